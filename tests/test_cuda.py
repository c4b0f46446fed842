"""peakbench.cuda (creating the backend) without a GPU: no CuPy, no driver, no GPU, or devices
whose properties cannot be read are each one BackendUnavailable line, and the CLI exits 2."""
from __future__ import annotations

import sys

import pytest

from peakbench.backend import BackendUnavailable

def test_cuda_backend_without_cupy_is_a_clear_usage_error(monkeypatch, capsys):
    import builtins
    real = builtins.__import__

    def no_cupy(name, *args, **kwargs):
        if name == "cupy" or name.startswith("cupy."):
            raise ImportError("No module named 'cupy'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cupy)
    from peakbench import cli
    assert cli.main(["--backend", "cuda", "--tests", "compute.fp32"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("peakbench: error: cuda backend: Python package 'cupy' is not installed")
    assert "peakbench[cuda]" in err and "Traceback" not in err


def fake_cupy(monkeypatch, count=None, error=None):
    """A stand-in `cupy` whose runtime reports `count` devices or raises `error`."""
    import types

    def get_count():
        if error:
            raise error
        return count
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=get_count))
    monkeypatch.setitem(sys.modules, "cupy", cupy)


@pytest.mark.parametrize("count, error, message", [
    (None, RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient\nmore"),
     "cuda backend: no usable NVIDIA driver or GPU (cudaErrorInsufficientDriver: CUDA driver version is insufficient)"),
    (0, None, "cuda backend: the NVIDIA driver reports no CUDA device")])
def test_no_driver_or_no_gpu_is_one_line(monkeypatch, count, error, message):
    import peakbench.cuda
    fake_cupy(monkeypatch, count, error)
    with pytest.raises(BackendUnavailable) as e:
        peakbench.cuda.create()
    assert str(e.value) == message


def test_a_device_whose_properties_cannot_be_read_is_unavailable(monkeypatch):
    import types

    import peakbench.cuda
    fake_cupy(monkeypatch, count=1)
    broken = types.ModuleType("peakbench.cuda.backend")

    def backend(count):
        raise RuntimeError("cudaErrorDevicesUnavailable: all CUDA-capable devices are busy\nstack")
    broken.CudaBackend = backend
    monkeypatch.setitem(sys.modules, "peakbench.cuda.backend", broken)
    with pytest.raises(BackendUnavailable, match=r"cannot read the devices' properties \(cudaErrorDevicesUnavailable: all CUDA-capable devices are busy\)$"):
        peakbench.cuda.create()

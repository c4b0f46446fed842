"""peakbench.rocm (creating the backend), against the fake HIP runtime (tests/fake_hip.py) at
hip-python's API boundary: a missing package, runtime, driver or GPU is one clear line, in the
CLI too. The fixtures here (the fake with an MI300X and an RX 7900 XTX, a device opened on it)
serve the other ROCm tests."""
from __future__ import annotations

import sys

import pytest

import fake_hip
from peakbench import cli
from peakbench.backend import BackendUnavailable

@pytest.fixture
def no_amdsmi(monkeypatch):
    monkeypatch.setitem(sys.modules, "amdsmi", None)


@pytest.fixture
def fakes(monkeypatch, no_amdsmi):
    """A fake HIP runtime with an MI300X and an RX 7900 XTX, installed as `hip`."""
    hip, rtc = fake_hip.pair([fake_hip.mi300x(), fake_hip.rx7900xtx()])
    fake_hip.install(monkeypatch, hip, rtc)
    return hip, rtc


def create():
    import peakbench.rocm
    return peakbench.rocm.create()


@pytest.fixture
def device(fakes):
    """Device 0 (the MI300X) opened through create(), as the CLI would."""
    backend = create()
    dev = backend.open(0)
    yield dev
    dev.close()


def test_without_hip_python_the_error_names_the_package_and_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "hip", None)
    with pytest.raises(BackendUnavailable) as e:
        create()
    assert "'hip-python' is not installed" in str(e.value)
    assert "pip install 'peakbench[rocm]'" in str(e.value) and "ROCm" in str(e.value)


@pytest.mark.parametrize("code, words", [
    (fake_hip.hipError_t.hipErrorNoDevice, "no AMD GPU"),
    (fake_hip.hipError_t.hipErrorInsufficientDriver, "no usable AMD GPU driver"),
    (fake_hip.hipError_t.hipErrorInvalidValue, "hipGetDeviceCount failed: hipErrorInvalidValue"),
])
def test_device_count_errors_become_backend_unavailable(monkeypatch, code, words):
    hip, rtc = fake_hip.pair()
    hip.fail["hipGetDeviceCount"] = code
    fake_hip.install(monkeypatch, hip, rtc)
    with pytest.raises(BackendUnavailable, match=words):
        create()


def test_zero_devices_is_no_gpu(monkeypatch):
    hip, rtc = fake_hip.pair([])
    fake_hip.install(monkeypatch, hip, rtc)
    with pytest.raises(BackendUnavailable, match="reports no AMD GPU"):
        create()


def test_a_missing_hip_library_at_first_call_is_backend_unavailable(monkeypatch):
    """hip-python loads libamdhip64.so lazily: the import works, the first call fails."""
    hip, rtc = fake_hip.pair()
    hip.raise_on["hipGetDeviceCount"] = OSError("libamdhip64.so: cannot open shared object file")
    fake_hip.install(monkeypatch, hip, rtc)
    with pytest.raises(BackendUnavailable, match="libamdhip64.so.*LD_LIBRARY_PATH"):
        create()


def test_an_enumeration_error_is_backend_unavailable_naming_the_call(monkeypatch):
    hip, rtc = fake_hip.pair()
    hip.fail["hipGetDeviceProperties"] = fake_hip.hipError_t.hipErrorInvalidDevice
    fake_hip.install(monkeypatch, hip, rtc)
    with pytest.raises(BackendUnavailable, match="hipGetDeviceProperties failed: hipErrorInvalidDevice"):
        create()


def test_cli_without_hip_python_exits_2_with_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "hip", None)
    code = cli.main(["--backend", "rocm", "--tests", "compute.fp32"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("peakbench: error: rocm backend: Python package 'hip-python' is not installed")


def test_cli_with_no_gpu_exits_2(monkeypatch, capsys, no_amdsmi):
    hip, rtc = fake_hip.pair()
    hip.fail["hipGetDeviceCount"] = fake_hip.hipError_t.hipErrorNoDevice
    fake_hip.install(monkeypatch, hip, rtc)
    assert cli.main(["--backend", "rocm", "--list-devices"]) == 2
    assert "rocm backend: the HIP runtime reports no AMD GPU" in capsys.readouterr().err

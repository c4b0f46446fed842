"""shaders/sfu.cu: compiled with nvcc for sm_90a, each function is one MUFU instruction per step
of every chain in the SASS (CI, no GPU); clang-22 shows the AMDGPU transcendental where it is
installed; on an NVIDIA GPU with CuPy, run and checked against the host reference (marker gpu)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from helpers import fixture, fixture_absent

from peakbench.kernels import sfu as cuda_sfu
from peakbench.workloads import sfu

SOURCE = Path(__file__).resolve().parents[1] / "shaders" / "sfu.cu"
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
ACC, UNROLL = 8, 32
FUNCTIONS = list(sfu.FUNCTIONS)


def nvdisasm() -> str | None:
    try:
        import nvidia.cu13
        found = Path(nvidia.cu13.__path__[0]) / "bin" / "nvdisasm"
        if found.exists():
            return str(found)
    except ImportError:
        pass
    return shutil.which("nvdisasm")


def flags(function: str) -> list[str]:
    settings = {**sfu.defines(function), "ACC": ACC, "UNROLL": UNROLL, "SEEDS": sfu.SEEDS}
    return [f"-D{k}={v}" for k, v in settings.items()]


def sass(tmp_path, function: str) -> list[str]:
    cubin = tmp_path / f"{function}.cubin"
    subprocess.run([NVCC, "-cubin", "-arch=sm_90a", *flags(function), str(SOURCE), "-o", str(cubin)],
                   check=True, capture_output=True, text=True)
    listing = subprocess.run([nvdisasm(), "-c", str(cubin)], check=True, capture_output=True, text=True).stdout
    return re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?P\w\s+)?([A-Z][A-Z0-9_.]*)", listing)


@pytest.mark.skipif(NVCC is None or nvdisasm() is None, reason="nvcc or nvdisasm is not installed")
@pytest.mark.parametrize("function", FUNCTIONS)
def test_each_step_is_one_mufu_of_its_function(tmp_path, function):
    ops = sass(tmp_path, function)
    want = cuda_sfu.INSTRUCTION["cuda"][function]
    assert ops.count(want) == ACC * UNROLL, f"{function}: {ops.count(want)} {want}, want {ACC * UNROLL}"
    others = {op for op in ops if op.startswith("MUFU") and op != want}
    assert not others, f"{function}: other MUFU functions {others}"
    # The chain's FMAs: one per chain per step, plus t's once per step.
    assert ops.count("FFMA") == ACC * UNROLL + UNROLL


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_a_kernel_without_a_function_does_not_build(tmp_path):
    done = subprocess.run([NVCC, "-ptx", "-arch=sm_90", "-DACC=8", "-DUNROLL=4", "-DSEEDS=256", str(SOURCE),
                           "-o", str(tmp_path / "x.ptx")], capture_output=True, text=True)
    assert done.returncode != 0 and "FN_RCP" in done.stderr


@pytest.mark.skipif(shutil.which("clang-22") is None, reason="clang-22 is not installed")
def test_hip_dialect_issues_each_transcendental(tmp_path):
    """For gfx942, each function is one AMDGPU transcendental per step (the builtins need no
    device library)."""
    headers = fixture("hip-headers-rocm-6.3.tgz")
    if fixture_absent(headers.name):
        pytest.skip(fixture_absent(headers.name))
    import tarfile
    with tarfile.open(headers) as tar:
        tar.extractall(tmp_path, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    rocm = next(p.parents[2] for p in tmp_path.glob("*/include/hip/hip_runtime.h"))
    for function in FUNCTIONS:
        done = subprocess.run(["clang-22", "-x", "hip", "--cuda-device-only", "-nogpulib", f"--rocm-path={rocm}",
                               "--hip-version=6.3", "--offload-arch=gfx942", "-O3", "-std=c++17",
                               "-D__AMDGCN_WAVEFRONT_SIZE=64", "-S", "-o", "-", "-include", str(rocm / "include" / "hip" / "hip_runtime.h"), *flags(function),
                               str(SOURCE)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        want = cuda_sfu.INSTRUCTION["hip"][function]
        assert len(re.findall(rf"^\s+{want}\w*", done.stdout, re.M)) == ACC * UNROLL, function


@pytest.mark.gpu
@pytest.mark.parametrize("function", FUNCTIONS)
def test_cuda_kernel_matches_the_host_reference(function):
    cp = pytest.importorskip("cupy")
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception:
        pytest.skip("no CUDA device")
    module = cp.RawModule(code=SOURCE.read_text(), options=("--std=c++17", *flags(function)))
    fn = module.get_function("sfu")
    inputs = sfu.make_inputs(function, ACC)
    threads, block = 4096, 256
    inp = cp.asarray(np.frombuffer(inputs.buffer(), np.float32))
    done = cp.zeros(1, dtype=cp.uint32)
    for iterations in (1, 2):
        out = cp.full(threads * ACC, np.nan, dtype=cp.float32)
        fn((threads // block,), (block,), (out, inp, done, np.uint32(iterations)))
        assert int(done[0]) == iterations * threads // block      # the launch witness: one a block
        got = cp.asnumpy(out).reshape(threads, ACC)
        error = cuda_sfu.ERROR["cuda"][function]
        assert sfu.check(function, error, inputs, iterations * UNROLL, got) is None

"""peakbench.cuda.gemm without a GPU: which gemm tests each compute capability runs and why not,
a missing cuBLASLt is unsupported [toolchain], cuBLASLt's numbers are the headers' (checked against
the real library's descriptor calls where the nvidia-cublas wheel is installed), and the library
is looked for where CuPy's and the wheel's are."""
from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pytest

from peakbench.backend import Unsupported
from peakbench.catalog.gemm import TESTS
from peakbench.cuda import gemm
from peakbench.kernels import gemm as lt
from peakbench.workloads.gemm import GemmTypes

BY_NAME = {t.name: t for t in TESTS}


@pytest.fixture
def found(monkeypatch):
    monkeypatch.setattr(gemm, "library", lambda: object())


def rt(cc):
    return SimpleNamespace(cc=cc)


def test_hopper_runs_every_gemm_test(found):
    assert [gemm.support(t, rt((9, 0))) for t in TESTS] == [None] * 6


def test_fp8_needs_ada_or_hopper(found):
    reason = gemm.support(BY_NAME["gemm.fp8_e4m3.fp32"], rt((8, 0)))
    assert reason == "[hardware] fp8_e4m3 tensor cores need compute capability 8.9; this GPU is 8.0"
    assert gemm.support(BY_NAME["gemm.fp8_e4m3.fp32"], rt((8, 9))) is None
    assert gemm.support(BY_NAME["gemm.bf16.fp32"], rt((7, 5))).startswith("[hardware] bf16")


def test_without_cublaslt_every_test_is_unsupported_toolchain(monkeypatch):
    def missing():
        raise Unsupported("[toolchain] cuBLASLt is not installed or not on the library path (tried x)")
    monkeypatch.setattr(gemm, "library", missing)
    for t in TESTS:
        assert gemm.support(t, rt((9, 0))).startswith("[toolchain] cuBLASLt is not installed")


def test_the_library_is_looked_for_by_soname_and_in_the_wheel(tmp_path, monkeypatch):
    lib = tmp_path / "nvidia" / "cublas" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcublasLt.so.12").write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = gemm.candidates(12)
    assert found[0] == "libcublasLt.so.12" and str(lib / "libcublasLt.so.12") in found


def test_every_type_has_its_cuda_numbers():
    for t in TESTS:
        operand, _ = t.types
        assert operand in gemm.API.compute and operand in gemm.API.data and t.output in gemm.API.data


def real_cublaslt():
    for path in gemm.candidates(12) + gemm.candidates(13):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    pytest.skip("no libcublasLt here (the nvidia-cublas wheel brings one)")


@pytest.mark.parametrize("test", TESTS, ids=lambda t: t.name)
def test_the_real_library_accepts_every_descriptor_call(test):
    """cuBLASLt checks each attribute's size and each enum: a wrong number fails here, on the host
    (creating the handle needs a GPU, the descriptors do not)."""
    lib = real_cublaslt()
    calls = lt.Lt.__new__(lt.Lt)
    calls.api, calls.lib, calls._objects, calls.handle = gemm.API, lib, [], ctypes.c_void_p()
    operand, accumulator = test.types
    with pytest.raises(lt.LtError, match="cublasLtMatmulAlgoGetHeuristic returned"):
        calls.plan(GemmTypes(operand, accumulator, test.output), 256, 256, 256, (0x1000, 0x1004))
    assert [fn for fn, _ in calls._objects].count("MatrixLayoutDestroy") == 3
    calls.close()

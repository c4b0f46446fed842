"""The vendor GEMM on CUDA: cuBLASLt (kernels/gemm.py makes the calls), on CuPy's memory and
stream, timed between CUDA events.

The library: the libcublasLt that CuPy's cuBLAS already loaded (CuPy binds cuBLAS, not
cuBLASLt), else the one cuda-pathfinder finds (the nvidia-cublas wheel), else the toolkit's.
Numbers: cublasLt.h, cublas_api.h and library_types.h of CUDA 12.9; FP8 needs TN, FP32 compute
and per-tensor scales (cuBLAS docs, cublasLtMatmul: "FP8 ... only the TN format is supported").
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import sys
from pathlib import Path

import numpy as np

from peakbench.backend import Unsupported
from peakbench.kernels import gemm as lt
from peakbench.workloads.gemm import workload_of

API = lt.Api(
    name="cuBLASLt", prefix="cublasLt", sonames=(),
    # cudaDataType_t
    data={"fp16": 2, "bf16": 14, "tf32": 0, "fp32": 0, "fp64": 1, "int8": 3, "int32": 10, "fp8_e4m3": 28},
    # cublasComputeType_t, by operand type: 32F, 32F_FAST_TF32, 64F, 32I
    compute={"fp16": (68, "f32"), "bf16": (68, "f32"), "tf32": (77, "f32"), "fp8_e4m3": (68, "f32"),
             "fp64": (70, "f64"), "int8": (72, "i32")},
    scale_data={"f32": 0, "f64": 1, "i32": 10},
    op_n=0, op_t=1, transa=3, transb=4, a_scale=17, b_scale=18, workspace_pref=1, algo_bytes=64,
    status={1: "NOT_INITIALIZED", 3: "ALLOC_FAILED", 7: "INVALID_VALUE", 8: "ARCH_MISMATCH",
            11: "MAPPING_ERROR", 13: "EXECUTION_FAILED", 14: "INTERNAL_ERROR", 15: "NOT_SUPPORTED",
            16: "LICENSE_ERROR"},
    not_supported=15)
# The tensor-core generation each operand type needs (CUDA C++ Programming Guide, warp matrix
# functions: FP8 from sm_89; BF16, TF32 and FP64 DMMA from sm_80).
MIN_CC = {"fp8_e4m3": (8, 9), "bf16": (8, 0), "tf32": (8, 0), "fp64": (8, 0)}
ALGO_CONFIG = (("algo", 0, ctypes.c_int32), ("tile", 1, ctypes.c_uint32), ("split-K", 2, ctypes.c_int32),
               ("stages", 6, ctypes.c_uint32), ("cluster", 8, ctypes.c_uint16))

_LIBRARY: dict = {}


def candidates(major: int) -> list[str]:
    """Where libcublasLt of CUDA `major` may be: its soname (found when CuPy's cuBLAS loaded it),
    the nvidia-cublas wheel, the toolkit."""
    name = f"libcublasLt.so.{major}"
    found = [name]
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        found.append(load_nvidia_dynamic_lib("cublasLt").abs_path)
    except Exception:
        pass
    roots = [Path(p) / "nvidia" / sub / "lib" for p in sys.path if p for sub in ("cublas", f"cu{major}")]
    roots += [Path(r) / "lib64" for r in (os.environ.get("CUDA_PATH"), "/usr/local/cuda") if r]
    return found + [str(r / name) for r in roots if (r / name).exists()]


def library():
    """The loaded libcublasLt (once per process), or Unsupported([toolchain])."""
    if "lib" not in _LIBRARY:
        import cupy as cp
        try:
            from cupy_backends.cuda.libs import cublas      # loads libcublas, and with it libcublasLt
            cublas.destroy(cublas.create())
        except Exception:
            pass
        major = cp.cuda.runtime.runtimeGetVersion() // 1000
        try:
            _LIBRARY["lib"] = lt.load(dataclasses.replace(API, sonames=tuple(candidates(major))))
        except Unsupported as e:
            _LIBRARY["lib"] = e
    if isinstance(_LIBRARY["lib"], Exception):
        raise _LIBRARY["lib"]
    return _LIBRARY["lib"]


def support(test, rt) -> str | None:
    need = MIN_CC.get(test.types[0])
    if need and tuple(rt.cc) < need:
        return (f"[hardware] {test.types[0]} tensor cores need compute capability {need[0]}.{need[1]};"
                f" this GPU is {rt.cc[0]}.{rt.cc[1]}")
    try:
        library()
    except Unsupported as e:
        return str(e)
    return None


def workload(test, variant, rt):
    return workload_of(test, variant, CudaGemm(rt, library()), "cuBLASLt")


class CudaGemm(lt.LtGemm):
    """cuBLASLt over CuPy: buffers are CuPy byte arrays, work goes on the runtime's stream."""

    def __init__(self, rt, lib):
        import cupy
        super().__init__(API, lib, rt)
        self.cp, self.stream = cupy, rt.stream.ptr
        self._start, self._end = cupy.cuda.Event(), cupy.cuda.Event()

    def pointer(self, buf) -> int:
        return buf.data.ptr

    def zero(self, buf) -> None:
        with self.rt.stream:
            buf.fill(0)
        self.rt.stream.synchronize()

    def timed(self, calls) -> float:
        self._start.record(self.rt.stream)
        calls()
        self._end.record(self.rt.stream)
        self._end.synchronize()
        return self.cp.cuda.get_elapsed_time(self._start, self._end) / 1e3

    def read(self, buf, index: np.ndarray, dtype) -> np.ndarray:
        """One copy an element: a fancy index would have CuPy compile a gather kernel for each
        type (0.2-0.3 s of NVRTC a GEMM test in a run with an empty CuPy cache)."""
        self.rt.stream.synchronize()
        flat = buf.view(dtype)
        return np.array([flat[i:i + 1].get(stream=self.rt.stream)[0] for i in map(int, index)], dtype)

    def version(self) -> str:
        get = self.lib.cublasLtGetVersion
        get.restype = ctypes.c_size_t
        v = int(get())
        return f"cuBLASLt {v // 10000}.{v // 100 % 100}.{v % 100}"

    def describe(self, i: int) -> str:
        """The candidate's configuration as cuBLASLt reports it (tile and stages are the ids of
        cublasLtMatmulTile_t and cublasLtMatmulStages_t), and the heuristic's waves count."""
        raw = self.plan.algos[i]
        algo = (ctypes.c_uint8 * API.algo_bytes).from_buffer_copy(raw[:API.algo_bytes])
        parts = []
        for name, attr, ctype in ALGO_CONFIG:
            value, written = ctype(), ctypes.c_size_t()
            status = self.lib.cublasLtMatmulAlgoConfigGetAttribute(
                ctypes.byref(algo), ctypes.c_int(attr), ctypes.byref(value), ctypes.c_size_t(ctypes.sizeof(value)),
                ctypes.byref(written))
            if status == 0:
                parts.append(f"{name} {value.value}")
        waves = np.frombuffer(raw[API.algo_bytes + 12:API.algo_bytes + 16], np.float32)[0]
        return ", ".join(parts + [f"waves {waves:.2f}"])

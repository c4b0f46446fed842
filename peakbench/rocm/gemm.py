"""The vendor GEMM on ROCm: hipBLASLt (kernels/gemm.py makes the calls; hip-python has no
hipBLASLt binding), on the runtime's HIP memory and stream, timed between HIP events.

Numbers: hipblaslt.h, hipblas-common.h and hip/library_types.h (ROCm 6.4/7.x). Types: hipBLASLt's
data-type support page (rocm.docs.amd.com/projects/hipBLASLt/en/latest/reference/
data-type-support.html): int8, FP8, FP16, BF16 and FP32 operands, no FP64; FP8 is FNUZ on gfx942
and OCP on gfx950 and gfx12, the same split as the matrix units (rocm/targets.py Family.fp8).
"""
from __future__ import annotations

import ctypes
import dataclasses

import numpy as np

from peakbench.backend import Unsupported
from peakbench.kernels import gemm as lt
from peakbench.rocm import targets
from peakbench.workloads.gemm import workload_of

API = lt.Api(
    name="hipBLASLt", prefix="hipblasLt", sonames=("libhipblaslt.so.1", "libhipblaslt.so.0", "libhipblaslt.so",
                                                   "/opt/rocm/lib/libhipblaslt.so"),
    # hipDataType (FP8: OCP; FNUZ targets get FNUZ below)
    data={"fp16": 2, "bf16": 14, "tf32": 0, "fp32": 0, "int8": 3, "int32": 10, "fp8_e4m3": 28},
    # hipblasComputeType_t, by operand type: 32F, 32F_FAST_TF32, 32I
    compute={"fp16": (2, "f32"), "bf16": (2, "f32"), "tf32": (6, "f32"), "fp8_e4m3": (2, "f32"),
             "int8": (9, "i32")},
    scale_data={"f32": 0, "f64": 1, "i32": 10},
    op_n=111, op_t=112, transa=0, transb=1, a_scale=5, b_scale=6, workspace_pref=1, algo_bytes=24,
    status={1: "NOT_INITIALIZED", 2: "ALLOC_FAILED", 3: "INVALID_VALUE", 4: "MAPPING_ERROR",
            5: "EXECUTION_FAILED", 6: "INTERNAL_ERROR", 7: "NOT_SUPPORTED", 8: "ARCH_MISMATCH"},
    not_supported=7)
FP8_FNUZ = 1000           # HIP_R_8F_E4M3_FNUZ
NO_FP64 = ("[api] hipBLASLt has no FP64 GEMM (its data-type support lists int8, FP8, FP16, BF16"
           " and FP32 operands)")
NO_XF32 = "[hardware] {arch} has no XF32 (TF32) matrix instructions: they exist on gfx940-gfx942 only"

_LIBRARY: dict = {}


def library():
    """The loaded libhipblaslt (once per process), or Unsupported([toolchain])."""
    if "lib" not in _LIBRARY:
        try:
            _LIBRARY["lib"] = lt.load(API)
        except Unsupported as e:
            _LIBRARY["lib"] = e
    if isinstance(_LIBRARY["lib"], Exception):
        raise _LIBRARY["lib"]
    return _LIBRARY["lib"]


def api_for(arch: str) -> lt.Api:
    """The API's numbers on this target: FP8 as FNUZ where the matrix units read FNUZ."""
    fam = targets.family(arch)
    if fam and fam.fp8 == "fnuz":
        return dataclasses.replace(API, data={**API.data, "fp8_e4m3": FP8_FNUZ})
    return API


def support(test, rt) -> str | None:
    operand = test.types[0]
    if operand == "fp64":
        return NO_FP64
    if operand in ("tf32", "fp8_e4m3"):
        # the library runs these types on the target's matrix instructions only
        reason = targets.matrix_support(rt.arch, "matrix." + test.name.split(".", 1)[1])
        if reason:
            return NO_XF32.format(arch=rt.arch) if operand == "tf32" and reason.startswith("[hardware]") else reason
    try:
        library()
    except Unsupported as e:
        return str(e)
    return None


def workload(test, variant, rt):
    return workload_of(test, variant, HipGemm(rt, library()), "hipBLASLt")


# OCP E4M3 bytes as FNUZ E4M3 (bias 8): the exponent one higher is the same value. The operands'
# bytes have exponents 4 to 7 (|x| in [1/8, 2)), so adding 8 to each byte carries into none.
FNUZ_ADD = 0x08080808


class HipGemm(lt.LtGemm):
    """hipBLASLt over the ROCm runtime's buffers (runtime.DeviceBuffer) and stream."""

    def __init__(self, rt, lib):
        super().__init__(api_for(rt.arch), lib, rt)
        self.hip = rt.hip
        self.stream = int(rt.stream) if rt.stream is not None else 0
        self._start = rt.api.call(self.hip.hipEventCreate)
        self._end = rt.api.call(self.hip.hipEventCreate)

    def pointer(self, buf) -> int:
        return buf.address

    def form(self, operand):
        form = operand.form()
        if operand.kind == "fp8_e4m3" and self.api.data["fp8_e4m3"] == FP8_FNUZ:
            return dataclasses.replace(form, add=(FNUZ_ADD, FNUZ_ADD))
        return form

    def zero(self, buf) -> None:
        self.rt.fill(buf, 0)

    def timed(self, calls) -> float:
        call, hip = self.rt.api.call, self.hip
        call(hip.hipEventRecord, self._start, self.rt.stream)
        calls()
        call(hip.hipEventRecord, self._end, self.rt.stream)
        call(hip.hipEventSynchronize, self._end)
        return call(hip.hipEventElapsedTime, self._start, self._end) / 1e3

    def read(self, buf, index: np.ndarray, dtype) -> np.ndarray:
        self.rt.api.call(self.hip.hipStreamSynchronize, self.rt.stream)
        return np.frombuffer(self.rt.download(buf), dtype)[index]

    def version(self) -> str:
        """hipblasLtGetVersion's number, as the library encodes it (major * 100000 + minor * 100 + patch)."""
        get, number = getattr(self.lib, "hipblasLtGetVersion", None), ctypes.c_int(0)
        if get is None or get(self.lt.handle, ctypes.byref(number)) != 0:
            return "hipBLASLt"
        v = number.value
        return f"hipBLASLt {v // 100000}.{v // 100 % 1000}.{v % 100}"

    def close(self) -> None:
        try:
            super().close()
        finally:
            for event in (self._start, self._end):
                if event is not None:
                    self.rt.api.call(self.hip.hipEventDestroy, event)
            self._start = self._end = None

"""CUDA's capability table: which tests have a native path on an NVIDIA architecture and why
not, and the kernel each family runs (shaders/*.cu, peakbench/kernels.py; tensor cores:
cuda/tensor.py).

Sources: PTX ISA (docs.nvidia.com/cuda/parallel-thread-execution): fma.rn.f16x2 needs sm_53,
fma.rn.bf16x2 sm_80, dp4a sm_61. FP8, INT4 and FP4 have conversion instructions only (cvt with
.e4m3x2/.e5m2x2 from sm_89, .e2m1x2 from sm_100a): no NVIDIA GPU does vector arithmetic on them.
"""
from __future__ import annotations

from peakbench import kernels
from peakbench.catalog import TestSpec

MIN_CC = {"fp16": (5, 3), "bf16": (8, 0), "int8": (6, 1)}
INSTRUCTION = {"fp64": "DFMA", "fp32": "FFMA", "fp16": "HFMA2", "bf16": "HFMA2.BF16", "int32": "IMAD",
               "int64": "IMAD.WIDE.U32 + 2 IMAD + IADD3 (no 64-bit multiplier: 32-bit halves)",
               "int16": "IMAD (16-bit lanes in 32-bit registers)", "int8": "IDP.4A (dp4a)"}
# Vector element types without an instruction, by the test's dtype.
NO_VECTOR = {
    "fp8_e4m3": "[hardware] NVIDIA GPUs have no FP8 vector arithmetic: PTX converts FP8 "
                "(cvt .e4m3x2) to f16 for math; FP8 runs only on the tensor cores (matrix.fp8_*)",
    "fp8_e5m2": "[hardware] NVIDIA GPUs have no FP8 vector arithmetic: PTX converts FP8 "
                "(cvt .e5m2x2) to f16 for math; FP8 runs only on the tensor cores (matrix.fp8_*)",
    "int4": "[hardware] NVIDIA GPUs have no 4-bit integer vector instruction (INT4 exists only "
            "as a tensor-core operand on Turing and Ampere)",
    "fp4": "[hardware] NVIDIA GPUs have no FP4 vector arithmetic (FP4 is a tensor-core operand "
           "on Blackwell and a conversion type, cvt .e2m1x2)",
}


def alu_support(test: TestSpec, rt) -> str | None:
    if test.dtype in NO_VECTOR or not test.kernel:
        return NO_VECTOR.get(test.dtype, "[hardware] no NVIDIA vector instruction")
    need = MIN_CC.get(test.dtype)
    if need and tuple(rt.cc) < need:
        return (f"[hardware] {INSTRUCTION[test.dtype]} needs compute capability {need[0]}.{need[1]}; "
                f"this GPU is {rt.cc[0]}.{rt.cc[1]}")
    return None


# The device table the workloads read (peakbench/workloads/__init__.py).
TABLE = kernels.table(alu_support, "peakbench.cuda.tensor",
                      {"transfer": "peakbench.cuda.transfer", "gemm": "peakbench.cuda.gemm", "p2p": "peakbench.cuda.p2p"})

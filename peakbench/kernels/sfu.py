"""Special functions on CUDA and HIP: shaders/sfu.cu through the hardware's approximate path,
with the error bound each vendor documents for it (workloads/sfu.py checks within it).

Sources:
  [PTX]  PTX ISA (docs.nvidia.com/cuda/parallel-thread-execution), floating-point instructions
         rcp/rsqrt/sqrt/ex2/lg2/sin .approx.ftz.f32: rcp 1 ulp; rsqrt 2^-22.9 relative; sqrt
         2^-23 relative; ex2 2^-22.5 relative; lg2 2^-22.6 absolute (mantissa); sin 2^-20.9
         absolute in [-pi, pi]. ptxas maps each to one MUFU instruction (sin: an FMUL by 1/2pi
         first), checked with nvcc 13 for sm_90a (tests/test_shaders_sfu.py).
  [AMD]  AMD CDNA3 / RDNA3 ISA reference guides, VOP1 transcendentals: v_rcp_f32, v_rsq_f32,
         v_sqrt_f32, v_exp_f32, v_log_f32 1 ULP; v_sin_f32 takes revolutions and its error is not
         stated (2^-18 absolute is allowed here, looser than the PTX sine's).
The bounds below are absolute on the chain's range (|F| < 2, so 1 ulp < 2^-22), rounded up.
"""
from __future__ import annotations

from peakbench.workloads.sfu import SfuKernel, SfuWorkload, defines

ERROR = {
    "cuda": {"rcp": 2.0 ** -23, "rsqrt": 2.0 ** -22, "sqrt": 2.0 ** -22, "exp2": 2.0 ** -22,
             "log2": 2.0 ** -21, "sin": 2.0 ** -20},
    "hip": {"rcp": 2.0 ** -22, "rsqrt": 2.0 ** -22, "sqrt": 2.0 ** -22, "exp2": 2.0 ** -22,
            "log2": 2.0 ** -22, "sin": 2.0 ** -18},
}
SOURCE = {"cuda": "PTX ISA, .approx.ftz.f32", "hip": "AMD ISA guides, VOP1 transcendentals"}
# The opcode each function's machine code must show, by dialect.
INSTRUCTION = {
    "cuda": {"rcp": "MUFU.RCP", "rsqrt": "MUFU.RSQ", "sqrt": "MUFU.SQRT", "exp2": "MUFU.EX2",
             "log2": "MUFU.LG2", "sin": "MUFU.SIN"},
    "hip": {"rcp": "v_rcp_f32", "rsqrt": "v_rsq_f32", "sqrt": "v_sqrt_f32", "exp2": "v_exp_f32",
            "log2": "v_log_f32", "sin": "v_sin_f32"},
}
PATH = {"cuda": "{ptx}.approx.ftz.f32 (inline PTX)", "hip": "__builtin_amdgcn_{amd}"}
PTX = {"rcp": "rcp", "rsqrt": "rsqrt", "sqrt": "sqrt", "exp2": "ex2", "log2": "lg2", "sin": "sin"}
AMD = {"rcp": "rcpf", "rsqrt": "rsqf", "sqrt": "sqrtf", "exp2": "exp2f", "log2": "logf", "sin": "sinf"}


def support(test, rt) -> str | None:
    return None


def sfu_kernel(test, rt) -> SfuKernel:
    f, dialect = test.function, rt.dialect
    path = PATH[dialect].format(ptx=PTX[f], amd=AMD[f])
    return SfuKernel("sfu.cu", "sfu", defines(f), ERROR[dialect][f], SOURCE[dialect],
                     INSTRUCTION[dialect][f], {"kernel": f"sfu.cu ({path})"})


def workload(test, variant, rt) -> SfuWorkload:
    return SfuWorkload(test, variant, rt, sfu_kernel(test, rt))

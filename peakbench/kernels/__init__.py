"""The CUDA-dialect kernels of shaders/*.cu, which CUDA (NVRTC) and HIP (hiprtc) compile from one
source (their thin dialect layer picks HIP's names under __HIP_PLATFORM_AMD__): the defines and
element types each family takes, and the capability table both backends build from their rules (table)."""
from __future__ import annotations

from peakbench.catalog import Variant
from peakbench.catalog.compute import fma
from peakbench.workloads.alu import AluKernel
from peakbench.workloads.chase import ChaseKernel
from peakbench.workloads.stream import StreamKernel
from peakbench.workloads.table import CapabilityTable

# Per element type: the C type one instruction works on, and the lanes it holds.
ELEMENTS = {"fp64": ("double", 1), "fp32": ("float", 1), "fp16": ("__half2", 2), "bf16": ("bfloat162", 2),
            "int64": ("long long", 1), "int32": ("int", 1), "int16": ("short", 1), "int8": ("int", 1)}
# alu.cu has a native packed bfloat16 FMA (HFMA2.BF16, v_pk_fma_bf16) and no bfloat16 dot
# product, so a bf16dot test runs its fma family here, with these variants.
FAMILIES = {"bf16dot": ("fma", (fma(2, 64), fma(4, 32)))}
# Types the ALU works on in pieces, by dialect: what one step becomes (the SASS / AMDGPU mix in
# the evidence shows it ran so; compiler-checked with nvcc 13 for sm_90a and clang-22).
EMULATED = {"int64": {
    "cuda": "no 64-bit integer multiplier: each step is IMAD.WIDE.U32 (the low halves, 64-bit result) "
            "+ 2 IMAD (the cross products) + IADD3 on 32-bit halves",
    "hip": "no 64-bit integer multiply: each step is v_mad_u64_u32 (the low halves) + 2 v_mul_lo_u32 "
           "(the cross products) + v_add3_u32 on 32-bit halves"}}

STREAM = StreamKernel("mem.cu", "stream")
EMPTY = ("mem.cu", "empty")
LAUNCH_PARAMS = {"launch": "1 block of 1 thread", "timed": "launch to stream synchronized, host clock"}
CHASE_PATH = {"cuda": "ld.global.ca.u64 of the next node's address (L1-cached global loads), one thread",
              "hip": "global_load_dwordx2 of the next node's address, kept in VGPRs (vector memory, not s_load), one lane"}


def chase_kernel(rt) -> ChaseKernel:
    """mem.cu `chase`, a pointer chase whose addresses `chase_link` writes: clock64() values at words
    2-5 of its output (8-byte aligned)."""
    return ChaseKernel("mem.cu", "chase", clock_word=2, path=CHASE_PATH[rt.dialect], pointer=True, link="chase_link")


def variants(test) -> tuple[Variant, ...]:
    return FAMILIES.get(test.kernel, (test.kernel, test.variants))[1]


def alu_kernel(test, variant: Variant, rt) -> AluKernel:
    family = FAMILIES.get(test.kernel, (test.kernel,))[0]
    element, lanes = ELEMENTS[test.dtype]
    defines = {"E": element, "STEP_DOT4X8": int(family == "dot4x8"),
               "VEC": variant.width // lanes, "ACC": test.accumulators, "UNROLL": variant.unroll}
    emulated = EMULATED.get(test.dtype, {}).get(getattr(rt, "dialect", None))
    return AluKernel("alu.cu", "alu", family, defines, {"kernel": f"alu.cu ({family}, {element})"},
                     {"emulation": emulated} if emulated else {}, bf16_words=True)


# Kernel families with a module of their own, by the test's `kernel`: the same for CUDA and HIP
# (each module: support(test, rt), workload(test, variant, rt), optionally variants(test, rt)).
MODULES = {"shared": "peakbench.kernels.onchip", "l2": "peakbench.kernels.onchip",
           "sfu": "peakbench.kernels.sfu", "atomic": "peakbench.kernels.atomic", "sm": "peakbench.kernels.sm"}


def table(alu_support, matrix: str, modules: dict[str, str] | None = None) -> CapabilityTable:
    """The capability table of a backend that runs these kernels: its vector-ALU rule
    `alu_support(test, rt)`, its matrix module, and the modules of the other kernel families
    (MODULES and the backend's own, e.g. its host transfers and vendor GEMM). The memory, latency
    and launch kernels run everywhere."""
    return CapabilityTable(alu_support=alu_support, alu_kernel=alu_kernel, matrix=matrix,
                           modules={**MODULES, **(modules or {})}, stream=STREAM, empty=EMPTY,
                           launch_params=LAUNCH_PARAMS, chase_kernel=chase_kernel,
                           variants_of=lambda test, rt: variants(test))

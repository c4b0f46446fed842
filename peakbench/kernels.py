"""The CUDA-dialect kernels of shaders/*.cu, which CUDA (NVRTC) and HIP (hiprtc) compile from one
source (their thin dialect layer picks HIP's names under __HIP_PLATFORM_AMD__): the defines and
element types each family takes, as data both backends' capability tables use."""
from __future__ import annotations

from peakbench.catalog import Variant
from peakbench.catalog.compute import fma
from peakbench.workloads.alu import AluKernel
from peakbench.workloads.chase import ChaseKernel
from peakbench.workloads.stream import StreamKernel

# Per element type: the C type one instruction works on, and the lanes it holds.
ELEMENTS = {"fp64": ("double", 1), "fp32": ("float", 1), "fp16": ("__half2", 2), "bf16": ("bfloat162", 2),
            "int32": ("int", 1), "int16": ("short", 1), "int8": ("int", 1)}
# alu.cu has a native packed bfloat16 FMA (HFMA2.BF16, v_pk_fma_bf16) and no bfloat16 dot
# product, so a bf16dot test runs its fma family here, with these variants.
FAMILIES = {"bf16dot": ("fma", (fma(2, 64), fma(4, 32)))}

STREAM = StreamKernel("mem.cu", "stream")
EMPTY = ("mem.cu", "empty")
LAUNCH_PARAMS = {"launch": "1 block of 1 thread", "timed": "launch to stream synchronized, host clock"}
CHASE_PATH = {"cuda": "ld.global.ca (L1-cached global loads, vector memory), one thread",
              "hip": "global_load with the address in a VGPR (vector memory, not s_load), one lane"}


def chase_kernel(rt) -> ChaseKernel:
    """mem.cu `chase`: clock64() values at words 2-5 of its output (8-byte aligned)."""
    return ChaseKernel("mem.cu", "chase", clock_word=2, path=CHASE_PATH[rt.dialect])


def variants(test) -> tuple[Variant, ...]:
    return FAMILIES.get(test.kernel, (test.kernel, test.variants))[1]


def support(test, rt, alu, matrix) -> str | None:
    """A backend's rules `alu(test, rt)` and `matrix(test, rt)`; the memory, latency and launch
    kernels run everywhere."""
    rule = {"compute": alu, "matrix": matrix}.get(test.family)
    return rule(test, rt) if rule else None


def alu_kernel(test, variant: Variant, rt) -> AluKernel:
    family = FAMILIES.get(test.kernel, (test.kernel,))[0]
    element, lanes = ELEMENTS[test.dtype]
    defines = {"E": element, "STEP_DOT4X8": int(family == "dot4x8"),
               "VEC": variant.width // lanes, "ACC": test.accumulators, "UNROLL": variant.unroll}
    return AluKernel("alu.cu", "alu", family, defines, {"kernel": f"alu.cu ({family}, {element})"},
                     bf16_words=True)

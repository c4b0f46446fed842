"""Vulkan's capability table: which tests run on a device and why not, the variants it offers,
and the kernel each family runs here (the workloads themselves are peakbench/workloads/)."""
from __future__ import annotations

from peakbench.backend import Unsupported
from peakbench.catalog import TestSpec, Variant
from peakbench.catalog import alu_reference as ref
from peakbench.vulkan.kernels import CHASE_PATH, EMPTY, LAUNCH_PARAMS, STREAM
from peakbench.vulkan.probe import EXT_BFLOAT16, EXT_FLOAT8
from peakbench.workloads.alu import AluKernel
from peakbench.workloads.chase import ChaseKernel
from peakbench.workloads.table import CapabilityTable

# Stream layouts whose shader reduces with subgroup arithmetic (mem_stream.comp, LAYOUT 2).
SUBGROUP_LAYOUTS = ("rows",)

# GLSL vector type per (dtype, width) for the "fma" kernel family.
GLSL_TYPES = {
    ("fp64", 1): "double", ("fp64", 2): "dvec2", ("fp64", 4): "dvec4",
    ("fp32", 1): "float", ("fp32", 2): "vec2", ("fp32", 4): "vec4",
    ("fp16", 1): "float16_t", ("fp16", 2): "f16vec2", ("fp16", 4): "f16vec4",
    ("int32", 1): "int", ("int32", 2): "ivec2", ("int32", 4): "ivec4",
    ("int64", 1): "int64_t", ("int64", 2): "i64vec2", ("int64", 4): "i64vec4",
    ("int16", 1): "int16_t", ("int16", 2): "i16vec2", ("int16", 4): "i16vec4",
}

# Device features each element type needs (Vulkan feature names).
NEEDS = {
    "fp64": ("shaderFloat64",),
    "fp16": ("shaderFloat16", "storageBuffer16BitAccess"),
    "int16": ("shaderInt16", "storageBuffer16BitAccess"),
    "int64": ("shaderInt64",),
    "int8": ("shaderIntegerDotProduct",),
    "bf16": ("shaderBFloat16Type", "shaderBFloat16DotProduct"),
}

# Vector types without a kernel, by the test's element type (its descriptor's dtype).
NO_KERNEL = {
    "fp8_e4m3": "[api] SPIR-V has no FP8 arithmetic: VK_EXT_shader_float8{have} allows FP8 only "
                "in conversions and cooperative matrices",
    "fp8_e5m2": "[api] SPIR-V has no FP8 arithmetic: VK_EXT_shader_float8{have} allows FP8 only "
                "in conversions and cooperative matrices",
    "int4": "[api] Vulkan and SPIR-V have no 4-bit integer type",
    "fp4": "[api] Vulkan and SPIR-V have no 4-bit float type",
}
# Kernel families with a module of their own, by the test's `kernel` (each module: support(test,
# rt), workload(test, variant, rt), optionally variants(test, rt)); the matrix tests' is coopmat.
MODULES = {"shared": "peakbench.vulkan.onchip", "l2": "peakbench.vulkan.onchip",
           "transfer": "peakbench.vulkan.transfer", "sfu": "peakbench.vulkan.sfu",
           "atomic": "peakbench.vulkan.atomic", "sm": "peakbench.vulkan.sm"}
NO_GEMM = "[api] Vulkan has no vendor GEMM library (cuBLASLt and hipBLASLt are CUDA and HIP only)"


NO_SPARSE = ("[api] Vulkan has no sparse cooperative matrix: VK_KHR_cooperative_matrix and "
             "VK_NV_cooperative_matrix2 multiply dense operands only (no 2:4 metadata operand)")
NO_P2P = ("[api] Vulkan has no peer-to-peer copy between devices (a copy between two VkDevices"
          " goes through host memory; device groups are not used here)")


def refuse(test: TestSpec, rt) -> str | None:
    """The families Vulkan has no path for at all."""
    if test.family == "matrix" and getattr(test, "sparse", False):
        return NO_SPARSE
    if test.family == "gemm":
        return NO_GEMM
    if test.kernel == "p2p":
        return NO_P2P
    return None


def alu_support(test: TestSpec, rt) -> str | None:
    caps, driver = rt.caps, rt.driver_label
    if not test.kernel:
        have = " (exposed here)" if EXT_FLOAT8 in caps.extensions else f" (not exposed by {driver})"
        return NO_KERNEL.get(test.dtype, "[api] no Vulkan path").format(have=have)
    if test.dtype == "bf16" and EXT_BFLOAT16 not in caps.extensions:
        return f"[driver] {EXT_BFLOAT16} not exposed by {driver}"
    missing = [f for f in NEEDS.get(test.dtype, ()) if not caps.has(f)]
    if missing:
        return f"[driver] {driver} does not support {', '.join(missing)}"
    return None


def kernel_source(test: TestSpec, v: Variant) -> tuple[str, dict]:
    """The shader file and its compile-time settings for one variant (the input buffer's 256
    seed rows come before the parameters: PARAMS_OFFSET)."""
    common = {"ACC": test.accumulators, "UNROLL": v.unroll}
    if test.kernel == "fma":
        return "alu_fma.comp", {**common, "T": GLSL_TYPES[(test.dtype, v.width)],
                                "IS_FLOAT": int(test.dtype.startswith("fp"))}
    if test.kernel in ("dot4x8", "bf16dot"):
        return f"alu_{test.kernel}.spvasm", {**common, "WIDTH": v.width, "PARAMS_OFFSET": ref.SEEDS * v.width,
                                             "CONSTANTS": max(test.accumulators, v.width)}
    raise Unsupported(f"[api] no Vulkan kernel for family {test.kernel!r}")


def alu_kernel(test: TestSpec, variant: Variant, rt) -> AluKernel:
    shader, settings = kernel_source(test, variant)
    evidence = {"integer_dot_product_properties": rt.caps.dot_product} if test.kernel == "dot4x8" else {}
    return AluKernel(shader, "main", test.kernel, settings, {"shader": shader}, evidence)


def variants(test: TestSpec, rt) -> tuple[Variant, ...]:
    """The catalog's variants, less the stream layouts that reduce with subgroup arithmetic
    where it is missing."""
    if test.kernel == "stream" and not rt.caps.subgroup_arithmetic:
        return tuple(v for v in test.variants if v.name not in SUBGROUP_LAYOUTS)
    return test.variants


def chase_kernel(rt) -> ChaseKernel:
    """mem_chase.comp: the subgroup clock's two 32-bit halves at words 1-4 of its output; a pointer
    chase where the device has buffer device addresses, else an index chase."""
    pointer = rt.caps.has("bufferDeviceAddress")
    return ChaseKernel("mem_chase.comp", "main", clock_word=1, path=CHASE_PATH[pointer], max_rounds=rt.max_rounds,
                       pointer=pointer)


# The device table the workloads read (peakbench/workloads/__init__.py).
TABLE = CapabilityTable(alu_support=alu_support, alu_kernel=alu_kernel, matrix="peakbench.vulkan.coopmat",
                        modules=MODULES, stream=STREAM, empty=EMPTY, launch_params=LAUNCH_PARAMS,
                        chase_kernel=chase_kernel, refuse=refuse, variants_of=variants)

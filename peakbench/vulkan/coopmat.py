"""Matrix tests through VK_KHR_cooperative_matrix: the shapes a driver reports, why a test cannot
run, and the workload that times one shape.

GLSL (glslang 13) spells FP16, FP32 and 8-bit integer matrices; BF16, FP8 and FP64 variants are
the FP16 or FP32 module with its float type rewritten in SPIR-V assembly and validated again.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from peakbench.backend import release_on_failure
from peakbench.catalog import TestSpec, Variant
from peakbench.catalog import matrix as catalog
from peakbench.catalog import matrix_reference as ref
from peakbench.vulkan import shaders
from peakbench.workloads import matrix as shared

EXT = "VK_KHR_cooperative_matrix"
SCOPE_WORKGROUP, SCOPE_SUBGROUP = 2, 3
# Workgroup-scope shapes tried where VK_NV_cooperative_matrix2 allows them: (M, N, K, accumulators),
# sized so the tiles fit in registers when a workgroup of 128+ invocations shares them.
WORKGROUP_SHAPES = ((64, 64, 32, 4), (128, 128, 32, 1))
COMPONENTS = {0: "fp16", 1: "fp32", 2: "fp64", 3: "int8", 4: "int16", 5: "int32", 6: "int64",
              7: "uint8", 8: "uint16", 9: "uint32", 10: "uint64", 1000141000: "bf16",
              1000491002: "fp8_e4m3", 1000491003: "fp8_e5m2"}
WAVES = 4

# Operand types a test accepts (the first is the canonical one), and its accumulator types.
OPERANDS = {"fp16": ("fp16",), "bf16": ("bf16",), "fp8_e4m3": ("fp8_e4m3",), "fp8_e5m2": ("fp8_e5m2",),
            "int8": ("int8", "uint8"), "fp64": ("fp64",)}
ACCUMULATORS = {"fp16": ("fp16",), "fp32": ("fp32",), "int32": ("int32", "uint32"), "fp64": ("fp64",)}
NO_COMPONENT = {"tf32": "[api] Vulkan has no TF32 component type for cooperative matrices",
                "int4": "[api] Vulkan has no 4-bit integer component type for cooperative matrices",
                "fp4": "[api] Vulkan has no 4-bit float component type for cooperative matrices"}
GLSL = {"fp16": "float16_t", "fp32": "float", "int8": "int8_t", "uint8": "uint8_t",
        "int32": "int32_t", "uint32": "uint32_t"}
# Extension and feature each rewritten operand type needs (VK_KHR_shader_bfloat16, VK_EXT_shader_float8).
NEEDS = {"bf16": ("VK_KHR_shader_bfloat16", "shaderBFloat16CooperativeMatrix"),
         "fp8_e4m3": ("VK_EXT_shader_float8", "shaderFloat8CooperativeMatrix"),
         "fp8_e5m2": ("VK_EXT_shader_float8", "shaderFloat8CooperativeMatrix")}


@dataclass(frozen=True)
class Shape:
    m: int
    n: int
    k: int
    a: str
    b: str
    c: str
    result: str
    saturating: bool
    scope: int
    invocations: int = 0        # workgroup-scope (flexible) shapes: the workgroup size they need

    def describe(self) -> str:
        text = f"{self.m}x{self.n}x{self.k} {self.a}*{self.b}+{self.c}->{self.result}"
        if self.saturating:
            text += " saturating"
        if self.scope == SCOPE_WORKGROUP:
            text += f" workgroup scope, granularity, {self.invocations} invocations"
        return text


def query_shapes(instance, physical) -> list[Shape]:
    import vulkan as vk
    try:
        fn = vk.vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")
        props = fn(physical)
    except Exception:
        return []
    name = lambda t: COMPONENTS.get(t, f"type{t}")
    return [Shape(p.MSize, p.NSize, p.KSize, name(p.AType), name(p.BType), name(p.CType),
                  name(p.ResultType), bool(p.saturatingAccumulation), p.scope) for p in props]


def query_flexible_shapes(instance, physical) -> list[Shape]:
    """VK_NV_cooperative_matrix2's flexible-dimension entries (granularities in m, n, k); the
    `vulkan` package predates the entry point and its structure, so both are used raw."""
    import vulkan as vk
    from vulkan._vulkan import lib
    ffi = vk.ffi
    ptr = lib.vkGetInstanceProcAddr(instance, b"vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV")
    if ptr == ffi.NULL:
        return []
    fn = ffi.cast("VkResult(*)(VkPhysicalDevice, uint32_t*, void*)", ptr)
    count = ffi.new("uint32_t*")
    fn(physical, count, ffi.NULL)
    words = 14                                   # sType, pad, pNext(2), 10 x uint32_t
    props = ffi.new("uint32_t[]", words * count[0])
    for i in range(count[0]):
        props[i * words] = 1000593001            # VkCooperativeMatrixFlexibleDimensionsPropertiesNV
    fn(physical, count, props)
    name = lambda t: COMPONENTS.get(t, f"type{t}")
    out = []
    for i in range(count[0]):
        p = [props[i * words + j] for j in range(4, 14)]
        out.append(Shape(p[0], p[1], p[2], name(p[3]), name(p[4]), name(p[5]), name(p[6]), bool(p[7]), p[8], p[9]))
    return out



def matching(test: TestSpec, shapes: list[Shape], scope: int = SCOPE_SUBGROUP) -> list[Shape]:
    a, c = test.types
    ok_a, ok_c = OPERANDS.get(a, ()), ACCUMULATORS.get(c, ())
    return [s for s in shapes if s.a in ok_a and s.b == s.a and s.c in ok_c and s.result == s.c
            and s.scope == scope and not s.saturating
            and (s.a.startswith("uint") == s.c.startswith("uint"))]


def support(test: TestSpec, rt) -> str | None:
    a, c = test.types
    driver = rt.driver_label
    if a in NO_COMPONENT:
        return NO_COMPONENT[a]
    if EXT not in rt.caps.extensions or not rt.caps.has("cooperativeMatrix"):
        return f"[driver] {EXT} not exposed by {driver}"
    if a in NEEDS:
        ext, feature = NEEDS[a]
        if ext not in rt.caps.extensions:
            return f"[driver] {ext} not exposed by {driver}"
        if not rt.caps.has(feature):
            return f"[driver] {driver} does not support {feature}"
    if not matching(test, rt.caps.coopmat_shapes):
        return (f"[driver] {driver} reports no subgroup cooperative-matrix shape with "
                f"{a.upper()} operands and {c.upper()} accumulators")
    if a == "fp64" and not rt.caps.has("shaderFloat64"):
        return f"[driver] {driver} does not support shaderFloat64"
    return None


def variants(test: TestSpec, rt) -> tuple[Variant, ...]:
    """Every subgroup shape the driver reports, then the workgroup-scope shapes its flexible
    dimensions allow (VK_NV_cooperative_matrix2), named wg<M>x<N>x<K>."""
    out = []
    for s in matching(test, rt.caps.coopmat_shapes):
        prefix = "u8:" if s.a == "uint8" else ""
        out.append(catalog.shape(s.m, s.n, s.k, prefix))
    limit = rt.caps.coopmat2.get("max_dimension", 0)
    # The widest workgroups the driver offers (128 and more invocations) sharing 64-128 wide tiles.
    for s in matching(test, rt.caps.coopmat_shapes, SCOPE_WORKGROUP):
        if s.a == "uint8" or s.invocations < 128:
            continue
        for m, n, k, acc in WORKGROUP_SHAPES:
            # More than 64 accumulator elements per invocation spills (seen: 128x128 over 128).
            if m * n > 64 * s.invocations:
                continue
            if all(d % g == 0 and d <= limit for d, g in ((m, s.m), (n, s.n), (k, s.k))):
                out.append(catalog.workgroup_shape(m, n, k, s.invocations, acc))
    return tuple(dict.fromkeys(out))


def _rewrite(text: str, old_type: str, new_type: str, capabilities: dict, extension: str | None,
             strides: dict) -> str:
    """Swap one scalar type declaration and its capabilities in a disassembled module."""
    text = re.sub(rf"^(\s*%\w+ = ){re.escape(old_type)}$", rf"\g<1>{new_type}", text, flags=re.M)
    for old, new in capabilities.items():
        text = text.replace(f"OpCapability {old}\n", "".join(f"OpCapability {c}\n" for c in new))
    if extension:    # extensions follow the capabilities, before the glslang ones
        text = text.replace("OpExtension", f'OpExtension "{extension}"\nOpExtension', 1)
    for old, new in strides.items():
        text = re.sub(rf"(OpDecorate %\w+ ArrayStride) {old}$", rf"\g<1> {new}", text, flags=re.M)
    return text


REWRITES = {
    # operand: (GLSL operand type it starts from, rewrite arguments)
    "bf16": ("float16_t", ("OpTypeFloat 16", "OpTypeFloat 16 BFloat16KHR",
                           {"Float16": ["BFloat16TypeKHR", "BFloat16CooperativeMatrixKHR"]},
                           "SPV_KHR_bfloat16", {})),
    "fp8_e4m3": ("float16_t", ("OpTypeFloat 16", "OpTypeFloat 8 Float8E4M3EXT",
                               {"Float16": ["Float8EXT", "Float8CooperativeMatrixEXT"],
                                "StorageBuffer16BitAccess": ["StorageBuffer8BitAccess"]},
                               "SPV_EXT_float8", {2: 1})),
    "fp8_e5m2": ("float16_t", ("OpTypeFloat 16", "OpTypeFloat 8 Float8E5M2EXT",
                               {"Float16": ["Float8EXT", "Float8CooperativeMatrixEXT"],
                                "StorageBuffer16BitAccess": ["StorageBuffer8BitAccess"]},
                               "SPV_EXT_float8", {2: 1})),
    "fp64": ("float", ("OpTypeFloat 32", "OpTypeFloat 64", {"Shader": ["Shader", "Float64"]}, None, {4: 8})),
}


def module(a: str, c: str, m: int, n: int, k: int, accumulators: int, workgroup: bool = False) -> bytes:
    """The validated SPIR-V for one shape (rewritten from the GLSL module where GLSL cannot spell a)."""
    settings = {"M": m, "N": n, "K": k, "ACC": accumulators, "UNROLL": catalog.UNROLL,
                "WORKGROUP_SCOPE": int(workgroup)}
    if a not in REWRITES:
        return shaders.compile_shader("matrix_coopmat.comp", {**settings, "A_T": GLSL[a], "C_T": GLSL[c]})
    base_type, args = REWRITES[a]
    c_glsl = "float" if a == "fp64" else GLSL[c]
    base = shaders.compile_shader("matrix_coopmat.comp", {**settings, "A_T": base_type, "C_T": c_glsl})
    return shaders.assemble(_rewrite(shaders.disassemble(base, raw_ids=False), *args), f"matrix {a}.{c} {settings}")


class MatrixWorkload(shared.MatrixWorkload):
    """One shape: a pipeline holding A, B and the accumulators in registers."""

    @release_on_failure
    def __init__(self, test: TestSpec, variant: Variant, rt):
        a, c = ("uint8", "uint32") if variant.name.startswith("u8:") else test.types
        m, n, k = variant.shape
        self.accumulators = variant.accumulators or test.accumulators
        workgroup = variant.scope == "workgroup"
        code = module(a, c, m, n, k, self.accumulators, workgroup)
        sub = rt.caps.subgroup_size
        local = variant.invocations if workgroup else sub * 4
        self.grid = max(1, rt.grid_threads(WAVES) // local)
        self.owners = self.grid if workgroup else self.grid * (local // sub)     # tile owners: subgroups
        inputs = ref.make_inputs(m, n, k, a, c, self.accumulators)
        self.kernel = rt.load(code, local, "bbbbu", f"{test.name}-{variant.name}")
        self.census = rt.census(self.kernel)           # the module's MMA steps, for the guards
        self.loop_items = variant.unroll * self.accumulators     # items one owner does per iteration
        self.setup(test, variant, rt, inputs, c)
        self.params = {"variant": variant.name, "shader": "matrix_coopmat.comp", "m": m, "n": n, "k": k,
                       "operands": a, "accumulator": c, "workgroup_size": local, "workgroups": self.grid,
                       "tile_owners": self.owners, "scope": variant.scope, "accumulators": self.accumulators,
                       "unroll": variant.unroll, "ops_per_step": variant.ops_per_step}
        self.evidence = {"driver_shapes": [s.describe() for s in rt.caps.coopmat_shapes], **rt.evidence(self.kernel)}


def workload(test: TestSpec, variant: Variant, rt) -> MatrixWorkload:
    return MatrixWorkload(test, variant, rt)

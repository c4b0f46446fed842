"""Catalog tests as Vulkan workloads: which kernel runs a test, and why a test cannot run here."""
from __future__ import annotations

import numpy as np

from peakbench.backend import Unsupported, release, release_on_failure
from peakbench.catalog import TestSpec, Variant
from peakbench.catalog import alu_reference as ref
from peakbench.harness import sweeps
from peakbench.vulkan import coopmat, memory
from peakbench.vulkan.instance import EXT_BFLOAT16, EXT_FLOAT8
from peakbench.vulkan.shaders import compile_shader

LOCAL_SIZE = 256
WAVES = 4                  # the ALU grid fills the device this many times over

# GLSL vector type per (dtype, width) for the "fma" kernel family.
GLSL_TYPES = {
    ("fp64", 1): "double", ("fp64", 2): "dvec2", ("fp64", 4): "dvec4",
    ("fp32", 1): "float", ("fp32", 2): "vec2", ("fp32", 4): "vec4",
    ("fp16", 1): "float16_t", ("fp16", 2): "f16vec2", ("fp16", 4): "f16vec4",
    ("int32", 1): "int", ("int32", 2): "ivec2", ("int32", 4): "ivec4",
    ("int16", 1): "int16_t", ("int16", 2): "i16vec2", ("int16", 4): "i16vec4",
}

# Device features each element type needs (Vulkan feature names).
NEEDS = {
    "fp64": ("shaderFloat64",),
    "fp16": ("shaderFloat16", "storageBuffer16BitAccess"),
    "int16": ("shaderInt16", "storageBuffer16BitAccess"),
    "int8": ("shaderIntegerDotProduct",),
    "bf16": ("shaderBFloat16Type", "shaderBFloat16DotProduct"),
}

NO_KERNEL = {
    "compute.fp8_e4m3": "[api] SPIR-V has no FP8 arithmetic: VK_EXT_shader_float8{have} allows FP8 only "
                        "in conversions and cooperative matrices",
    "compute.fp8_e5m2": "[api] SPIR-V has no FP8 arithmetic: VK_EXT_shader_float8{have} allows FP8 only "
                        "in conversions and cooperative matrices",
    "compute.int4": "[api] Vulkan and SPIR-V have no 4-bit integer type",
    "compute.fp4": "[api] Vulkan and SPIR-V have no 4-bit float type",
}


def support(test: TestSpec, dev) -> str | None:
    if test.family == "matrix":
        return coopmat.support(test, dev)
    if test.family in ("memory", "latency", "launch"):
        return None
    caps, driver = dev.caps, dev.driver_label
    if not test.kernel:
        have = " (exposed here)" if EXT_FLOAT8 in caps.extensions else f" (not exposed by {driver})"
        return NO_KERNEL.get(test.name, "[api] no Vulkan path").format(have=have)
    if test.dtype == "bf16" and EXT_BFLOAT16 not in caps.extensions:
        return f"[driver] {EXT_BFLOAT16} not exposed by {driver}"
    missing = [f for f in NEEDS.get(test.dtype, ()) if not caps.has(f)]
    if missing:
        return f"[driver] {driver} does not support {', '.join(missing)}"
    return None


def kernel_source(test: TestSpec, v: Variant) -> tuple[str, dict]:
    """The shader file and its compile-time settings for one variant."""
    common = {"ACC": test.accumulators, "UNROLL": v.unroll}
    if test.kernel == "fma":
        return "alu_fma.comp", {**common, "T": GLSL_TYPES[(test.dtype, v.width)],
                                "IS_FLOAT": int(test.dtype.startswith("fp"))}
    if test.kernel in ("dot4x8", "bf16dot"):
        return f"alu_{test.kernel}.spvasm", {**common, "WIDTH": v.width, "PARAMS_OFFSET": 256 * v.width,
                                             "CONSTANTS": max(test.accumulators, v.width)}
    raise Unsupported(f"[api] no Vulkan kernel for family {test.kernel!r}")


class AluWorkload:
    """One vector-ALU variant: a pipeline, its input and output buffers, and its op count."""

    @release_on_failure
    def __init__(self, test: TestSpec, variant: Variant, dev):
        self.test, self.variant, self.dev = test, variant, dev
        self.name = variant.name
        shader, settings = kernel_source(test, variant)
        code = compile_shader(shader, settings)
        local = min(LOCAL_SIZE, dev.caps.max_workgroup_size)
        self.groups = max(1, dev.grid_threads(WAVES) // local)
        self.threads = self.groups * local
        self.inputs = ref.make_inputs(test.kernel, test.dtype, variant.width)
        self.out_dtype = ref.DTYPES[test.dtype]
        self.out_shape = (test.accumulators, variant.width)
        data = self.inputs.buffer()
        self.pipeline = dev.pipeline(code, bindings=2, local_size=local, label=f"{test.name}-{variant.name}")
        self.inp = dev.buffer(len(data))
        self.out = dev.buffer(self.threads * int(np.prod(self.out_shape)) * np.dtype(self.out_dtype).itemsize)
        dev.upload(self.inp, data)
        dev.bind(self.pipeline, [self.out, self.inp])
        self.params = {"variant": variant.name, "shader": shader, "workgroup_size": local,
                       "workgroups": self.groups, "threads": self.threads,
                       "accumulators": test.accumulators, "unroll": variant.unroll, "width": variant.width,
                       "ops_per_step": variant.ops_per_step}
        self.evidence = {"pipeline_statistics": self.pipeline.statistics} if self.pipeline.statistics else {}
        if test.kernel == "dot4x8":
            self.evidence["integer_dot_product_properties"] = dev.caps.dot_product

    def run(self, size: int) -> float:
        return self.dev.dispatch(self.pipeline, self.groups, [size])

    def work(self, size: int) -> float:
        return float(self.threads) * size * self.variant.unroll * self.test.accumulators * self.variant.ops_per_step

    def verify(self) -> str | None:
        """One loop iteration on the full grid, output poisoned first, recomputed on the host
        (exactly, except the float64 FMA and the bfloat16 dot product: alu_reference.TOLERANCE)."""
        self.dev.fill(self.out, 0xFFFFFFFF)      # NaN for floats, -1 for integers
        self.run(1)
        got = np.frombuffer(self.dev.download(self.out), dtype=self.out_dtype).reshape(self.threads, *self.out_shape)
        return ref.check(self.test.kernel, self.test.dtype, self.inputs, self.test.accumulators,
                         self.variant.unroll, got)

    def close(self) -> None:
        release(self, self.dev.free, "inp", "out")
        release(self, self.dev.destroy, "pipeline")


def variants(test: TestSpec, dev) -> tuple[Variant, ...]:
    """The catalog's variants (less the rows read where subgroup arithmetic, which it reduces
    with, is missing), or for matrix tests the shapes this driver reports."""
    if test.family == "matrix":
        return coopmat.variants(test, dev)
    if test.name == "memory.read" and not dev.caps.subgroup_arithmetic:
        return tuple(v for v in test.variants if v.name != "rows")
    return test.variants


def prepare(test: TestSpec, variant: Variant, dev):
    """The workload for one variant; Unsupported (with support()'s reason) for a test that
    cannot run here, as the Device interface promises."""
    reason = support(test, dev)
    if reason:
        raise Unsupported(reason)
    if test.family == "matrix":
        return coopmat.MatrixWorkload(test, variant, dev)
    if test.family == "memory":
        return memory.StreamWorkload(test, variant, dev)
    if test.family == "latency":
        if getattr(dev, "chase_sweep", None) is None:      # one sweep serves every level
            dev.chase_sweep = memory.chase_sweep(dev)
        return sweeps.LatencyWorkload(test, variant, dev.chase_sweep, memory.PATH)
    if test.family == "launch":
        return memory.LaunchWorkload(test, variant, dev)
    return AluWorkload(test, variant, dev)

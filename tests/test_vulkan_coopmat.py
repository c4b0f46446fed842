"""peakbench.vulkan.coopmat: the variants are the subgroup shapes the driver reports, the
unsupported reasons, and every generated cooperative-matrix module (GLSL and the BF16/FP8/FP64
rewrites) through spirv-val."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from peakbench.catalog import default_catalog

CATALOG = default_catalog()
coopmat = pytest.importorskip("peakbench.vulkan.coopmat", exc_type=(ImportError, OSError))
Shape = coopmat.Shape
H200_SHAPES = [Shape(16, 16, 16, "fp16", "fp16", "fp16", "fp16", False, 3),
               Shape(16, 8, 16, "fp16", "fp16", "fp32", "fp32", False, 3),
               Shape(16, 16, 32, "uint8", "uint8", "uint32", "uint32", False, 3),
               Shape(16, 16, 32, "int8", "int8", "int32", "int32", False, 3),
               Shape(16, 16, 32, "int8", "int8", "int32", "int32", True, 3),      # saturating: skipped
               Shape(64, 64, 16, "fp16", "fp16", "fp32", "fp32", False, 2),      # workgroup scope: skipped
               Shape(16, 16, 16, "bf16", "bf16", "fp32", "fp32", False, 3)]


def fake_device(extensions=("VK_KHR_cooperative_matrix", "VK_KHR_shader_bfloat16"), shapes=H200_SHAPES, **features):
    feats = {"cooperativeMatrix": True, "shaderBFloat16CooperativeMatrix": True, "shaderFloat64": True, **features}
    caps = SimpleNamespace(extensions=set(extensions), coopmat_shapes=list(shapes), coopmat2={},
                           has=lambda f: bool(feats.get(f)))
    return SimpleNamespace(caps=caps, driver_label="Fake 1.2.3")


def test_variants_are_the_reported_subgroup_shapes():
    dev = fake_device()
    names = lambda t: [v.name for v in coopmat.variants(CATALOG.get(t), dev)]
    assert names("matrix.int8.int32") == ["u8:16x16x32", "16x16x32"]
    assert names("matrix.fp16.fp32") == ["16x8x16"]
    assert names("matrix.fp16.fp16") == ["16x16x16"]
    assert names("matrix.bf16.fp32") == ["16x16x16"]


@pytest.mark.parametrize("test, dev, reason", [
    ("matrix.tf32.fp32", fake_device(), "[api] Vulkan has no TF32 component type"),
    ("matrix.int4.int32", fake_device(), "[api] Vulkan has no 4-bit integer"),
    ("matrix.fp4.fp32", fake_device(), "[api] Vulkan has no 4-bit float"),
    ("matrix.fp16.fp32", fake_device(extensions=()), "[driver] VK_KHR_cooperative_matrix not exposed by Fake 1.2.3"),
    ("matrix.fp8_e4m3.fp32", fake_device(), "[driver] VK_EXT_shader_float8 not exposed by Fake 1.2.3"),
    ("matrix.bf16.fp32", fake_device(shaderBFloat16CooperativeMatrix=False),
     "[driver] Fake 1.2.3 does not support shaderBFloat16CooperativeMatrix"),
    ("matrix.fp64.fp64", fake_device(), "[driver] Fake 1.2.3 reports no subgroup cooperative-matrix shape with FP64"),
    ("matrix.fp16.fp32", fake_device(), None),
])
def test_support_reasons(test, dev, reason):
    got = coopmat.support(CATALOG.get(test), dev)
    assert got == reason if reason is None else got.startswith(reason)


MODULES = [("fp16", "fp32", (16, 16, 16), "OpTypeFloat 16"), ("fp16", "fp16", (16, 8, 8), "OpTypeFloat 16"),
           ("int8", "int32", (16, 16, 32), "MatrixASignedComponentsKHR"), ("uint8", "uint32", (16, 8, 32), "OpTypeInt 8 0"),
           ("bf16", "fp32", (16, 16, 16), "OpTypeFloat 16 BFloat16KHR"),
           ("fp8_e4m3", "fp32", (16, 16, 32), "OpTypeFloat 8 Float8E4M3EXT"),
           ("fp8_e5m2", "fp32", (16, 16, 32), "OpTypeFloat 8 Float8E5M2EXT"), ("fp64", "fp64", (8, 8, 4), "OpTypeFloat 64")]


@pytest.mark.parametrize("a, c, mnk, marker", MODULES, ids=[f"{a}.{c}" for a, c, _, _ in MODULES])
def test_every_generated_module_passes_spirv_val(a, c, mnk, marker):
    from peakbench.vulkan import shaders
    code = coopmat.module(a, c, *mnk, 8)          # compiles or rewrites, then spirv-val inside
    shaders.validate(code, f"{a}.{c}")
    text = shaders.disassemble(code, raw_ids=False)
    assert marker in text
    assert text.count("OpCooperativeMatrixMulAddKHR") >= 2, "the loop alternates B1 and B2"
    if a in ("bf16", "fp8_e4m3", "fp8_e5m2"):
        assert "OpTypeFloat 16\n" not in text, "no FP16 left behind in a rewritten module"


def test_workgroup_scope_variants_follow_the_flexible_entries():
    wg = [Shape(32, 32, 16, "fp16", "fp16", "fp32", "fp32", False, 2, 256),
          Shape(32, 16, 16, "fp16", "fp16", "fp32", "fp32", False, 2, 128),
          Shape(16, 16, 16, "fp16", "fp16", "fp32", "fp32", False, 2, 32)]      # too narrow: skipped
    dev = fake_device(shapes=H200_SHAPES + wg)
    dev.caps.coopmat2 = {"max_dimension": 256}
    got = {v.name: v for v in coopmat.variants(CATALOG.get("matrix.fp16.fp32"), dev)}
    assert list(got) == ["16x8x16", "wg256:64x64x32", "wg256:128x128x32", "wg128:64x64x32"]
    v = got["wg256:128x128x32"]
    assert (v.scope, v.invocations, v.accumulators, v.ops_per_step) == ("workgroup", 256, 1, 2 * 128 * 128 * 32)
    dev.caps.coopmat2 = {"max_dimension": 64}
    assert "wg256:128x128x32" not in [v.name for v in coopmat.variants(CATALOG.get("matrix.fp16.fp32"), dev)]


def test_workgroup_scope_module_passes_spirv_val():
    from peakbench.vulkan import shaders
    text = shaders.disassemble(coopmat.module("fp16", "fp32", 64, 64, 32, 4, workgroup=True), raw_ids=False)
    assert "OpTypeCooperativeMatrixKHR %half %uint_2 %uint_64 %uint_32" in text      # scope 2 = Workgroup

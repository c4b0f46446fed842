"""peakbench.rocm.targets, the ROCm capability table: every compute and matrix test on the five
targets the backend is written for is native or unsupported with the expected category, the
matrix shapes and forms per family, and a device follows the table."""
from __future__ import annotations

import pytest

from peakbench.catalog import default_catalog
from peakbench.rocm import targets
from test_rocm import device, fakes, no_amdsmi  # noqa: F401  (fixtures)

CATALOG = default_catalog()
# Every compute and matrix test on the five targets the ROCm backend is written for: "ok" (native)
# or the category the reason must start with.
OK = "ok"
EXPECTED = {
    #                        gfx90a        gfx942        gfx950        gfx1100       gfx1201
    "compute.fp64":         (OK,           OK,           OK,           OK,           OK),
    "compute.fp32":         (OK,           OK,           OK,           OK,           OK),
    "compute.fp16":         (OK,           OK,           OK,           OK,           OK),
    "compute.bf16":         ("hardware",   "hardware",   "toolchain",  "toolchain",  "toolchain"),
    "compute.int32":        (OK,           OK,           OK,           OK,           OK),
    "compute.int64":        (OK,           OK,           OK,           OK,           OK),
    "compute.int16":        (OK,           OK,           OK,           OK,           OK),
    "compute.int8":         (OK,           OK,           OK,           OK,           OK),
    "compute.fp8_e4m3":     ("hardware",   "hardware",   "hardware",   "hardware",   "toolchain"),
    "compute.fp8_e5m2":     ("hardware",   "hardware",   "hardware",   "hardware",   "toolchain"),
    "compute.int4":         ("toolchain",  "toolchain",  "toolchain",  "toolchain",  "toolchain"),
    "compute.fp4":          ("hardware",   "hardware",   "hardware",   "hardware",   "hardware"),
    "matrix.fp16.fp16":     ("hardware",   "hardware",   "hardware",   OK,           OK),
    "matrix.fp16.fp32":     (OK,           OK,           OK,           OK,           OK),
    "matrix.bf16.fp32":     (OK,           OK,           OK,           OK,           OK),
    "matrix.tf32.fp32":     ("hardware",   OK,           "hardware",   "hardware",   "hardware"),
    "matrix.fp8_e4m3.fp32": ("hardware",   OK,           OK,           "hardware",   OK),
    "matrix.fp8_e5m2.fp32": ("hardware",   OK,           OK,           "hardware",   OK),
    "matrix.int8.int32":    (OK,           OK,           OK,           OK,           OK),
    "matrix.int4.int32":    ("hardware",   "hardware",   "hardware",   OK,           OK),
    "matrix.fp4.fp32":      ("hardware",   "hardware",   OK,           "hardware",   "hardware"),
    "matrix.fp64.fp64":     (OK,           OK,           OK,           "hardware",   "hardware"),
}
ARCHES = ("gfx90a:sramecc+:xnack-", "gfx942:sramecc+:xnack-", "gfx950", "gfx1100", "gfx1201")


def test_the_expectations_cover_every_compute_and_matrix_test():
    # The dense ones: the sparse matrix tests are decided by their own module.
    assert set(EXPECTED) == {t.name for t in CATALOG.tests if t.family in ("compute", "matrix")
                             and not t.name.endswith(".sparse")}


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("test_name", sorted(EXPECTED))
def test_capability_decision(arch, test_name):
    want = EXPECTED[test_name][ARCHES.index(arch)]
    fn = targets.alu_reason if test_name.startswith("compute.") else targets.matrix_support
    reason = fn(arch, test_name)
    if want == OK:
        assert reason is None, reason
    else:
        assert reason and reason.startswith(f"[{want}] "), reason
        assert len(reason) > len(want) + 20, "the reason says what is missing"


def test_reasons_name_what_the_brief_expects():
    assert "emulates it in FP32" in targets.alu_reason("gfx1201", "compute.bf16")
    assert "v_dot4_f32_fp8_fp8" in targets.alu_reason("gfx1201", "compute.fp8_e4m3")
    assert "XF32" in targets.matrix_support("gfx950", "matrix.tf32.fp32")
    assert "gfx950" in targets.matrix_support("gfx942", "matrix.fp4.fp32")


def test_matrix_shapes_per_target():
    shapes = lambda arch, test: [f.shape for f in targets.matrix_forms(arch, test)]
    assert shapes("gfx942", "matrix.fp8_e4m3.fp32") == [(32, 32, 16), (16, 16, 32)]
    assert shapes("gfx950", "matrix.fp4.fp32") == [(32, 32, 64), (16, 16, 128)]
    assert [f.fmt for f in targets.matrix_forms("gfx950", "matrix.fp4.fp32")] == [4, 4]
    assert shapes("gfx1201", "matrix.int4.int32") == [(16, 16, 32), (16, 16, 16)]
    assert shapes("gfx1100", "matrix.int4.int32") == [(16, 16, 16)]
    assert shapes("gfx90a", "matrix.int8.int32") == [(32, 32, 8), (16, 16, 16)]
    assert shapes("gfx942", "matrix.int8.int32") == [(32, 32, 16), (16, 16, 32)]


def test_forms_keep_to_their_family_wave_and_kind():
    for fam in targets.FAMILIES:
        for forms in fam.matrix.values():
            for f in forms:
                assert f.builtin.startswith("mfma" if fam.wave == 64 else "wmma"), (fam.name, f)
                if fam.name == "RDNA4":
                    assert f.builtin.endswith("_w32_gfx12")
                if fam.name == "RDNA3":
                    assert f.builtin.endswith("_w32")


def test_family_lookup_ignores_target_features_and_knows_the_fp8_encoding():
    assert targets.family("gfx90a:sramecc+:xnack-").name == "CDNA2"
    assert targets.family("gfx942").fp8 == "fnuz" and targets.family("gfx950").fp8 == "ocp"
    assert targets.family("gfx1201").fp8 == "ocp" and targets.family("gfx1151").name == "RDNA3"
    unknown = targets.matrix_support("gfx1010:xnack-", "matrix.fp16.fp32")
    assert unknown.startswith("[toolchain]") and "gfx1010" in unknown
    assert targets.alu_reason("gfx1010", "compute.fp32") is None, "plain FMA runs on any target"


def test_device_support_and_variants_follow_the_table(device):
    fp8 = CATALOG.get("matrix.fp8_e4m3.fp32")
    assert device.support(fp8) is None
    assert [v.name for v in device.variants(fp8)] == ["32x32x16", "16x16x32"]
    assert all(v.shape and v.scope == "subgroup" for v in device.variants(fp8))
    assert device.support(CATALOG.get("matrix.int4.int32")).startswith("[hardware]")
    assert device.support(CATALOG.get("compute.bf16")).startswith("[hardware]")
    assert device.support(CATALOG.get("compute.fp16")) is None

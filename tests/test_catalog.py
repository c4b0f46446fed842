"""The test catalog: names from DESIGN.md, op counts from its "Op counting" rules, glob selection."""
from __future__ import annotations

import pytest

from peakbench.catalog import default_catalog

CATALOG = default_catalog()
COMPUTE = ["compute.fp64", "compute.fp32", "compute.fp16", "compute.bf16", "compute.int32", "compute.int64",
           "compute.int16", "compute.int8", "compute.fp8_e4m3", "compute.fp8_e5m2", "compute.int4", "compute.fp4"]
ALU = [t for t in CATALOG.tests if t.family == "compute" and t.kernel]
MEMORY = ["memory.read", "memory.write", "memory.copy", "memory.update", "latency.l0", "latency.l1", "latency.l2", "latency.l3",
          "latency.dram", "launch.overhead"]
SFU = ["sfu.rcp", "sfu.rsqrt", "sfu.sqrt", "sfu.exp2", "sfu.log2", "sfu.sin"]
ATOMIC = ["atomic.global_add", "atomic.global_add_contended", "atomic.shared_add"]
MATRIX = ["matrix.fp16.fp16", "matrix.fp16.fp32", "matrix.bf16.fp32", "matrix.tf32.fp32", "matrix.fp8_e4m3.fp32",
          "matrix.fp8_e5m2.fp32", "matrix.int8.int32", "matrix.int4.int32", "matrix.fp4.fp32", "matrix.fp64.fp64"]


def test_compute_family_is_the_design_list_in_order():
    assert [n for n in CATALOG.names() if n.startswith("compute.")] == COMPUTE


def test_matrix_family_is_the_design_list_with_shapes_from_the_device():
    # The dense tests; the sparse ones (matrix.<a>.<c>.sparse) follow them, tested with their module.
    assert [n for n in CATALOG.names() if n.startswith("matrix.") and not n.endswith(".sparse")] == MATRIX
    for name in MATRIX:
        t = CATALOG.get(name)
        assert t.kernel == "mma" and t.variants == () and t.dtype == ".".join(name.split(".")[1:])
        assert t.unit == ("TOPS" if ".int" in name else "TFLOPS")


def test_a_matrix_shape_counts_two_m_n_k():
    from peakbench.catalog.matrix import shape
    v = shape(16, 8, 32, "u8:")
    assert (v.name, v.shape, v.ops_per_step) == ("u8:16x8x32", (16, 8, 32), 2 * 16 * 8 * 32)
    assert v.unroll % 2 == 0, "the kernel alternates B1 and B2, so the unroll is even"


def test_names_and_units():
    for t in CATALOG.tests:
        assert t.name == t.name.lower() and t.family in (
            "compute", "sfu", "atomic", "matrix", "gemm", "memory", "latency", "launch", "transfer", "sm")
        assert t.unit in ("TFLOPS", "TOPS", "GOPS", "GB/s", "ns", "us")
        if t.family == "compute":
            assert t.unit == ("TOPS" if t.dtype.startswith(("int", "uint")) or ".int" in t.name else "TFLOPS"), t.name
    assert len(set(CATALOG.names())) == len(CATALOG.names())


# Ops per step of each variant, by DESIGN.md's op counting: an FMA is 2 ops per lane (a packed
# 2-lane FMA 4), a 4x8-bit dot-accumulate 8 per 32-bit word, a dot of n lanes n multiplies and
# n - 1 adds, once per output lane.
OPS_PER_STEP = {
    "compute.fp64": {"x1u64": 2, "x2u32": 4},                  # 2 x 1 lane, 2 x 2 lanes
    "compute.fp32": {"x1u64": 2, "x2u32": 4, "x4u16": 8},      # 2 x 1, 2 x 2, 2 x 4
    "compute.fp16": {"x2u64": 4, "x4u32": 8},                  # 2 x 2, 2 x 4
    "compute.bf16": {"dot2u32": 6, "dot4u16": 28},             # 2 x (2 + 1), 4 x (4 + 3)
    "compute.int32": {"x1u64": 2, "x4u16": 8},                 # 2 x 1, 2 x 4
    "compute.int64": {"x1u64": 2, "x2u32": 4},                 # 2 x 1, 2 x 2 (a 64-bit multiply-add, as vkpeak)
    "compute.int16": {"x1u64": 2, "x2u32": 4},                 # 2 x 1, 2 x 2
    "compute.int8": {"x1u64": 8, "x4u16": 32},                 # 8 x 1 word, 8 x 4 words
}


@pytest.mark.parametrize("test", ALU, ids=[t.name for t in ALU])
def test_op_counts_follow_design(test):
    assert test.variants and len({v.name for v in test.variants}) == len(test.variants)
    assert {v.name: v.ops_per_step for v in test.variants} == OPS_PER_STEP[test.name]
    for v in test.variants:
        assert v.unroll >= 8 and test.accumulators >= 4
    if test.name == "compute.fp16":
        assert all(v.width % 2 == 0 for v in test.variants), "fp16 is measured packed (2 lanes per instruction)"


def test_sfu_and_atomic_tests_count_one_op_per_result():
    assert [n for n in CATALOG.names() if n.startswith("sfu.")] == SFU
    assert [n for n in CATALOG.names() if n.startswith("atomic.")] == ATOMIC
    for name in SFU + ATOMIC:
        t = CATALOG.get(name)
        assert t.unit == ("TOPS" if name.startswith("sfu.") else "GOPS") and t.kernel == t.family
        assert t.variants and all(t.per_item(v) == 1 and v.unroll >= 16 for v in t.variants)
    assert CATALOG.get("sfu.sin").function == "sin"
    assert [v.name for v in CATALOG.get("atomic.shared_add").variants] == ["u32", "f32"]
    assert CATALOG.get("atomic.global_add_contended").contended
    assert CATALOG.get("atomic.shared_add").space == "shared"


def test_types_without_a_vector_path_have_no_kernel():
    for name in ("compute.fp8_e4m3", "compute.fp8_e5m2", "compute.int4", "compute.fp4"):
        t = CATALOG.get(name)
        assert t.kernel == "" and t.variants == ()


@pytest.mark.parametrize("patterns", [None, []])
def test_no_pattern_selects_every_family_in_catalog_order(patterns):
    names = [t.name for t in CATALOG.select(patterns)]
    assert names == CATALOG.names()
    head = COMPUTE + SFU + ATOMIC
    assert names[:len(head)] == head
    assert [n for n in names if n.startswith("matrix.") and not n.endswith(".sparse")] == MATRIX
    assert [n for n in names if n in MEMORY] == MEMORY
    # the near-idle loads last, so no core test follows their seconds of idle cores but sm's own
    light = ("latency.l0", "latency.dram", "launch.overhead", "transfer.h2d", "transfer.bidir")
    assert [names.index(n) for n in light] == sorted(names.index(n) for n in light)
    assert names.index("sm.l2_latency") < names.index("latency.l0")
    assert names.index("memory.update") < names.index("memory.shared") < names.index("latency.l0")
    # the sparse matrix tests after the GEMMs, whose clocks they held down for the rest of a process
    sparse = [names.index(n) for n in names if n.endswith(".sparse")]
    gemms = [names.index(n) for n in names if n.startswith("gemm.")]
    assert len(sparse) == 7 and min(sparse) > max(gemms)


@pytest.mark.parametrize("patterns, want", [
    (["compute.fp32"], ["compute.fp32"]),
    (["compute.fp8_*"], ["compute.fp8_e4m3", "compute.fp8_e5m2"]),
    (["compute.int*", "compute.fp64"], ["compute.fp64", "compute.int32", "compute.int64", "compute.int16",
                                         "compute.int8", "compute.int4"]),   # catalog order, not pattern order
    (["sfu.*sqrt"], ["sfu.rsqrt", "sfu.sqrt"]),
    (["atomic.global*"], ["atomic.global_add", "atomic.global_add_contended"]),
    (["Compute.FP32"], []),                                        # case-sensitive
    (["nomatch.*"], []),
])
def test_select(patterns, want):
    assert [t.name for t in CATALOG.select(patterns)] == want


def test_get_unknown_raises():
    with pytest.raises(KeyError):
        CATALOG.get("compute.fp128")


def test_shared_atomics_and_shared_memory_scale_with_the_core_clock_global_atomics_do_not():
    assert CATALOG.get("atomic.shared_add").clocked and CATALOG.get("memory.shared").clocked
    assert not CATALOG.get("atomic.global_add").clocked and not CATALOG.get("memory.l2").clocked


def test_the_gemms_and_the_sparse_matrix_tests_keep_a_burst_and_nothing_else():
    bursting = {t.name for t in CATALOG.tests if t.bursts}
    want = {n for n in CATALOG.names() if n.startswith("gemm.") or n.endswith(".sparse")}
    assert bursting == want and len(want) == 13


def test_the_matrix_and_gemm_tests_and_nothing_else_keep_a_tensor_load():
    tensor = {t.name for t in CATALOG.tests if t.tensor}
    assert tensor == {t.name for t in CATALOG.tests if t.family in ("matrix", "gemm")} and len(tensor) > 20

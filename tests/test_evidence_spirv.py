"""The SPIR-V census (evidence/spirv.py) on modules glslang builds here, no device
needed: every vector-ALU variant (64-bit integers included) and every cooperative-matrix module
(GLSL, the BF16/FP8/FP64 rewrites, the workgroup-scope form) holds the catalog's work in the test's
types; planted faults (an FP16 module under the BF16 label, half the steps) fail the guard that
reads them, through the session's static guards. Lavapipe exposes no cooperative matrices, so the
matrix workload's wiring is checked on a stand-in runtime."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from peakbench.catalog import Variant, default_catalog
from peakbench.catalog import matrix as matrix_catalog
from peakbench.harness import guards, session
from peakbench.runtime import Kernel

spirv_census = pytest.importorskip("peakbench.evidence.spirv", exc_type=(ImportError, OSError))
from peakbench.vulkan import capabilities, coopmat  # noqa: E402
from peakbench.vulkan.shaders import compile_shader  # noqa: E402
from peakbench.workloads import alu  # noqa: E402

CATALOG = default_catalog()
ALU = [(t.name, v.name) for t in CATALOG.tests if t.family == "compute" and t.kernel for v in t.variants]
# (test, operands, accumulator, M, N, K): one shape per module kind the Vulkan backend builds
MATRIX = [("matrix.fp16.fp32", "fp16", "fp32", 16, 8, 16), ("matrix.fp16.fp16", "fp16", "fp16", 16, 16, 16),
          ("matrix.int8.int32", "int8", "int32", 16, 16, 32), ("matrix.int8.int32", "uint8", "uint32", 16, 8, 32),
          ("matrix.bf16.fp32", "bf16", "fp32", 16, 16, 16), ("matrix.fp8_e4m3.fp32", "fp8_e4m3", "fp32", 16, 16, 32),
          ("matrix.fp8_e5m2.fp32", "fp8_e5m2", "fp32", 16, 16, 32), ("matrix.fp64.fp64", "fp64", "fp64", 8, 8, 4)]


def checked(test, variant, census, loop_items) -> tuple:
    """The session's static guards on a workload with this census: (problem, the guards' evidence)."""
    workload = SimpleNamespace(census=census, loop_items=loop_items, params={}, evidence={}, timing="gpu")
    checks = {}
    problem = session.static_guards(test, variant, workload, None, None, checks)
    return problem, checks


@pytest.mark.parametrize("name, variant_name", ALU, ids=[f"{a}-{b}" for a, b in ALU])
def test_each_alu_module_holds_the_catalogs_work_in_its_types(name, variant_name):
    test = CATALOG.get(name)
    variant = next(v for v in test.variants if v.name == variant_name)
    shader, settings = capabilities.kernel_source(test, variant)
    found = spirv_census.count(compile_shader(shader, {**settings, **alu.DEFINES}))
    problem, checks = checked(test, variant, found, variant.unroll * test.accumulators)
    assert problem is None, (problem, found)
    assert checks["work"]["evidence"]["ops_counted"] == checks["work"]["evidence"]["ops_claimed"], checks


def test_the_int64_module_counts_64_bit_multiply_adds():
    test = CATALOG.get("compute.int64")
    variant = test.variants[0]
    shader, settings = capabilities.kernel_source(test, variant)
    found = spirv_census.count(compile_shader(shader, {**settings, **alu.DEFINES}))
    assert found.ops == {"OpIAdd i64": 512, "OpIMul i64": 512} and found.types == {"i64"}
    # the same module under the INT32 label is a lie about its types
    problem, _ = guards.types(CATALOG.get("compute.int32"), variant, found)
    assert problem == "module does i64 arithmetic; test compute.int32 is int32 (i32)"


def matrix_variant(m, n, k):
    return matrix_catalog.shape(m, n, k)


@pytest.mark.parametrize("name, a, c, m, n, k", MATRIX, ids=[f"{a}.{c}" for _, a, c, *_ in MATRIX])
def test_each_matrix_module_holds_unroll_x_accumulators_mma_steps(name, a, c, m, n, k):
    test = CATALOG.get(name)
    variant = matrix_variant(m, n, k)
    found = spirv_census.count(coopmat.module(a, c, m, n, k, test.accumulators))
    steps = matrix_catalog.UNROLL * test.accumulators
    assert list(found.ops.values()) == [steps], found
    assert found.work == steps * 2 * m * n * k
    problem, checks = checked(test, variant, found, steps)
    assert problem is None, (problem, found)
    assert checks["types"]["why"].endswith("(SPIR-V)")


def test_the_workgroup_scope_module_is_counted_per_workgroup():
    test = CATALOG.get("matrix.fp16.fp32")
    variant = matrix_catalog.workgroup_shape(64, 64, 32, 256, 4)
    found = spirv_census.count(coopmat.module("fp16", "fp32", 64, 64, 32, 4, workgroup=True))
    assert found.ops == {"OpCooperativeMatrixMulAddKHR 64x64x32 f16.f32": 16}
    assert checked(test, variant, found, variant.unroll * 4)[0] is None


def test_an_fp16_matrix_module_under_the_bf16_label_fails_the_types_guard():
    test = CATALOG.get("matrix.bf16.fp32")
    found = spirv_census.count(coopmat.module("fp16", "fp32", 16, 16, 16, test.accumulators))
    problem, _ = checked(test, matrix_variant(16, 16, 16), found, matrix_catalog.UNROLL * test.accumulators)
    assert problem == "guard types: module does f16.f32 arithmetic; test matrix.bf16.fp32 is bf16.fp32 (bf16.f32)"


def test_a_matrix_module_doing_half_its_steps_fails_the_work_guard(monkeypatch):
    test = CATALOG.get("matrix.fp16.fp32")
    monkeypatch.setattr(matrix_catalog, "UNROLL", 2)          # the module gets 2 steps, the catalog claims 4
    found = spirv_census.count(coopmat.module("fp16", "fp32", 16, 8, 16, test.accumulators))
    monkeypatch.undo()
    problem, _ = checked(test, matrix_variant(16, 8, 16), found, matrix_catalog.UNROLL * test.accumulators)
    assert problem.startswith("guard work: loop body has 16 OpCooperativeMatrixMulAddKHR 16x8x16 f16.f32 = 65536 ops"), problem
    assert "the catalog claims 131072" in problem


class StandIn:
    """The Vulkan runtime's verbs the matrix workload uses, with the real census; no device."""
    caps = SimpleNamespace(subgroup_size=32, coopmat_shapes=[])

    def __init__(self):
        from peakbench.vulkan.runtime import VulkanRuntime
        self.census = lambda kernel: VulkanRuntime.census(self, kernel)

    def grid_threads(self, waves):
        return 256

    def load(self, code, block, args, label):
        return Kernel(label, None, block, code)

    def alloc(self, nbytes):
        return bytearray(nbytes)

    def upload(self, buf, data):
        buf[:len(data)] = data

    def fill(self, buf, byte):
        buf[:] = bytes([byte]) * len(buf)

    def evidence(self, kernel):
        return {}

    free = discard = lambda self, x: None
    dev = SimpleNamespace(sass=lambda handle: "")


def test_the_matrix_workload_exposes_its_census_and_loop_items():
    test = CATALOG.get("matrix.fp16.fp32")
    w = coopmat.MatrixWorkload(test, matrix_variant(16, 8, 16), StandIn())
    assert w.loop_items == matrix_catalog.UNROLL * test.accumulators
    assert w.census.ops == {"OpCooperativeMatrixMulAddKHR 16x8x16 f16.f32": w.loop_items}
    problem, checks = checked(test, w.variant, w.census, w.loop_items)
    assert problem is None and checks["work"]["evidence"]["ops_counted"] == w.loop_items * 2 * 16 * 8 * 16


def test_a_module_without_a_loop_says_so():
    found = spirv_census.count(compile_shader("empty.comp", {}))
    assert found.ops == {} and found.note.startswith("no arithmetic loop to count")
    test = CATALOG.get("compute.fp32")
    assert guards.work(test, Variant("x"), found, 8) == (None, f"not checked: {found.note}")


# -- the streams' device loads and stores ---------------------------------------------------------

@pytest.mark.parametrize("mode, layout, unroll, loads, stores, where", [
    ("read", "chunk", 16, 16, 0, "the innermost loop"),      # the sums are stored after the loop
    ("read", "stride", 16, 16, 0, "the innermost loop"),
    ("read", "rows", 32, 32, 1, "the whole kernel"),          # a row each, the column's total stored once
    ("write", "tile", 1, 0, 1, "the whole kernel"),
    ("copy", "tile", 1, 1, 1, "the whole kernel"),
    ("update", "tile", 1, 2, 1, "the whole kernel"),
])
def test_the_stream_kernels_loads_and_stores_are_counted_where_they_repeat(mode, layout, unroll, loads, stores, where):
    from peakbench.workloads.stream import COUNT_SLOTS, LAYOUTS, MODES
    from peakbench.workloads.witness import slot_defines
    # built as it is measured: the workgroup count's atomic add is no load or store of the stream
    found = spirv_census.count_memory(compile_shader("mem_stream.comp", {"MODE": MODES[mode], "UNROLL": unroll,
                                                                         "LAYOUT": LAYOUTS[layout],
                                                                         **slot_defines(COUNT_SLOTS)}))
    want = {op: n for op, n in (("OpLoad i32x4 (load, 16 B)", loads), ("OpStore i32x4 (store, 16 B)", stores)) if n}
    assert found.ops == want and found.work == 16 * (loads + stores)
    assert found.note.startswith(f"counted in {where}")


# -- the atomics ----------------------------------------------------------------------------------

SHARED_ADD = CATALOG.get("atomic.shared_add")
U32 = next(v for v in SHARED_ADD.variants if v.name == "u32")


def shared_add_module() -> bytes:
    from peakbench.workloads.atomic import defines
    return compile_shader("atomic.comp", defines(SHARED_ADD, U32, 32, 256))


def test_the_atomic_module_counts_one_add_a_step():
    found = spirv_census.operation_census(shared_add_module(), "atomic")
    assert found.ops == {"OpAtomicIAdd i32": U32.unroll} and found.work == U32.unroll > 1


def test_adds_folded_behind_a_condition_the_unrolling_makes_constant_count_once(tmp_path, monkeypatch):
    # The kernel's fault the results cannot see: one add of v * UNROLL a trip where UNROLL adds of
    # v were due leaves the same sums. The unrolled `if (u == 0u)` is a branch on a constant; a
    # driver runs its one add, and so must the census count it.
    from peakbench.vulkan import shaders
    text = (shaders.SHADERS / "atomic.comp").read_text()
    folded = text.replace("atomicAdd(s[lid], v);", "if (u == 0u) atomicAdd(s[lid], v * UNROLL);")
    assert folded != text
    (tmp_path / "atomic.comp").write_text(folded)
    monkeypatch.setattr(shaders, "SHADERS", tmp_path)
    found = spirv_census.operation_census(shared_add_module(), "atomic")
    assert found.ops == {"OpAtomicIAdd i32": 1} and found.work == 1
    problem, _ = guards.work(SHARED_ADD, U32, found, U32.unroll)     # the workload claims unroll adds a trip
    assert problem and f"the catalog claims {U32.unroll}" in problem

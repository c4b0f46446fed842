"""peakbench.kernels: the CUDA-dialect kernels' data that CUDA and HIP share (the bf16 test's
family and variants), and the capability table both build from their rules."""
from __future__ import annotations

import sys
import types

from peakbench import kernels
from peakbench.catalog import default_catalog

CATALOG = default_catalog()


def test_bf16_runs_the_fma_family_with_packed_pairs():
    bf16 = CATALOG.get("compute.bf16")
    assert kernels.alu_kernel(bf16, kernels.variants(bf16)[0], None).family == "fma"
    assert [v.width for v in kernels.variants(bf16)] == [2, 4]
    assert kernels.variants(CATALOG.get("compute.fp32")) == CATALOG.get("compute.fp32").variants


def test_the_table_routes_each_family_to_the_backends_rule_or_matrix_module(monkeypatch):
    matrix = types.ModuleType("fake_matrix")
    matrix.support = lambda test, rt: f"[hardware] no {test.dtype} matrix on {rt}"
    matrix.variants = lambda test, rt: ("a shape",)
    matrix.workload = lambda test, variant, rt: ("workload", test.name, variant, rt)
    monkeypatch.setitem(sys.modules, "fake_matrix", matrix)
    table = kernels.table(lambda test, rt: None if test.dtype == "fp32" else "[hardware] no vector path", "fake_matrix")
    fp16_matrix = CATALOG.get("matrix.fp16.fp32")
    assert table.support(CATALOG.get("compute.fp32"), "gpu") is None
    assert table.support(CATALOG.get("compute.fp16"), "gpu") == "[hardware] no vector path"
    assert table.support(fp16_matrix, "gpu") == "[hardware] no fp16.fp32 matrix on gpu"
    assert table.support(CATALOG.get("memory.read"), "gpu") is None      # the streams run everywhere
    assert table.variants(fp16_matrix, "gpu") == ("a shape",)
    assert table.variants(CATALOG.get("memory.read"), "gpu") == CATALOG.get("memory.read").variants
    assert table.matrix_workload(fp16_matrix, "v", "gpu") == ("workload", "matrix.fp16.fp32", "v", "gpu")
    assert table.stream.source == "mem.cu" and table.empty == ("mem.cu", "empty")


def test_int64_is_long_long_and_its_evidence_says_how_it_is_emulated():
    int64 = CATALOG.get("compute.int64")
    for dialect, pieces in (("cuda", "IMAD.WIDE.U32"), ("hip", "v_mad_u64_u32")):
        k = kernels.alu_kernel(int64, int64.variants[1], types.SimpleNamespace(dialect=dialect))
        assert k.defines["E"] == "long long" and k.defines["VEC"] == 2 and k.family == "fma"
        assert pieces in k.evidence["emulation"]
    fp32 = CATALOG.get("compute.fp32")
    assert kernels.alu_kernel(fp32, fp32.variants[0], types.SimpleNamespace(dialect="cuda")).evidence == {}


def test_the_sfu_and_atomic_families_have_modules_of_their_own():
    table = kernels.table(lambda test, rt: "[hardware] not this one", "fake_matrix")
    rt = types.SimpleNamespace(dialect="cuda", arch="sm_90a")
    for name in ("sfu.rcp", "sfu.sin", "atomic.global_add", "atomic.shared_add"):
        test = CATALOG.get(name)
        assert table.module(test).__name__ == f"peakbench.kernels.{test.family}"
        assert table.support(test, rt) is None
    assert [v.name for v in table.variants(CATALOG.get("atomic.shared_add"), rt)] == ["u32"]
    assert table.variants(CATALOG.get("sfu.exp2"), rt) == CATALOG.get("sfu.exp2").variants

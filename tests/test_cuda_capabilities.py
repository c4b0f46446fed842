"""peakbench.cuda.capabilities: the vector-ALU rules name the hardware a GPU lacks."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from peakbench.catalog import default_catalog
from peakbench.cuda import capabilities

CATALOG = default_catalog()



@pytest.mark.parametrize("cc, test, reason", [
    ((9, 0), "compute.bf16", None), ((7, 5), "compute.bf16", "compute capability 8.0"),
    ((6, 0), "compute.int8", "compute capability 6.1"), ((9, 0), "compute.fp8_e4m3", "[hardware]"),
    ((10, 0), "compute.fp4", "[hardware]"), ((9, 0), "compute.fp64", None), ((8, 0), "compute.int64", None)])
def test_alu_rules_name_the_missing_hardware(cc, test, reason):
    got = capabilities.alu_support(CATALOG.get(test), SimpleNamespace(cc=cc))
    if reason is None:
        assert got is None
    else:
        assert got.startswith("[hardware]") and reason in got


def test_the_cuda_table_runs_sfu_and_atomics_from_their_modules():
    rt = SimpleNamespace(dialect="cuda", arch="sm_90a", cc=(9, 0))
    for name in ("sfu.rsqrt", "atomic.global_add_contended"):
        test = CATALOG.get(name)
        assert capabilities.TABLE.support(test, rt) is None
        assert capabilities.TABLE.module(test).__name__.startswith("peakbench.kernels.")
    assert "IMAD.WIDE.U32" in capabilities.INSTRUCTION["int64"]

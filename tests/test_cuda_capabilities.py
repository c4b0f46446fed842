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
    ((10, 0), "compute.fp4", "[hardware]"), ((9, 0), "compute.fp64", None)])
def test_alu_rules_name_the_missing_hardware(cc, test, reason):
    got = capabilities.alu_support(CATALOG.get(test), SimpleNamespace(cc=cc))
    if reason is None:
        assert got is None
    else:
        assert got.startswith("[hardware]") and reason in got

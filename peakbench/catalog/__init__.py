"""The catalog of tests: frozen descriptors, one family per module. No GPU API here.

A test names its kernel family and element type; each backend maps the family to its own source
(GLSL, SPIR-V assembly, CUDA). Counts that the kernel and the op arithmetic share (accumulators,
unroll, vector width) live here and reach the kernels as defines, so nothing has to "match".

Each family's descriptor declares what one work item is worth (`per_item`): a workload reports
only how many items a launch did, and the runner turns items and GPU time into the unit.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

from peakbench.catalog.descriptors import (Variant, TestSpec, ComputeTest, MatrixTest, MemoryTest, LatencyTest,  # noqa: F401
                                          LaunchTest, SmTest)  # (the descriptors)


@dataclass
class Catalog:
    tests: list[TestSpec] = field(default_factory=list)

    def names(self) -> list[str]:
        return [t.name for t in self.tests]

    def get(self, name: str) -> TestSpec:
        for t in self.tests:
            if t.name == name:
                return t
        raise KeyError(name)

    def select(self, patterns: list[str] | None) -> list[TestSpec]:
        """Tests whose name matches any glob, in catalog order; every test when patterns is empty."""
        if not patterns:
            return list(self.tests)
        return [t for t in self.tests if any(fnmatch.fnmatchcase(t.name, p) for p in patterns)]

    def unmatched(self, patterns: list[str]) -> list[str]:
        """The patterns that match no test (each must: a typo next to a good pattern is not ignored)."""
        return [p for p in patterns if not any(fnmatch.fnmatchcase(t.name, p) for t in self.tests)]


def default_catalog() -> Catalog:
    from peakbench.catalog import atomic, compute, gemm, matrix, memory, onchip, sfu, sm, transfer
    # The latency sweep, the launches and the copies last: they keep the cores nearly idle for
    # seconds, and the core test after one warms up again (memory.shared after the sweep did:
    # 0.35 s of quick's run); after the copies sm.fp32 found the SM clock fallen to 1290 MHz and
    # slow to come back (PERFORMANCE_ANALYSIS.md, "A per-SM clock reading that lags"). The sparse
    # matrix tests after the GEMMs: on an H100 a GEMM after one of them in the same process ran
    # 4-5% slower, burst and sustained, after 1 s or 10 s of rest alike, drawing more power a MHz
    # (PERFORMANCE_ANALYSIS.md, "What the sparse matrix tests leave behind").
    groups = (compute.TESTS, sfu.TESTS, atomic.TESTS, matrix.DENSE, gemm.TESTS, matrix.SPARSE, memory.STREAMS,
              onchip.TESTS, sm.TESTS, memory.LIGHT, transfer.TESTS)
    return Catalog([test for group in groups for test in group])

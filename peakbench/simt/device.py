"""One opened CUDA or HIP device behind the core's Device interface.

The backend supplies the runtime, its vector-ALU support rule and its matrix module; the rest
(ALU, memory, latency, launch workloads) is shared. A matrix module has
`support(test, rt) -> reason | None`, `variants(test, rt) -> tuple[Variant]` and
`workload(test, variant, rt)`.
"""
from __future__ import annotations

from types import ModuleType
from typing import Callable

from peakbench.backend import Unsupported
from peakbench.catalog import TestSpec, Variant
from peakbench.simt import workloads
from peakbench.simt.runtime import Runtime


class SimtDevice:
    def __init__(self, rt: Runtime, alu_support: Callable[[TestSpec, Runtime], str | None],
                 matrix: ModuleType, clock: Callable[[], float | None] | None = None):
        self.rt, self.info = rt, rt.info
        self._alu_support, self._matrix = alu_support, matrix
        self._clock = clock or rt.clock_mhz
        self.chase_sweep = None        # one latency sweep serves every latency.* test

    def support(self, test: TestSpec) -> str | None:
        if test.family == "matrix":
            return self._matrix.support(test, self.rt)
        if test.family == "compute":
            return self._alu_support(test, self.rt)
        return None

    def variants(self, test: TestSpec) -> tuple[Variant, ...]:
        return self._matrix.variants(test, self.rt) if test.family == "matrix" else workloads.variants(test)

    def prepare(self, test: TestSpec, variant: Variant):
        reason = self.support(test)
        if reason:
            raise Unsupported(reason)
        if test.family == "matrix":
            return self._matrix.workload(test, variant, self.rt)
        if test.family == "latency" and self.chase_sweep is None:
            self.chase_sweep = workloads.chase_sweep(self.rt)
        return workloads.prepare(test, variant, self.rt, self.chase_sweep)

    def clock_mhz(self) -> float | None:
        return self._clock()

    def close(self) -> None:
        self.rt.close()

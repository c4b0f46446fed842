"""One workload per test family, written once against peakbench/runtime.py, and the Device that
serves them to the harness.

A backend supplies a runtime and a capability table (table.CapabilityTable, filled with the
backend's rules and kernels as data): which tests run on a device and why not, the variants it
offers, the kernel the ALU, stream, launch and chase workloads run there, and the modules of
the families it runs its own way (matrix units, shared memory, L2, host transfers, special
functions, atomics, vendor GEMM, peer copies).
"""
from __future__ import annotations

from peakbench.backend import Unsupported
from peakbench.harness.levels import documented_caches
from peakbench.workloads import alu, chase, launch, stream


class Device:
    """One opened device behind the core's Device interface (peakbench/backend.py)."""

    def __init__(self, rt, table):
        self.rt, self.info, self.table = rt, rt.info, table
        self.chase_sweep = None        # one latency sweep serves every latency.* test

    def support(self, test) -> str | None:
        return self.table.support(test, self.rt)

    def variants(self, test) -> tuple:
        return self.table.variants(test, self.rt)

    def prepare(self, test, variant, spec=None):
        reason = self.support(test)
        if reason:
            raise Unsupported(reason)
        rt, table = self.rt, self.table
        if table.module(test) is not None:
            return table.workload(test, variant, rt)
        if test.family == "compute":
            return alu.AluWorkload(test, variant, rt, table.alu_kernel(test, variant, rt))
        if test.family == "matrix":
            return table.matrix_workload(test, variant, rt)
        if test.family == "memory":
            return stream.StreamWorkload(test, variant, rt, table.stream)
        if test.family == "latency":
            kernel = table.chase_kernel(rt)
            if self.chase_sweep is None:
                self.chase_sweep = chase.sweep(rt, kernel, stream.working_bytes(rt), caches=documented_caches(spec),
                                               flush=lambda nbytes: stream.CacheFlush(rt, table.stream, nbytes))
            return chase.LatencyWorkload(test, variant, self.chase_sweep, kernel.path)
        if test.family == "launch":
            return launch.LaunchWorkload(test, variant, rt, *table.empty, table.launch_params)
        raise Unsupported(f"[api] no {rt.dialect} kernel for {test.name}")

    def clock_mhz(self) -> float | None:
        return self.rt.clock_mhz()

    def close(self) -> None:
        self.rt.close()

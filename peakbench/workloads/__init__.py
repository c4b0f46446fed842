"""One workload per test family, written once against peakbench/runtime.py, and the Device that
serves them to the harness.

A backend supplies a runtime and a capability table (a module, or for the backends that run
shaders/*.cu a peakbench.kernels.Table): which tests run on a device and why not, the variants it
offers, and per family the kernel it runs as data:

    support(test, rt) -> reason | None       variants(test, rt) -> tuple[Variant]
    alu_kernel(test, variant, rt) -> alu.AluKernel
    matrix_workload(test, variant, rt) -> a matrix.MatrixWorkload
    STREAM: stream.StreamKernel               chase_kernel(rt) -> chase.ChaseKernel
    EMPTY: (source, entry)                    LAUNCH_PARAMS: dict
    module(test) -> the module of a kernel family the table does not run itself (shared
    memory, L2, host transfers, special functions, atomics, vendor GEMM), or None
    workload(test, variant, rt) -> that module's workload for the test
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

    def prepare(self, test, variant, settings=None, spec=None):
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
            return stream.StreamWorkload(test, variant, rt, table.STREAM)
        if test.family == "latency":
            kernel = table.chase_kernel(rt)
            if self.chase_sweep is None:
                screening = bool(settings and settings.screening)
                self.chase_sweep = chase.sweep(rt, kernel, stream.working_bytes(rt), screening=screening,
                                               caches=documented_caches(spec),
                                               flush=lambda nbytes: stream.CacheFlush(rt, table.STREAM, nbytes))
            return chase.LatencyWorkload(test, variant, self.chase_sweep, kernel.path)
        if test.family == "launch":
            return launch.LaunchWorkload(test, variant, rt, *table.EMPTY, table.LAUNCH_PARAMS)
        raise Unsupported(f"[api] no {rt.dialect} kernel for {test.name}")

    def clock_mhz(self) -> float | None:
        return self.rt.clock_mhz()

    def close(self) -> None:
        self.rt.close()

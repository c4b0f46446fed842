"""One workload per test family, written once against peakbench/runtime.py, and the Device that
serves them to the harness.

A backend supplies a runtime and a capability table (table.CapabilityTable, filled with the
backend's rules and kernels as data): which tests run on a device and why not, the variants it
offers, the kernel the ALU, stream, launch and chase workloads run there, and the modules of
the families it runs its own way (matrix units, shared memory, L2, host transfers, special
functions, atomics, vendor GEMM, peer copies).
"""
from __future__ import annotations

from dataclasses import dataclass

from peakbench.backend import Unsupported
from peakbench.harness.levels import documented_caches
from peakbench.runtime import Kernel
from peakbench.workloads import alu, chase, launch, stream, transfer

# The families whose workloads touch the device only through the runtime, and compile before
# they allocate: a plan of theirs (Device.plan) has no other effect. A vendor GEMM, a host or
# peer copy make library handles and buffers of their own first.
PLANNED_FAMILIES = ("compute", "sfu", "atomic", "memory", "matrix", "latency", "launch", "sm")
# What a plan may ask of the runtime beyond compile(): questions with no effect on the device.
QUERIES = ("grid_threads", "max_groups", "memory_budget")
RELEASES = ("free", "discard")      # of what a plan never made: nothing to do


@dataclass(frozen=True)
class Request:
    """One compile() a workload makes: what Runtime.prefetch takes."""
    source: str
    defines: tuple
    entry: str
    block: int
    args: str
    label: str


@dataclass(frozen=True)
class PlannedBuffer:
    """What a plan's alloc() returns: a size, no memory."""
    size: int


class Planned(Exception):
    """A planned workload reached work other than compiling: its plan ends there."""


class Planner:
    """The runtime as a plan sees it (Device.plan): compile() records the request and returns a
    kernel with no handle; alloc() a placeholder of no memory; questions pass through; anything
    that would touch the device or read a kernel ends the plan (Planned), so building a workload
    on it lists the kernels it compiles before its first upload, launch or evidence."""

    def __init__(self, rt):
        self._rt, self.requests = rt, []

    def compile(self, source: str, defines: dict, entry: str = "main", block: int = 1, args: str = "",
                label: str = "") -> Kernel:
        self.requests.append(Request(source, tuple(sorted(defines.items())), entry, block, args, label))
        return Kernel(label or entry, None, block, b"", extra={"planned": True})

    def alloc(self, nbytes: int) -> "PlannedBuffer":
        return PlannedBuffer(nbytes)

    def __getattr__(self, name):
        value = getattr(self._rt, name)
        if not callable(value) or name in QUERIES:
            return value
        if name in RELEASES:
            return lambda *args, **kwargs: None

        def planned(*args, **kwargs):
            raise Planned(name)
        return planned


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
        return self._build(test, variant, self.rt, spec)

    def plan(self, test, variant, spec=None) -> list[Request]:
        """The kernels prepare() would compile for this variant, without touching the device
        (Planner): [] where the runtime cannot prefetch, the family is not one that compiles
        first (PLANNED_FAMILIES), or building it fails before it compiles."""
        if not hasattr(self.rt, "prefetch") or test.family not in PLANNED_FAMILIES:
            return []
        planner = Planner(self.rt)
        try:
            self._build(test, variant, planner, spec, planning=True)
        except Exception:        # Planned, or an error prepare() will report in its own test
            pass
        return planner.requests

    def prefetch(self, request: Request) -> None:
        r = request
        self.rt.prefetch(r.source, dict(r.defines), r.entry, r.block, r.args, r.label)

    def _build(self, test, variant, rt, spec, planning: bool = False):
        table = self.table
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
            if self.chase_sweep is None or planning:
                sweep = chase.sweep(rt, kernel, stream.working_bytes(rt), caches=documented_caches(spec),
                                    flush=lambda nbytes: stream.CacheFlush(rt, table.stream, nbytes))
                if planning:
                    return sweep
                self.chase_sweep = sweep
            return chase.LatencyWorkload(test, variant, self.chase_sweep, kernel.path)
        if test.family == "launch":
            return launch.LaunchWorkload(test, variant, rt, *table.empty, table.launch_params)
        raise Unsupported(f"[api] no {rt.dialect} kernel for {test.name}")

    def clock_mhz(self) -> float | None:
        return self.rt.clock_mhz()

    def close(self) -> None:
        try:
            transfer.release_kept(self.rt)        # the transfer tests' buffers, while the runtime lives
        finally:
            self.rt.close()

"""Compile ahead: before the first measurement, every kernel the selected tests will compile is
made into the cache on a pool of threads, so the run that follows finds each one there.

A cold run used to compile and disassemble one kernel at a time between measurements: 40 NVRTC
compiles with their SASS listings took 30 of a cold CUDA `--quick`'s 53 s, mostly waiting on
one disassembler start after another (PERFORMANCE_ANALYSIS.md, "A cold start in seconds"). The
compilers and disassemblers are subprocesses or library calls that release the GIL, so they
overlap. What each test compiles comes from building its workloads on a Planner
(workloads.Device.plan), the same code path as the run, so the plan cannot drift from what the
run needs. The pool is drained before the first measurement: no compile competes with a timed
sample. CUDA's listings are the exception: made by a disassembler process a kernel, on at most
half the cores, they go on while the first tests run (runtime.CompiledModules), each test waiting
for its own. A request that fails here is left for its test, which reports it."""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from peakbench.harness import runner

MAX_WORKERS = 16


@dataclass(frozen=True)
class Ahead:
    kernels: int         # distinct compile requests made
    failed: int          # of those, how many raised (their tests report why)
    workers: int
    seconds: float
    longest: tuple[str, float] | None = None    # the slowest request's label and seconds: the floor

    def describe(self) -> str:
        failed = f", {self.failed} left to their tests" if self.failed else ""
        longest = f" (the longest, {self.longest[0]}, {self.longest[1]:.1f} s)" if self.longest else ""
        return (f"compiled {self.kernels} kernels ahead on {self.workers} threads in {self.seconds:.1f} s"
                f"{longest}{failed}")


def requests(device, tests, settings: runner.Settings, spec=None) -> list:
    """The distinct compile requests of every variant the run will measure, in test order."""
    plan = getattr(device, "plan", None)
    if plan is None:
        return []
    found: dict = {}
    for test in tests:
        try:
            if device.support(test):
                continue
            offered = runner.variants(test, device.variants(test), settings)
        except Exception:       # the test reports it when it runs
            continue
        for variant in offered:
            for request in plan(test, variant, spec):
                found.setdefault(request, None)
    return list(found)


def workers() -> int:
    return max(1, min(MAX_WORKERS, os.cpu_count() or 1))


def compile_ahead(device, tests, settings: runner.Settings, spec=None) -> Ahead | None:
    """Make every request of `requests` on a pool, waiting for all; None when there is none."""
    t0 = time.perf_counter()
    wanted = requests(device, tests, settings, spec)
    if not wanted:
        return None
    count = min(workers(), len(wanted))

    def timed(request) -> float:
        began = time.perf_counter()
        device.prefetch(request)
        return time.perf_counter() - began
    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="compile-ahead") as pool:
        futures = [pool.submit(timed, request) for request in wanted]
    failed = sum(1 for f in futures if f.exception() is not None)
    took = [(r.label or r.entry, f.result()) for r, f in zip(wanted, futures) if f.exception() is None]
    return Ahead(len(wanted), failed, count, time.perf_counter() - t0,
                 max(took, key=lambda t: t[1]) if took else None)

"""Compile ahead: before the first measurement, every kernel the selected tests will compile is
made into the cache on a pool of threads, so the run that follows finds each one there.

A cold run used to compile and disassemble one kernel at a time between measurements: 40 NVRTC
compiles with their SASS listings took 30 of a cold CUDA `--quick`'s 53 s, mostly waiting on
one disassembler start after another (PERFORMANCE_ANALYSIS.md, "A cold start in seconds"). The
compilers and disassemblers are subprocesses or library calls that release the GIL, so they
overlap. What each test compiles comes from building its workloads on a Planner
(workloads.Device.plan), the same code path as the run, so the plan cannot drift from what the
run needs. The pool starts with the first test's requests and goes on while the first tests run
(start): each test waits for its own requests (Pending.wait_for), and the whole pool is drained
before a test whose timing a host CPU takes part in (HOST_TIMED), so only a GPU-timed kernel can
run beside a compiler, whose GPU time the host's load does not change; on a CPU device (lavapipe),
whose kernels run on the compilers' cores, before the first test. CUDA's listings go on the same
way (runtime.CompiledModules). A request that fails here is left for its test, which
reports it."""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

from peakbench.harness import runner

MAX_WORKERS = 16
# Families whose measurement a host CPU takes part in: launches timed on the host, copies through
# host memory (the GPU-to-GPU copies are transfer tests too). The pool is drained before the first.
HOST_TIMED = frozenset({"launch", "transfer"})


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


def requests(device, tests, settings: runner.Settings, spec=None) -> dict[str, list]:
    """Each test's compile requests, every variant the run will measure, in test order (a request
    two tests share is listed under both)."""
    plan = getattr(device, "plan", None)
    if plan is None:
        return {}
    found: dict[str, list] = {}
    for test in tests:
        try:
            if device.support(test):
                continue
            offered = runner.variants(test, device.variants(test), settings)
        except Exception:       # the test reports it when it runs
            continue
        mine: dict = {}
        for variant in offered:
            for request in plan(test, variant, spec):
                mine.setdefault(request, None)
        if mine:
            found[test.name] = list(mine)
    return found


def workers() -> int:
    return max(1, min(MAX_WORKERS, os.cpu_count() or 1))


class Pending:
    """Compile-ahead under way: a future a distinct request, in test order."""

    def __init__(self, device, by_test: dict[str, list]):
        self.began = time.perf_counter()
        self.by_test = by_test
        distinct = list(dict.fromkeys(r for rs in by_test.values() for r in rs))
        self.workers = min(workers(), len(distinct))
        self.pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="compile-ahead")

        def timed(request) -> tuple[float, float]:
            began = time.perf_counter()
            device.prefetch(request)
            return time.perf_counter() - began, time.perf_counter()      # its seconds, and when it ended
        self.futures: dict = {r: self.pool.submit(timed, r) for r in distinct}

    @property
    def kernels(self) -> int:
        return len(self.futures)

    def wait_for(self, test) -> None:
        """Until every request of `test` is made (or has failed: the test compiles it and says why)."""
        mine = [self.futures[r] for r in self.by_test.get(test.name, ())]
        if mine:
            wait(mine)

    def done(self) -> bool:
        return all(f.done() for f in self.futures.values())

    def finish(self, cancel: bool = False) -> Ahead:
        """Wait for the pool (`cancel`: drop the requests not started, which it then does not
        count) and say what it made, in the seconds from its start to its last request's end."""
        self.pool.shutdown(wait=True, cancel_futures=cancel)
        ran = [(r, f) for r, f in self.futures.items() if not f.cancelled()]
        failed = sum(1 for _, f in ran if f.exception() is not None)
        took = [(r.label or r.entry, *f.result()) for r, f in ran if f.exception() is None]
        ended = max((end for _, _, end in took), default=time.perf_counter())
        return Ahead(len(ran), failed, self.workers, ended - self.began,
                     max(((label, t) for label, t, _ in took), key=lambda x: x[1]) if took else None)


def start(device, tests, settings: runner.Settings, spec=None) -> Pending | None:
    """The pool making every request of `requests`, running; None when there is none."""
    by_test = requests(device, tests, settings, spec)
    return Pending(device, by_test) if by_test else None


def compile_ahead(device, tests, settings: runner.Settings, spec=None) -> Ahead | None:
    """Make every request of `requests` on a pool, waiting for all; None when there is none."""
    pending = start(device, tests, settings, spec)
    return pending.finish() if pending else None

"""Which host CPUs a host-timed launch loop runs on.

A driver signals a launch's completion to the host (a Vulkan fence, a timeline semaphore) from
the GPU's interrupt, whose handler runs on the CPU the kernel routes that interrupt to. A thread
polling on that same CPU holds off the work the handler leaves to run after it until the
scheduler preempts the poll. On an H100 (driver 580.159.04) an empty Vulkan dispatch's fence
read signaled 45 us after submission with the loop on the interrupts' CPU and 17 us on any
other, the GPU's own write into host memory was seen at 12.7 us on either, and CUDA (which spins
on a word in host memory) read 9.1-9.4 us on either (PERFORMANCE_ANALYSIS.md, "Vulkan's slow
fence"). Where the process happened to run decided the number. So the launches taken untimed
first show, in /proc/interrupts, which CPUs their interrupts go to; the timed loop runs off those,
and a few launches timed on the busiest say what a thread there gets. A runtime whose launches
raise no interrupt (CUDA's) moves nowhere.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

GPU_DRIVERS = frozenset({"nvidia", "amdgpu", "radeon", "nouveau", "i915", "xe"})
PROC = Path("/proc")


def gpu_interrupts(text: str) -> dict[str, tuple[str, dict[int, int]]]:
    """/proc/interrupts' GPU lines: IRQ -> (the driver's name, {CPU: interrupts taken})."""
    lines = text.splitlines()
    if not lines:
        return {}
    cpus = [int(name[3:]) for name in lines[0].split() if name.startswith("CPU") and name[3:].isdigit()]
    found = {}
    for line in lines[1:]:
        irq, _, rest = line.partition(":")
        fields = rest.split()
        if len(fields) <= len(cpus) or not all(f.isdigit() for f in fields[:len(cpus)]):
            continue
        driver = fields[-1]
        if driver in GPU_DRIVERS:
            found[irq.strip()] = (driver, {cpu: int(n) for cpu, n in zip(cpus, fields)})
    return found


def gpu_counts(proc: Path | None = None) -> tuple[dict[int, int], set[str]]:
    """The GPU drivers' interrupts taken so far, by CPU over all their lines, and the drivers'
    names; nothing where /proc/interrupts cannot be read."""
    try:
        lines = gpu_interrupts(((proc or PROC) / "interrupts").read_text())
    except OSError:
        return {}, set()
    total: dict[int, int] = {}
    for _, counts in lines.values():
        for cpu, n in counts.items():
            total[cpu] = total.get(cpu, 0) + n
    return total, {driver for driver, _ in lines.values()}


@dataclass(frozen=True)
class Placement:
    """Where the launch loop runs: `taken` the GPU interrupts some launches raised, by CPU;
    `avoided` those CPUs the loop is kept off, the busiest first (none where every CPU allowed
    to it took some)."""
    taken: dict[int, int]
    avoided: tuple[int, ...]
    drivers: tuple[str, ...]

    def evidence(self, on_interrupt_cpu_us: float | None) -> dict:
        found = {"kept_off_cpus": list(self.avoided), "interrupts_taken": {str(c): n for c, n in sorted(self.taken.items())},
                 "interrupts_of": ", ".join(self.drivers)}
        if on_interrupt_cpu_us is not None:
            found["on_interrupt_cpu_us"] = on_interrupt_cpu_us
        return found


def placement(before: tuple[dict[int, int], set[str]], proc: Path | None = None) -> Placement | None:
    """The Placement from the GPU interrupts taken since `before` (gpu_counts), or None where
    none was (CUDA's launches, which spin on memory, raise none) or the OS has no affinity calls."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    after, drivers = gpu_counts(proc)
    taken = {cpu: n - before[0].get(cpu, 0) for cpu, n in after.items() if n > before[0].get(cpu, 0)}
    if not taken:
        return None
    allowed = os.sched_getaffinity(0)
    avoid = sorted(set(taken) & allowed, key=lambda cpu: -taken[cpu])
    return Placement(taken, tuple(avoid) if set(avoid) != allowed else (), tuple(sorted(drivers | before[1])))


@contextlib.contextmanager
def pinned(cpus: set[int]):
    """The calling thread on `cpus` inside the block, on the CPUs it had before after it."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@contextlib.contextmanager
def kept_off(where: Placement | None):
    """The calling thread off `where.avoided` inside the block (where there are any)."""
    if where is None or not where.avoided:
        yield
        return
    with pinned(os.sched_getaffinity(0) - set(where.avoided)):
        yield

"""Which host CPUs a host-timed launch loop runs on.

A driver signals a launch's completion to the host (a Vulkan fence, a timeline semaphore) from
the GPU's interrupt, whose handler runs on the CPU the kernel routes that interrupt to. A thread
polling on that same CPU holds off the work the handler leaves to run after it until the
scheduler preempts the poll. On an H100 (driver 580.159.04) an empty Vulkan dispatch's fence
read signaled 45 us after submission with the loop on the interrupts' CPU and 17 us on any
other, the GPU's own write into host memory was seen at 12.7 us on either, and CUDA (which spins
on a word in host memory) read 9.1-9.4 us on either (PERFORMANCE_ANALYSIS.md, "Vulkan's slow
fence"). Where the process happened to run decided the number. So the launch loop runs off the
CPUs that take the GPU drivers' interrupts, and a few launches timed on one of them say what a
thread there gets.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

GPU_DRIVERS = frozenset({"nvidia", "amdgpu", "radeon", "nouveau", "i915", "xe"})
PROC = Path("/proc")


def cpu_list(text: str) -> set[int]:
    """CPUs from a kernel CPU list such as "0-3,8,10-11"."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


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


def interrupt_cpus(proc: Path | None = None) -> tuple[set[int], set[str]]:
    """The CPUs that take the GPU drivers' interrupts, and those drivers' names: of the CPUs each
    line's counts name, those in its effective affinity where the kernel shows one that keeps any
    (a line moved since boot has counts on its old CPU; a vector never raised names none)."""
    proc = proc or PROC
    try:
        lines = gpu_interrupts((proc / "interrupts").read_text())
    except OSError:
        return set(), set()
    cpus: set[int] = set()
    for irq, (_, counts) in lines.items():
        taken = {cpu for cpu, n in counts.items() if n}
        try:
            now = cpu_list((proc / "irq" / irq / "effective_affinity_list").read_text())
        except (OSError, ValueError):
            now = set()
        cpus |= (taken & now) or taken
    return cpus, {driver for driver, _ in lines.values()}


@dataclass(frozen=True)
class Placement:
    """Where the launch loop ran: `avoided` the interrupts' CPUs it was kept off (empty where
    none was allowed to it or every allowed one takes them), `interrupt_cpus` all of those."""
    avoided: tuple[int, ...]
    interrupt_cpus: tuple[int, ...]
    drivers: tuple[str, ...]

    def evidence(self, on_interrupt_cpu_us: float | None) -> dict:
        found = {"kept_off_cpus": list(self.avoided), "interrupt_cpus": list(self.interrupt_cpus),
                 "interrupts_of": ", ".join(self.drivers)}
        if on_interrupt_cpu_us is not None:
            found["on_interrupt_cpu_us"] = on_interrupt_cpu_us
        return found


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
def off_interrupt_cpus(proc: Path | None = None):
    """The calling thread off the CPUs that take GPU interrupts inside the block, where it may
    run elsewhere; yields the Placement, or None where no GPU interrupt is seen or the OS has no
    affinity calls."""
    if not hasattr(os, "sched_setaffinity"):
        yield None
        return
    taking, drivers = interrupt_cpus(proc)
    allowed = os.sched_getaffinity(0)
    avoid = taking & allowed
    if not taking:
        yield None
        return
    placement = Placement(tuple(sorted(avoid)) if avoid != allowed else (), tuple(sorted(taking)), tuple(sorted(drivers)))
    if not placement.avoided:
        yield placement
        return
    with pinned(allowed - avoid):
        yield placement

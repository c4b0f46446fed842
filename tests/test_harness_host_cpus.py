"""peakbench.harness.host_cpus: which CPUs a launch's GPU interrupts go to, read from a
/proc/interrupts laid out as the H100's was (IRQ 42, NVIDIA's first MSI-X vector, on CPU 14), and
the launch loop kept off them, with a few launches timed there for the evidence."""
from __future__ import annotations

import os

import pytest

from peakbench.harness import host_cpus, runner
from peakbench.harness.runner import Settings
from peakbench.report import verdict

CPUS = max(16, max(os.sched_getaffinity(0)) + 1)      # as many columns as this host has CPUs, 16 at least
HEADER = "".join(f"{'CPU' + str(i):>11}" for i in range(CPUS))


def line(irq: str, counts: dict[int, int], tail: str) -> str:
    return f"{irq:>4}:" + "".join(f"{counts.get(i, 0):>11}" for i in range(CPUS)) + "  " + tail


def interrupts(nvidia_42: dict[int, int]) -> str:
    return "\n".join([
        HEADER,
        line("24", {0: 5120, 3: 77}, "PCI-MSIX-0000:00:04.0   0-edge      nvme0q0"),
        line("42", nvidia_42, "PCI-MSIX-0000:00:06.0   0-edge      nvidia"),
        line("43", {}, "PCI-MSIX-0000:00:06.0   1-edge      nvidia"),
        line("44", {0: 10}, "PCI-MSIX-0000:00:06.0   2-edge      nvidia"),
        "NMI:" + "".join(f"{0:>11}" for _ in range(CPUS)) + "   Non-maskable interrupts",
        "ERR:          0",
    ]) + "\n"


def test_the_gpu_lines_of_proc_interrupts_are_found_by_driver_with_their_counts():
    found = host_cpus.gpu_interrupts(interrupts({14: 3798}))
    assert set(found) == {"42", "43", "44"}, "the NVMe line, NMI and ERR are not a GPU's"
    driver, counts = found["42"]
    assert driver == "nvidia" and counts[14] == 3798 and sum(counts.values()) == 3798


def test_gpu_counts_add_every_gpu_line_by_cpu(tmp_path):
    (tmp_path / "interrupts").write_text(interrupts({14: 3798}))
    assert host_cpus.gpu_counts(tmp_path) == ({**{c: 0 for c in range(CPUS)}, 14: 3798, 0: 10}, {"nvidia"})
    assert host_cpus.gpu_counts(tmp_path / "absent") == ({}, set())


class FakeProc:
    """A /proc whose NVIDIA line 42 counts one interrupt a launch on `cpu`, as the H100's did."""

    def __init__(self, path, cpu: int | None):
        self.path, self.cpu, self.raised = path, cpu, 0
        path.mkdir(parents=True, exist_ok=True)
        self.write()

    def write(self):
        (self.path / "interrupts").write_text(interrupts({} if self.cpu is None else {self.cpu: 3798 + self.raised}))

    def launches(self, count: int):
        self.raised += count if self.cpu is not None else 0
        self.write()


class Launches:
    """A launch workload whose host time depends on the CPU it is timed from, as the H100's
    fence did: 45 us on the interrupts' CPU, 17 us elsewhere. Each launch raises an interrupt."""
    name = "empty"
    params = {"variant": "empty"}

    def __init__(self, proc: FakeProc):
        self.proc, self.evidence, self.calls = proc, {}, []

    def host_times(self, count: int) -> list[float]:
        cpus = os.sched_getaffinity(0)
        self.calls.append((count, cpus))
        self.proc.launches(count)
        return [45e-6 if cpus == {self.proc.cpu} else 17e-6] * count


def two_cpus():
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs to move between")
    return allowed[0], allowed[1]


def test_the_timed_launches_run_off_the_cpu_their_interrupts_went_to(tmp_path, monkeypatch):
    stay, busy = two_cpus()
    before = os.sched_getaffinity(0)
    proc = FakeProc(tmp_path, busy)
    monkeypatch.setattr(host_cpus, "PROC", tmp_path)
    workload = Launches(proc)
    v = runner.host_timed(workload, 1, "us", Settings(host_samples=30))
    assert v.summary.median == pytest.approx(17.0), "the samples come from a CPU without the interrupts"
    assert [count for count, _ in workload.calls] == [20, runner.ON_INTERRUPT_CPU, 30]
    assert busy not in workload.calls[2][1] and stay in workload.calls[2][1]
    assert workload.calls[1][1] == {busy}
    assert os.sched_getaffinity(0) == before, "the thread's CPUs come back after"
    assert v.evidence["host_cpus"] == {"kept_off_cpus": [busy], "interrupts_taken": {str(busy): 20},
                                       "interrupts_of": "nvidia", "on_interrupt_cpu_us": 45.0}
    result = {"test": "launch.overhead", "status": "ok", "value": 17.0, "unit": "us", "params": {},
              "evidence": {**v.evidence, "host_split": {"submit_us": 2.4, "until_signaled_us": 14.1}}}
    found = verdict.limit(result)
    assert found["by"] == "host"
    assert (f"timed off CPU {busy}, where the untimed launches' GPU interrupts went (nvidia): a launch timed"
            f" on CPU {busy} read 45 us") in found["why"]
    assert "2.4 us in the submission call, 14.1 us more until the completion read signaled" in found["why"]
    assert found["evidence"]["on_interrupt_cpu_us"] == 45.0


def test_launches_that_raise_no_interrupt_move_nowhere(tmp_path, monkeypatch):
    monkeypatch.setattr(host_cpus, "PROC", tmp_path)
    workload = Launches(FakeProc(tmp_path, None))         # CUDA's: a spin on memory, no interrupt
    v = runner.host_timed(workload, 1, "us", Settings(host_samples=10))
    assert [count for count, _ in workload.calls] == [20, 10] and "host_cpus" not in v.evidence


def test_nothing_moves_where_every_allowed_cpu_took_the_interrupts(tmp_path):
    before = os.sched_getaffinity(0)
    (tmp_path / "interrupts").write_text(interrupts({}))
    counts = host_cpus.gpu_counts(tmp_path)
    (tmp_path / "interrupts").write_text(interrupts({cpu: 3 for cpu in before}))
    where = host_cpus.placement(counts, tmp_path)
    assert where.avoided == () and where.evidence(None)["kept_off_cpus"] == []
    with host_cpus.kept_off(where):
        assert os.sched_getaffinity(0) == before


def test_the_busiest_cpu_comes_first(tmp_path, monkeypatch):
    monkeypatch.setattr(host_cpus.os, "sched_getaffinity", lambda pid: {0, 1, 2})
    (tmp_path / "interrupts").write_text(interrupts({}))
    counts = host_cpus.gpu_counts(tmp_path)
    (tmp_path / "interrupts").write_text(interrupts({0: 2, 1: 20}))
    assert host_cpus.placement(counts, tmp_path).avoided == (1, 0), "CPU 1 took ten times CPU 0's"

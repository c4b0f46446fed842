"""peakbench.harness.host_cpus: the CPUs that take GPU interrupts, read from a /proc laid out as
the H100's was (IRQ 42, NVIDIA's first MSI-X vector, on CPU 14 of 16), and the launch loop kept
off them, with a few launches timed there for the evidence."""
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


H100_INTERRUPTS = "\n".join([
    HEADER,
    line("24", {0: 5120, 3: 77}, "PCI-MSIX-0000:00:04.0   0-edge      nvme0q0"),
    line("42", {14: 3798}, "PCI-MSIX-0000:00:06.0   0-edge      nvidia"),
    line("43", {}, "PCI-MSIX-0000:00:06.0   1-edge      nvidia"),
    line("44", {0: 10}, "PCI-MSIX-0000:00:06.0   2-edge      nvidia"),
    "NMI:" + "".join(f"{0:>11}" for _ in range(CPUS)) + "   Non-maskable interrupts",
    "ERR:          0",
])


def fake_proc(tmp_path, interrupts: str, affinity: dict[str, str]):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "interrupts").write_text(interrupts)
    for irq, cpus in affinity.items():
        (tmp_path / "irq" / irq).mkdir(parents=True)
        (tmp_path / "irq" / irq / "effective_affinity_list").write_text(cpus + "\n")
    return tmp_path


def test_the_gpu_lines_of_proc_interrupts_are_found_by_driver_with_their_counts():
    found = host_cpus.gpu_interrupts(H100_INTERRUPTS)
    assert set(found) == {"42", "43", "44"}, "the NVMe line, NMI and ERR are not a GPU's"
    driver, counts = found["42"]
    assert driver == "nvidia" and counts[14] == 3798 and sum(counts.values()) == 3798


@pytest.mark.parametrize("text, cpus", [("14", {14}), ("0-3,8,10-11", {0, 1, 2, 3, 8, 10, 11}), ("", set())])
def test_cpu_lists_read_as_the_kernel_writes_them(text, cpus):
    assert host_cpus.cpu_list(text) == cpus


def test_the_cpus_that_took_a_lines_interrupts_count_narrowed_by_its_effective_affinity(tmp_path):
    proc = fake_proc(tmp_path, H100_INTERRUPTS, {"42": "14", "43": "14"})     # 44's affinity unreadable
    cpus, drivers = host_cpus.interrupt_cpus(proc)
    assert cpus == {14, 0} and drivers == {"nvidia"}, "44 took its 10 interrupts on CPU 0; 43 none"
    assert host_cpus.interrupt_cpus(tmp_path / "absent") == (set(), set())
    moved = HEADER + "\n" + line("42", {3: 500, 14: 3798}, "PCI-MSIX-0000:00:06.0   0-edge      nvidia")
    assert host_cpus.interrupt_cpus(fake_proc(tmp_path / "moved", moved, {"42": "14"}))[0] == {14}
    assert host_cpus.interrupt_cpus(fake_proc(tmp_path / "wide", moved, {"42": "0-15"}))[0] == {3, 14}


def two_cpus():
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs to move between")
    return allowed[0], allowed[1]


def test_the_loop_runs_off_the_interrupts_cpu_and_its_cpus_come_back_after(tmp_path):
    stay, busy = two_cpus()
    before = os.sched_getaffinity(0)
    proc = fake_proc(tmp_path, HEADER + "\n" + line("42", {busy: 9}, "PCI-MSIX-0000:00:06.0 0-edge nvidia"),
                     {"42": str(busy)})
    with host_cpus.off_interrupt_cpus(proc) as placement:
        inside = os.sched_getaffinity(0)
    assert busy not in inside and stay in inside
    assert placement.avoided == (busy,) and placement.drivers == ("nvidia",)
    assert os.sched_getaffinity(0) == before


def test_nothing_moves_where_every_allowed_cpu_takes_interrupts_or_none_does(tmp_path):
    before = os.sched_getaffinity(0)
    everywhere = HEADER + "\n" + line("42", {cpu: 7 for cpu in before}, "PCI-MSIX-0000:00:06.0   0-edge      nvidia")
    proc = fake_proc(tmp_path, everywhere, {"42": ",".join(map(str, sorted(before)))})
    with host_cpus.off_interrupt_cpus(proc) as placement:
        assert os.sched_getaffinity(0) == before
    assert placement.avoided == () and placement.evidence(None)["kept_off_cpus"] == []
    quiet = fake_proc(tmp_path / "quiet", HEADER + "\n", {})
    with host_cpus.off_interrupt_cpus(quiet) as placement:
        assert placement is None and os.sched_getaffinity(0) == before


class CpuRecordingLaunches:
    """A launch workload whose host time depends on the CPU it is timed from, as the H100's
    fence did: 45 us on the interrupts' CPU, 17 us elsewhere."""
    name = "empty"
    params = {"variant": "empty"}

    def __init__(self, busy: int):
        self.busy, self.evidence, self.calls = busy, {}, []

    def host_times(self, count: int) -> list[float]:
        cpus = os.sched_getaffinity(0)
        self.calls.append((count, cpus))
        return [45e-6 if cpus == {self.busy} else 17e-6] * count


def test_host_timed_launches_are_timed_off_the_interrupts_cpu_and_say_what_it_costs(tmp_path, monkeypatch):
    stay, busy = two_cpus()
    proc = fake_proc(tmp_path, HEADER + "\n" + line("42", {busy: 9}, "PCI-MSIX-0000:00:06.0 0-edge nvidia"),
                     {"42": str(busy)})
    monkeypatch.setattr(host_cpus, "PROC", proc)
    workload = CpuRecordingLaunches(busy)
    v = runner.host_timed(workload, 1, "us", Settings(host_samples=30))
    assert v.summary.median == pytest.approx(17.0), "the samples come from a CPU without the interrupts"
    counts = [count for count, _ in workload.calls]
    assert counts == [20, runner.ON_INTERRUPT_CPU, 30]
    assert all(busy not in cpus for count, cpus in workload.calls if count != runner.ON_INTERRUPT_CPU)
    assert v.evidence["host_cpus"] == {"kept_off_cpus": [busy], "interrupt_cpus": [busy], "interrupts_of": "nvidia",
                                       "on_interrupt_cpu_us": 45.0}
    result = {"test": "launch.overhead", "status": "ok", "value": 17.0, "unit": "us", "params": {},
              "evidence": {**v.evidence, "host_split": {"submit_us": 2.4, "until_signaled_us": 14.1}}}
    found = verdict.limit(result)
    assert found["by"] == "host"
    assert f"timed off CPU {busy}, which takes the GPU's interrupts (nvidia): a launch timed there read 45 us" in found["why"]
    assert "2.4 us in the submission call, 14.1 us more until the completion read signaled" in found["why"]
    assert found["evidence"]["on_interrupt_cpu_us"] == 45.0


def test_host_timed_launches_without_gpu_interrupts_carry_no_placement(tmp_path, monkeypatch):
    monkeypatch.setattr(host_cpus, "PROC", fake_proc(tmp_path, HEADER + "\n", {}))
    workload = CpuRecordingLaunches(busy=-1)
    v = runner.host_timed(workload, 1, "us", Settings(host_samples=10))
    assert [count for count, _ in workload.calls] == [20, 10] and "host_cpus" not in v.evidence

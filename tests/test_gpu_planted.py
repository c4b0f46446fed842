"""On a real GPU (the H200), through Vulkan and CUDA in one process each: faults planted the way
real mistakes look, one kind a run, across the families, come back `failed` with a reason that
names a guard, never `ok`. tests/test_guards_planted.py plants the same kinds on lavapipe with the
words each guard prints there; here the machine code (SASS, the Vulkan driver's or CUDA's) is what
the guards read, so only the guard is asserted. PEAKBENCH_PLANTED_OUT=DIR keeps each run's JSON."""
from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import pytest

from helpers import gpu_required

pytestmark = pytest.mark.gpu

BACKENDS = ("vulkan", "cuda")


@pytest.fixture(scope="module")
def backends(request):
    from peakbench.backend import BackendUnavailable, load
    found = []
    for name in BACKENDS:
        try:
            backend = load(name)
        except BackendUnavailable as e:
            (pytest.fail if gpu_required(request.config) else pytest.skip)(f"{name}: {e}")
        try:
            if not [d for d in backend.devices() if d.kind != "cpu"]:
                (pytest.fail if gpu_required(request.config) else pytest.skip)(f"{name}: no GPU")
        finally:
            backend.close()
        found.append(name)
    return ",".join(found)


def planted_run(tmp_path, monkeypatch, backends: str, fault: str, tests: str, profile=("--quick",)) -> dict:
    """The CLI in this process (the fault is a monkeypatch), {(backend, test): result}; `profile`
    () for the default suite."""
    from peakbench import cli
    from peakbench.report.result import load_json
    keep = os.environ.get("PEAKBENCH_PLANTED_OUT")
    out = Path(keep) / f"planted-{fault}.json" if keep else tmp_path / "out.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    assert cli.main(["--backend", backends, *profile, "--tests", tests, "--json", str(out)]) == 1
    return {(run["backend"], r["test"]): r for run in load_json(out)["runs"] for r in run["results"]}


def assert_failed_by(results: dict, allowed: tuple[str, ...]) -> None:
    ran = {k: r for k, r in results.items() if r["status"] != "unsupported"}
    assert ran, results
    for (backend, test), r in ran.items():
        assert r["status"] == "failed", f"{backend} {test} came back {r['status']}: {r.get('value')} {r['unit']}"
        guard = r["reason"].split(":")[0].removeprefix("guard ")
        assert r["reason"].startswith("guard ") and guard in allowed, f"{backend} {test}: {r['reason']}"


def test_host_counts_twice_the_work_fail(tmp_path, monkeypatch, backends):
    """Every descriptor's per_item doubled: the census (work), or where none counts the loop, a
    bound, must refuse each rate; int64 and int16 by the ceiling their loop's IMAD slots set."""
    from peakbench.catalog import atomic, descriptors, sfu
    for cls in (descriptors.ComputeTest, descriptors.MatrixTest, descriptors.MemoryTest, atomic.AtomicTest,
                sfu.SfuTest):
        monkeypatch.setattr(cls, "per_item", lambda self, v, real=cls.per_item: 2 * real(self, v))
    r = planted_run(tmp_path, monkeypatch, backends, "per-item-x2",
                    "compute.fp32,compute.int8,compute.int64,compute.int16,matrix.bf16.fp32,memory.copy,memory.update,"
                    "atomic.*,sfu.sin,sfu.rcp")
    assert_failed_by(r, ("work", "sass", "clock-ceiling", "bound"))


def test_an_l2_and_int64_rate_three_times_too_high_fail_their_bounds(tmp_path, monkeypatch, backends):
    from peakbench.catalog import descriptors
    for cls in (descriptors.ComputeTest, descriptors.MemoryTest):
        monkeypatch.setattr(cls, "per_item", lambda self, v, real=cls.per_item: 3 * real(self, v))
    r = planted_run(tmp_path, monkeypatch, backends, "per-item-x3", "memory.l2,compute.int64")
    assert_failed_by(r, ("work", "clock-ceiling", "bound"))


def test_host_counts_of_loads_gemm_ops_and_transfer_bytes_off_by_two_fail(tmp_path, monkeypatch, backends):
    """The families the first plant leaves out: a latency's count of loads (the cycle counter
    disagrees), a GEMM's ops (its ceiling), a transfer's bytes (the link's bound: one direction's copy,
    which reads over half of it on both APIs)."""
    from peakbench.catalog import gemm, transfer
    from peakbench.workloads import chase, onchip
    for cls in (gemm.GemmTest, transfer.TransferTest):
        monkeypatch.setattr(cls, "per_item", lambda self, v, real=cls.per_item: 2 * real(self, v))
    # the chase counts its own loads (items), not the descriptor's per_item
    monkeypatch.setattr(chase.ChaseSweep, "items", lambda self, rounds: 2 * rounds * chase.ROUND)
    monkeypatch.setattr(onchip.SharedChaseWorkload, "items", lambda self, size: 2 * size * chase.ROUND)
    r = planted_run(tmp_path, monkeypatch, backends, "per-item-x2-rest", "latency.l1,latency.l2,latency.shared,"
                                                                        "gemm.bf16.fp32,transfer.d2h")
    assert_failed_by(r, ("cycles", "clock-ceiling", "bound"))


def lossy(launch, jitter_s: float = 0.0):
    """A launch that skips a long launch identical to the one before, waits as long as that one
    took and reports its time (a command buffer or graph thought still valid), plus `jitter_s` in
    turn (a timer's tick)."""
    last, ticks = {}, itertools.cycle((0, 1, 2))

    def planted(self, kernel, grid, args, repeat=1, **kw):
        scalars = [int(a) for a in args if type(a).__module__ == "numpy"]
        key = (kernel.name, str(grid), tuple(scalars), repeat)
        if (repeat > 2 or any(s > 2 for s in scalars)) and last.get("key") == key:
            time.sleep(last["seconds"])
            return last["seconds"] + jitter_s * next(ticks)
        last.update(key=key, seconds=launch(self, kernel, grid, args, repeat, **kw))
        return last["seconds"]
    return planted


def plant_lost_launches(monkeypatch, jitter_s: float = 0.0) -> None:
    from peakbench.cuda.runtime import CudaRuntime
    from peakbench.vulkan.runtime import VulkanRuntime
    for cls in (VulkanRuntime, CudaRuntime):
        monkeypatch.setattr(cls, "launch", lossy(cls.launch, jitter_s))


def test_launches_lost_after_the_first_fail(tmp_path, monkeypatch, backends):
    """The replayed time itself (timer), also where each launch leaves the same output (a special
    function's, a cache read's, a shared-memory atomic's, the ALU's)."""
    plant_lost_launches(monkeypatch)
    r = planted_run(tmp_path, monkeypatch, backends, "launches-lost", "atomic.global_add,atomic.global_add_contended,"
                    "memory.update,sfu.rcp,atomic.shared_add,memory.l2,compute.fp32")
    # memory.update's coverage check sums its destination with launches of its own on the GPU
    # (stream.lane_sums), the second of them the first's twin: lost, it fails there, before timing
    assert_failed_by(r, ("measured", "timer", "coverage"))


def test_launches_lost_behind_a_jittered_time_fail(tmp_path, monkeypatch, backends):
    """The replayed time given a tick of jitter passes the timer: what the timed launches left, and
    where each launch leaves the same output (the streams' reads, writes and copies among them),
    the kernel's own count of its workgroups."""
    plant_lost_launches(monkeypatch, jitter_s=1e-9)
    r = planted_run(tmp_path, monkeypatch, backends, "launches-lost-jittered",
                    "atomic.global_add,atomic.global_add_contended,memory.update,sfu.rcp,atomic.shared_add,"
                    "memory.l2,memory.shared,compute.fp32,memory.read,memory.write,memory.copy")
    assert_failed_by(r, ("measured", "coverage", "launches"))


def test_a_launch_path_that_does_not_wait_fails(tmp_path, monkeypatch, backends):
    from peakbench.cuda.runtime import CudaRuntime
    from peakbench.vulkan.runtime import VulkanRuntime
    for cls in (VulkanRuntime, CudaRuntime):
        monkeypatch.setattr(cls, "launch_times", lambda self, kernel, count, args=(), real=cls.launch_times:
                            [t / 10 for t in real(self, kernel, count, args)])
    r = planted_run(tmp_path, monkeypatch, backends, "launch-early", "launch.overhead")
    assert_failed_by(r, ("measured",))


def test_copies_lost_after_the_first_fail(tmp_path, monkeypatch, backends):
    from peakbench.cuda.transfer import CudaLink
    from peakbench.vulkan.transfer import VulkanLink
    for cls in (VulkanLink, CudaLink):
        def first_only(self, jobs, nbytes, at, real=cls.copy):
            seconds = real(self, jobs, nbytes, at[:1])
            time.sleep(seconds * (len(at) - 1))
            return seconds * len(at)
        monkeypatch.setattr(cls, "copy", first_only)
    # d2h: a copy on both APIs (Vulkan's quick h2d is the mapped read, a kernel); the default
    # suite's 10 ms samples: Vulkan's quick 5 ms ones are one 256 MiB copy, with nothing to lose
    r = planted_run(tmp_path, monkeypatch, backends, "copies-lost", "transfer.d2h", profile=())
    assert_failed_by(r, ("measured", "bound"))


def balanced_copies(backend: str, backends: str):
    """The link class whose copy_each a backend's both-ways copies go through, and its name there;
    skipped where the backend is not measured or (Vulkan) device 0 has no copy queues to balance on."""
    if backend not in backends.split(","):
        pytest.skip(f"{backend}'s balanced copies")
    if backend == "cuda":
        from peakbench.cuda.transfer import CudaLink
        return CudaLink, "copy_each"
    import vulkan as vk
    from peakbench import vulkan as vulkan_backend
    from peakbench.vulkan.queues import COPY_QUEUES, transfer_family
    from peakbench.vulkan.transfer import VulkanLink      # bound as copy_each where copy queues exist
    opened = vulkan_backend.create()
    try:
        families = vk.vkGetPhysicalDeviceQueueFamilyProperties(opened._physical[0])
    finally:
        opened.close()
    found = transfer_family(families)
    if found is None or families[found].queueCount < COPY_QUEUES:
        pytest.skip(f"no transfer-only family of {COPY_QUEUES} queues: Vulkan's bidir is not balanced here")
    return VulkanLink, "_copy_each"


@pytest.mark.parametrize("backend", ["cuda", "vulkan"])
def test_pieces_of_a_balanced_copy_lost_after_the_first_fail(tmp_path, monkeypatch, backends, backend):
    """Both-ways copies go in pieces through copy_each (CUDA's streams, Vulkan's copy queues):
    each stream's or queue's pieces after its first lost, the time of all of them claimed."""
    cls, name = balanced_copies(backend, backends)

    def first_only(self, jobs, nbytes, ats, real=getattr(cls, name)):
        seconds, each = real(self, jobs, nbytes, [at[:1] for at in ats])
        most = max(len(at) for at in ats)
        time.sleep(seconds * (most - 1))
        return seconds * most, [e * len(at) for e, at in zip(each, ats)]
    monkeypatch.setattr(cls, name, first_only)
    r = planted_run(tmp_path, monkeypatch, backend, f"pieces-lost-{backend}", "transfer.bidir")
    bidir = r[(backend, "transfer.bidir")]
    assert "balanced" in bidir["params"], f"{backend}: bidir was not balanced ({bidir['params'].get('queue')})"
    assert_failed_by(r, ("measured", "bound"))


@pytest.mark.parametrize("backend", ["cuda", "vulkan"])
def test_balanced_copies_counting_twice_their_bytes_fail(tmp_path, monkeypatch, backends, backend):
    """transfer.bidir's bytes doubled in the host's count (items), its copies as they were: the
    bytes the copy calls were handed disagree, or the link's bound is passed."""
    balanced_copies(backend, backends)
    from peakbench.workloads.transfer import TransferWorkload
    items = TransferWorkload.items
    monkeypatch.setattr(TransferWorkload, "items", lambda self, size, nbytes=None: 2 * items(self, size, nbytes))
    r = planted_run(tmp_path, monkeypatch, backend, f"bidir-bytes-x2-{backend}", "transfer.bidir")
    assert "balanced" in r[(backend, "transfer.bidir")]["params"]
    assert_failed_by(r, ("measured", "bound"))


def test_a_value_from_the_wrong_sample_fails(tmp_path, monkeypatch, backends):
    # the median of the samples in another unit than they are kept in (x2): the value no longer
    # follows from them (the best sample instead reads within the spread on a GPU: 0.1%)
    from dataclasses import replace
    from peakbench.harness import runner, stats
    summarize = stats.summarize
    monkeypatch.setattr(runner, "summarize", lambda values: replace(summarize(values), median=2 * summarize(values).median))
    r = planted_run(tmp_path, monkeypatch, backends, "wrong-sample", "compute.fp32,memory.read,atomic.shared_add")
    assert_failed_by(r, ("statistics", "clock-ceiling", "bound"))      # twice the rate: a ceiling may see it first


def test_kernels_doing_less_work_than_counted_fail(tmp_path, backends):
    """Kernel faults, in a copy of shaders/ the run reads through PEAKBENCH_SHADERS: an int32 step
    that multiplies and no longer adds (half the ops), and atomics folded into one add of
    v * UNROLL an iteration (the same sums, a sixteenth of the atomics), in both APIs' sources."""
    import json
    import shutil
    import subprocess
    import sys
    from peakbench.sources import SHADERS
    folder = tmp_path / "shaders"
    shutil.copytree(SHADERS, folder)
    edits = {"alu_fma.comp": ("acc[k] = acc[k] * b_ + c_;", "acc[k] = acc[k] * b_;"),
             "alu.cu": ("int step(int x, int b, int c) { return x * b + c; }", "int step(int x, int b, int c) { return x * b; }"),
             "atomic.comp": ("u < UNROLL; u++) atomicAdd(words[at], v);", "u < 1u; u++) atomicAdd(words[at], v * T(UNROLL));"),
             "atomic.cu": ("for (int u = 0; u < UNROLL; u++) ADD(at, v);", "for (int u = 0; u < 1; u++) ADD(at, v * (T)UNROLL);")}
    for name, (old, new) in edits.items():
        text = (folder / name).read_text()
        assert text.count(old) == 1, f"{name}: the fault's anchor is not there once"
        (folder / name).write_text(text.replace(old, new))
    keep = os.environ.get("PEAKBENCH_PLANTED_OUT")
    out = Path(keep) / "planted-kernels.json" if keep else tmp_path / "out.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PEAKBENCH_SHADERS": str(folder), "PEAKBENCH_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "peakbench", "--backend", backends, "--quick", "--tests",
                           "compute.int32,atomic.global_add,atomic.global_add_contended", "--json", str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    r = {(run["backend"], x["test"]): x for run in json.loads(out.read_text())["runs"] for x in run["results"]}
    assert_failed_by(r, ("work", "sass"))

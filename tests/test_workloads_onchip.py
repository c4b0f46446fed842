"""peakbench.workloads.onchip: the host references of the shared-memory read and chase and of the L2
read (read against loops written out here), where the L2's size comes from and which working
sets it gives, and the three tests on a real Vulkan device (lavapipe here): each verifies, each
kernel with a planted fault fails, and a plain `--quick` run reports them ok with their evidence."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from helpers import run_peakbench
from test_workloads import rt  # noqa: F401  (a fixture: the ROCm runtime on the fake HIP)
from peakbench.backend import Unsupported
from peakbench.catalog import default_catalog
from peakbench.harness import runner
from peakbench.harness.runner import Settings
from peakbench.runtime import Limits
from peakbench.workloads import onchip, stream

CATALOG = default_catalog()
MIB = 1 << 20
TESTS = ("memory.shared", "latency.shared", "memory.l2")


# -- host references ----------------------------------------------------------------------------

def test_the_shared_read_reference_follows_the_moving_window():
    data = onchip.shared_data(2)                     # a window of 2 * 32 vectors and its slide
    assert data.shape == (64 + onchip.SLIDE, 4)
    got = onchip.shared_sums(data, groups=2, passes=3, unroll=2)
    for w, t in [(0, 0), (0, 33), (1, 255), (1, 70)]:
        want = np.zeros(4, np.uint64)
        for p in range(3):
            o = (p + t // 32 + w) & (onchip.SLIDE - 1)
            want += data[o + t % 32].astype(np.uint64) + data[o + t % 32 + 32]
        assert (got[w * onchip.BLOCK + t] == want % (1 << 32)).all()
    # a pass more changes every sum: a kernel doing fewer passes cannot match
    assert (onchip.shared_sums(data, 2, 2, 2) != got).any(axis=1).all()


def test_the_shared_chase_is_one_cycle_through_every_word():
    order, nxt = onchip.shared_cycle(64, np.random.default_rng(1))
    i, seen = int(order[0]), []
    for _ in range(64):
        seen.append(i)
        i = int(nxt[i])
    assert i == order[0] and sorted(seen) == list(range(64)) and seen == order.tolist()


def device(l2=0, kind="gpu", name="GPU"):
    limits = Limits(units=2, threads_per_unit=512, max_block=1024, warp=32, l2_bytes=l2, memory_bytes=1 << 30)
    return SimpleNamespace(limits=limits, dialect="vulkan", info=SimpleNamespace(kind=kind, name=name))


def test_the_l2_size_comes_from_the_api_the_spec_or_nowhere():
    spec = SimpleNamespace(name="NVIDIA H200 SXM", data={"l2_mib": 50.0})
    assert onchip.l2_bytes(device(40 * MIB), spec) == (40 * MIB, "vulkan device properties")
    assert onchip.l2_bytes(device(), spec) == (50 * MIB, "spec NVIDIA H200 SXM")
    assert onchip.l2_bytes(device(kind="cpu"), None)[0] == onchip.CPU_L2
    with pytest.raises(Unsupported, match=r"^\[api\] the L2 size of GPU is unknown"):
        onchip.l2_bytes(device(), None)


def test_the_l2_working_sets_are_powers_of_two_inside_the_l2():
    assert onchip.l2_working_sets(50 * MIB) == [2 * MIB, 4 * MIB, 8 * MIB, 16 * MIB, 32 * MIB]  # H200: 50 MB
    assert onchip.l2_working_sets(4 * MIB) == [MIB // 8, MIB // 4, MIB // 2, MIB, 2 * MIB]     # MI300X, per XCD
    assert onchip.l2_working_sets(6 * MIB) == [MIB // 4, MIB // 2, 1 * MIB, 2 * MIB, 4 * MIB]
    assert all(ws <= 0.75 * 96 * MIB for ws in onchip.l2_working_sets(96 * MIB))


def test_runs_longer_than_a_launch_allows_split_into_equal_launches():
    assert onchip.launches(1 << 20, 32768) == (32768, 32)
    assert onchip.launches(6, 4) == (3, 2)
    assert onchip.launches(8, 0) == (1, 8)


# -- on a real Vulkan device ------------------------------------------------------------------

@pytest.mark.parametrize("name", TESTS)
def test_onchip_workloads_verify_and_spoiled_data_fails(vulkan_device, name):
    test = CATALOG.get(name)
    w = vulkan_device.prepare(test, test.variants[0])
    try:
        assert w.verify() is None
        assert "checked at 1 and 2" in w.evidence["guards"]["iterations"]["why"]
        assert w.items(2) == 2 * w.items(1) > 0
        rt = vulkan_device.rt
        if name == "latency.shared":
            rt.upload(w.next, np.arange(onchip.CHASE_WORDS, dtype=np.uint32).tobytes())   # every word its own next
            assert "the chase ended at index" in (w.verify() or "")
        else:
            rt.fill(w.src, 0x01)
            assert "differ from the host reference" in (w.verify() or "")
    finally:
        w.close()


FAULTS = {   # (shader, anchor, fault, what verify() says)
    "memory.shared-half-passes": ("onchip_shared.comp", "for (uint p = 0; p < push.passes; p++)",
                                  "for (uint p = 0; p < push.passes; p += 2)", "guard iterations: output after 2 passes"),
    "memory.shared-layout": ("onchip_shared.comp", "s[at + 32 * u]", "s[at + 16 * u]", "differ from the host reference"),
    "latency.shared-two-loads": ("onchip_shared.comp", "i = s[i];", "i = s[s[i]];", "the chase ended at index"),
    "memory.l2-half-passes": ("onchip_l2.comp", "pass < push.passes; pass++", "pass < push.passes; pass += 2",
                              "guard iterations: output after 2 passes"),
    "memory.l2-no-rotation": ("onchip_l2.comp", "(gl_WorkGroupID.x + pass * push.shift)", "(gl_WorkGroupID.x)",
                              "differ from the host reference"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_planted_kernel_fault_fails_verification(vulkan_device, shaders, tmp_path, monkeypatch, fault):
    module, _ = shaders
    source, old, new, said = FAULTS[fault]
    for name in ("onchip_shared.comp", "onchip_l2.comp"):
        (tmp_path / name).write_text((module.SHADERS / name).read_text())
    text = (tmp_path / source).read_text()
    assert text.count(old) == 1, f"the fault's anchor {old!r} is not there once"
    (tmp_path / source).write_text(text.replace(old, new))
    monkeypatch.setattr(module, "SHADERS", tmp_path)
    test = CATALOG.get(fault.split("-")[0])
    w = vulkan_device.prepare(test, test.variants[0])
    try:
        assert said in (w.verify() or "")
    finally:
        w.close()


def test_the_l2_read_counts_what_its_slices_read(vulkan_device):
    test = CATALOG.get("memory.l2")
    w = vulkan_device.prepare(test, test.variants[0])
    try:
        ws = 4 * w.groups * w.tile * 16
        w.at(ws)
        n, mask, shift = w.point
        assert (n, mask, shift) == stream.sweep_point(ws, w.groups, w.tile) and mask == ws // 16 - 1
        assert w.items(3) == 3 * n and w.run(3) > 0
        got = np.frombuffer(vulkan_device.rt.download(w.dst, w.threads * 16), np.uint32)
        assert onchip.differs(got, stream.read_sums(n, w.groups, onchip.BLOCK, "chunk", 3, shift, mask)) is None
    finally:
        w.close()


@pytest.mark.parametrize("screening", [False, True])
def test_the_l2_read_measures_every_set_and_screening_the_smallest(vulkan_device, screening):
    test = CATALOG.get("memory.l2")
    w = vulkan_device.prepare(test, test.variants[0])
    try:
        settings = Settings(sample_s=0.001, warmup_s=0.0, min_samples=2, max_samples=2, screening=screening)
        v = runner.take(w, test, test.variants[0], settings, lambda: None, runner.Load())
        sets = onchip.l2_working_sets(v.params["l2_bytes"])
        assert [int(k) for k in v.params["working_sets"]] == (sets[:1] if screening else sets) and len(sets) > 1
    finally:
        w.close()


@pytest.mark.usefixtures("vulkan_backend")
def test_a_quick_run_reports_the_three_ok_with_their_evidence(tmp_path):
    out = tmp_path / "onchip.json"
    p = run_peakbench("--backend", "vulkan", "--quick", "--tests", ",".join(TESTS), "--json", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    results = {r["test"]: r for run in json.loads(out.read_text())["runs"] for r in run["results"]}
    for name in TESTS:
        assert results[name]["status"] == "ok" and results[name]["value"] > 0, results[name]
        assert "timer" in results[name]["evidence"]["guards"]
    l2 = results["memory.l2"]["params"]
    smallest = onchip.l2_working_sets(l2["l2_bytes"])[0]
    assert l2["working_sets"].keys() == {str(smallest)} and l2["working_set_bytes"] == smallest and l2["l2_from"]
    assert set(results["memory.l2"]["params"]["variants"]) == {"unroll16"}      # the screening variant
    chase = results["latency.shared"]
    if chase["params"]["timed"].startswith("the core's cycle counter"):
        assert chase["params"]["cycles"] > 0 and chase["clock_mhz"] > 0
    assert results["memory.shared"]["unit"] == "GB/s" and chase["unit"] == "ns"


@pytest.mark.usefixtures("vulkan_backend")
def test_a_shared_read_doing_half_its_passes_is_failed_by_the_run(tmp_path):
    from test_guards_planted import assert_caught, run_edited
    _, old, new, _ = FAULTS["memory.shared-half-passes"]
    r = run_edited(tmp_path, "onchip_shared.comp", old, new, "memory.shared")
    assert_caught(r["memory.shared"], "iterations", "variant lds128", "after 2 passes")


# -- through the ROCm runtime, on the fake HIP runtime -------------------------------------------
# Players of shaders/onchip.cu, written from its comments: the host side of the HIP path (the
# entry points, defines, arguments and grids kernels/onchip.py and the workloads hand hiprtc).

def onchip_players(bug: str = ""):
    import fake_hip
    from test_workloads import args, words

    def shared_read(fake, launch):
        d = fake_hip.defines(launch["options"])
        unroll, slide = int(d["UNROLL"]), int(d["SLIDE"])
        src_arg, dst_arg, _, passes = args(launch)      # _: the launch witness (fake_hip counts it)
        src, dst = words(fake, src_arg).astype(np.uint64), words(fake, dst_arg)
        groups, block = launch["grid"][0], launch["block"][0]
        t = np.arange(groups * block)
        total = np.zeros((t.size, 4), np.uint64)
        for p in range(0, fake_hip.scalar(passes), 2 if bug == "half" else 1):
            o = (p + t % block // 32 + t // block) & (slide - 1)
            for u in range(unroll):
                total += src[o + t % 32 + 32 * u]
        dst[:t.size] = (total % (1 << 32)).astype(np.uint32)

    def shared_chase(fake, launch):
        d = fake_hip.defines(launch["options"])
        next_arg, out_arg, rounds, start = args(launch)
        nxt = np.frombuffer(fake.buffer(next_arg), np.uint32)[:int(d["CHASE_WORDS"])]
        i = fake_hip.scalar(start)
        for _ in range(fake_hip.scalar(rounds) * int(d["ROUND"])):
            i = int(nxt[i])
        out = np.frombuffer(fake.buffer(out_arg), np.uint32)
        out[0] = i
        out[2:6] = [0, 0, fake_hip.scalar(rounds) * int(d["ROUND"]) * 30, 0]    # 30 cycles a load

    def l2_read(fake, launch):
        d = fake_hip.defines(launch["options"])
        unroll = int(d["L2_UNROLL"])
        src_arg, dst_arg, _, *scalars = args(launch)      # _: the launch witness (fake_hip counts it)
        passes, n, mask, shift = (fake_hip.scalar(x) for x in scalars)
        src, dst = words(fake, src_arg).astype(np.uint64), words(fake, dst_arg)
        groups, block = launch["grid"][0], launch["block"][0]
        t = np.arange(groups * block)
        span, total = n // groups, np.zeros((t.size, 4), np.uint64)
        for p in range(passes):
            base = (t // block + p * (0 if bug == "rotation" else shift)) * span + t % block
            for i in range(0, span, block * unroll):
                for u in range(unroll):
                    total += src[(base + i + u * block) & mask]
        dst[:t.size] = (total % (1 << 32)).astype(np.uint32)
    return {"shared_read": shared_read, "shared_chase": shared_chase, "l2_read": l2_read}


@pytest.mark.parametrize("name, entry", [("memory.shared", "shared_read"), ("latency.shared", "shared_chase"),
                                         ("memory.l2", "l2_read")])
def test_the_hip_path_runs_each_kernel_as_its_contract_says(rt, name, entry):
    import fake_hip
    from peakbench import kernels
    rt.fake.kernels.update(onchip_players())
    test = CATALOG.get(name)
    table = kernels.table(lambda *_: None, "peakbench.rocm.matrix")
    assert table.module(test).__name__ == "peakbench.kernels.onchip" and table.support(test, rt) is None
    w = table.workload(test, test.variants[0], rt)
    try:
        assert w.verify() is None
        launch = [x for x in rt.fake.launches if x["function"] == entry][-1]
        # the shared read's grid is resident (2 a CU); the L2 read's keeps more loads in flight
        groups = {"latency.shared": 1, "memory.shared": 2 * rt.limits.units,
                  "memory.l2": onchip.L2_BLOCKS_PER_UNIT * rt.limits.units}[name]
        assert launch["grid"][0] == groups and launch["block"][0] == onchip.BLOCK
        assert "-DSUMS" in " ".join(launch["options"]) or name == "latency.shared"
        assert w.params["path"] == kernels.onchip.__dict__[{"memory.shared": "SHARED_PATH", "latency.shared": "CHASE_PATH",
                                                            "memory.l2": "L2_PATH"}[name]]["hip"]
        if name == "latency.shared":      # the ROCm chase reads no cycle counter: CLOCK=0, timed by events
            assert fake_hip.defines(launch["options"])["CLOCK"] == "0" and not w.clocked
            w.rt.kernel_clock = w.clocked = True          # as CUDA's: the counter at words 2-5
            w.run(2)
            assert w.readings[-1][0] == 30.0
    finally:
        w.close()


@pytest.mark.parametrize("name, bug, said", [("memory.shared", "half", "guard iterations"),
                                             ("memory.l2", "rotation", "differ from the host reference")])
def test_a_hip_kernel_fault_fails_verification(rt, name, bug, said):
    from peakbench import kernels
    rt.fake.kernels.update(onchip_players(bug))
    test = CATALOG.get(name)
    w = kernels.onchip.workload(test, test.variants[0], rt)
    try:
        assert said in (w.verify() or "")
    finally:
        w.close()


def test_the_l2_read_is_calibrated_to_the_default_suites_launch_in_every_profile():
    from peakbench.harness.runner import Settings, launch_settings
    full, quick = Settings.full(), Settings.quick()
    assert onchip.L2Workload.launch_s == full.sample_s > quick.sample_s
    workload = onchip.L2Workload.__new__(onchip.L2Workload)     # only its declaration is read
    assert launch_settings(workload, quick).sample_s == launch_settings(workload, full).sample_s == full.sample_s

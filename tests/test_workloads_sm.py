"""Per-SM maps (workloads/sm.py) at the HIP API boundary: a fake GPU plays shaders/sm.cu's
contract (sink and records), with a slow unit planted; the map finds it, the value is its rate,
the counters are held to the GPU timer, and a kernel that loses iterations or records fails.
Vulkan's path on lavapipe says why it cannot run (no SM id there)."""
from __future__ import annotations

import numpy as np
import pytest

import fake_hip
from peakbench.catalog import default_catalog
from peakbench.harness.runner import Settings
from peakbench.harness.session import run_test
from peakbench.workloads import sm
from test_workloads import args, rt, words  # noqa: F401  (rt: a fixture, 2 CUs)

CATALOG = default_catalog()
MHZ = 2100.0                 # the fake's clock
MS_AN_ITERATION = 0.01       # each launch lasts this long an iteration


def iterations_of(launch) -> int:
    d = fake_hip.defines(launch["options"])
    return fake_hip.scalar(args(launch)[3 if d["CHASE"] == "1" else 4])


def elapsed_ms(launch) -> float:
    return iterations_of(launch) * MS_AN_ITERATION


def player(slow_unit: int | None = None, slowdown: float = 1.0, bug: str = "", stretch: float = 1.0):
    """sm_map on the fake: unit = workgroup % units; a unit's workgroups share the launch's cycles
    (the slow unit's work takes `slowdown` times longer, inside the launch)."""
    def sm_map(fake, launch):
        d = fake_hip.defines(launch["options"])
        groups, block = launch["grid"][0], launch["block"][0]
        units = 2
        cycles = int(elapsed_ms(launch) * 1e-3 * MHZ * 1e6 * 0.9)
        rec = words(fake, args(launch)[1]).reshape(-1)
        if d["CHASE"] == "1":
            sink_arg, rec_arg, next_arg, iterations, nodes = args(launch)
            nxt = np.frombuffer(fake.buffer(next_arg), np.uint32)
            lw = int(d["LINE_WORDS"])
            out = np.frombuffer(fake.buffer(sink_arg), np.uint32)
            for g in range(groups if fake_hip.scalar(iterations) <= 2 else 0):     # the checks' launches
                out[g] = sm.walk(nxt, sm.start_of(g, fake_hip.scalar(nodes), lw), fake_hip.scalar(iterations) * int(d["STEPS"]))
        else:
            sink_arg, rec_arg, b, c, iterations = args(launch)
            n = fake_hip.scalar(iterations) * int(d["UNROLL"]) * (0.5 if bug == "half" else 1)
            out = np.frombuffer(fake.buffer(sink_arg), np.float32)
            out[:groups * block] = sm.fma_sums(groups * block, int(d["ACC"]), int(n))
        for g in range(groups):
            if bug == "lost" and g == groups - 1:
                continue
            unit = g % units
            span = stretch * cycles * (slowdown if unit == slow_unit else 1.0) / max(slowdown, 1.0)
            start = 1000 + g
            end = start + int(span)
            rec[6 * g:6 * g + 6] = [unit, 0, start, 0, end & 0xFFFFFFFF, end >> 32]
    return sm_map


def run(rt, name, read_mhz: float = MHZ, spec=None, **kw):
    rt.fake.kernels["sm_map"] = player(**kw)
    rt.fake.elapsed_ms = elapsed_ms
    rt.clock_mhz = lambda: read_mhz
    from peakbench.workloads import Device
    from peakbench import kernels
    dev = Device(rt, kernels.table(lambda *_: None, "peakbench.rocm.matrix"))
    return run_test(dev, CATALOG.get(name), Settings.quick(), lambda line: None, spec)


def test_the_fp32_map_finds_the_slow_unit_and_takes_its_rate(rt):
    r = run(rt, "sm.fp32", slow_unit=1, slowdown=1.25)
    assert r.status == "ok", r.reason
    series = r.series
    assert series["x"] == "unit" and series["y"] == "tflops" and series["unit"] == [0, 1]
    fast, slow = series["tflops"]
    assert slow == pytest.approx(fast / 1.25, rel=1e-3)
    assert r.value == pytest.approx(slow, rel=1e-3)             # the slowest unit's, each sample
    assert r.params["slowest_unit"] == 1 and r.params["slowest_of_median"] < 0.9
    # every workgroup's FMAs over its unit's cycles, at the measured clock
    workgroups = series["workgroups"][0]
    params = r.params
    ops = workgroups * params["workgroup_size"] * params["size"] * 16 * 8 * 2
    assert fast == pytest.approx(ops / series["cycles"][0] * MHZ * 1e6 / 1e12, rel=1e-4)
    assert r.evidence["guards"]["cycles"]["verdict"] == "passed"
    assert r.evidence["guards"]["iterations"]["verdict"] == "passed"


def test_the_latency_map_takes_the_slowest_unit(rt):
    r = run(rt, "sm.l2_latency", slow_unit=0, slowdown=1.5)
    assert r.status == "ok", r.reason
    ns = r.series["ns"]
    assert ns[0] == pytest.approx(ns[1] * 1.5, rel=1e-3) and r.value == pytest.approx(ns[0], rel=1e-3)
    assert r.params["slowest_unit"] == 0


@pytest.mark.parametrize("bug, words_", [("half", "differ from the host's"), ("lost", "left no record")])
def test_a_kernel_that_skips_work_or_records_fails(rt, bug, words_):
    r = run(rt, "sm.fp32", bug=bug)
    assert r.status == "failed" and words_ in r.reason, r.reason


def test_counters_longer_than_the_launch_fail_the_cycles_guard(rt):
    r = run(rt, "sm.fp32", stretch=2.0)          # counters that span 1.8x the launch's GPU time
    assert r.status == "failed" and r.reason.startswith("guard cycles:"), r.reason


def test_a_clock_reading_that_lags_the_counters_is_replaced_by_theirs_within_the_maximum(rt):
    # the reading (a management library's, between launches) is 2.27x under the clock the
    # counters ran at: within the spec's maximum, the counters' clock is taken and said
    from peakbench.specs import GpuSpec
    spec = GpuSpec("Fake GPU", 2 * MHZ, {})
    r = run(rt, "sm.fp32", read_mhz=MHZ / 2.27, spec=spec)
    assert r.status == "ok", r.reason
    implied = 0.9 * MHZ                          # the player's counters span 0.9 of each launch
    assert r.clock_mhz == pytest.approx(implied, rel=1e-3)
    assert r.params["clock_from"] == "implied by the counters and the GPU timer"
    why = r.evidence["guards"]["cycles"]["why"]
    assert why.startswith(f"the clock read {MHZ / 2.27:.0f} MHz, under the {implied:.0f} MHz") and "spec Fake GPU" in why
    fast = run(rt, "sm.fp32", spec=spec)         # the same units at a reading that does not lag
    assert r.value == pytest.approx(fast.value * implied / MHZ, rel=1e-3)


def test_counters_a_little_past_the_maximum_clock_are_taken(rt):
    # an H100's SM counters ran at 2040-2085 MHz, past its 1980 maximum (guards.CLOCK_OVERSHOOT)
    from peakbench.specs import GpuSpec
    implied = 0.9 * MHZ
    r = run(rt, "sm.fp32", read_mhz=MHZ / 2.27, spec=GpuSpec("Fake GPU", implied / 1.04, {}))
    assert r.status == "ok" and r.clock_mhz == pytest.approx(implied, rel=1e-3), r.reason
    assert "within 6% of the" in r.evidence["guards"]["cycles"]["why"]


@pytest.mark.parametrize("maximum", [None, MHZ])
def test_a_lagging_reading_is_not_replaced_without_a_maximum_or_past_it(rt, maximum):
    # counters spanning 1.8x the launch imply 1.8x the clock: past a maximum of the clock read,
    # or with no maximum known, the cycles guard judges at the reading and fails
    from peakbench.specs import GpuSpec
    spec = GpuSpec("Fake GPU", maximum, {}) if maximum else None
    r = run(rt, "sm.fp32", spec=spec, stretch=2.0)
    assert r.status == "failed" and r.reason.startswith("guard cycles:"), r.reason
    assert f"at {MHZ:.0f} MHz" in r.reason


def test_vulkan_without_sm_ids_says_why(vulkan_device):
    reason = vulkan_device.support(CATALOG.get("sm.fp32"))
    assert reason.startswith("[driver] VK_NV_shader_sm_builtins (gl_SMIDNV) not exposed by")

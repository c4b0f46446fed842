"""peakbench.harness.session: run_test on a fake device (ok, failed, unsupported) and with_spec."""
from __future__ import annotations

from dataclasses import asdict, replace

import pytest

from fakes import FakeClock, FakeDevice, FakeSweep, FakeWorkload, fake_info, use_clock
from peakbench.backend import Unsupported
from peakbench.catalog import ComputeTest as Spec  # aliased: pytest would try to collect Test*
from peakbench.catalog import Variant, default_catalog
from peakbench.harness import guards, runner, session
from peakbench.harness.runner import Settings, screening_variants
from peakbench.harness.session import run_test, with_spec
from peakbench.report.render import rows
from peakbench.report.result import Result
from peakbench.workload import Axis
from peakbench.specs import GpuSpec, find, load_database

SETTINGS = Settings(sample_s=0.002, warmup_s=0.01, min_samples=3, max_samples=5, budget_s=1.0)
WIDE = Spec("compute.fake", "TFLOPS", "fma", "fp32",
            (Variant("narrow", width=1), Variant("wide", width=4), Variant("mid", width=2)))
OTHER = Spec("compute.other", "TOPS", "fma", "int32", (Variant("only"),))


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    use_clock(monkeypatch, c, runner, session)
    return c


def run(device, test=WIDE):
    lines: list[str] = []
    return run_test(device, test, SETTINGS, lines.append), lines


def test_ok_reports_the_best_variant(clock):
    device = FakeDevice(clock=clock, clock_mhz=1410.0)
    result, lines = run(device)
    assert result.status == "ok" and result.reason is None and result.unit == "TFLOPS"
    # FakeDevice's rate is 1 TFLOPS per lane of width: "wide" wins.
    assert result.value == pytest.approx(4.0)
    assert result.params["variant"] == "wide"
    assert set(result.params["variants"]) == {"narrow", "wide", "mid"}
    assert result.params["variants"]["narrow"]["median"] == pytest.approx(1.0)
    assert result.params["fake_param"] == 7 and result.evidence["fake_evidence"] == "isa"
    assert result.evidence["guards"]["clock-ceiling"] == {"verdict": "not_checked", "why": "no spec peak"}
    assert result.stats["median"] == pytest.approx(4.0) and result.stats["samples"] == SETTINGS.min_samples
    assert result.clock_mhz == 1410.0
    assert device.prepared == [("compute.fake", "narrow"), ("compute.fake", "wide"), ("compute.fake", "mid")]
    assert all(w.verified and w.closed for w in device.workloads)
    assert len(lines) == 3 and "wide" in lines[1] and "1410 MHz" in lines[1]


def test_a_screening_run_measures_the_named_variant_alone_without_sweeps_and_times_each_phase(clock):
    def make(test, variant):
        w = FakeWorkload(1e-6 / variant.width, clock=clock, name=variant.name)
        w.series = lambda: FakeSweep(w)
        return w

    screening = replace(SETTINGS, screening=True)
    named = replace(WIDE, screen="mid")
    device = FakeDevice(plan={"compute.fake": make}, clock=clock)
    result = run_test(device, named, screening, lambda line: None)
    assert device.prepared == [("compute.fake", "mid")] and result.params["variant"] == "mid"
    assert result.series is None and list(result.params["variants"]) == ["mid"]
    assert set(result.params["variants"]["mid"]["seconds"]) == {"prepare", "verify", "measure", "guards"}
    assert result.elapsed_s is not None and result.elapsed_s >= 0
    full = run_test(FakeDevice(plan={"compute.fake": make}, clock=clock), named, SETTINGS, lambda line: None)
    assert full.params["variant"] == "wide"                 # the full suite: every variant, and the series
    # the runner measured it: 1e6 items (bytes) per 1e-6 / width GPU seconds, at each point
    assert full.series["working_set_bytes"] == [4096, 8192]
    assert full.series["GB/s"] == [pytest.approx(4000.0)] * 2


def test_the_screening_variant_is_the_named_one_else_the_largest_matrix_shape_else_the_first():
    small, large, first = Variant("16x8x16", ops_per_step=4096), Variant("m64n256k16", ops_per_step=524288), WIDE.variants[0]
    matrix = Spec("matrix.fp16.fp32", "TFLOPS", "mma", "fp16.fp32")
    assert screening_variants(matrix, (small, large)) == (large,)
    assert screening_variants(WIDE, WIDE.variants) == (first,)
    assert screening_variants(replace(WIDE, screen="wide"), WIDE.variants) == (WIDE.variants[1],)
    assert screening_variants(replace(WIDE, screen="gone"), WIDE.variants) == (first,)   # not offered here
    assert screening_variants(replace(WIDE, screen="*"), WIDE.variants) == WIDE.variants   # every one


def test_a_screened_workgroup_shape_holds_at_most_32_accumulators_an_invocation():
    # Vulkan's workgroup-scope shapes: 128x128 over 256 invocations (64 each) does the most work a
    # step, 64x64 over 128 (32 each) is screened; a warpgroup's wgmma tile is not held to it
    from peakbench.catalog.matrix import shape, workgroup_shape
    matrix = Spec("matrix.int8.int32", "TOPS", "mma", "int8.int32")
    sub, mid, big = shape(16, 8, 32), workgroup_shape(64, 64, 32, 128, 1), workgroup_shape(128, 128, 32, 256, 1)
    assert screening_variants(matrix, (sub, mid, workgroup_shape(64, 64, 32, 256, 1), big)) == (mid,)
    assert screening_variants(matrix, (big,)) == (big,)
    over_512 = workgroup_shape(128, 128, 32, 512, 1)                       # 32 each: it fits
    assert screening_variants(matrix, (big, over_512)) == (over_512,)
    over_128 = workgroup_shape(128, 128, 32, 128, 1)                       # none fits: the most work
    assert screening_variants(matrix, (over_128, big)) == (over_128,)
    wgmma = Variant("m64n256k16", ops_per_step=2 * 64 * 256 * 16, shape=(64, 256, 16), scope="warpgroup",
                    invocations=128)
    assert screening_variants(matrix, (sub, wgmma)) == (wgmma,)


def test_a_sweep_from_a_losing_variant_is_kept(clock):
    """The sweep is taken once per test, on one variant; the result keeps it whichever variant wins."""
    def make(test, variant):
        w = FakeWorkload(1e-6 / variant.width, clock=clock, name=variant.name)
        if variant.name == "narrow":
            w.series = lambda: FakeSweep(w)
        return w

    result, _ = run(FakeDevice(plan={"compute.fake": make}, clock=clock))
    assert result.params["variant"] == "wide" and result.series["GB/s"] == [pytest.approx(1000.0)] * 2
    assert "series" not in result.evidence


def test_a_test_that_keeps_a_burst_idles_the_gpu_before_it_and_the_catalog_says_which(clock, monkeypatch):
    """Bursts are the catalog's (TestSpec.bursts: the work, not the API, meets the power cap)."""
    events: list = []

    def rest(seconds):
        events.append(("rest", seconds))
        clock.advance(seconds)

    monkeypatch.setattr(runner.time, "sleep", rest, raising=False)

    def make(test, variant):
        events.append("prepare")
        return FakeWorkload(1e-6, 1e6 / test.per_item(variant), clock=clock, name=variant.name)

    gemm = default_catalog().get("gemm.bf16.fp32")
    settings = replace(SETTINGS, burst_idle_s=1.0)
    result = run_test(FakeDevice(plan={gemm.name: make}, clock=clock), gemm, settings, lambda _: None)
    assert gemm.bursts and result.status == "ok" and result.evidence["burst"]["load_before_s"] < 0.1
    assert events == ["prepare", ("rest", 1.0)]
    events.clear()
    result = run_test(FakeDevice(plan={WIDE.name: make}, clock=clock), WIDE, settings, lambda _: None)
    assert events == ["prepare"] * 3 and "burst" not in result.evidence, "a test that keeps no burst"


def test_verify_runs_before_any_timing(clock):
    device = FakeDevice(clock=clock)
    run(device, OTHER)
    w = device.workloads[0]
    assert w.verified and w.sizes, "verified and then measured"


def test_mismatch_fails_with_the_reason_and_skips_timing(clock):
    problem = "3 of 4096 values differ from the host reference (first at (7, 0): got 1, want 2)"
    bad = FakeWorkload(clock=clock, problem=problem)
    device = FakeDevice({"compute.fake": lambda t, v: bad if v.name == "wide" else FakeWorkload(clock=clock)})
    result, _ = run(device)
    assert result.status == "failed" and result.value is None
    assert result.reason == f"variant wide: {problem}"
    assert result.params == bad.params and result.evidence == bad.evidence
    assert bad.sizes == [] and bad.closed
    # A failed variant ends the test: the later variant is not prepared.
    assert ("compute.fake", "mid") not in device.prepared


def test_exception_fails_the_test_and_the_run_goes_on(clock):
    def boom(test, variant):
        raise RuntimeError("vkCreateComputePipelines failed: VkErrorOutOfDeviceMemory\nsecond line")

    device = FakeDevice({"compute.fake": boom}, clock=clock)
    failed, _ = run(device, WIDE)
    assert failed.status == "failed"
    assert failed.reason == "variant narrow: RuntimeError: vkCreateComputePipelines failed: VkErrorOutOfDeviceMemory"
    following, _ = run(device, OTHER)
    assert following.status == "ok" and following.value > 0


def test_error_during_timing_fails_and_still_closes(clock):
    w = FakeWorkload(clock=clock, fail_on_run=4)
    result, _ = run(FakeDevice({"compute.other": lambda t, v: w}), OTHER)
    assert result.status == "failed" and "device lost" in result.reason and result.reason.startswith("variant only:")
    assert w.closed


def test_unsupported_reason_passes_through_without_preparing():
    reason = "[driver] VK_KHR_shader_bfloat16 not exposed by Fake 1.0"
    device = FakeDevice(unsupported={"compute.fake": reason})
    result, _ = run(device)
    assert (result.status, result.reason, result.value) == ("unsupported", reason, None)
    assert device.prepared == []


def test_unsupported_raised_by_prepare_is_unsupported(clock):
    def refuse(test, variant):
        raise Unsupported("[hardware] no 4-bit units")

    result, _ = run(FakeDevice({"compute.fake": refuse}, clock=clock))
    assert (result.status, result.reason) == ("unsupported", "[hardware] no 4-bit units")


def test_unsupported_needs_a_category():
    with pytest.raises(ValueError):
        Result("compute.fp8_e4m3", "unsupported", "TFLOPS", reason="no FP8 here")


# -- with_spec -------------------------------------------------------------------------------

FAKE_SPEC = GpuSpec("Fake GPU", 2000.0, {"compute.fp32": 100.0, "matrix.fp16.fp32": 1000.0},
                    data={"peak_clock_mhz": {"matrix.fp16.fp32": 1800}})


def ok(test: str, value: float, clock_mhz: float | None = None) -> Result:
    return Result(test, "ok", "TFLOPS", value=value, clock_mhz=clock_mhz)


def test_pct_of_spec_and_of_the_peak_at_the_measured_clock():
    r = with_spec(ok("compute.fp32", 50.0, clock_mhz=1000.0), FAKE_SPEC)
    assert (r.spec_value, r.pct_of_spec) == (100.0, 50.0)
    assert r.pct_of_clock_peak == 100.0     # half the boost clock: the peak there is 50


def test_peak_clock_of_a_test_overrides_the_boost_clock():
    r = with_spec(ok("matrix.fp16.fp32", 450.0, clock_mhz=900.0), FAKE_SPEC)
    assert r.pct_of_spec == 45.0
    assert r.pct_of_clock_peak == 90.0      # 1000 * 900 / 1800 = 500 at 900 MHz


@pytest.mark.parametrize("test, scales", [
    ("compute.fp32", True), ("sfu.rcp", True), ("matrix.bf16.fp32.sparse", True), ("gemm.bf16.fp32", True),
    ("memory.shared", True), ("memory.read", False), ("memory.l2", False), ("transfer.h2d", False),
    ("latency.l1", False), ("atomic.global_add", False)])
def test_only_peaks_set_by_the_core_clock_get_a_pct_at_the_measured_clock(test, scales):
    spec = GpuSpec("Fake GPU", 2000.0, {test: 100.0})
    r = with_spec(ok(test, 50.0, clock_mhz=1000.0), spec)
    assert r.pct_of_spec == 50.0
    assert r.pct_of_clock_peak == (100.0 if scales else None)


def test_a_gemm_result_carries_its_ratio_to_the_same_runs_matrix_test():
    gemm = default_catalog().get("gemm.bf16.fp32")
    earlier = [ok("matrix.fp16.fp32", 900.0), ok("matrix.bf16.fp32", 800.0)]
    r = session.with_matrix_ratio(ok("gemm.bf16.fp32", 760.0), gemm, earlier)
    assert r.evidence["matrix_ratio"] == {"of": "matrix.bf16.fp32", "ratio": 0.95, "matrix_value": 800.0}
    failed = [Result("matrix.bf16.fp32", "failed", "TFLOPS", reason="x")]
    assert "matrix_ratio" not in session.with_matrix_ratio(ok("gemm.bf16.fp32", 760.0), gemm, failed).evidence
    matrix = default_catalog().get("matrix.bf16.fp32")
    assert session.with_matrix_ratio(ok("matrix.bf16.fp32", 1.0), matrix, earlier).evidence == {}


def test_no_clock_gives_pct_of_spec_only():
    r = with_spec(ok("compute.fp32", 25.0), FAKE_SPEC)
    assert r.pct_of_spec == 25.0 and r.pct_of_clock_peak is None


@pytest.mark.parametrize("result, spec", [
    (ok("compute.fp64", 10.0, 1000.0), FAKE_SPEC),                     # no peak for the test
    (ok("compute.fp32", 10.0, 1000.0), None),                          # no spec matched
    (Result("compute.fp32", "unsupported", "TFLOPS", reason="[api] x"), FAKE_SPEC),
    (Result("compute.fp32", "failed", "TFLOPS", reason="variant a: boom"), FAKE_SPEC),
])
def test_spec_columns_stay_empty_without_a_peak_or_a_value(result, spec):
    r = with_spec(result, spec)
    assert (r.spec_value, r.pct_of_spec, r.pct_of_clock_peak) == (None, None, None)


def test_h200_example_of_design_md():
    """DESIGN.md's example: 64.1 TFLOPS FP32 on an H200 SXM is 95.8% of spec."""
    h200 = find(load_database(), "NVIDIA H200 SXM")
    r = with_spec(ok("compute.fp32", 64.1, clock_mhz=1980.0), h200)
    assert (r.spec_value, r.pct_of_spec, r.pct_of_clock_peak) == (66.9, 95.8, 95.8)
    # Tensor peaks assume 1830 MHz: at that clock the same % of spec is 100% of the clock's peak.
    peak = h200.peak("matrix.fp16.fp32")
    m = with_spec(ok("matrix.fp16.fp32", peak, clock_mhz=1830.0), h200)
    assert (m.pct_of_spec, m.pct_of_clock_peak) == (100.0, 100.0)


def test_catalog_tests_run_on_the_fake_device(clock):
    """Every compute test either runs through the harness or is unsupported with its reason."""
    device = FakeDevice(clock=clock, unsupported={t.name: "[api] no kernel"
                                                  for t in default_catalog().tests if not t.variants})
    for test in default_catalog().select(["compute.*"]):
        result, _ = run(device, test)
        assert result.status == ("unsupported" if not test.variants else "ok"), test.name


def test_with_spec_builds_a_new_result_and_a_result_cannot_change():
    measured = ok("compute.fp32", 50.0)
    r = with_spec(measured, FAKE_SPEC)
    assert r.pct_of_spec == 50.0 and measured.pct_of_spec is None and measured.spec_value is None
    with pytest.raises(AttributeError):
        r.value = 1.0


def test_the_best_variants_samples_are_kept(clock):
    r, device = run(FakeDevice(clock=clock))
    assert r.status == "ok" and len(r.samples) == r.stats["samples"] == SETTINGS.min_samples
    assert min(r.samples) == pytest.approx(r.stats["min"]) and max(r.samples) == pytest.approx(r.stats["max"])


def test_a_shared_warm_up_holds_only_while_the_clock_does(clock):
    """A test continuing the load before warms up again on its own kernel where the clock, read
    after one of its launches, is more than 3% under the clock the test before ran at."""
    shared = Settings(sample_s=0.002, warmup_s=0.3, min_samples=3, max_samples=5, budget_s=1.0, warm_gap_s=0.5)
    load = runner.Load()
    device = FakeDevice(clock=clock, clock_mhz=1980.0)
    run_test(device, OTHER, shared, lambda _: None, load=load)
    clock.advance(0.1)
    held = run_test(device, OTHER, shared, lambda _: None, load=load)
    device._clock_mhz = 1620.0               # the clock fell while the host checked the kernel
    clock.advance(0.1)
    fell = run_test(device, OTHER, shared, lambda _: None, load=load)
    launches = [len(w.sizes) for w in device.workloads]
    assert held.evidence["warm_up"].startswith("continued the load before (clock 1980 MHz")
    # The clock stood still at 1620 MHz (as under a power cap): the warm-up again ends at the
    # second reading in a row that finds it unmoved, 100 ms on, not after the full 300 ms.
    assert fell.evidence["warm_up"] == ("warmed up again: the clock read 1620 MHz, under the 1980 MHz of the"
                                        " load before; held at 1620 MHz 102 ms later")
    assert launches[1] + 45 < launches[2] < launches[1] + 65      # 100 ms more of its own load, in 2 ms launches
    clock.advance(0.1)
    again = run_test(device, OTHER, shared, lambda _: None, load=load)   # 1620 is now the clock held
    assert again.evidence["warm_up"].startswith("continued")
    first = run_test(FakeDevice(clock=clock, clock_mhz=1980.0), OTHER, SETTINGS, lambda _: None)
    assert "warm_up" not in first.evidence           # its own warm-up: nothing to tell


def test_consecutive_tests_share_one_warm_up_when_the_gap_is_short(clock):
    shared = Settings(sample_s=0.002, warmup_s=0.3, min_samples=3, max_samples=5, budget_s=1.0, warm_gap_s=0.5)
    load = runner.Load()
    device = FakeDevice(clock=clock)
    first = run_test(device, OTHER, shared, lambda _: None, load=load)
    warm_launches = len(device.workloads[0].sizes)
    clock.advance(0.1)                    # compile and verify of the next test
    second = run_test(device, OTHER, shared, lambda _: None, load=load)
    assert first.status == second.status == "ok"
    # the first warmed up for 0.3 s; the second went straight from calibration to its samples
    assert warm_launches > len(device.workloads[1].sizes) + 20
    clock.advance(1.0)                    # idle past the gap: a full warm-up again
    run_test(device, OTHER, shared, lambda _: None, load=load)
    assert len(device.workloads[2].sizes) == warm_launches


def test_a_variant_after_an_idle_gap_warms_up_again_when_warm_ups_are_shared(clock):
    # An H200 quick run: Vulkan compiled each matrix shape's pipeline for seconds, the SM clock
    # fell to 345-570 MHz, and variants that did not warm up again read a fifth of the rate.
    shared = Settings(sample_s=0.002, warmup_s=0.3, min_samples=3, max_samples=5, budget_s=1.0, warm_gap_s=0.5)
    two = Spec("compute.two", "TOPS", "fma", "int32", (Variant("a"), Variant("b")))

    def slow_compile(test, variant):
        if variant.name == "b":
            clock.advance(2.0)
        return FakeWorkload(1e-6, 1e6, clock=clock, name=variant.name)
    device = FakeDevice({"compute.two": slow_compile}, clock=clock)
    assert run_test(device, two, shared, lambda _: None, load=runner.Load()).status == "ok"
    first, second = (len(w.sizes) for w in device.workloads)
    assert second == first, "the variant after a 2 s compile must warm up for the whole 0.3 s again"


class Points(FakeWorkload):
    """A workload measured at the points of an axis (as the L2's working sets), the best the value."""
    def axis(self, spec=None):
        return Axis("point", (1, 2))

    def at(self, point):
        self.point = point


def test_a_workload_over_an_axis_continues_the_load_and_hands_it_on(clock):
    shared = Settings(sample_s=0.002, warmup_s=0.3, min_samples=3, max_samples=5, budget_s=1.0, warm_gap_s=0.5)
    load = runner.Load()
    device = FakeDevice(clock=clock, clock_mhz=1980.0,
                        plan={"compute.other": lambda t, v: Points(1e-6, 1e6, clock=clock)})
    third = Spec("compute.third", "TOPS", "fma", "int32", (Variant("only"),))
    first = run_test(device, WIDE, shared, lambda _: None, load=load)
    clock.advance(0.3)
    timed = run_test(device, OTHER, shared, lambda _: None, load=load)
    clock.advance(0.3)          # 0.3 + the axis test + 0.3 > 0.5: continued only if it ended the load
    after = run_test(device, third, shared, lambda _: None, load=load)
    assert first.status == timed.status == after.status == "ok"
    assert timed.evidence["warm_up"].startswith("continued the load before") and timed.params["point"] in (1, 2)
    assert after.evidence["warm_up"].startswith("continued the load before")
    assert len(device.workloads[0].sizes) > len(device.workloads[-1].sizes) + 20   # only the first warmed up 0.3 s


# -- bound and verification ---------------------------------------------------------------------

READ = default_catalog().get("memory.read")


def read_on(clock, items_factor: float = 1.0):
    """memory.read on a fake device that reads 1 GB/s (1e6 bytes a size unit in 1 ms); a host
    whose count of bytes is off claims `items_factor` times the items."""
    def make(test, variant):
        w = FakeWorkload(1e-3, 1e6 / test.per_item(variant) * items_factor, clock=clock, name=variant.name)
        guards.passed(w.evidence, "coverage", "planted: every vector counted")
        return w
    return FakeDevice({"memory.read": make}, clock=clock)


def test_a_rate_above_the_spec_peak_fails_the_bound_guard_whatever_the_clock(clock):
    spec = GpuSpec("Fake GPU", 2000.0, {}, data={"memory_bandwidth_gbs": 1.5})
    good = run_test(read_on(clock), READ, SETTINGS, lambda _: None, spec)
    assert good.status == "ok" and good.verified is True and good.value == pytest.approx(1.0)
    assert good.evidence["guards"]["bound"] == {"verdict": "passed",
                                                "why": "1 GB/s is 0.67x the 1.5 GB/s of spec Fake GPU"}
    # The host counts each vector's bytes twice: 2 GB/s from a memory that does 1.5 at most.
    doubled = run_test(read_on(clock, 2.0), READ, SETTINGS, lambda _: None, spec)
    assert doubled.status == "failed"
    assert doubled.reason.startswith("guard bound: variant rows: 2 GB/s is 1.33x the 1.5 GB/s of spec Fake GPU")


def test_a_result_no_guard_could_bound_is_ok_but_unverified(clock):
    r = run_test(read_on(clock), READ, SETTINGS, lambda _: None, None)
    assert r.status == "ok" and r.verified is False
    assert r.evidence["unverified"] == "bound: no spec peak for memory.read"
    assert rows({"results": [asdict(r)]})[0][-1] == "ok (unverified: no bound)"


def test_without_a_guard_on_its_work_a_result_is_unverified_too(clock):
    r = run_test(FakeDevice(clock=clock), WIDE, SETTINGS, lambda _: None, FAKE_SPEC)
    assert r.status == "ok" and r.verified is False
    assert r.evidence["unverified"].startswith("work: no guard checks it; bound: ")


def test_a_latency_under_one_cycle_a_load_fails_the_bound_guard():
    latency = default_catalog().get("latency.l1")
    spec = GpuSpec("Fake GPU", 2000.0, {})
    assert guards.bound(latency, 0.6, fake_info(), spec)[0] is None          # 1.2 cycles at 2000 MHz
    problem, _ = guards.bound(latency, 0.4, fake_info(), spec)
    assert problem == "0.4 ns a load, one cycle at the 2000 MHz maximum (spec Fake GPU) is 0.5 ns"


def test_launches_lost_after_the_first_fail_the_timer_guard(clock):
    """A runtime that runs one of two launches but reports the GPU time of both (a lost launch
    behind a right-looking rate): the GPU time exceeds the host's wait for it."""
    class LostLaunches(FakeWorkload):
        def run(self, size: int) -> float:
            return 2 * super().run(max(1, size // 2))        # half the work done, all of it reported
    device = FakeDevice({"compute.fake": lambda t, v: LostLaunches(1e-3, 1e6, clock=clock, name=v.name)},
                        clock=clock)
    r = run_test(device, WIDE, SETTINGS, lambda _: None, None)
    assert r.status == "failed" and r.reason.startswith("guard timer: variant narrow: GPU time ")
    assert "the GPU timer runs slow (GPU/wall 2.00, at most 1.05" in r.reason

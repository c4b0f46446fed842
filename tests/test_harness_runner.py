"""peakbench.harness.runner: calibration, warm-up, sampling and the rate arithmetic, on a fake
workload whose GPU time is known in closed form and a fake clock that the launches advance."""
from __future__ import annotations

import itertools

import pytest

from fakes import TIMER_TICK_S, FakeClock, FakeWorkload, use_clock
from peakbench.harness import guards, runner
from peakbench.harness.runner import Settings, calibrate, measure, rate

# A fake launch reads up to two timer ticks over its closed-form time (fakes.FakeWorkload).
TICKS = 1e-5
FAST = Settings(sample_s=0.002, warmup_s=0.0, min_samples=3, max_samples=8, settle=0.005, budget_s=10.0)


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    use_clock(monkeypatch, c, runner)
    return c


def run_measure(workload: FakeWorkload, timer: FakeClock, settings: Settings = FAST, unit: str = "TFLOPS", **kw):
    return measure(workload, 1, unit, settings, timer(), **kw)


@pytest.mark.parametrize("seconds_per_unit", [1e-8, 1e-6, 3e-5, 7e-4, 1.5e-3])
def test_calibrate_finds_smallest_power_of_two_reaching_sample_s(seconds_per_unit):
    w = FakeWorkload(seconds_per_unit)
    size, seconds = calibrate(w.run, FAST)
    assert size & (size - 1) == 0, f"{size} is not a power of two"
    assert seconds == pytest.approx(w.seconds(size), abs=3 * TIMER_TICK_S) and w.seconds(size) >= FAST.sample_s
    assert size == 1 or w.seconds(size // 2) < FAST.sample_s
    # It jumps once the time is measurable rather than doubling all the way.
    assert len(w.sizes) <= size.bit_length()


def test_calibrate_keeps_a_slow_kernel_at_size_one():
    w = FakeWorkload(seconds_per_unit=0.5)
    assert calibrate(w.run, FAST) == (1, 0.5)
    assert w.sizes == [1]


def test_calibrate_stops_at_max_size():
    settings = Settings(sample_s=0.02, max_size=1 << 10)
    w = FakeWorkload(seconds_per_unit=1e-9)
    size, seconds = calibrate(w.run, settings)
    assert size == 1 << 10 and seconds < settings.sample_s
    assert max(w.sizes) == 1 << 10


@pytest.mark.parametrize("unit", ["TFLOPS", "TOPS", "GB/s"])
def test_rate_is_work_over_seconds_in_the_unit(clock, unit):
    w = FakeWorkload(seconds_per_unit=2e-6, ops_per_unit=5e7, clock=clock)
    v = run_measure(w, clock, unit=unit)
    want = {"TFLOPS": 25.0, "TOPS": 25.0, "GB/s": 25_000.0}[unit]      # 5e7 items in 2 us
    assert v.summary.median == pytest.approx(want, rel=TICKS)
    assert v.summary.min == pytest.approx(want, rel=TICKS) and v.summary.max == pytest.approx(want, rel=TICKS)
    assert v.size == calibrate(FakeWorkload(2e-6).run, FAST)[0]


def test_rate_counts_items_at_their_declared_worth():
    assert rate(1000, 2e-6, 16, "GB/s") == pytest.approx(8.0)             # 16 kB in 2 us
    assert rate(3, 1e-3, 2e9, "TFLOPS") == pytest.approx(6.0)              # 6e9 ops in 1 ms
    assert rate(512, 1e-6, 1, "ns") == pytest.approx(1.953125)             # loads, time per load
    assert rate(1, 5e-6, 1, "us") == pytest.approx(5.0)                    # one launch


def test_the_per_item_worth_scales_every_sample(clock):
    w = FakeWorkload(seconds_per_unit=2e-6, ops_per_unit=5e7, clock=clock)
    v = measure(w, 4, "TFLOPS", FAST, clock())
    assert v.summary.median == pytest.approx(100.0) and v.samples == [pytest.approx(100.0)] * v.summary.samples


def test_warm_up_runs_until_warmup_s_after_start(clock):
    settings = Settings(sample_s=0.002, warmup_s=0.05, min_samples=3, max_samples=8, budget_s=10.0)
    w = FakeWorkload(seconds_per_unit=1e-6, clock=clock)
    started = clock()
    v = measure(w, 1, "TFLOPS", settings, started)
    first_sample = len(w.sizes) - v.summary.samples
    assert w.starts[first_sample] - started >= settings.warmup_s
    # The launch before the first sample started inside the warm-up window: warm-up stops as soon
    # as it has lasted long enough, it does not overshoot by a whole extra launch.
    assert w.starts[first_sample - 1] - started < settings.warmup_s
    # Warm-up launches happened (calibration alone is far shorter than 50 ms) at the calibrated size.
    calibration_launches = len(_calibration_sizes(1e-6, settings))
    assert first_sample > calibration_launches
    assert set(w.sizes[calibration_launches:]) == {v.size}


def _calibration_sizes(seconds_per_unit: float, settings: Settings) -> list[int]:
    w = FakeWorkload(seconds_per_unit)
    calibrate(w.run, settings)
    return w.sizes


def test_a_shared_warm_up_still_runs_the_tests_own_kernel_for_own_warmup_s(clock):
    settings = Settings(sample_s=0.002, warmup_s=0.3, min_samples=3, max_samples=8, budget_s=10.0, own_warmup_s=0.1)
    w = FakeWorkload(seconds_per_unit=1e-6, clock=clock)
    began = clock()
    v = measure(w, 1, "TFLOPS", settings, started=began - 10.0)     # the load began 10 s ago
    first_sample = len(w.sizes) - v.summary.samples
    assert w.starts[first_sample] - began >= 0.1 > w.starts[first_sample - 1] - began


def test_only_the_least_own_launches_when_the_warm_up_time_has_passed(clock):
    w = FakeWorkload(seconds_per_unit=1e-6, clock=clock)
    v = measure(w, 1, "TFLOPS", FAST, started=clock() - 10.0)     # the test began 10 s ago
    calibration = len(_calibration_sizes(1e-6, FAST))
    own = runner.own_launches(FAST.min_samples)
    assert len(w.sizes) == calibration + own + v.summary.samples
    # the timer guard reads them all, calibration's last launch among them: enough to tell a replay
    assert [len(group) for group in v.launches] == [1 + own + v.summary.samples]
    assert 1 + own + FAST.min_samples == guards.REPLAYED_LAUNCHES
    assert set(w.sizes[calibration - 1:]) == {v.size}


def test_settled_samples_stop_at_min_samples(clock):
    v = run_measure(FakeWorkload(clock=clock), clock)
    assert v.summary.samples == FAST.min_samples


def test_noisy_samples_stop_at_max_samples(clock):
    w = FakeWorkload(seconds_per_unit=1e-6, clock=clock, noise=(1.0, 1.25))
    v = run_measure(w, clock)
    assert v.summary.samples == FAST.max_samples
    assert v.summary.max == pytest.approx(w.rate(), rel=TICKS)
    assert v.summary.min == pytest.approx(w.rate() / 1.25, rel=TICKS)
    # Eight samples alternating between the two rates: the median is their mean.
    assert v.summary.median == pytest.approx((w.rate() + w.rate() / 1.25) / 2, rel=TICKS)


def test_noisy_samples_stop_at_the_budget(clock):
    settings = Settings(sample_s=0.002, warmup_s=0.0, min_samples=3, max_samples=1000, budget_s=0.02)
    w = FakeWorkload(seconds_per_unit=1e-6, clock=clock, noise=(1.0, 1.25))
    v = measure(w, 1, "TFLOPS", settings, clock())
    assert settings.min_samples <= v.summary.samples < 20
    samples = w.starts[-v.summary.samples:]
    # The last sample began within the budget; the loop stopped right after passing it.
    assert samples[-1] - samples[0] <= settings.budget_s
    assert clock() - samples[0] > settings.budget_s


def test_clock_is_the_median_of_the_readings(clock):
    readings = itertools.count(1500)
    v = run_measure(FakeWorkload(clock=clock), clock, clock=lambda: next(readings))
    assert v.clock_mhz == 1500 + (FAST.min_samples - 1) / 2


def test_no_clock_readings_give_none(clock):
    assert run_measure(FakeWorkload(clock=clock), clock).clock_mhz is None


def test_params_and_evidence_are_copied(clock):
    w = FakeWorkload(clock=clock, name="x4u16")
    v = run_measure(w, clock)
    assert v.name == "x4u16"
    assert v.params == w.params and v.params is not w.params
    assert v.evidence == w.evidence and v.evidence is not w.evidence


def test_quick_settings_are_smaller_but_keep_the_warm_up():
    quick, full = Settings.quick(), Settings.full()
    assert quick.sample_s < full.sample_s and quick.max_samples <= full.max_samples
    assert quick.min_samples <= quick.max_samples and full.min_samples >= 10   # DESIGN.md: at least 10
    assert quick.warmup_s >= 0.3 and full.warmup_s >= 0.3                      # DESIGN.md: >= 300 ms


def test_a_load_continues_across_a_short_gap_and_starts_afresh_after_a_long_one():
    load = runner.Load()
    assert load.begin(10.0, 0.5) == 10.0            # nothing before: the load begins now
    load.end(11.0)
    assert load.begin(11.4, 0.5) == 10.0            # 0.4 s later: the same load, warm already
    load.end(12.0)
    assert load.begin(12.6, 0.5) == 12.6            # 0.6 s idle: a new load, a full warm-up
    assert runner.Load().begin(5.0, 0.0) == 5.0


def test_a_load_is_shared_across_1_s_where_its_clock_was_read_and_half_that_where_not():
    profile = Settings.full()
    read, unread = runner.Load(), runner.Load()
    read.begin(10.0, 0), unread.begin(10.0, 0)
    read.end(11.0, 1980.0)
    unread.end(11.0, None)
    assert read.start(11.8, profile) == (10.0, 1980.0)         # 0.8 s: continued, its clock to be checked
    assert unread.start(11.8, profile) == (11.8, None)         # no reading to check it by: a new load
    assert unread.start(12.2, profile) == (12.2, None)
    unread.end(12.5, None)
    assert unread.start(12.9, profile) == (12.2, None)         # 0.4 s: continued


def test_both_profiles_share_warm_ups_and_run_each_tests_own_kernel_first():
    for profile in (Settings.quick(), Settings.full()):
        assert profile.warm_gap_s > 0 and profile.own_warmup_s > 0
    assert Settings().warm_gap_s == 0          # a plain Settings (the tests' own) never shares


class Ramp:
    """A clock that climbs `step` MHz each `every` seconds of fake time, from `start` to `top`."""

    def __init__(self, fake, start: float, top: float, step: float, every: float):
        self.fake, self.t0, self.start, self.top, self.step, self.every = fake, fake(), start, top, step, every

    def __call__(self) -> float:
        return min(self.top, self.start + self.step * int((self.fake() - self.t0) / self.every))


def test_a_warm_up_again_lasts_while_the_clock_climbs_and_ends_once_it_is_back(clock):
    settings = Settings(sample_s=0.002, warmup_s=0.3, min_samples=3, max_samples=8, budget_s=10.0)
    # 1400 MHz climbing 100 MHz every 40 ms: back within 3% of 1980 MHz (1920.6) at the 6th step,
    # 240 ms in; the 250 ms reading ends it.
    climbing = Ramp(clock, 1400.0, 1980.0, 100.0, 0.04)
    w = FakeWorkload(1e-6, 1e6, clock=clock)
    story = runner.hold(w, 2000, settings, climbing, 1980.0)
    waited = clock() - climbing.t0
    assert story.startswith("warmed up again: the clock read 1400 MHz") and "back at 1980 MHz" in story
    assert 0.2 <= waited < 0.3, story          # it kept going while the clock rose, and stopped once back
    # A clock that never comes back and never stands still: the full warmup_s, no more.
    clock.advance(1.0)
    crawling = Ramp(clock, 1000.0, 1900.0, 30.0, 0.045)
    story = runner.hold(FakeWorkload(1e-6, 1e6, clock=clock), 2000, settings, crawling, 1980.0)
    assert 0.3 <= clock() - crawling.t0 < 0.36 and "still under, at" in story, story
    # One 15 MHz step a reading (0.8% at 1800 MHz, under CLOCK_STILL) is a climb too, not a clock held.
    clock.advance(1.0)
    stepping = Ramp(clock, 1800.0, 1980.0, 15.0, 0.05)
    story = runner.hold(FakeWorkload(1e-6, 1e6, clock=clock), 2000, settings, stepping, 1980.0)
    assert 0.3 <= clock() - stepping.t0 < 0.36 and "still under, at" in story, story
    # A reading missing on the way: the warm-up goes on (a None is not a clock that came back).
    clock.advance(1.0)
    readings = iter([1400.0, None, None, 1990.0])
    story = runner.hold(FakeWorkload(1e-6, 1e6, clock=clock), 2000, settings, lambda: next(readings), 1980.0)
    assert "back at 1990 MHz" in story, story


def test_measure_on_without_shared_warm_ups_continues_the_tests_own_load(clock):
    """With warm_gap_s 0 a measurement given its test's `started` does not warm up again (the
    second working set of memory.l2, a second variant); without it, it warms up 0.3 s."""
    settings = Settings(sample_s=0.002, warmup_s=0.3, min_samples=3, max_samples=3, budget_s=10.0)
    load = runner.Load()
    first = FakeWorkload(1e-6, 1e6, clock=clock)
    runner.measure_on(load, first, 1.0, "TOPS", settings, lambda: None)
    second, fresh = FakeWorkload(1e-6, 1e6, clock=clock), FakeWorkload(1e-6, 1e6, clock=clock)
    clock.advance(0.01)                    # the host between the two
    runner.measure_on(load, second, 1.0, "TOPS", settings, lambda: None, started=load.since)
    clock.advance(0.01)
    runner.measure_on(load, fresh, 1.0, "TOPS", settings, lambda: None)
    assert len(first.sizes) > 100 and len(second.sizes) < 20 and len(fresh.sizes) > 100


class Copies(FakeWorkload):
    cores = False


def test_a_copy_test_hands_on_the_core_clock_before_it_not_the_one_it_let_fall(clock):
    """A host link's copies leave the SMs idle (1365 MHz after a quick run's transfer.bidir on an
    H100): the core test after it is held to the 1980 MHz of the core load before, and warms up
    again, instead of continuing at the fallen clock (sm.fp32 read 0.67x its default value); the
    copies themselves are not held to it (warming up on copies, 0.22 s each, could not restore it)."""
    settings = Settings(sample_s=0.002, warmup_s=0.3, min_samples=3, max_samples=3, budget_s=10.0, warm_gap_s=1.0)
    load = runner.Load()
    runner.measure_on(load, FakeWorkload(1e-6, 1e6, clock=clock), 1.0, "TOPS", settings, lambda: 1980.0)
    copy = runner.measure_on(load, Copies(1e-6, 1e6, clock=clock), 1.0, "GB/s", settings, lambda: 1365.0)
    assert copy.clock_mhz == 1365.0 and load.mhz == 1980.0
    assert "warm_up" not in copy.evidence          # nor warmed up again by copies, which cannot raise it
    core = runner.measure_on(load, FakeWorkload(1e-6, 1e6, clock=clock), 1.0, "TOPS", settings,
                             Ramp(clock, 1365.0, 1980.0, 300.0, 0.02))
    assert core.evidence["warm_up"].startswith("warmed up again: the clock read 1365 MHz, under the 1980 MHz")
    assert core.clock_mhz == 1980.0


def test_copies_share_a_load_of_their_own_and_leave_the_core_load_alone(clock):
    """A core load does not warm the link: the first copy test after one warms up warmup_s of
    copies; the copy test after it continues that copy load (its own warm-up only); the core
    load is neither continued nor restarted by copies, so a core test after the copies and the
    latency sweep's idle seconds warms up in full."""
    settings = Settings(sample_s=0.002, warmup_s=0.3, own_warmup_s=0.03, min_samples=3, max_samples=3,
                        budget_s=10.0, warm_gap_s=1.0)
    load = runner.Load()
    runner.measure_on(load, FakeWorkload(1e-6, 1e6, clock=clock), 1.0, "TOPS", settings, lambda: 1980.0)
    since = load.since
    t0 = clock()
    runner.measure_on(load, Copies(1e-6, 1e6, clock=clock), 1.0, "GB/s", settings, lambda: 1500.0)
    assert clock() - t0 >= 0.3                # right after a core test: the link warms up in full
    clock.advance(0.4)                        # the next copy test's buffers and checks
    t0 = clock()
    runner.measure_on(load, Copies(1e-6, 1e6, clock=clock), 1.0, "GB/s", settings, lambda: 1500.0)
    assert 0.03 <= clock() - t0 < 0.1         # continues the copies' load
    assert load.since == since                # the core load untouched
    clock.advance(2.5)                        # the sweep's near-idle seconds
    t0 = clock()
    runner.measure_on(load, FakeWorkload(1e-6, 1e6, clock=clock), 1.0, "TOPS", settings, lambda: 1980.0)
    assert clock() - t0 >= 0.3 and load.since > since


def test_tensor_work_shares_a_load_of_its_own_and_continues_the_core_load(clock):
    """Core work does not bring the tensor rate up: the first tensor test after core tests warms
    up warmup_s of its own kernel, the tensor test after it continues that load (its own warm-up
    only), and a core test after tensor work continues the core load, which tensor work kept."""
    settings = Settings(sample_s=0.002, warmup_s=0.3, own_warmup_s=0.03, min_samples=3, max_samples=3,
                        budget_s=10.0, warm_gap_s=1.0)
    load = runner.Load()
    runner.measure_on(load, FakeWorkload(1e-6, 1e6, clock=clock), 1.0, "TOPS", settings, lambda: 1980.0)
    since = load.since
    clock.advance(0.1)
    t0 = clock()
    runner.measure_on(load, FakeWorkload(1e-6, 1e6, clock=clock), 1.0, "TFLOPS", settings, lambda: 1980.0, tensor=True)
    assert clock() - t0 >= 0.3                # right after a core test: the tensor load warms up in full
    clock.advance(0.1)
    t0 = clock()
    runner.measure_on(load, FakeWorkload(1e-6, 1e6, clock=clock), 1.0, "TFLOPS", settings, lambda: 1980.0, tensor=True)
    assert 0.03 <= clock() - t0 < 0.1         # continues the tensor load
    clock.advance(0.1)
    t0 = clock()
    runner.measure_on(load, FakeWorkload(1e-6, 1e6, clock=clock), 1.0, "TOPS", settings, lambda: 1980.0)
    assert 0.03 <= clock() - t0 < 0.1 and load.since == since      # the core load went on under the tensor work


class Capped(FakeWorkload):
    """A GEMM under a power cap: full rate for its first second of load, 0.8x after."""

    def seconds(self, size: int) -> float:
        t = self.clock() - self.began
        return size * self.seconds_per_unit * (1.0 if t < 1.0 else 1.25)


def test_a_burst_keeps_the_first_launches_rate_beside_the_capped_sustained_one(clock):
    w = Capped(seconds_per_unit=1e-6, clock=clock)
    w.began = clock()
    settings = Settings(sample_s=0.01, warmup_s=1.5, min_samples=5, max_samples=8, settle=0.005, budget_s=10.0)
    v = measure(w, 1, "TFLOPS", settings, clock(), clock=lambda: 1755.0, burst=True)
    burst = v.evidence["burst"]
    assert burst["value"] == pytest.approx(w.rate(), rel=1e-3)              # the first launches: full rate
    assert v.summary.median == pytest.approx(w.rate() / 1.25, rel=1e-3)      # sustained: the cap's
    assert burst["launches"] == runner.BURST_LAUNCHES and burst["clock_mhz"] == 1755
    assert burst["load_before_s"] < 0.1


def test_the_default_suite_idles_before_a_burst_tests_first_variant_only(clock, monkeypatch):
    slept = []
    monkeypatch.setattr(runner.time, "sleep", lambda s: (slept.append(s), clock.advance(s)), raising=False)
    settings = Settings.full()
    assert settings.burst_idle_s == runner.BURST_IDLE_S and Settings.quick().burst_idle_s == 0
    load = runner.Load()
    load.begin(clock(), 0)
    clock.advance(5.0)                          # five seconds into the tests before
    w = Capped(seconds_per_unit=1e-6, clock=clock)
    w.began = clock()
    v = runner.measure_on(load, w, 1, "TFLOPS", settings, lambda: 1980.0, burst=True)
    assert slept == [runner.BURST_IDLE_S] and v.evidence["burst"]["load_before_s"] < 0.1
    runner.measure_on(load, w, 1, "TFLOPS", settings, lambda: 1980.0, started=load.since, burst=True)
    assert slept == [runner.BURST_IDLE_S], "a later variant continues the test's load"


def test_a_size_timed_three_times_still_gives_the_replay_check_its_launches(clock):
    # transfer.p2p times each pair 3 times: with no warm-up time, the warm-up runs launches enough
    # that calibration's last, the warm-up's and the samples make REPLAYED_LAUNCHES
    settings = Settings(sample_s=0.002, warmup_s=0.0, min_samples=5, max_samples=10, budget_s=10.0)
    w = FakeWorkload(seconds_per_unit=1e-6, clock=clock)
    v = runner.fixed_samples(w, 3, 1, "TFLOPS", settings, lambda: None)
    assert v.summary.samples == 3
    assert [len(group) for group in v.launches] == [guards.REPLAYED_LAUNCHES]


def test_a_workload_whose_rate_rises_with_the_launch_is_calibrated_alike_in_every_profile(clock):
    quick, full = Settings.quick(), Settings.full()
    assert quick.sample_s < full.sample_s
    sizes = []
    for settings in (quick, full):
        w = FakeWorkload(seconds_per_unit=1e-3, clock=clock)
        w.launch_s = full.sample_s
        sizes.append(measure(w, 1, "TFLOPS", settings, clock()).size)
    plain = measure(FakeWorkload(seconds_per_unit=1e-3, clock=clock), 1, "TFLOPS", quick, clock()).size
    assert sizes == [16, 16] and plain == 8      # 16 ms launches in both; quick alone stops at 8 ms

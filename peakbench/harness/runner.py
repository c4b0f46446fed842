"""Warm up, calibrate, sample, stop: the one place that measures a workload and turns (items,
GPU seconds) into a rate.

For each variant of a test: find the size whose launch takes about `sample_s` of GPU time (the
workload's `launch_s` where that is longer; doubling from 1), keep the GPU under sustained load
until `warmup_s` has passed since the test began (clocks ramp over hundreds of milliseconds), then
take samples until at least `min_samples` are in and their relative deviation is under
`settle`, or `max_samples`/`budget_s` is reached.
The value of a test is its best variant's median rate.

What a workload declares (peakbench/workload.py) picks the path: the points of an Axis, each
measured so; host-timed launches; a Sweep, whose points are each calibrated and timed a few
times, shared by the tests that read it. The screening profile (Settings.screening) is read
here alone: one variant a test, the first points of an axis, no series, a shorter chase sweep.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable

from peakbench.harness import host_cpus
from peakbench.harness.guards import REPLAYED_LAUNCHES
from peakbench.harness.stats import Summary, median, round_significant, stdrel, summarize
from peakbench.workload import Sweep

SCALE = {"TFLOPS": 1e12, "TOPS": 1e12, "GOPS": 1e9, "GB/s": 1e9}     # work per second in the unit
PER = {"ns": 1e9, "us": 1e6}                            # the unit in a second (time per item)


def own_launches(samples: int) -> int:
    """The least warm-up launches of the measured size before `samples` timed ones, however long
    the warm-up ran: with calibration's last, the REPLAYED_LAUNCHES the timer guard needs to tell
    a replayed time from a steady one (a quick run's 5 samples: 2; a p2p pair's 3: 4)."""
    return max(0, REPLAYED_LAUNCHES - 1 - samples)


def warm_launches(run: Callable[[int], float], size: int, seconds: float, least: int,
                  warming: Callable[[], bool]) -> list[float]:
    """The GPU seconds of calibration's last launch of `size` (`seconds`) and of the warm-up's
    after it: `least` launches at least (own_launches), more while `warming()` holds."""
    launches = [seconds]
    while len(launches) - 1 < least or warming():
        launches.append(run(size))
    return launches


def rate(items: int, seconds: float, per_item: float, unit: str) -> float:
    """`items` work items, each worth `per_item` (the descriptor's ops, bytes, loads or launches),
    done in `seconds` of GPU time, in `unit`: work per second, or time per item for ns and us."""
    if unit in PER:
        return seconds / (items * per_item) * PER[unit]
    return items * per_item / seconds / SCALE[unit]


@dataclass(frozen=True)
class Settings:
    # GPU time per sample; quick's shorter samples read compute and memory within 1.2% of these
    # (PERFORMANCE_ANALYSIS.md, "Quick against the default suite").
    sample_s: float = 0.01
    warmup_s: float = 0.3       # sustained load before the first sample (DESIGN.md: >= 300 ms)
    min_samples: int = 10
    max_samples: int = 30
    settle: float = 0.005       # stop sampling once stdrel of the samples is below this
    budget_s: float = 3.0       # wall time per variant, after warm-up
    max_size: int = 1 << 24
    # A test that starts within this long of the previous test's last launch on the device counts
    # that test's sustained load towards its warm-up; 0: never. Where the clock can be read,
    # whether it held over the gap is read, not assumed (hold): an idle GPU's SM clock can fall from
    # boost to idle within 2 s (PERFORMANCE_ANALYSIS.md, "The SM clock falls to idle within seconds"),
    # and 1 s covers the host work of one test (a 256 MiB transfer's buffers and checks took
    # 0.5-0.7 s). Without a clock reading the gap is at most UNCHECKED_GAP_S.
    warm_gap_s: float = 0.0
    # With a shared warm-up, the least each test still runs its own kernel before its samples:
    # the GPU idles while the host checks the kernel, and its clock can fall there unseen (sfu.sin
    # has run at 0.8x the rate of the boost clock NVML still read:
    # PERFORMANCE_ANALYSIS.md, "Quick against the default suite").
    own_warmup_s: float = 0.0
    # The screening profile (--quick): one variant a test (screening_variants), no size sweeps
    # beside the value, and a latency sweep that stops short of the full range (workloads/chase.py).
    screening: bool = False
    host_samples: int = 200     # host-timed launches a sample set (launch overhead), after 20 untimed
    # The burn-in profile: each test's one variant sampled for its whole budget_s (no settling),
    # every sample's time and clock kept for the time series and the stability summary.
    burn_in: bool = False
    # A test that keeps a burst (TestSpec.bursts: GEMM, sparse matrices) idles the GPU this long
    # before its first variant, so its burst starts under the power cap's limit as a GEMM
    # benchmark's first products do, not seconds into the load of the tests before (torch's
    # products after 4 s under the cap burst as rested ones after 1 s of idle: PERFORMANCE_ANALYSIS.md,
    # "What the sparse matrix tests leave behind"); 0: the burst is taken inside the load it finds
    # (its `load_before_s` says how long that had run).
    burst_idle_s: float = 0.0

    @classmethod
    def full(cls) -> "Settings":
        """The default suite: every variant, 10-30 samples of 10 ms, warm-ups shared as in quick."""
        return cls(warm_gap_s=1.0, own_warmup_s=0.1, burst_idle_s=BURST_IDLE_S)

    @classmethod
    def quick(cls) -> "Settings":
        return cls(sample_s=0.005, warmup_s=0.3, min_samples=5, max_samples=10, budget_s=0.5,
                   warm_gap_s=1.0, own_warmup_s=0.03, screening=True, host_samples=50)

    @classmethod
    def burn(cls, seconds_per_test: float) -> "Settings":
        """The burn-in profile: one variant a test under sustained load for `seconds_per_test`,
        samples of 50 ms (a time series of 20 points a second at most), never settling early."""
        return cls(sample_s=0.05, warmup_s=0.3, min_samples=1 << 30, max_samples=1 << 30, settle=0.0,
                   budget_s=seconds_per_test, warm_gap_s=1.0, own_warmup_s=0.03, screening=True,
                   host_samples=50, burn_in=True)


PROFILES = ("prolog", "default", "burn-in")     # --profile; --quick is prolog
BURN_IN_S = 60.0                                # --profile burn-in without --duration

def screening_variants(test, offered: tuple) -> tuple:
    """The variants a screening run measures: every one where the catalog says so (screen
    SCREEN_ALL), else the one it names (TestSpec.screen), else for a matrix test the shape with the
    most work a step (workgroup-scope shapes of at most SCREEN_TILE_PER_INVOCATION accumulator
    elements an invocation), else the first."""
    if len(offered) <= 1 or test.screen == SCREEN_ALL:
        return tuple(offered)
    named = [v for v in offered if test.screen and v.name == test.screen]
    if named:
        return (named[0],)
    if test.family == "matrix":
        fits = [v for v in offered if v.scope != "workgroup" or _per_invocation(v) <= SCREEN_TILE_PER_INVOCATION]
        return (max(fits or offered, key=lambda v: v.ops_per_step),)
    return (offered[0],)


# TestSpec.screen: a screening run measures every variant (few and short, and which is fastest
# differs between backends: the contended atomic's u32 through CUDA, f32 through Vulkan, ~6% apart).
SCREEN_ALL = "*"
# A workgroup-scope matrix shape (Vulkan's VK_NV_cooperative_matrix2) holding more accumulator
# elements an invocation than this reads 1-3% under the 32-element ones (int8 on an H100: 128x128
# over 256 invocations 1300-1325 TOPS, 64x64 over 128 1341; PERFORMANCE_ANALYSIS.md, "Start-up,
# second round"), though it does the most work a step.
SCREEN_TILE_PER_INVOCATION = 32


def _per_invocation(v) -> float:
    m, n, _ = v.shape
    return m * n / max(1, v.invocations)


UNCHECKED_GAP_S = 0.5  # the longest gap a load is shared over where no clock reading can check it
CLOCK_HOLD = 0.03     # a shared warm-up holds while the clock is within this of the last test's
# A burst (TestSpec.bursts): the first launches, before the power cap bites, as torch's and
# cuBLAS's GEMM benchmarks time ten products after a short warm-up. Launches of 10 ms were capped
# already on the H200 (cuBLASLt bf16 686 TFLOPS at 1485 MHz after an idle second, torch 782).
BURST_LAUNCHES = 10
BURST_SAMPLE_S = 0.001  # each burst launch: about one 8192-cube GEMM, so the ten span ~15 ms, as torch's
BURST_IDLE_S = 1.0
ON_INTERRUPT_CPU = 20    # launches timed on a CPU that takes GPU interrupts, for the evidence (host_timed)
REWARM_CHECK_S = 0.05  # a warm-up again reads the clock this often...
CLOCK_STILL = 0.01     # ...and ends where it stays within this of one reading (15 MHz at 1980 MHz is 0.8%)
STILL_READINGS = 2     # ...for this many readings after it (a clock climbing a step per reading goes on)


class Load:
    """When one device's sustained load began, when its last timed launch ended and the clock it
    ran at, so that consecutive tests can share one warm-up (Settings.warm_gap_s)."""

    def __init__(self):
        self.since: float | None = None
        self.until: float | None = None
        self.mhz: float | None = None
        self._link: Load | None = None
        self._tensor: Load | None = None

    @property
    def link(self) -> "Load":
        """The copies' own load on the same device (Workload.cores False)."""
        if self._link is None:
            self._link = Load()
        return self._link

    @property
    def tensor(self) -> "Load":
        """The tensor tests' own load on the same device (TestSpec.tensor)."""
        if self._tensor is None:
            self._tensor = Load()
        return self._tensor

    def of(self, workload, tensor: bool) -> "Load":
        """The load a measurement continues: the copies' (Workload.cores False), the tensor
        work's (TestSpec.tensor) or the cores'."""
        return self.link if not workload.cores else self.tensor if tensor else self

    def begin(self, now: float, gap_s: float) -> float:
        """When the load a test starting `now` continues began: the previous test's, where it ended
        under `gap_s` ago; else now."""
        if self.since is None or self.until is None or now - self.until > gap_s:
            self.since = now
        return self.since

    def end(self, now: float, mhz: float | None = None) -> None:
        self.until, self.mhz = now, mhz

    def start(self, now: float, settings: Settings, started: float | None = None) -> tuple[float, float | None]:
        """(when the sustained load a measurement starting `now` continues began, the clock that
        load ran at where it began before this test, else None). With shared warm-ups off, the
        load is the test's own: `started`, its first variant's, else now."""
        if not settings.warm_gap_s:
            return started or self.begin(now, 0), None
        gap = settings.warm_gap_s if self.mhz else min(settings.warm_gap_s, UNCHECKED_GAP_S)
        began = self.begin(now, gap)
        return began, (self.mhz if began < now else None)


@dataclass
class VariantResult:
    name: str
    size: int
    summary: Summary
    clock_mhz: float | None
    params: dict = field(default_factory=dict)
    evidence: dict = field(default_factory=dict)
    samples: list = field(default_factory=list)      # the per-sample values, in the test's unit
    timing: list = field(default_factory=list)       # (GPU seconds, host wall seconds) per sample
    window: tuple | None = None                      # perf_counter() start and end of the timed samples
    times: list = field(default_factory=list)        # perf_counter() at each sample's end (a burn-in's series)
    clocks: list = field(default_factory=list)       # the clock read after each sample (None where unread)
    launches: list = field(default_factory=list)     # each measured size's launches, their GPU seconds
    phases: dict = field(default_factory=dict)       # wall seconds of prepare, verify and measure


def launch_settings(workload, settings: Settings) -> Settings:
    """The settings a workload's timed launches are calibrated by: sample_s, or the workload's
    launch_s where that is longer (Workload.launch_s)."""
    if workload.launch_s and workload.launch_s > settings.sample_s:
        return replace(settings, sample_s=workload.launch_s)
    return settings


def calibrate(run: Callable[[int], float], settings: Settings) -> tuple[int, float]:
    """The smallest power-of-two size whose launch takes at least sample_s (or max_size)."""
    size, seconds = 1, run(1)
    while seconds < settings.sample_s and size < settings.max_size:
        if seconds <= 0:
            raise RuntimeError(f"the GPU timer read {seconds} s for a launch of size {size}")
        # Jump close to the target once the time is well above timer noise.
        grow = 2 if seconds < 1e-4 else min(16, max(2, int(settings.sample_s / seconds)))
        size = min(settings.max_size, size * (1 << (grow.bit_length() - 1)))
        seconds = run(size)
    return size, seconds


def hold(workload, size: int, settings: Settings, clock: Callable[[], float | None], held_mhz: float) -> str:
    """A warm-up shared with the test before holds only while the clock does: the GPU idles while
    the host checks a kernel, and its clock may fall in that gap (by 30% over consecutive quick
    tests, no throttle reported: PERFORMANCE_ANALYSIS.md, "Quick against the default suite"). Read
    after a launch of this kernel, a clock under the last test's warms up again, on this kernel,
    until the clock is back within CLOCK_HOLD of the last test's or stands still over
    STILL_READINGS readings REWARM_CHECK_S apart (a power cap this kernel meets holds it lower for
    good), for at most warmup_s. The warm-up's story, for the evidence."""
    workload.run(size)
    now = clock()
    if not now:
        return f"continued the load before (its clock {held_mhz:.0f} MHz; none read now)"
    if now >= held_mhz * (1 - CLOCK_HOLD):
        return f"continued the load before (clock {now:.0f} MHz, {held_mhz:.0f} before)"
    t, last, anchor, still, ended = time.perf_counter(), now, now, 0, "still under, at"
    while time.perf_counter() - t < settings.warmup_s:
        check = time.perf_counter()
        while time.perf_counter() - check < REWARM_CHECK_S:
            workload.run(size)
        read = clock()
        if not read:                   # no reading: keep warming, up to warmup_s
            continue
        if read >= held_mhz * (1 - CLOCK_HOLD):
            last, ended = read, "back at"
            break
        if abs(read - anchor) <= CLOCK_STILL * anchor:    # against where it stood, so a climb adds up
            still += 1
        else:
            anchor, still = read, 0
        last = read
        if still == STILL_READINGS:
            ended = "held at"
            break
    return (f"warmed up again: the clock read {now:.0f} MHz, under the {held_mhz:.0f} MHz of the load before;"
            f" {ended} {last:.0f} MHz {(time.perf_counter() - t) * 1e3:.0f} ms later")


def measure_on(load: Load, workload, per_item: float, unit: str, settings: Settings,
               clock: Callable[[], float | None], started: float | None = None, burst: bool = False,
               tensor: bool = False) -> VariantResult:
    """measure() continuing the device's sustained load (Load.start; `started`: the test's own
    load, where warm-ups are not shared), and handing it on to the next measurement. `tensor`:
    the work runs on the matrix units (TestSpec.tensor)."""
    # Copies keep a load of their own (Load.link): a core load does not bring the link up, nor
    # can copies bring a fallen core clock back, so neither counts towards the other's warm-up,
    # and the core test after copies is held to the core clock before them (hold). Tensor work
    # keeps one too (Load.tensor): other work does not bring the tensor rate up, but tensor work
    # keeps the cores' clock as any work does, so it continues the core load as well.
    own = load.of(workload, tensor)
    if burst and settings.burst_idle_s and started is None:     # the test's first variant
        time.sleep(settings.burst_idle_s)
        own.begin(time.perf_counter(), 0)
        started = own.since
    began, held = own.start(time.perf_counter(), settings, started)
    v = measure(workload, per_item, unit, settings, began, clock, held if workload.cores else None, burst)
    own.end(time.perf_counter(), v.clock_mhz)
    if own is load.tensor:
        load.begin(began, settings.warm_gap_s)
        load.end(time.perf_counter(), v.clock_mhz)
    return v


def measure(workload, per_item: float, unit: str, settings: Settings, started: float,
            clock: Callable[[], float | None] = lambda: None, held_mhz: float | None = None,
            burst: bool = False) -> VariantResult:
    """Time one prepared workload (`run(size)` -> GPU seconds, `items(size)` -> work items done);
    `per_item` is what its descriptor says an item is worth; `started` is when the test's
    sustained load began; `held_mhz`, where that load began before this test, the clock it ran at
    (see hold); `burst`: the first launches are kept (take_burst)."""
    own = time.perf_counter()
    first = take_burst(workload, per_item, unit, clock, started) if burst else None
    size, seconds = calibrate(workload.run, launch_settings(workload, settings))
    # calibration's last, the warm-up's, then the timed ones (the timer guard reads them all)
    launches = warm_launches(workload.run, size, seconds, own_launches(settings.min_samples),
                             lambda: (time.perf_counter() - started < settings.warmup_s
                                      or time.perf_counter() - own < settings.own_warmup_s))
    warm_up = hold(workload, size, settings, clock, held_mhz) if held_mhz else None
    rates, clocks, timing, times = [], [], [], []
    t0 = time.perf_counter()
    while len(rates) < settings.max_samples:
        wall = time.perf_counter()
        seconds = workload.run(size)
        timing.append((seconds, time.perf_counter() - wall))     # for the timer guard
        launches.append(seconds)
        times.append(time.perf_counter())
        if seconds <= 0:
            raise RuntimeError(f"the GPU timer read {seconds} s for a launch of size {size}")
        clocks.append(clock())
        rates.append(rate(workload.items(size), seconds, per_item, unit))
        if time.perf_counter() - t0 > settings.budget_s and (settings.burn_in or len(rates) >= settings.min_samples):
            break
        if len(rates) >= settings.min_samples and stdrel(rates) < settings.settle:
            break
    read = [c for c in clocks if c]
    evidence = {**workload.evidence, **({"warm_up": warm_up} if warm_up else {}), **({"burst": first} if first else {})}
    return VariantResult(workload.name, size, summarize(rates),
                         median(read) if read else None, dict(workload.params),
                         evidence, rates, timing, (t0, time.perf_counter()), times, clocks, [launches])


def take_burst(workload, per_item: float, unit: str, clock: Callable[[], float | None], started: float) -> dict:
    """The median rate of BURST_LAUNCHES launches of at least BURST_SAMPLE_S each, before the
    test's calibration (a few ms of load), the clock read after them, and how long the device's
    load had run when they began."""
    t0 = time.perf_counter()
    size, _ = calibrate(workload.run, Settings(sample_s=BURST_SAMPLE_S))
    seconds = [workload.run(size) for _ in range(BURST_LAUNCHES)]
    mhz = clock()
    rates = [rate(workload.items(size), s, per_item, unit) for s in seconds]
    return {"value": round_significant(median(rates), 4), "clock_mhz": round(mhz) if mhz else None,
            "launches": BURST_LAUNCHES, "launch_s": round_significant(median(seconds), 3),
            "seconds": round(time.perf_counter() - t0, 3), "load_before_s": round(max(0.0, t0 - started), 3)}


class Failed(Exception):
    """A measurement that found its own output wrong: the variant fails with this reason."""


def variants(test, offered: tuple, settings: Settings) -> tuple:
    """The variants a run measures of those offered: all, or a screening run's one."""
    return screening_variants(test, offered) if settings.screening else tuple(offered)


def take(workload, test, variant, settings: Settings, clock: Callable[[], float | None], load: Load,
         spec=None, started: float | None = None) -> VariantResult:
    """Measure one prepared variant along the path its workload declares (workload.timing,
    axis): `load` is the device's sustained load, `started` the test's own where warm-ups are
    not shared (Load.start)."""
    if workload.timing == "host":
        return host_timed(workload, test.per_item(variant), test.unit, settings)
    if workload.timing == "sweep":
        if not workload.sweep.taken:
            sweep(workload.sweep, settings.screening)
        if workload.sweep.problem:
            raise Failed(workload.sweep.problem)
        return workload.from_sweep(spec)
    axis = workload.axis(spec)
    if axis is None:
        v = measure_on(load, workload, test.per_item(variant), test.unit, settings, clock, started, test.bursts,
                       test.tensor)
    else:
        v = over_axis(workload, axis, test.per_item(variant), test.unit, settings, clock, load, started, test.bursts,
                      test.tensor)
    workload.observed(v, spec)
    return v


def over_axis(workload, axis, per_item: float, unit: str, settings: Settings, clock, load: Load,
              started: float | None, burst: bool = False, tensor: bool = False) -> VariantResult:
    """Each point of `axis` in order (a screening run: its first axis.screen), the workload
    moved there (at), measured as any test, each point after the first continuing the first's
    load (its own warm-up not repeated); or with axis.samples, calibrated, warmed up for
    min(warmup_s, budget_s) and timed that many times. The value: the best point's result, or
    one over the points' medians (axis.value)."""
    points = axis.points[:axis.screen] if settings.screening and axis.screen else axis.points
    measured, t0 = {}, time.perf_counter()
    for point in points:
        workload.at(point)
        if axis.samples:
            v = fixed_samples(workload, axis.samples, per_item, unit, settings, clock)
        else:
            own = settings if not measured else replace(settings, own_warmup_s=0.0)
            v = measure_on(load, workload, per_item, unit, own, clock, started, burst, tensor)
            started = started or load.of(workload, tensor).since
        measured[point] = v
    if axis.value == "best":
        value = max(measured.values(), key=lambda v: -v.summary.median if unit in PER else v.summary.median)
        first = measured[points[0]]
        if "warm_up" in first.evidence:      # how the load the points continued began
            value.evidence.setdefault("warm_up", first.evidence["warm_up"])
        value.params[axis.name] = next(p for p, v in measured.items() if v is value)
    else:
        medians = [v.summary.median for v in measured.values()]
        read = [v.clock_mhz for v in measured.values() if v.clock_mhz]
        value = VariantResult(workload.name, max(v.size for v in measured.values()),
                              summarize(medians), median(read) if read else None, dict(workload.params),
                              dict(workload.evidence), medians,
                              [t for v in measured.values() for t in v.timing], (t0, time.perf_counter()),
                              launches=[group for v in measured.values() for group in v.launches])
    workload.over_points(measured, value)
    return value


def fixed_samples(workload, count: int, per_item: float, unit: str, settings: Settings, clock) -> VariantResult:
    """Calibrated as measure() calibrates, warmed up for min(warmup_s, budget_s), then `count`
    timed launches."""
    size, seconds = calibrate(workload.run, launch_settings(workload, settings))
    warm_until = time.perf_counter() + min(settings.warmup_s, settings.budget_s)
    launches = warm_launches(workload.run, size, seconds, own_launches(count), lambda: time.perf_counter() < warm_until)
    rates, timing, t0 = [], [], time.perf_counter()
    for _ in range(count):
        wall = time.perf_counter()
        seconds = workload.run(size)
        timing.append((seconds, time.perf_counter() - wall))
        launches.append(seconds)
        rates.append(rate(workload.items(size), seconds, per_item, unit))
    mhz = clock()
    return VariantResult(workload.name, size, summarize(rates), mhz or None, {}, {}, rates,
                         timing, (t0, time.perf_counter()), launches=[launches])


def host_timed(workload, per_item: float, unit: str, settings: Settings) -> VariantResult:
    """20 host-timed launches untimed (the first are slower), then settings.host_samples off the
    CPUs that took the GPU interrupts those 20 raised (host_cpus); where one was avoided,
    ON_INTERRUPT_CPU launches timed on the busiest go in the evidence. No clock: an empty launch
    leaves the GPU idle."""
    on_interrupt_cpu, before = None, host_cpus.gpu_counts()
    workload.host_times(20)
    placement = host_cpus.placement(before)
    with host_cpus.kept_off(placement):
        if placement and placement.avoided:
            with host_cpus.pinned({placement.avoided[0]}):
                there = workload.host_times(ON_INTERRUPT_CPU)
            on_interrupt_cpu = round_significant(median([rate(1, t, per_item, unit) for t in there]), 4)
        times = workload.host_times(settings.host_samples)
    if len(times) != settings.host_samples:
        raise Failed(f"the runtime timed {len(times)} of {settings.host_samples} launches")
    values = [rate(1, t, per_item, unit) for t in times]
    evidence = dict(workload.evidence)
    if placement:
        evidence["host_cpus"] = placement.evidence(on_interrupt_cpu)
    return VariantResult(workload.name, 0, summarize(values), None, dict(workload.params), evidence, values)


def series_of(workload, settings: Settings) -> dict | None:
    """The test's series (workload.series()), measured where no test measured it yet; none in a
    screening run."""
    s = workload.series()
    if s is None or settings.screening:
        return None
    if not s.taken:
        sweep(s)
    return s.series()


def launch_length(run: Callable[[int], float], sample_s: float, max_size: int, per: float | None = None) -> int:
    """The size of a launch of at least `sample_s`, its last launch (untimed) at that size:
    calibrated, or from `per` (GPU seconds an item took at the point before) the smallest power
    of two that reaches it, corrected once by what that launch took."""
    if per is None:
        return calibrate(run, Settings(sample_s=sample_s, max_size=max_size))[0]

    def doubling(per_size: float) -> int:
        size = 1
        while size * per_size < sample_s and size < max_size:
            size = min(max_size, 2 * size)
        return size
    size = doubling(per)
    seconds = run(size)
    if seconds <= 0:
        raise RuntimeError(f"the GPU timer read {seconds} s for a launch of size {size}")
    corrected = doubling(seconds / size)
    if corrected != size:
        run(corrected)
    return corrected


def sweep(s: Sweep, screening: bool = False) -> Sweep:
    """Measure a Sweep: each stage's points in order, each moved to (at), its launch length found
    (launch_length; with s.predict from the point before, across stages), s.timed launches timed,
    their median's rate handed to s.after with the timing (GPU and host seconds per launch)."""
    stages = s.stages(screening)
    per = None
    try:
        for stage in stages:
            for point in stage.points:
                s.at(point)
                size = launch_length(s.run, stage.sample_s, s.max_size, per if s.predict else None)
                timing = []
                for _ in range(s.timed):
                    wall = time.perf_counter()
                    timing.append((s.run(size), time.perf_counter() - wall))
                seconds = median([g for g, _ in timing])
                per = seconds / size
                value = rate(s.items(size), seconds, s.per_item, s.unit)
                s.after(point, size, value if s.digits is None else round(value, s.digits), timing)
    except Exception as e:      # a sweep several tests share is not taken again: each says why
        s.problem = s.problem or f"the sweep stopped: {type(e).__name__}: {e}"
        raise
    finally:
        s.taken = True
        try:
            stages.close()
        finally:
            s.finish()
    return s

"""Per-SM maps, written once: the vector-ALU rate and the L2 load latency of every compute unit
(an NVIDIA SM, an AMD CU) of one GPU, each unit identified through the API, so a weak part
inside a GPU shows up as one slow unit among its siblings.

Every workgroup notes the unit it ran on and that unit's cycle counter before and after its timed
work (shaders/sm.cu, sm.comp: six words a workgroup). sm.fp32 fills every unit with as many
workgroups as it holds at once: a unit's rate is its workgroups' FMAs over the cycles from the
first one's start to the last one's end, at the measured clock. sm.l2_latency runs one chase of
dependent loads per workgroup, CHASE_GROUPS_PER_UNIT workgroups a unit, through a working set
that fits in any L2 and not in an L1, with loads that skip the L1: a unit's latency is its
workgroups' cycles a load. The value is the slowest unit's, of each sample; the map (the last
sample's) is the series, with each unit's workgroups and counts.

The runner times the launches as any test's (the timer guard holds), and observed() turns each
sample into the slowest unit's value. The counters are checked against the GPU timer (guard
`cycles`): no unit's span can exceed the launch, and the units' work over their spans must add up
to at least the whole launch's rate.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peakbench.backend import release, release_on_failure
from peakbench.harness import guards
from peakbench.harness.stats import median, round_significant, summarize
from peakbench.workload import Workload

BLOCK = 256                  # the rate kernel's workgroup
CHASE_BLOCK = 32             # the chase's: one subgroup, of which one invocation chases
CHASE_GROUPS_PER_UNIT = 2    # so each unit gets one where the scheduler spreads workgroups evenly
STEPS = 64                   # dependent loads a loop iteration
LINE_BYTES = 128             # from one chase node to the next: a new cache line each load
CHAIN_BYTES = 4 << 20        # past any L1 (256 KiB on Hopper), inside any L2 here (CPU: its caches)
REC_WORDS = 6                # per workgroup: unit, 0, start cycles (low, high), end cycles (low, high)
VERIFY_COUNTS = (1, 2)       # loop iterations of the two checks
SEED = 0x5EED
ONE = int(np.float32(1.0).view(np.uint32))      # b = c = 1.0, as the kernels take them (their bits)
# A unit's span over the launch's GPU time, at most (the counters and the timer run on different
# clocks; the span starts after the workgroup does): more is a counter that cannot be this unit's.
SPAN_OVER_LAUNCH = 1.02


@dataclass(frozen=True)
class SmKernel:
    """One API's kernel: its source and entry point, and how it names a unit (for the params)."""
    source: str
    entry: str
    unit_id: str
    clock: str


def chain(nodes: int, line_words: int, seed: int = SEED) -> np.ndarray:
    """A random single cycle over `nodes` nodes `line_words` words apart: word node * line_words
    holds the next node's word index, every other word 0."""
    order = np.random.default_rng(seed).permutation(nodes).astype(np.uint32)
    words = np.zeros(nodes * line_words, np.uint32)
    words[order * line_words] = np.roll(order, -1) * line_words
    return words


def walk(words: np.ndarray, start: int, loads: int) -> int:
    """The word index a chase from `start` reaches after `loads` loads."""
    i = start
    for _ in range(loads):
        i = int(words[i])
    return i


def start_of(group: int, nodes: int, line_words: int) -> int:
    return (group * 7919) % nodes * line_words


def fma_sums(threads: int, acc: int, steps: int) -> np.ndarray:
    """sm.fp32's sink: accumulator k of thread t starts at t % 1024 + k and gains 1 a step."""
    start = (np.arange(threads) % 1024)[:, None] + np.arange(acc)[None, :]
    return (start + steps).astype(np.float32).sum(axis=1, dtype=np.float32)


@dataclass(frozen=True)
class Unit:
    unit: int
    groups: int
    cycles: int          # first start to last end (the rate), or the mean per workgroup (the chase)


def units_of(rec: np.ndarray, chase: bool) -> list[Unit]:
    """Each unit's workgroups and cycles from the records: the rate's span from its workgroups'
    first start to their last end, or the chase's cycles a workgroup (their mean)."""
    r = rec.reshape(-1, REC_WORDS).astype(np.uint64)
    unit = r[:, 0].astype(np.int64)
    t0 = r[:, 2] | (r[:, 3] << np.uint64(32))
    t1 = r[:, 4] | (r[:, 5] << np.uint64(32))
    out = []
    for u in np.unique(unit):
        mine = unit == u
        if chase:
            cycles = int(np.mean((t1[mine] - t0[mine]).astype(np.float64)))
        else:
            cycles = int(t1[mine].max() - t0[mine].min())
        out.append(Unit(int(u), int(mine.sum()), cycles))
    return out


class SmWorkload(Workload):
    """sm.fp32 or sm.l2_latency (test.dtype "fp32" or "l2_latency") through one API's SmKernel.
    An item: one FMA of one invocation (per_item 2 ops), or one load of one chase."""

    @release_on_failure
    def __init__(self, test, variant, rt, kernel: SmKernel):
        self.test, self.variant, self.rt, self.name = test, variant, rt, variant.name
        self.chase = test.dtype == "l2_latency"
        self.units = rt.limits.units or 1
        self.unroll, self.acc = variant.unroll, test.accumulators
        if self.chase:
            self.block, self.groups = CHASE_BLOCK, self.units * CHASE_GROUPS_PER_UNIT
            self.line_words = LINE_BYTES // 4
            self.nodes = CHAIN_BYTES // LINE_BYTES
            defines = {"CHASE": 1, "STEPS": STEPS, "LINE_WORDS": self.line_words}
            args = "bbbuu"
        else:
            per_unit = max(1, (rt.limits.threads_per_unit or BLOCK) // BLOCK)
            self.block, self.groups = BLOCK, self.units * per_unit
            defines = {"CHASE": 0, "UNROLL": self.unroll, "ACC": self.acc}
            args = "bbuuu"
        self.kernel = rt.compile(kernel.source, defines, kernel.entry, block=self.block, args=args, label=test.name)
        self.sink = rt.alloc(max(self.groups * self.block, self.groups) * 4)
        self.rec = rt.alloc(self.groups * REC_WORDS * 4)
        self.next = None
        if self.chase:
            self.words = chain(self.nodes, self.line_words)
            self.next = rt.alloc(self.words.nbytes)
            rt.upload(self.next, self.words)
        self.readings: list[tuple[list[Unit], float, int]] = []     # each launch's units, GPU time, size
        self.params = {"workgroup_size": self.block, "workgroups": self.groups, "units": self.units,
                       "unit_id": kernel.unit_id, "clock": kernel.clock,
                       "layout": (f"{CHASE_GROUPS_PER_UNIT} chases a unit, one invocation each, {STEPS} loads an"
                                  f" iteration through a {CHAIN_BYTES >> 20} MiB cycle, {LINE_BYTES} B from node to"
                                  f" node, loads that skip the L1") if self.chase else
                                 (f"{self.groups // self.units} workgroups a unit (all resident), {self.acc}"
                                  f" accumulators, {self.unroll} FMAs each an iteration")}
        self.evidence = rt.evidence(self.kernel)

    def _args(self, iterations: int) -> list:
        if self.chase:
            return [self.sink, self.rec, self.next, np.uint32(iterations), np.uint32(self.nodes)]
        return [self.sink, self.rec, np.uint32(ONE), np.uint32(ONE), np.uint32(iterations)]

    def _records(self) -> np.ndarray:
        return np.frombuffer(self.rt.download(self.rec, self.groups * REC_WORDS * 4), np.uint32)

    def run(self, size: int) -> float:
        seconds = self.rt.launch(self.kernel, self.groups, self._args(size))
        self.readings = self.readings[-63:] + [(units_of(self._records(), self.chase), seconds, size)]
        return seconds

    def items(self, size: int) -> int:
        if self.chase:
            return self.groups * size * STEPS
        return self.groups * self.block * size * self.unroll * self.acc

    def verify(self) -> str | None:
        """The sink after 1 and 2 iterations against the host's (fma_sums; walk), and a record
        from every workgroup (a unit id that is not all ones, an end after its start)."""
        def check(iterations: int) -> str | None:
            self.rt.fill(self.sink, 0xFF)
            self.rt.fill(self.rec, 0xFF)
            self.rt.launch(self.kernel, self.groups, self._args(iterations))
            if self.chase:
                got = np.frombuffer(self.rt.download(self.sink, self.groups * 4), np.uint32)
                want = np.array([walk(self.words, start_of(g, self.nodes, self.line_words), iterations * STEPS)
                                 for g in range(self.groups)], np.uint32)
            else:
                got = np.frombuffer(self.rt.download(self.sink, self.groups * self.block * 4), np.float32)
                want = fma_sums(self.groups * self.block, self.acc, iterations * self.unroll)
            bad = np.flatnonzero(got != want)
            if bad.size:
                what = "workgroups' chases" if self.chase else "invocations' sums"
                return f"{bad.size} of {want.size} {what} differ from the host's (the first at {int(bad[0])})"
            r = self._records().reshape(-1, REC_WORDS)
            lost = np.flatnonzero((r[:, 0] == 0xFFFFFFFF) | (r[:, 1] != 0))
            if lost.size:
                return f"{lost.size} of {self.groups} workgroups left no record (the first, {int(lost[0])})"
            return None
        return guards.at_counts(VERIFY_COUNTS, check, "iterations", self.evidence)

    def observed(self, v, spec=None) -> None:
        """Each sample becomes the slowest unit's value; the last sample's units the map."""
        readings = self.readings[-len(v.samples):]
        implied = max(self._implied_mhz(units, s) for units, s, _ in readings if s > 0)
        lagged = self._lagging_reading(implied, v.clock_mhz, spec)
        if lagged:
            v.clock_mhz = round(implied)
        mhz = v.clock_mhz or self._implied_mhz(*readings[-1][:2])
        values = [self._value(units, mhz, size) for units, _, size in readings]
        problem, text = self._against_timer(readings, mhz)
        text = f"{lagged}; {text}" if lagged else text
        v.evidence.setdefault("guards", {})["cycles"] = guards.verdict(problem, text)
        if problem:
            from peakbench.harness.runner import Failed
            raise Failed(guards.reason("cycles", problem))
        v.samples, v.summary = values, summarize(values)
        last, _, size = readings[-1]
        per = [self._unit_value(u, mhz, size) for u in last]
        worst = (max if self.chase else min)(range(len(last)), key=lambda i: per[i])
        mid = median(per)
        v.params.update({"units_seen": len(last), "slowest_unit": last[worst].unit,
                         "slowest_of_median": round(per[worst] / mid, 4) if mid else None,
                         "median_unit": round_significant(mid, 5),
                         "clock_from": "implied by the counters and the GPU timer" if lagged or not v.clock_mhz
                         else "measured",
                         **({"units_missing": self.units - len(last)} if len(last) < self.units else {})})
        y = "ns" if self.chase else "tflops"
        v.evidence["series"] = {"x": "unit", "y": y, "unit": [u.unit for u in last],
                                y: [round_significant(x, 5) for x in per], "workgroups": [u.groups for u in last],
                                "cycles": [u.cycles for u in last]}

    def _unit_value(self, u: Unit, mhz: float, size: int) -> float:
        if self.chase:
            return u.cycles / (size * STEPS) / mhz * 1e3                   # ns a load
        work = u.groups * self.block * size * self.unroll * self.acc * 2  # FLOPs
        return work / u.cycles * mhz * 1e6 / 1e12                       # TFLOPS

    def _value(self, units: list[Unit], mhz: float, size: int) -> float:
        per = [self._unit_value(u, mhz, size) for u in units]
        return max(per) if self.chase else min(per)

    def _implied_mhz(self, units: list[Unit], seconds: float) -> float:
        """The clock the longest unit's span and the launch's GPU time imply (no clock reading)."""
        longest = max(u.cycles for u in units)
        return longest / seconds / 1e6 if seconds > 0 else 1.0

    def _lagging_reading(self, implied: float, mhz: float | None, spec) -> str | None:
        """Why the clock read is not taken, where it lags the clock the counters and the GPU timer
        imply (`implied`, past SPAN_OVER_LAUNCH over it) and that clock is possible: within
        guards.CLOCK_OVERSHOOT of the device's maximum. The management library's clock lags one
        that rose within the launches (the host reads each launch's records, so the GPU idles
        between them; an H100 read 870 MHz under the 1980 its counters ran at). Where no maximum
        is known, or the implied clock is past it by more, None: the cycles guard judges at the
        reading."""
        if not mhz or implied <= mhz * SPAN_OVER_LAUNCH:
            return None
        most, where = guards.max_clock_mhz(self.rt.info, spec)
        if most is None or implied > most * (1 + guards.CLOCK_OVERSHOOT):
            return None
        return (f"the clock read {mhz:.0f} MHz, under the {implied:.0f} MHz the longest unit's cycles over"
                f" its launch's GPU time imply, within {guards.CLOCK_OVERSHOOT:.0%} of the {most:.0f} MHz maximum"
                f" ({where}): taken at that")

    def _against_timer(self, readings, mhz: float) -> tuple[str | None, str]:
        """No unit's span longer than its launch (SPAN_OVER_LAUNCH), at the clock used."""
        worst = max(max(u.cycles for u in units) / (mhz * 1e6) / s for units, s, _ in readings if s > 0)
        text = (f"the longest unit's cycles at {mhz:.0f} MHz span {worst:.3f}x its launch's GPU time"
                f" ({len(readings)} launches)")
        if worst > SPAN_OVER_LAUNCH:
            return f"{text}: a cycle count no launch could hold", text
        return None, text

    def close(self) -> None:
        release(self, self.rt.free, "sink", "rec", "next")
        release(self, self.rt.discard, "kernel")


def workload(test, variant, rt, kernel: SmKernel) -> SmWorkload:
    return SmWorkload(test, variant, rt, kernel)

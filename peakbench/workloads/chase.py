"""The pointer chase, written once: a random single cycle walked by one thread, swept over working
sets; the plateaus of its latency curve are the cache levels (harness/levels.py names them).

The kernel (shaders/mem_chase.comp, shaders/mem.cu `chase`) follows `rounds` * ROUND dependent
loads from word `start` of the chain and stores the word index it ended at, then, where the
runtime's kernels can read the core's cycle counter, the counter before and after its loop.
Built with POINTER=1 it is a true pointer chase: each node's first 8 bytes hold the address of
the next node, so a load's value is the next load's address (load to use, no address arithmetic
between). The addresses come from the device (the kernel table's `link` kernel rewrites the index
chain in place: CUDA and HIP) or from the host (the runtime's `address(buf)`: Vulkan's buffer
device address; the kernel then takes that address as two more 32-bit scalars, low word first).
Built with POINTER=0 it is an index chase: each load's value is the next node's word index.

The sweep's working sets are 2^(1/4) apart (STEPS_PER_OCTAVE), 4 KiB to 512 MiB: 69 points where
factor-2 steps gave 18, so each level is a plateau of several points and a level between two
others (a far L2 partition) is not stepped over. One chain buffer, sized for the largest working
set, serves every point (and its one device address, where the host writes the addresses; a
screening sweep that goes on reserves one more, for the rest). The cost per point: an untimed
walk (warm_loads), one untimed launch at the length the last point's round time predicts (it
confirms the length, or one more launch at the corrected length follows; the first point
calibrates) and three timed launches, each of SWEEP_SAMPLE_S (a screening sweep: SCREEN_SAMPLE_S).
At ~335 ns a load past the L2, a walk of 1M loads takes about 0.35 s, so about 3.5 s of the full
sweep's 6.4-6.5 s (CUDA) are the walks of its 10 points past 100 MiB.

A screening sweep stops at screening_max only where the levels it found there are complete (DRAM,
and the far L2 partition where the L2 is partitioned); otherwise it goes on as the full sweep
would to its end. With a partitioned 60 MiB L2 a sweep stopped at 181 MiB merged the far L2 plateau
(~265 ns at 38-54 MiB) with DRAM's (~290-334 ns from 64 MiB) in 2 of 3 runs, so it found no DRAM
level (PERFORMANCE_ANALYSIS.md, "The latency sweep in a screening run").
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from peakbench.backend import Unsupported
from peakbench.harness import guards
from peakbench.harness.levels import documented_caches, name_levels, plateaus
from peakbench.harness.runner import VariantResult
from peakbench.harness.stats import median, summarize
from peakbench.workload import Stage, Sweep, Workload

LINE = 128                       # chase stride in bytes: at least one cache line on every GPU here
ROUND = 256                      # chase loads per round: the kernels' inner loop (the ROUND define)
SWEEP_SAMPLE_S = 0.004           # GPU time per launch at a working-set point of the sweeps
SCREEN_SAMPLE_S = 0.002          # the same in a screening sweep: 4 launches of 2 ms a point
FIRST_BYTES = 4096
CHASE_MAX = 512 << 20
SCREEN_MIN, SCREEN_CACHE_TIMES, SCREEN_UNKNOWN = 128 << 20, 4, 256 << 20    # see screening_max
STEPS_PER_OCTAVE = 4             # working sets 2^(1/4) apart
SEED = 12345                     # the chains' random generator
LINK_BLOCK = 256                 # threads per workgroup of the link kernel (one node each)
# The chase walks its cycle untimed before it is timed (warm_loads), the whole cycle up to at least
# this many loads, so up to 128 MiB every timed load revisits a line one working set ago rather
# than touching it first, and past that the walk has pushed out of the last cache the lines the
# upload and the link kernel left there, ahead of the chase. With a 60 MiB L2, walks of 1M loads
# read 333.6-336.6 ns at every working set from 128 to 512 MiB; walks of 16 loads a 64 KiB page
# (32K-128K loads) read 298 ns at 128 MiB, rising to 332 ns at 512 MiB
# (PERFORMANCE_ANALYSIS.md, "Where the time goes").
WARM_LOADS = 1 << 20
# Where that bound stops the walk short of the whole cycle (past 128 MiB where the last cache is
# 64 MiB or less), the timed loads touch lines the walk never reached, and the walk's only work is
# to push the lines the upload and the link kernel left out of the last cache. A screening sweep
# does that there with a read of FLUSH_READ times the last cache of other data through the caches
# (stream.CacheFlush): microseconds, where 1M dependent loads take 0.35 s. The last cache here is
# the larger of the spec's and the API's (they can differ: 50 MiB in a GPU's spec, 60 MiB to CUDA).
FLUSH_READ = 4
# On NVIDIA, from FLUSH_FROM times that last cache a screening sweep flushes too where the walk
# does cover the cycle: there the walked steady state is DRAM's already, so reading the chain from
# a cold cache reads the same. With a 50 MiB L2 (60 to CUDA), the walked points read 313-318 ns at
# 64 MiB (the ramp) and 336-345 ns at 76 MiB and up (the plateau), through Vulkan and CUDA alike
# (PERFORMANCE_ANALYSIS.md, "The latency sweep in a screening run"). Elsewhere (a CPU's caches,
# AMD's Infinity Cache) how many lines a walk keeps past its cache has not been measured.
FLUSH_FROM = 1.5
# Level names in messages.
LABELS = {"l2_far": "far L2 partition", "dram": "DRAM"}


@dataclass(frozen=True)
class ChaseKernel:
    """One API's chase: its source and entry point, the word of its output where the cycle
    counters start (two 64-bit values, low word first), the most rounds one launch may run
    (llvmpipe ends loops past ~65535 iterations), the load path it takes, in words, whether it
    follows addresses (`pointer`, the POINTER define) and, for a pointer chase whose addresses
    the device writes, the entry point of the kernel that writes them (`link`)."""
    source: str
    entry: str
    clock_word: int
    path: str
    max_rounds: int = 1 << 24
    pointer: bool = False
    link: str | None = None


def working_sets(max_bytes: int, first: int = FIRST_BYTES) -> list[int]:
    """`first` up to `max_bytes`, STEPS_PER_OCTAVE points an octave, each a whole number of nodes."""
    sizes, k = [], 0
    while (ws := round(first * 2 ** (k / STEPS_PER_OCTAVE) / LINE) * LINE) <= max_bytes:
        sizes.append(ws)
        k += 1
    return sizes


def chase_chain(ws: int, rng, out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A uniformly random single cycle (Sattolo-equivalent) over the LINE-spaced nodes of `ws`
    bytes: the node order, and the uint32 `next` array (word indices) the kernels follow. `out`:
    a uint32 array to write it into (its first ws / 4 words; only the nodes' words are written,
    the rest must be zero), reused across chains of a sweep so no point allocates its own."""
    nodes, stride = ws // LINE, LINE // 4
    order = rng.permutation(nodes).astype(np.uint32)
    successor = np.empty(nodes, dtype=np.uint32)      # by node: a scatter over nodes, not the chain
    successor[order] = np.roll(order, -1)
    nxt = np.zeros(ws // 4, dtype=np.uint32) if out is None else out[:ws // 4]
    np.multiply(successor, stride, out=nxt[::stride])
    return order, nxt


def pointer_chain(nxt: np.ndarray, base: int, out: np.ndarray | None = None) -> np.ndarray:
    """The index chain as addresses in a buffer at `base`: each node's first two words hold the
    next node's address (base + 4 x its word index), low word first, as the link kernel writes.
    `out`: a uint32 array to write it into, as chase_chain's."""
    out = np.zeros_like(nxt) if out is None else out[:len(nxt)]
    address = nxt[::LINE // 4].astype(np.uint64)
    address *= np.uint64(4)
    address += np.uint64(base)
    out.view("<u8")[::LINE // 8] = address           # little-endian: the low word first
    return out


class Chaser:
    """The chase kernel on one thread of a runtime, one chain at a time."""

    def __init__(self, rt, kernel: ChaseKernel):
        self.rt, self.spec = rt, kernel
        self.clocked = rt.kernel_clock
        self.max_rounds = kernel.max_rounds
        self.addressed = kernel.pointer and not kernel.link      # the host writes the addresses
        defines = {"CLOCK": int(self.clocked), "ROUND": ROUND, "POINTER": int(kernel.pointer)}
        self.kernel = rt.compile(kernel.source, defines, kernel.entry, block=1,
                                 args="bbuuuu" if self.addressed else "bbuu", label="chase")
        self.linker = None
        if kernel.pointer and kernel.link:
            self.linker = rt.compile(kernel.source, defines, kernel.link, block=LINK_BLOCK, args="buu",
                                     label="chase_link")
        self.evidence = {**rt.evidence(self.kernel), "chase": "pointer" if kernel.pointer else "index"}
        self.out = rt.alloc(32)
        self.buf, self.base, self.capacity, self.pointers = None, 0, 0, None

    def reserve(self, nbytes: int) -> None:
        """One chain buffer of `nbytes` for every chain up to that size (a sweep's largest), with,
        for a host-written pointer chase, its address and a host array for the addresses."""
        if self.buf is not None:
            self.rt.free(self.buf)
        self.buf, self.capacity = self.rt.alloc(nbytes), nbytes
        if self.addressed:
            self.base = self.rt.address(self.buf)
            self.pointers = np.zeros(nbytes // 4, dtype=np.uint32)

    def load(self, nxt: np.ndarray) -> None:
        """Upload a chain (as addresses, for a pointer chase) over the last, into the reserved
        buffer (a larger chain reserves its own)."""
        if nxt.nbytes > self.capacity:
            self.reserve(nxt.nbytes)
        if self.addressed:
            self.rt.upload(self.buf, pointer_chain(nxt, self.base, self.pointers))
            return
        self.rt.upload(self.buf, nxt)
        if self.linker:
            nodes, stride = len(nxt) // (LINE // 4), LINE // 4
            self.rt.launch(self.linker, -(-nodes // LINK_BLOCK), [self.buf, np.uint32(nodes), np.uint32(stride)])

    def launch(self, rounds: int, start: int) -> float:
        args = [self.buf, self.out, np.uint32(rounds), np.uint32(start)]
        if self.addressed:
            args += [np.uint32(self.base & 0xFFFFFFFF), np.uint32(self.base >> 32)]
        return self.rt.launch(self.kernel, 1, args)

    def readout(self) -> tuple[int, int | None]:
        """(final word index, cycles of the loop or None)."""
        at = self.spec.clock_word
        w = [int(x) for x in np.frombuffer(self.rt.download(self.out, 4 * (at + 4)), np.uint32)]
        if not self.clocked:
            return w[0], None
        t0, t1 = w[at] | w[at + 1] << 32, w[at + 2] | w[at + 3] << 32
        return w[0], t1 - t0

    def release(self) -> None:
        if self.buf is not None:
            self.rt.free(self.buf)
        self.rt.free(self.out)
        self.rt.discard(self.kernel)
        if self.linker:
            self.rt.discard(self.linker)


@dataclass(frozen=True)
class Screen:
    """A screening sweep: where it stops if its levels are complete there, its launches' GPU time,
    and the smallest working set it flushes the caches at where the walk covers the cycle (None:
    it flushes only where the walk does not: walked_in_full)."""
    max_bytes: int
    sample_s: float = SCREEN_SAMPLE_S
    flush_from: int | None = None

    def flushes(self, ws: int, last: int | None) -> bool:
        return not walked_in_full(ws, last) or (self.flush_from is not None and ws >= self.flush_from)


class ChaseSweep(Sweep):
    """One pointer chase per working set (working_sets), 4 KiB up to `max_bytes`; shared by every
    latency.* test of a device and measured once by the runner (runner.sweep), in ns a load. Each
    launch goes on from where the last one stopped, so a working set larger than one launch's
    loads is still walked in full rather than its first nodes again (which would stay cached).
    `last_cache`: the device's last cache in bytes (last_cache), which bounds the untimed walks
    (warm_loads); None: unknown. `caches`: the documented cache sizes the levels are named by
    (levels.name_levels). `screen`: the sweep a screening run takes, which stops at
    screen.max_bytes where its levels are complete there (complete) and otherwise goes on to
    `max_bytes`, those points measured as the full sweep's (sample_s); evidence["sweep"] says which."""
    x, unit, digits, predict = "working_set_bytes", "ns", None, True

    def __init__(self, chaser, max_bytes: int, first_level: int, sample_s: float = SWEEP_SAMPLE_S,
                 partitioned_l2: bool = False, last_cache: int | None = None, caches: dict | None = None,
                 screen: Screen | None = None, flush=None):
        """`flush()`: makes a cache flush (stream.CacheFlush: `nbytes`, called it reads them,
        close()) that a screening sweep reads in place of the untimed walk where Screen.flushes
        says; made as the screening points begin, closed after them."""
        super().__init__(working_sets(max_bytes), sample_s)
        self.chaser, self.first_level, self.partitioned_l2 = chaser, first_level, partitioned_l2
        self.last_cache, self.caches, self.screen, self.make_flush = last_cache, caches, screen, flush
        self.max_size = chaser.max_rounds
        self.flush, self.flushed = None, []
        self.evidence = dict(getattr(chaser, "evidence", {}))     # the chase kernel's instructions
        self.sizes, self.latencies, self.cycles, self.mhz = [], [], [], []
        self.implied = []                # per point, the cycles a load its latency implies at the counted launch
        self.timing = []                 # per point, (GPU seconds, host wall seconds) of its timed launches
        self.rng = np.random.default_rng(SEED)
        self._chain = None               # the points of the stage being measured, and the next chain

    def stages(self, screening: bool = False):
        screen = self.screen if screening else None
        screened = [ws for ws in self.points if screen is None or ws <= screen.max_bytes]
        rest = list(self.points[len(screened):])
        if screen and self.make_flush:
            self.flush = self.make_flush()
        self.flushed = [ws for ws in screened if self.flush and screen.flushes(ws, self.last_cache)]
        if self.flushed:
            self.evidence["flush"] = (f"{_kib(self.flushed[0])}-{_kib(self.flushed[-1])}: a read of"
                                      f" {_kib(self.flush.nbytes)} of other data through the caches in place of"
                                      f" the untimed walk")
        with self._chains(screened):
            yield Stage(tuple(screened), screen.sample_s if screen else self.sample_s)
        self._close_flush()             # any points past the screen are walked, as the full sweep's
        if screen and rest and screened:
            if self.complete():
                self.evidence["sweep"] = f"screening sweep to {_kib(screened[-1])}, where its levels were complete"
            else:
                self.evidence["sweep"] = (f"screening sweep extended to {_kib(rest[-1])}: its levels were "
                                          f"incomplete at {_kib(screened[-1])}")
                with self._chains(rest):
                    yield Stage(tuple(rest), self.sample_s)

    @contextmanager
    def _chains(self, sizes: list[int]):
        """One chain buffer for the largest of `sizes`. The host makes the next point's chain while
        the GPU walks this one's (once uploaded, the host array is free; chains of 128-512 MiB took
        0.04-0.25 s each on a 2-core host, as long as a walk), and has made it before the point's
        timed launches begin, so no thread competes with their launching."""
        if not sizes:
            yield
            return
        self.chaser.reserve(sizes[-1])
        host = np.zeros(sizes[-1] // 4, dtype=np.uint32)          # every chain's words
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="chase-chain") as maker:
            self._chain = (maker, host, sizes, maker.submit(chase_chain, sizes[0], self.rng, host))
            try:
                yield
            finally:
                self._chain = None

    def at(self, ws: int) -> None:
        """Working set `ws`: its chain loaded, then walked untimed, or the caches flushed where
        the screen says. A timed load that touches a line for the first time would read DRAM
        whatever the working set (unwalked, DRAM latency showed from 16 MiB, inside a 60 MiB
        L2), and one of a line the upload left in the last cache would read it fast (warm_loads)."""
        maker, host, sizes, made = self._chain
        self.order, self.position = made.result()[0], 0
        self.chaser.load(made.result()[1])
        i = sizes.index(ws)
        if i + 1 < len(sizes):
            made = maker.submit(chase_chain, sizes[i + 1], self.rng, host)
            self._chain = (maker, host, sizes, made)
        flush = ws in self.flushed
        warm = 0 if flush else warm_loads(ws, self.last_cache)
        if flush:
            self.flush()
        while warm > 0:
            rounds = min(self.chaser.max_rounds, -(-warm // ROUND))
            self.run(rounds)
            warm -= rounds * ROUND
        made.result()

    def run(self, rounds: int) -> float:
        seconds = self.chaser.launch(rounds, int(self.order[self.position]) * (LINE // 4))
        self.position = (self.position + rounds * ROUND) % len(self.order)
        return seconds

    def items(self, rounds: int) -> int:
        return rounds * ROUND

    def after(self, ws: int, rounds: int, ns: float, timing: list) -> None:
        """The point's latency, its launches (for the timer guard), where the chase ended against
        where its chain says, and the cycles a load from the core's own counter."""
        self.sizes.append(ws)
        self.latencies.append(ns)
        self.timing.append(timing)
        last = timing[-1][0]
        end, cycles = self.chaser.readout()
        want = int(self.order[self.position]) * (LINE // 4)
        if end != want and self.problem is None:
            self.problem = f"working set {ws} B: the chase ended at {end}, not at {want}"
        if cycles is not None and "counter" not in self.evidence:
            mhz = round(cycles / last / 1e6)
            if cycles > 0 and mhz > 0:
                self.cycles.append(round(cycles / (rounds * ROUND), 1))
                self.mhz.append(mhz)
                # ns is the median launch's: scaled to the launch the counter read (x last /
                # typical) and times its clock (cycles / last), the cycles a load the host's
                # count implies, free of the spread between launches (30% on a loaded CPU device)
                typical = median([g for g, _ in timing])
                self.implied.append(round(ns * cycles / typical / 1e9, 2))
            else:                        # a counter that stood still or went back: no cycles at all
                self.cycles, self.mhz, self.implied = [], [], []
                self.evidence["counter"] = (f"working set {ws} B: the core's counter moved {cycles} in "
                                            f"{last * 1e6:.0f} us; no cycles reported")

    def finish(self) -> None:
        try:
            self.chaser.release()
        finally:
            self._close_flush()

    def _close_flush(self) -> None:
        flush, self.flush = self.flush, None
        if flush is not None:
            flush.close()

    def found(self):
        """The plateaus; where the L2 is partitioned, one of 3 points counts (the far partition's
        plateau spans about an octave on Hopper), elsewhere 6 (1.25 octaves: a CPU driver's
        noisy sweep shows shorter flat stretches on its ramps)."""
        return plateaus(self.sizes, self.latencies, min_points=3 if self.partitioned_l2 else 6)

    def levels(self, spec=None) -> dict:
        return name_levels(self.found(), self.first_level, documented_caches(spec), self.partitioned_l2)

    def complete(self) -> bool:
        """Whether the levels found so far, named by the sweep's caches, reach DRAM and, where the
        L2 is partitioned, its far partition (a sweep stopped too soon merges the two)."""
        names = name_levels(self.found(), self.first_level, self.caches, self.partitioned_l2)
        return "dram" in names and ("l2_far" in names or not self.partitioned_l2)

    def series(self) -> dict:
        out = {"x": "working_set_bytes", "y": "ns", "working_set_bytes": self.sizes,
               "ns": [round(t, 2) for t in self.latencies]}
        if self.cycles:
            out["cycles"], out["clock_mhz"] = self.cycles, self.mhz
        return out


def first_level(info) -> int:
    """Without documented sizes, where level names start: AMD's RDNA GPUs have an L0 vector
    cache, CDNA (Instinct) GPUs and everyone else start at L1."""
    amd, name = info.vendor_id == 0x1002, info.name.lower()
    return 0 if amd and not any(k in name for k in ("instinct", " mi")) else 1


def partitioned_l2(info) -> bool:
    """NVIDIA GPUs have no L3: a level between their L2 and DRAM is a far L2 partition."""
    return info.vendor_id == 0x10DE


def screening_max(info, l2_bytes: int, caches: dict | None = None) -> int:
    """Where a screening sweep stops: SCREEN_CACHE_TIMES the last cache (at least SCREEN_MIN),
    which leaves DRAM's plateau several points. The last cache is the spec's largest where it
    documents them, else on NVIDIA (whose last cache is its L2) the L2 the API reports, or where
    it reports none (Vulkan) SCREEN_UNKNOWN; else (AMD's Infinity Cache is not in the L2 size)
    the full range."""
    last = last_cache(info, l2_bytes, caches)
    if last:
        return min(CHASE_MAX, max(SCREEN_MIN, SCREEN_CACHE_TIMES * last))
    return SCREEN_UNKNOWN if partitioned_l2(info) else CHASE_MAX


def last_cache(info, l2_bytes: int, caches: dict | None) -> int | None:
    """The size of the device's last cache level, where known: the spec's, or NVIDIA's L2."""
    if caches:
        return max(caches.get("l3", 0), caches.get("l2", 0)) or None
    return l2_bytes if partitioned_l2(info) and l2_bytes else None


def warm_loads(ws: int, last: int | None) -> int:
    """The untimed walk's loads at working set `ws` given the last cache's size (None: unknown):
    the whole cycle, up to the larger of WARM_LOADS and twice the last cache's lines (WARM_LOADS
    where it is unknown). Twice: a margin over a documented size (a GPU's L2 can be 50 MiB in its
    spec and 60 MiB to CUDA) and over a replacement that keeps some old lines longer than LRU would."""
    bound = WARM_LOADS if last is None else max(WARM_LOADS, 2 * last // LINE)
    return min(ws // LINE, bound)


def walked_in_full(ws: int, last: int | None) -> bool:
    """Whether the untimed walk at working set `ws` covers its whole cycle (warm_loads)."""
    return warm_loads(ws, last) == ws // LINE


def sweep(rt, kernel: ChaseKernel, max_bytes: int, sample_s: float | None = None,
          caches: dict | None = None, flush=None) -> ChaseSweep:
    """The latency sweep of a device, 4 KiB up to CHASE_MAX (or `max_bytes`, the stream buffer),
    for the runner to measure (runner.sweep). A screening run's stops at screening_max where its
    levels are complete there, with launches of SCREEN_SAMPLE_S; `sample_s`, where given, is
    every launch's. `caches`: the spec's documented sizes (levels.documented_caches).
    `flush(nbytes)`: makes a cache flush of that size (stream.CacheFlush), which a screening
    sweep that knows its last cache reads in place of the untimed walk where that walk would not
    cover the cycle, and on NVIDIA from FLUSH_FROM times the last cache (FLUSH_READ)."""
    top = min(CHASE_MAX, max_bytes)
    last = last_cache(rt.info, rt.limits.l2_bytes, caches)
    largest = max(last or 0, rt.limits.l2_bytes if last else 0)
    screen = Screen(min(top, screening_max(rt.info, rt.limits.l2_bytes, caches)), sample_s or SCREEN_SAMPLE_S,
                    int(FLUSH_FROM * largest) if largest and partitioned_l2(rt.info) else None)
    nbytes = FLUSH_READ * largest
    # where a point of the screen flushes, and the flush fits as the chains do
    flusher = None
    if flush and nbytes and screen.flushes(screen.max_bytes, last) and nbytes <= top:
        flusher = lambda: flush(nbytes)    # noqa: E731
    return ChaseSweep(Chaser(rt, kernel), top, first_level(rt.info), sample_s or SWEEP_SAMPLE_S,
                      partitioned_l2(rt.info), last, caches, screen, flusher)


class LatencyWorkload(Workload):
    """One level of the shared chase sweep, reported in ns (and cycles where the clock is known):
    read off the sweep the runner measures once per device (from_sweep)."""
    timing = "sweep"

    def __init__(self, test, variant, sweep: ChaseSweep, path: str):
        self.test, self.sweep, self.name = test, sweep, variant.name
        self.params = {"stride_bytes": LINE, "path": path}
        self.evidence = {}

    def from_sweep(self, spec=None) -> VariantResult:
        found = self.sweep.found()
        levels = self.sweep.levels(spec)
        described = ", ".join(f"{p.latency_ns:.0f} ns at {_kib(p.first_bytes)}-{_kib(p.last_bytes)}" for p in found)
        level = levels.get(self.test.dtype)
        if level is None:
            label = LABELS.get(self.test.dtype, self.test.dtype.upper())
            raise Unsupported(f"[hardware] the latency sweep found no {label} level (plateaus: {described})")
        on = [level.first_bytes <= s <= level.last_bytes for s in self.sweep.sizes]
        points = [t for t, inside in zip(self.sweep.latencies, on) if inside]
        params = {**self.params, "working_sets_bytes": [level.first_bytes, level.last_bytes]}
        mhz = None
        if self.sweep.cycles:    # the kernel's own cycle counter: cycles need no outside clock
            params["cycles"] = median([c for c, inside in zip(self.sweep.cycles, on) if inside])
            params["cycles_implied"] = median([c for c, inside in zip(self.sweep.implied, on) if inside])
            mhz = median([m for m, inside in zip(self.sweep.mhz, on) if inside])
        evidence = {**self.sweep.evidence, "plateaus": described, "path": self.params["path"],
                    "levels_named_from": "spec cache sizes" if documented_caches(spec) else "plateau order"}
        # the sweep failed where a chase ended off its chain: each point's loads were all done
        guards.passed(evidence, "iterations", f"the chase ended on the node the host predicts after every"
                                              f" point's launches ({len(self.sweep.sizes)} working sets)")
        dram = levels.get("dram")
        beyond = [p for p in found if dram and p.first_bytes > dram.last_bytes]
        if beyond:   # past DRAM's own plateau the chase also misses the address translation caches
            evidence["page_or_tlb_effects"] = ", ".join(f"{p.latency_ns:.0f} ns from {p.first_bytes >> 20} MiB" for p in beyond)
        # The clock is the counter's cycles over the launch's GPU time, not NVML, which reads the
        # GPU idling between chase launches (600-810 MHz while the counter read the boost clock:
        # PERFORMANCE_ANALYSIS.md, "The SM clock falls to idle within seconds").
        timing = [launch for launches, inside in zip(self.sweep.timing, on) if inside for launch in launches]
        return VariantResult(self.name, 0, summarize(points), mhz, params, evidence, points, timing)

    def series(self) -> ChaseSweep:
        return self.sweep


def _kib(n: int) -> str:
    return f"{n / (1 << 20):.3g} MiB" if n >= 1 << 20 else f"{n / 1024:.3g} KiB"

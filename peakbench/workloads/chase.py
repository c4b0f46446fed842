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
others (a far L2 partition) is not stepped over. Its cost per point: a walk of the whole cycle
(up to WARM_LOADS loads), the calibration and four launches of SWEEP_SAMPLE_S each. On lavapipe
(to 64 MiB) that measured 3-9 s; on the H200 it is estimated at 10-15 s, most of it the walks past
64 MiB (13 points x 1M loads x ~0.35 us).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peakbench.backend import Unsupported
from peakbench.harness.levels import documented_caches, name_levels, plateaus
from peakbench.harness.runner import Settings, VariantResult, calibrate, rate
from peakbench.harness.stats import median, summarize

LINE = 128                       # chase stride in bytes: at least one cache line on every GPU here
ROUND = 256                      # chase loads per round: the kernels' inner loop (the ROUND define)
SWEEP_SAMPLE_S = 0.004           # GPU time per working-set point of the sweeps
FIRST_BYTES = 4096
CHASE_MAX = 512 << 20
SCREEN_MIN, SCREEN_CACHE_TIMES, SCREEN_UNKNOWN = 128 << 20, 4, 256 << 20    # see screening_max
STEPS_PER_OCTAVE = 4             # working sets 2^(1/4) apart
SEED = 12345                     # the chains' random generator
LINK_BLOCK = 256                 # threads per workgroup of the link kernel (one node each)
# The chase walks the whole cycle once untimed (up to this many loads) before it is timed, so up
# to 128 MiB every timed load revisits a line one working set ago rather than touching it first;
# past that the walk still visits every page, so translation is warm.
WARM_LOADS = 1 << 20
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


def chase_chain(ws: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """A uniformly random single cycle (Sattolo-equivalent) over the LINE-spaced nodes of `ws`
    bytes: the node order, and the uint32 `next` array (word indices) the kernels follow."""
    nodes, stride = ws // LINE, LINE // 4
    order = rng.permutation(nodes).astype(np.uint32)
    nxt = np.zeros(ws // 4, dtype=np.uint32)
    nxt[order * stride] = np.roll(order, -1) * stride
    return order, nxt


def pointer_chain(nxt: np.ndarray, base: int) -> np.ndarray:
    """The index chain as addresses in a buffer at `base`: each node's first two words hold the
    next node's address (base + 4 x its word index), low word first, as the link kernel writes."""
    out = np.zeros_like(nxt)
    at = np.arange(0, len(nxt), LINE // 4)
    address = np.uint64(base) + nxt[at].astype(np.uint64) * np.uint64(4)
    out[at] = (address & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    out[at + 1] = (address >> np.uint64(32)).astype(np.uint32)
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
        self.buf, self.base = None, 0

    def load(self, nxt: np.ndarray) -> None:
        """Upload a chain (as addresses, for a pointer chase), replacing the last."""
        if self.buf is not None:
            self.rt.free(self.buf)
        self.buf = self.rt.alloc(nxt.nbytes)
        if self.addressed:
            self.base = self.rt.address(self.buf)
            self.rt.upload(self.buf, pointer_chain(nxt, self.base).tobytes())
            return
        self.rt.upload(self.buf, nxt.tobytes())
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


class ChaseSweep:
    """One pointer chase per working set (working_sets), 4 KiB up to `max_bytes`; shared by every
    latency.* test of a device. Each launch goes on from where the last one stopped, so a working
    set larger than one launch's loads is still walked in full rather than its first nodes again
    (which would stay cached)."""

    def __init__(self, chaser, max_bytes: int, first_level: int, sample_s: float = SWEEP_SAMPLE_S,
                 partitioned_l2: bool = False):
        self.chaser, self.first_level, self.partitioned_l2 = chaser, first_level, partitioned_l2
        self.evidence = dict(getattr(chaser, "evidence", {}))     # the chase kernel's instructions
        self.sizes, self.latencies, self.cycles, self.mhz, self.problem = [], [], [], [], None
        rng = np.random.default_rng(SEED)
        try:
            for ws in working_sets(max_bytes):
                self.sizes.append(ws)
                self.latencies.append(self._measure(ws, rng, sample_s))
        finally:
            chaser.release()

    def _measure(self, ws: int, rng, sample_s: float) -> float:
        order, nxt = chase_chain(ws, rng)
        nodes, stride = len(order), LINE // 4
        self.chaser.load(nxt)
        position = 0

        def run(rounds: int) -> float:
            nonlocal position
            seconds = self.chaser.launch(rounds, int(order[position]) * stride)
            position = (position + rounds * ROUND) % nodes
            return seconds

        # Walk the cycle once untimed: a timed load that touches a line for the first time
        # would read DRAM whatever the working set (the H200 showed DRAM latency from 16 MiB).
        warm = min(nodes, WARM_LOADS)
        while warm > 0:
            rounds = min(self.chaser.max_rounds, -(-warm // ROUND))
            run(rounds)
            warm -= rounds * ROUND
        rounds, _ = calibrate(run, Settings(sample_s=sample_s, max_size=self.chaser.max_rounds))
        run(rounds)                      # one untimed launch at the final length first
        times = [run(rounds) for _ in range(3)]
        end, cycles = self.chaser.readout()
        want = int(order[position]) * stride
        if end != want and self.problem is None:
            self.problem = f"working set {ws} B: the chase ended at {end}, not at {want}"
        if cycles is not None:           # cycles of the last launch, from the core's own counter
            self.cycles.append(round(cycles / (rounds * ROUND), 1))
            self.mhz.append(round(cycles / times[-1] / 1e6))
        return rate(rounds * ROUND, median(times), 1, "ns")

    def found(self):
        """The plateaus; where the L2 is partitioned, one of 3 points counts (the far partition's
        plateau spans about an octave on Hopper), elsewhere 6 (1.25 octaves: a CPU driver's
        noisy sweep shows shorter flat stretches on its ramps)."""
        return plateaus(self.sizes, self.latencies, min_points=3 if self.partitioned_l2 else 6)

    def levels(self, spec=None) -> dict:
        return name_levels(self.found(), self.first_level, documented_caches(spec), self.partitioned_l2)

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


def sweep(rt, kernel: ChaseKernel, max_bytes: int, sample_s: float = SWEEP_SAMPLE_S,
          screening: bool = False, caches: dict | None = None) -> ChaseSweep:
    """The latency sweep of a device, 4 KiB up to CHASE_MAX (or `max_bytes`, the stream buffer;
    a screening run: screening_max). `caches`: the spec's documented sizes (levels.documented_caches)."""
    top = min(CHASE_MAX, max_bytes)
    if screening:
        top = min(top, screening_max(rt.info, rt.limits.l2_bytes, caches))
    return ChaseSweep(Chaser(rt, kernel), top, first_level(rt.info), sample_s, partitioned_l2(rt.info))


class LatencyWorkload:
    """One level of the shared chase sweep, reported in ns (and cycles where the clock is known)."""

    def __init__(self, test, variant, sweep: ChaseSweep, path: str):
        self.test, self.sweep, self.name = test, sweep, variant.name
        self.params = {"stride_bytes": LINE, "path": path}
        self.evidence = {}

    def verify(self) -> str | None:
        return self.sweep.problem

    def measure(self, settings, clock, spec=None) -> VariantResult:
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
            mhz = median([m for m, inside in zip(self.sweep.mhz, on) if inside])
        evidence = {**self.sweep.evidence, "plateaus": described, "path": self.params["path"],
                    "levels_named_from": "spec cache sizes" if documented_caches(spec) else "plateau order"}
        dram = levels.get("dram")
        beyond = [p for p in found if dram and p.first_bytes > dram.last_bytes]
        if beyond:   # past DRAM's own plateau the chase also misses the address translation caches
            evidence["page_or_tlb_effects"] = ", ".join(f"{p.latency_ns:.0f} ns from {p.first_bytes >> 20} MiB" for p in beyond)
        # The clock is the counter's cycles over the launch's GPU time, not NVML, which reads the
        # GPU idling between chase launches (600-810 MHz on the H200).
        return VariantResult(self.name, 0, summarize(points), mhz, params, evidence, points)

    def series(self) -> dict:
        return self.sweep.series()

    def close(self) -> None:
        pass


def _kib(n: int) -> str:
    return f"{n / (1 << 20):.3g} MiB" if n >= 1 << 20 else f"{n / 1024:.3g} KiB"

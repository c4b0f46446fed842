"""The working-set sweeps every backend shares: the pointer-chase latency sweep whose plateaus are
the cache levels, the read-bandwidth sweep, and the data they run on. No GPU API here: a backend
hands in a `Chaser` (how to load a chain and launch the chase) or a launch function.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from peakbench.backend import Unsupported
from peakbench.harness.levels import documented_caches, name_levels, plateaus
from peakbench.harness.runner import VariantResult, calibrate
from peakbench.harness.stats import median, summarize

LINE = 128                       # chase stride in bytes: at least one cache line on every GPU here
ROUND = 256                      # chase loads per round (the kernels' inner loop)
SWEEP_SAMPLE_S = 0.004           # GPU time per working-set point of the sweeps
FIRST_BYTES = 4096


# Data -----------------------------------------------------------------------------------------
def hash32(x: np.ndarray) -> np.ndarray:
    """The fill kernels' lowbias32, on uint32 arrays."""
    x = x.astype(np.uint32)
    x ^= x >> 16
    x = (x * np.uint32(0x7FEB352D)).astype(np.uint32)
    x ^= x >> 15
    x = (x * np.uint32(0x846CA68B)).astype(np.uint32)
    x ^= x >> 16
    return x


def filled(n_vec: int) -> np.ndarray:
    """What the fill kernels write: 16-byte vector i holds hash(4i .. 4i+3)."""
    return hash32(np.arange(4 * n_vec, dtype=np.uint64).astype(np.uint32)).reshape(n_vec, 4)


def written(index: np.ndarray) -> np.ndarray:
    """What the write kernels store at vector j."""
    j = index.astype(np.uint32)
    return np.stack([j, j ^ np.uint32(0x5BD1E995), ~j, (j * np.uint32(2654435761)).astype(np.uint32)], axis=1)


# The stream kernels' contract (shaders/mem_stream.comp and shaders/mem.cu alike): MODE and
# LAYOUT defines per test and variant, the workgroup size, the buffer and chase sizes.
MODES = {"read": 0, "write": 1, "copy": 2, "fill": 3}
LAYOUTS = {"chunk": 0, "stride": 1, "rows": 2, "tile": 0}
STREAM_BLOCK = 256
STREAM_BYTES = 1 << 30           # past the largest GPU last-level cache (256 MiB) by 4x
CHASE_MAX = 512 << 20
# The read grid: two workgroups per compute unit. The read kernels need up to 128 registers a
# thread (94 on sm_90), so two of 256 threads fit on any NVIDIA SM or AMD CU: the whole grid is
# resident at once. A larger grid runs in waves, and each wave rereads a fraction of the buffer
# that can fit in the L2 (the H200's sweep showed 11.9-15.2 TB/s at 64-256 MiB that way).
READ_BLOCKS_PER_UNIT = 2
# The rows read's workgroup (where the device allows it), with ROWS_UNROLL rows
# (catalog/memory.py): short-lived workgroups read DRAM fastest when each reads much. H200 board
# c650911d, 16 passes a dispatch, GB/s for 256 x 16, 256 x 32, 1024 x 16 and 1024 x 32 threads x
# rows: Vulkan 4705 / 4713 / 4715 / 4720, CUDA 4690 / 4690 / 4700 / 4709 (experiments/probes/
# *_stream_paths.py; experiments/results/h200-probe-stream-paths-2026-11-30.txt, run 6).
ROWS_BLOCK = 1024
# The chase walks the whole cycle once untimed (up to this many loads) before it is timed, so up
# to 128 MiB every timed load revisits a line one working set ago rather than touching it first;
# past that the walk still visits every page, so translation is warm.
WARM_LOADS = 1 << 20


def read_sums(n: int, blocks: int, block: int, layout: str = "chunk", passes: int = 1, shift: int = 0,
              mask: int = 0xFFFFFFFF, rows: int = 1) -> np.ndarray:
    """What a read kernel stores, uint32. Chunk layout, (threads, 4): in pass p, thread x of
    block b sums the vectors ((b + p*shift)*span + x + j*block) & mask of its slice (span = n /
    blocks); stride layout, (threads, 4): thread t sums vectors t + j*threads, every pass. Rows
    layout, (columns, 4): the n vectors as `rows` rows of columns * block, each column's total."""
    if layout == "rows":
        src = filled(n).astype(np.uint64).reshape(rows, -1, block, 4)
        return (src.sum(axis=(0, 2)) % (1 << 32)).astype(np.uint32)
    if layout == "stride":
        src = filled(n).astype(np.uint64)
        return (passes * src.reshape(-1, blocks * block, 4).sum(axis=0) % (1 << 32)).astype(np.uint32)
    span, total = n // blocks, np.zeros((blocks, block, 4), np.uint64)
    src = filled(n if mask == 0xFFFFFFFF else mask + 1).astype(np.uint64)    # what the indices reach
    for p in range(passes):
        starts = (np.arange(blocks, dtype=np.uint64) + p * shift) * span % (1 << 32)
        index = (starts[:, None] + np.arange(span, dtype=np.uint64)) & mask
        total += src[index].reshape(blocks, -1, block, 4).sum(axis=1)
    return (total % (1 << 32)).astype(np.uint32).reshape(blocks * block, 4)


def pass_dispatches(passes: int, groups: int, max_groups: int) -> tuple[int, int]:
    """(passes per dispatch, dispatches) for `passes` passes of `groups` workgroups each (the rows
    read's columns, the write's and copy's tiles): as few dispatches as a grid of at most
    `max_groups` workgroups allows, each with the same whole number of passes, so the bytes
    counted stay exact."""
    if groups > max_groups:
        raise ValueError(f"{groups} workgroups a pass do not fit a grid of {max_groups}")
    per = min(passes, max_groups // groups)
    while passes % per:
        per -= 1
    return per, passes // per


def check_wrapped(mode: str, got: np.ndarray, n: int, block: int, unroll: int, layout: str) -> str | None:
    """The verification of a stream that hands out its work `w % groups` (the rows read's
    columns, the write's and copy's tiles): two passes over n vectors into an output filled
    with 0xFF bytes. The first pass's outputs must be the host's; the next as many must be
    untouched, or a workgroup of the second pass missed the wrap round (and would read and write
    past the buffer in a long dispatch)."""
    outputs = n // (block * unroll) if mode == "read" else n
    if got.size < 2 * outputs * 4:
        raise ValueError(f"the check needs two passes' outputs ({2 * outputs * 4} words), got {got.size}")
    read = {"rows": unroll} if mode == "read" else {}
    problem = check_stream(mode, got[:outputs * 4], n, outputs, block, layout, **read)
    stray = got[outputs * 4:2 * outputs * 4] != 0xFFFFFFFF
    if problem is None and stray.any():
        problem = f"{int(stray.sum())} words past the first pass's {outputs} outputs were written: the second pass did not wrap"
    return problem


def verify_stream(w, clear: Callable[[], None], download: Callable[[int], bytes]) -> str | None:
    """A stream workload's verification, for every backend: the first few vectors per thread,
    checked in full against the host. The chunk and stride reads run one pass; the others two,
    whose second must wrap round to the first's work (check_wrapped). `w` is the workload (its
    run, mode, layout and grid geometry); `clear` fills its output with 0xFF bytes and
    `download(nbytes)` reads the output back."""
    wraps = w.rows or w.mode != "read"
    n = w.step * (4 if w.rows else 2)
    clear()
    w.run(2 if wraps else 1, n)
    if wraps:
        outputs = n // w.tile if w.rows else n
        got = np.frombuffer(download(2 * outputs * 16), np.uint32)
        return check_wrapped(w.mode, got, n, w.block, w.unroll, w.layout)
    got = np.frombuffer(download(w.threads * 16), np.uint32)
    return check_stream("read", got, n, w.resident, STREAM_BLOCK, w.layout)


def check_stream(mode: str, got: np.ndarray, n: int, blocks: int, block: int, layout: str = "chunk",
                 **read) -> str | None:
    """A verification pass of `n` vectors against the host (`read`: read_sums's pass settings)."""
    if mode == "read":
        want = read_sums(n, blocks, block, layout, **read)
    else:
        want = filled(n) if mode == "copy" else written(np.arange(n))
    got = got.reshape(want.shape)
    bad = got != want
    if bad.any():
        i = tuple(int(x) for x in np.argwhere(bad)[0])
        return f"{int(bad.sum())} of {bad.size} words differ from the host reference (first at {i})"
    return None


def chase_chain(ws: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """A uniformly random single cycle (Sattolo-equivalent) over the LINE-spaced nodes of `ws`
    bytes: the node order, and the uint32 `next` array (word indices) the kernels follow."""
    nodes, stride = ws // LINE, LINE // 4
    order = rng.permutation(nodes).astype(np.uint32)
    nxt = np.zeros(ws // 4, dtype=np.uint32)
    nxt[order * stride] = np.roll(order, -1) * stride
    return order, nxt


@dataclass
class Budget:
    """The two settings calibrate() reads, for the sweeps' short points."""
    sample_s: float
    max_size: int = 1 << 24


# Bandwidth sweep ------------------------------------------------------------------------------
# A workgroup's own slice from which the sweep stops rotating slices: two workgroups per unit make
# a unit's share twice this, 2x the largest per-unit L1 (256 KiB on the H100/H200), so the L1
# cannot serve the reread, and with no other workgroup reading it no drift between workgroups
# can bring a line back early through the L2.
PRIVATE_SLICE = 256 << 10


def sweep_span(ws: int, blocks: int, tile: int) -> int:
    """Vectors per workgroup per pass at working set `ws`: the working set split among the
    workgroups (a power of two of whole tiles, so the slices tile it), at least one tile."""
    share = ws // 16 // blocks
    return max(tile, (1 << (share.bit_length() - 1)) // tile * tile if share else 0)


def sweep_shift(blocks: int) -> int:
    """Slices the chunk read moves by per pass in the sweep: the grid's width, so each pass reads
    the next window of the working set and a line comes back one working set of traffic later;
    made odd, so that around a power-of-two ring of slices every workgroup visits all of them
    (its own L1 never holds the next one) however few slices there are."""
    return blocks | 1


def sweep_point(ws: int, blocks: int, tile: int) -> tuple[int, int, int]:
    """(n_vec, mask, shift) of the chunk read at working set `ws`.

    Up to blocks * PRIVATE_SLICE, rotating slices: indices wrap at the working set and each pass
    moves the grid a whole window on (sweep_shift), so no workgroup rereads its own L1. Past it,
    private slices: each workgroup rereads its own ws / blocks (less the last part tile), as the
    stream does. Rotating slices there gave L2 hits the working set cannot explain: over a long
    launch the workgroups drift apart, and one then rereads lines another just pulled into the L2
    (H200, 128 MiB, twice the L2: 4.08, 4.52 and 5.26 TB/s after 8, 32 and 128 passes a launch,
    experiments/probes/cuda_memory.py; private slices 4.57)."""
    if ws // 16 // blocks >= PRIVATE_SLICE // 16:
        return blocks * (ws // 16 // blocks // tile * tile), 0xFFFFFFFF, 0
    return blocks * sweep_span(ws, blocks, tile), ws // 16 - 1, sweep_shift(blocks)


def bandwidth_sweep(run: Callable[[int, int, int, int], float], blocks: int, tile: int, max_bytes: int,
                    sample_s: float = SWEEP_SAMPLE_S) -> dict:
    """Read bandwidth over working sets of 4 KiB to `max_bytes`, on the chunk read kernel:
    `run(passes, n_vec, mask, shift)` has `blocks` workgroups read n_vec / blocks vectors each per
    pass, laid out by sweep_point, so the rate is that of the level the working set fits in.
    Below blocks * tile vectors (16.5 MiB on the H200) the slices overlap (several workgroups read
    each in a pass): those sizes are inside the caches."""
    sizes, rates = [], []
    ws = FIRST_BYTES
    while ws <= max_bytes:
        n, mask, shift = sweep_point(ws, blocks, tile)
        passes, _ = calibrate(lambda p: run(p, n, mask, shift), Budget(sample_s))
        seconds = median([run(passes, n, mask, shift) for _ in range(3)])
        sizes.append(ws)
        rates.append(round(passes * n * 16 / seconds / 1e9, 2))
        ws *= 2
    return {"x": "working_set_bytes", "y": "GB/s", "working_set_bytes": sizes, "GB/s": rates}


# Latency sweep --------------------------------------------------------------------------------
class Chaser(Protocol):
    """One backend's chase kernel: one lane, `rounds` * ROUND dependent loads from word `start`."""
    clocked: bool          # the kernel reads the core's cycle counter around its loop
    max_rounds: int        # per launch (llvmpipe ends loops past ~65535 iterations)

    def load(self, nxt: np.ndarray) -> None: ...          # upload a chain (replacing the last)
    def launch(self, rounds: int, start: int) -> float: ...  # GPU seconds
    def readout(self) -> tuple[int, int | None]: ...      # (final index, cycles of the loop or None)
    def release(self) -> None: ...


class ChaseSweep:
    """One pointer chase per working set, 4 KiB up to `max_bytes`; shared by every latency.* test
    of a device. Each launch goes on from where the last one stopped, so a working set larger than
    one launch's loads is still walked in full rather than its first nodes again (which would stay
    cached)."""

    def __init__(self, chaser: Chaser, max_bytes: int, first_level: int, sample_s: float = SWEEP_SAMPLE_S):
        self.chaser, self.first_level = chaser, first_level
        self.evidence = dict(getattr(chaser, "evidence", {}))     # the chase kernel's instructions
        self.sizes, self.latencies, self.cycles, self.mhz, self.problem = [], [], [], [], None
        rng = np.random.default_rng(12345)
        ws = FIRST_BYTES
        try:
            while ws <= max_bytes:
                self.sizes.append(ws)
                self.latencies.append(self._measure(ws, rng, sample_s))
                ws *= 2
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
        rounds, _ = calibrate(run, Budget(sample_s, self.chaser.max_rounds))
        run(rounds)                      # one untimed launch at the final length first
        times = [run(rounds) for _ in range(3)]
        end, cycles = self.chaser.readout()
        want = int(order[position]) * stride
        if end != want and self.problem is None:
            self.problem = f"working set {ws} B: the chase ended at {end}, not at {want}"
        if cycles is not None:           # cycles of the last launch, from the core's own counter
            self.cycles.append(round(cycles / (rounds * ROUND), 1))
            self.mhz.append(round(cycles / times[-1] / 1e6))
        return median(times) / (rounds * ROUND) * 1e9

    def levels(self, spec=None) -> dict:
        return name_levels(plateaus(self.sizes, self.latencies), self.first_level, documented_caches(spec))

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


class LatencyWorkload:
    """One level of the shared chase sweep, reported in ns (and cycles where the clock is known)."""

    def __init__(self, test, variant, sweep: ChaseSweep, path: str):
        self.test, self.sweep, self.name = test, sweep, variant.name
        self.params = {"stride_bytes": LINE, "path": path}
        self.evidence = {}

    def verify(self) -> str | None:
        return self.sweep.problem

    def measure(self, settings, clock, spec=None) -> VariantResult:
        found = plateaus(self.sweep.sizes, self.sweep.latencies)
        levels = name_levels(found, self.sweep.first_level, documented_caches(spec))
        described = ", ".join(f"{p.latency_ns:.0f} ns from {p.first_bytes // 1024} KiB" for p in found)
        level = levels.get(self.test.dtype)
        if level is None:
            raise Unsupported(f"[hardware] the latency sweep found no {self.test.dtype.upper()} level (plateaus: {described})")
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
        return VariantResult(self.name, 0, summarize(points), mhz, params, evidence)

    def series(self) -> dict:
        return self.sweep.series()

    def close(self) -> None:
        pass


def launch_overhead(name: str, times: Callable[[int], list[float]], settings, params: dict) -> VariantResult:
    """Submit-to-completion of an empty launch: 20 untimed (the first are slower), then the median
    of 200 (50 with --quick). No clock: an empty launch leaves the GPU idle."""
    times(20)
    samples = times(200 if settings.min_samples >= 10 else 50)
    return VariantResult(name, 0, summarize([t * 1e6 for t in samples]), None, dict(params), {})

"""The stream family, written once: memory.read / write / copy / update on one large buffer pair,
the read-bandwidth sweep over working sets, and the data contract of the stream kernels
(shaders/mem_stream.comp, shaders/mem.cu `stream`): what the fill writes, what a read stores,
what a pass of each writing mode stores, and the MODE and LAYOUT defines, all from here.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from peakbench.backend import release, release_on_failure
from peakbench.harness import guards
from peakbench.workload import Sweep, Workload
from peakbench.workloads.chase import FIRST_BYTES, SWEEP_SAMPLE_S
from peakbench.workloads.witness import Witness, slot_defines


# Data -----------------------------------------------------------------------------------------
def hash32(x: np.ndarray) -> np.ndarray:
    """The fill kernels' lowbias32, on uint32 arrays (a new array)."""
    return _hash32_in_place(np.array(x, dtype=np.uint32, order="C"))


HASH_CHUNK = 1 << 16        # words hashed at a time (256 KiB): each pass stays in the host's cache


def _hash32_in_place(x: np.ndarray) -> np.ndarray:
    """lowbias32 over x's uint32 words (C-contiguous) in place, a chunk at a time: the hash's
    eight passes over a whole 64 MiB array, each from memory, took 2.5-4.6x as long."""
    assert x.flags.c_contiguous, "hashed in place through a flat view"
    flat = x.reshape(-1)
    t = np.empty(min(HASH_CHUNK, flat.size), np.uint32)
    for at in range(0, flat.size, HASH_CHUNK):
        _hash32_chunk(flat[at:at + HASH_CHUNK], t)
    return x


def _hash32_chunk(x: np.ndarray, t: np.ndarray) -> None:
    t = t[:x.size]
    for shift, factor in ((16, 0x7FEB352D), (15, 0x846CA68B), (16, None)):
        np.right_shift(x, shift, out=t)
        x ^= t
        if factor:
            x *= np.uint32(factor)           # wraps mod 2**32, as the kernels' multiply does


def filled(n_vec: int, start: int = 0) -> np.ndarray:
    """What the fill kernels write: 16-byte vector i holds hash(4i .. 4i+3) (indices mod 2**32);
    vectors start .. start + n_vec - 1."""
    first, words = 4 * start, 4 * n_vec
    out = np.empty(words, np.uint32)
    base = np.arange(min(HASH_CHUNK, words), dtype=np.uint32)
    t = np.empty_like(base)
    for at in range(0, words, HASH_CHUNK):
        chunk = out[at:at + HASH_CHUNK]
        np.add(base[:chunk.size], np.uint32((first + at) % (1 << 32)), out=chunk)     # wraps as the kernels' index
        _hash32_chunk(chunk, t)
    return out.reshape(n_vec, 4)


def written(index: np.ndarray) -> np.ndarray:
    """What the write kernels store at vector j."""
    j = index.astype(np.uint32)
    return np.stack([j, j ^ np.uint32(0x5BD1E995), ~j, (j * np.uint32(2654435761)).astype(np.uint32)], axis=1)


def stored(mode: str, n: int, prior: int, passes: int = 1, start: int = 0) -> np.ndarray:
    """What vectors start .. start + n - 1 of the destination hold after `passes` passes of a
    writing mode over a destination of `prior` bytes."""
    out = np.full((n, 4), prior * 0x01010101, np.uint32)
    src, j = filled(n, start), np.arange(start, start + n)
    for _ in range(passes):
        out = STORES[mode](src, out, j)
    return out


def update_sums(src_sums: np.ndarray, count: int, prior: int, passes: int) -> np.ndarray:
    """What the chunk read sums (lane_sums) of a destination that started as `prior` bytes, after
    `passes` passes of an update over a source whose sums are `src_sums`, each sum over `count`
    vectors: an update adds the source to each vector, so the sums add too (mod 2**32)."""
    start = np.uint64(count * prior * 0x01010101 % (1 << 32))
    return ((src_sums.astype(np.uint64) * np.uint64(passes) + start) % (1 << 32)).astype(np.uint32)


# The stream kernels' contract (shaders/mem_stream.comp and shaders/mem.cu alike): MODE and
# LAYOUT defines per test and variant, the workgroup size, the buffer and chase sizes.
MODES = {"read": 0, "write": 1, "copy": 2, "fill": 3, "update": 4}
# What one pass of a writing mode stores at vectors j, from the source and what the destination
# held before it: the host's half of each MODE branch (a read's sums are read_sums's). uint32
# lanes wrap, as the kernels' adds do.
STORES = {
    "write": lambda src, old, j: written(j),
    "copy": lambda src, old, j: src,
    "update": lambda src, old, j: old + src,
}
LAYOUTS = {"chunk": 0, "stride": 1, "rows": 2, "tile": 0}
STREAM_BLOCK = 256
STREAM_BYTES = 1 << 30           # past the largest GPU last-level cache (256 MiB) by 4x
CPU_BYTES = 64 << 20             # a CPU driver (lavapipe): past a CI machine's caches, inside a few hundred MiB
# The read grid: two workgroups per compute unit. The read kernels need up to 128 registers a
# thread (94 on sm_90), so two of 256 threads fit on any NVIDIA SM or AMD CU: the whole grid is
# resident at once. A larger grid runs in waves, and each wave rereads a fraction of the buffer
# that can fit in the L2 (a sweep read 11.9-15.2 TB/s at 64-256 MiB that way, past a 60 MiB L2; with
# the resident grid it reads DRAM from 128 MiB:
# PERFORMANCE_ANALYSIS.md, "Cache levels, and the L2's two partitions (an inference)").
READ_BLOCKS_PER_UNIT = 2
# The rows read's workgroup (where the device allows it), with ROWS_UNROLL rows
# (catalog/memory.py): short-lived workgroups read DRAM fastest when each reads much. Of 256 and
# 1024 threads by 16 and 32 rows (16 passes a dispatch), 1024 x 32 read fastest through Vulkan and
# CUDA alike, 0.3-0.4% over 256 x 16
# (PERFORMANCE_ANALYSIS.md, "The DRAM read reaches 98% of the datasheet; the board sets the rest").
ROWS_BLOCK = 1024
VERIFY_PASSES = (1, 2)           # the chunk and stride reads' checks: a read doing half its passes fails
# The coverage check's source bytes: every word 0x01010101, an odd number, so sums of k and k'
# such words differ (mod 2**32) for any k != k' below 2**32: a sum says how many vectors were read.
COVER_BYTE = 0x01
COVER_WORD = 0x01010101
KEPT_SLICE_AFTER = 1 << 12       # vectors of each slice the measured guard compares after the timed launches
# The measured kernel's count of its workgroups, each workgroup's first act, in slots a line apart
# (workloads/witness.py): a write's 4 KiB tiles start about 10^9 times a second at HBM rates. At
# the start in 1024 slots the count cost the H100's reads 0.15-0.34% and the rest nothing; at the
# end in 64 it cost the H200's CUDA write 2.9% (PERFORMANCE_ANALYSIS.md, "The streams' count, at
# the start of the workgroup").
COUNT_SLOTS = 1024


def short_reads(got: np.ndarray, count: int, n_vec: int, passes: int, what: str = "threads") -> str | None:
    """A read kernel's sums (outputs, 4) of a source of COVER_WORD words, where each output was to
    count `count` vectors: None, or which read fewer (or more) and how many."""
    want = np.uint32(count * COVER_WORD % (1 << 32))
    bad = np.flatnonzero((got != want).any(axis=1))
    if not bad.size:
        return None
    first = int(bad[0])
    short = (int(got[first, 0]) * pow(COVER_WORD, -1, 1 << 32)) % (1 << 32)
    return (f"{bad.size} of {len(got)} {what} did not read their share of the {n_vec}-vector buffer"
            f" in {passes} pass{'es' if passes > 1 else ''} (the first, {first}, read {short} vectors, not {count})")


def read_sums(n: int, blocks: int, block: int, layout: str = "chunk", passes: int = 1, shift: int = 0,
              mask: int = 0xFFFFFFFF, rows: int = 1) -> np.ndarray:
    """What a read kernel stores, uint32. Chunk layout, (threads, 4): in pass p, thread x of
    block b sums the vectors ((b + p*shift)*span + x + j*block) & mask of its slice (span = n /
    blocks); stride layout, (threads, 4): thread t sums vectors t + j*threads, every pass. Rows
    layout, (columns, 4): the n vectors as `rows` rows of columns * block, each column's total."""
    # Sums are taken in uint32: the kernels' adds wrap mod 2**32, and so do numpy's.
    if layout == "rows":
        return filled(n).reshape(rows, -1, block, 4).sum(axis=(0, 2), dtype=np.uint32)
    if layout == "stride":
        return np.uint32(passes) * filled(n).reshape(-1, blocks * block, 4).sum(axis=0, dtype=np.uint32)
    span, total = n // blocks, np.zeros((blocks, block, 4), np.uint32)
    ring = n if mask == 0xFFFFFFFF else mask + 1                    # what the indices reach
    tiled = span and ring % span == 0 and span % block == 0
    src = None
    for p in range(passes):
        starts = ((np.arange(blocks, dtype=np.uint64) + p * shift) * span % (1 << 32)) & np.uint64(mask)
        if tiled and not (starts % span).any() and (starts + span <= ring).all():
            total += _slice_sums(ring, span, block)[starts // span]
            continue
        src = filled(ring) if src is None else src
        index = (starts[:, None] + np.arange(span, dtype=np.uint64)) & np.uint64(mask)
        total += src[index].reshape(blocks, -1, block, 4).sum(axis=1, dtype=np.uint32)
    return total.reshape(blocks * block, 4)


@functools.lru_cache(maxsize=4)
def _slice_sums(ring: int, span: int, block: int) -> np.ndarray:
    """Where a chunk read's slices tile a ring of `ring` filled vectors: each slice's per-thread
    sums, (ring / span, block, 4), so a pass of read_sums picks a slice's sums where it would
    gather and add its vectors (the L2 check's two counts took 0.8 s of the host that way, one
    fill and a reduction this way), and a second count reuses them."""
    sums = filled(ring).reshape(ring // span, -1, block, 4).sum(axis=1, dtype=np.uint32)
    sums.flags.writeable = False
    return sums


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
    with 0xFF bytes. The next outputs past the first pass's must be untouched, or a workgroup of
    the second pass missed the wrap round (and would read and write past the buffer in a long
    dispatch); the first pass's outputs must be the host's after both passes."""
    outputs = n // (block * unroll) if mode == "read" else n
    if got.size < 2 * outputs * 4:
        raise ValueError(f"the check needs two passes' outputs ({2 * outputs * 4} words), got {got.size}")
    read = {"rows": unroll} if mode == "read" else {"passes": 2}     # the second pass redoes the first's vectors
    stray = got[outputs * 4:2 * outputs * 4] != 0xFFFFFFFF
    if stray.any():     # named first: where a pass adds to what was there, the first outputs are off too
        return f"{int(stray.sum())} words past the first pass's {outputs} outputs were written: the second pass did not wrap"
    return check_stream(mode, got[:outputs * 4], n, outputs, block, layout, **read)


def check_stream(mode: str, got: np.ndarray, n: int, blocks: int, block: int, layout: str = "chunk",
                 **read) -> str | None:
    """A verification of `n` vectors against the host (`read`: read_sums's pass settings; a
    writing mode's `passes` over a destination of 0xFF bytes)."""
    if mode == "read":
        want = read_sums(n, blocks, block, layout, **read)
    else:
        want = stored(mode, n, 0xFF, read.get("passes", 1))
    got = got.reshape(want.shape)
    bad = got != want
    if bad.any():
        i = tuple(int(x) for x in np.argwhere(bad)[0])
        return f"{int(bad.sum())} of {bad.size} words differ from the host reference (first at {i})"
    return None


# Bandwidth sweep ------------------------------------------------------------------------------
# A workgroup's own slice from which the sweep stops rotating slices: two workgroups per unit make
# a unit's share twice this, 2x the largest per-unit L1 (256 KiB on Hopper), so the L1
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
    (at twice the L2: 4.08, 4.52 and 5.26 TB/s after 8, 32 and 128 passes a launch, against 4.57
    with private slices; the sweep as run: PERFORMANCE_ANALYSIS.md, "How the numbers are taken")."""
    if ws // 16 // blocks >= PRIVATE_SLICE // 16:
        return blocks * (ws // 16 // blocks // tile * tile), 0xFFFFFFFF, 0
    return blocks * sweep_span(ws, blocks, tile), ws // 16 - 1, sweep_shift(blocks)


class BandwidthSweep(Sweep):
    """Read bandwidth over working sets of 4 KiB to `max_bytes`, on the chunk read kernel:
    `run(passes, n_vec, mask, shift)` has `blocks` workgroups read n_vec / blocks vectors each per
    pass, laid out by sweep_point, so the rate is that of the level the working set fits in.
    Below blocks * tile vectors (16.5 MiB on 132 SMs) the slices overlap (several workgroups read
    each in a pass): those sizes are inside the caches. `per_item`: the bytes of one vector read."""
    x, unit = "working_set_bytes", "GB/s"

    def __init__(self, run: Callable[[int, int, int, int], float], blocks: int, tile: int, max_bytes: int,
                 sample_s: float = SWEEP_SAMPLE_S, per_item: int = 16):
        sizes, ws = [], FIRST_BYTES
        while ws <= max_bytes:
            sizes.append(ws)
            ws *= 2
        super().__init__(sizes, sample_s)
        self.read, self.blocks, self.tile, self.per_item = run, blocks, tile, per_item
        self.point = (0, 0xFFFFFFFF, 0)

    def at(self, ws: int) -> None:
        self.point = sweep_point(ws, self.blocks, self.tile)

    def run(self, passes: int) -> float:
        return self.read(passes, *self.point)

    def items(self, passes: int) -> int:
        return passes * self.point[0]


@dataclass(frozen=True)
class StreamKernel:
    """One API's stream kernel: its source and entry point."""
    source: str
    entry: str


def measured_defines(test, variant) -> dict[str, int]:
    """The measured stream kernel's defines: its mode, unroll and layout, and its count's slots
    (the fill and the checks' reads are built without the count)."""
    return {"MODE": MODES[test.dtype], "UNROLL": variant.unroll, "LAYOUT": LAYOUTS[variant.name],
            **slot_defines(COUNT_SLOTS)}


def working_bytes(rt) -> int:
    """The stream buffer: past every cache level, never more than a quarter of the memory budget
    nor than one buffer may cover (a 4 GiB Vulkan binding failed silently on NVIDIA)."""
    limit = rt.limits.max_buffer
    if rt.info.kind == "cpu":
        return min(CPU_BYTES, limit)
    return int(min(STREAM_BYTES, rt.memory_budget() // 4, limit))


def resident_groups(rt) -> int:
    """The read grid: READ_BLOCKS_PER_UNIT workgroups per compute unit, all resident at once
    (a CPU driver, or a GPU that does not say its units: one workgroup per STREAM_BLOCK threads
    of one wave)."""
    if rt.info.kind != "cpu" and rt.limits.units:
        return rt.limits.units * READ_BLOCKS_PER_UNIT
    return max(1, rt.grid_threads(1) // STREAM_BLOCK)


def fill_kernel(rt, kernel: StreamKernel, unroll: int):
    """The fill: vector i of its second buffer becomes hash(4i .. 4i+3), over one_pass."""
    return rt.compile(kernel.source, {"MODE": MODES["fill"], "UNROLL": unroll}, kernel.entry,
                      block=STREAM_BLOCK, args="bbuuuu", label="fill")


def chunk_reader(rt, kernel: StreamKernel, unroll: int, label: str):
    """The chunk read on a resident grid: each thread sums its contiguous share of the first
    buffer into its vector of the second."""
    return rt.compile(kernel.source, {"MODE": MODES["read"], "UNROLL": unroll, "LAYOUT": LAYOUTS["chunk"]},
                      kernel.entry, block=STREAM_BLOCK, args="bbuuuu", label=label)


def _scalars(passes: int, n_vec: int, mask: int, shift: int) -> list:
    return [np.uint32(passes), np.uint32(n_vec), np.uint32(mask), np.uint32(shift)]


def one_pass(n_vec: int) -> list:
    """A stream kernel's scalars for one pass over n_vec vectors, every word kept (mask, shift)."""
    return _scalars(1, n_vec, 0xFFFFFFFF, 0)


class CacheFlush:
    """A read of `nbytes` of its own data (hash-filled, nothing compressible) through the caches,
    one pass of the chunk read: what an upload or an earlier kernel left in them is gone after
    it. The chase's screening sweep reads one in place of a long untimed walk (workloads/chase.py)."""

    @release_on_failure
    def __init__(self, rt, kernel: StreamKernel, nbytes: int, unroll: int = 8):
        self.rt, self.groups = rt, resident_groups(rt)
        step = self.groups * STREAM_BLOCK * unroll
        self.n_vec = max(step, nbytes // 16 // step * step)          # whole steps, at most what was asked
        self.reader = chunk_reader(rt, kernel, unroll, "flush")
        self.src = rt.alloc(self.n_vec * 16)
        self.dst = rt.alloc(self.groups * STREAM_BLOCK * 16)
        filler = fill_kernel(rt, kernel, unroll)
        try:
            rt.launch(filler, self.groups, [self.dst, self.src, *one_pass(self.n_vec)])
        finally:
            rt.discard(filler)

    @property
    def nbytes(self) -> int:
        return self.n_vec * 16

    def __call__(self) -> float:
        return self.rt.launch(self.reader, self.groups, [self.src, self.dst, *one_pass(self.n_vec)])

    def close(self) -> None:
        release(self, self.rt.free, "src", "dst")
        release(self, self.rt.discard, "reader")


LAYOUT_TEXT = {
    "chunk": "a resident grid, a contiguous chunk per {group}, passes in the {program}",
    "stride": "a resident grid striding through the buffer, passes in the {program}",
    "rows": "the buffer as unroll rows, a {group} per column of each, passes * columns per {launch}",
    "tile": "a {group} per tile of workgroup_size * unroll vectors, passes * tiles per {launch}",
    "tile, a pass a launch": "a {group} per tile of workgroup_size * unroll vectors, one pass per {launch}",
}


class StreamWorkload(Workload):
    """memory.read / write / copy / update on one large buffer pair, filled with random-looking data.

    The chunk and stride reads are a grid resident all at once (READ_BLOCKS_PER_UNIT workgroups
    per compute unit) looping over the buffer `size` times inside the kernel: a line is reread
    only after the rest of the buffer went by, so the L2 cannot serve it. The rows read
    launches `size` * columns short-lived workgroups, taken in order; write and copy `size` *
    tiles, one tile each (mem_stream.comp says why). An item is one vector of one pass."""

    @release_on_failure
    def __init__(self, test, variant, rt, kernel: StreamKernel):
        self.test, self.variant, self.rt, self.name = test, variant, rt, variant.name
        self.mode = test.dtype
        self.layout, self.unroll = variant.name, variant.unroll
        self.rows = self.mode == "read" and self.layout == "rows"
        self.block = min(ROWS_BLOCK, rt.limits.max_block) if self.rows else STREAM_BLOCK
        self.tile = self.block * self.unroll
        self.resident = resident_groups(rt)
        self.threads = self.resident * STREAM_BLOCK
        self.step = self.tile if self.rows else self.threads * self.unroll
        most = rt.max_groups(self.block) * self.tile                      # one workgroup per tile (or column)
        # At least 4 steps: verify() runs two passes over two (the rows read: four) and checks past them.
        self.n_vec = max(4 * self.step, min(working_bytes(rt) // 16, most) // self.step * self.step)
        self.kernel = rt.compile(kernel.source, measured_defines(test, variant), kernel.entry, block=self.block,
                                 args="bbbuuuu", label=test.name)
        self.src = rt.alloc(self.n_vec * 16)
        out_vec = max(8, self.n_vec // self.tile) if self.rows else self.threads if self.mode == "read" else self.n_vec
        self.dst = rt.alloc(out_vec * 16)
        self.stream_kernel = kernel
        self.filler = fill_kernel(rt, kernel, self.unroll)
        # a writing test's coverage guard sums its destination with the chunk read (lane_sums)
        self.reader = chunk_reader(rt, kernel, self.unroll, "coverage") if test.writes else None
        # made after the compiles: compile-ahead plans them, and its plan ends at the first clear
        self.witness = Witness(rt, COUNT_SLOTS)
        self.fill_source()
        w = rt.words
        self.params = {"buffer_bytes": self.n_vec * 16, "workgroup_size": self.block,
                       "workgroups": self.resident if self.mode == "read" and not self.rows else self.n_vec // self.tile,
                       "access_bytes": test.access_bytes, "unroll": self.unroll,
                       "layout": LAYOUT_TEXT[self.layout if test.overwrites else f"{self.layout}, a pass a launch"]
                       .format(**vars(w)),
                       "bytes_counted": test.bytes_counted}
        self.evidence = rt.evidence(self.kernel)
        # what the work guard holds the bytes counted against: the kernel's own loads and stores
        self.census, self.loop_items = rt.census(self.kernel, "memory"), self.unroll

    def fill_source(self) -> None:
        """The source buffer as the host expects it: vector i holds hash(4i .. 4i+3)."""
        self.rt.launch(self.filler, self.resident, [self.dst, self.src, *one_pass(self.n_vec)])

    passes_kept = 0     # passes over the whole destination since it last held known contents

    def run(self, size: int, n_vec: int | None = None, mask: int = 0xFFFFFFFF, shift: int = 0) -> float:
        n = n_vec or self.n_vec
        self.passes_kept += size
        if self.mode == "read" and not self.rows:
            return self.witness.launch(self.kernel, self.resident, [self.src, self.dst], _scalars(size, n, mask, shift))
        per, repeat = pass_dispatches(size, n // self.tile, self.rt.max_groups(self.block))
        if not self.test.overwrites:    # a dispatch's passes run at once: two adds to one vector would race
            per, repeat = 1, size
        return self.witness.launch(self.kernel, per * (n // self.tile), [self.src, self.dst],
                                   _scalars(1, n, mask, shift), repeat=repeat)

    def items(self, size: int) -> int:
        return size * self.n_vec

    def verify(self) -> str | None:
        """The first few vectors per thread checked word by word (check_first), then the whole
        buffer counted (coverage)."""
        return self.check_first() or self.coverage()

    def check_first(self) -> str | None:
        """The first few vectors per thread, checked in full against the host. The chunk and
        stride reads are checked after each of VERIFY_PASSES; the others run two passes, whose
        second must wrap round to the first's work (check_wrapped)."""
        wraps = self.rows or self.mode != "read"
        n = self.step * (4 if self.rows else 2)
        self.rt.fill(self.dst, 0xFF)
        self.run(2 if wraps else VERIFY_PASSES[0], n)
        if wraps:
            outputs = n // self.tile if self.rows else n
            got = np.frombuffer(self.rt.download(self.dst, 2 * outputs * 16), np.uint32)
            problem = check_wrapped(self.mode, got, n, self.block, self.unroll, self.layout)
            if problem is None:
                guards.passed(self.evidence, "iterations", "2 passes checked, the second wrapping"
                              if self.test.overwrites else "2 passes checked, a launch each")
            return problem

        def check(passes: int) -> str | None:
            if passes != VERIFY_PASSES[0]:
                self.rt.fill(self.dst, 0xFF)
                self.run(passes, n)
            got = np.frombuffer(self.rt.download(self.dst, self.threads * 16), np.uint32)
            return check_stream("read", got, n, self.resident, STREAM_BLOCK, self.layout, passes=passes)
        # a loop doing fewer passes than it is given fails the second count
        return guards.at_counts(VERIFY_PASSES, check, "passes", self.evidence)

    def coverage(self) -> str | None:
        """The coverage guard, on the whole buffer as the measurement runs it (check_first has
        checked more than one pass). A read sums a source of COVER_WORD words over one pass:
        each output must be the number of vectors its thread (the rows read: its column) is
        counted for, times COVER_WORD. A write or copy runs one pass twice, into a destination
        first all 0x00 then all 0xFF bytes, and the stream kernel's chunk read sums it each time
        (lane_sums): a vector left unwritten keeps the prior bytes, so its thread's sums differ.
        An update is checked as kept_problem checks it."""
        if not self.test.writes:
            problem = self._count_reads(1)
            text = f"one pass over all {self.n_vec} vectors counted"
        elif self.test.overwrites:
            problem = self._compare_writes()
            text = f"all {self.n_vec} vectors found written in one pass"
        else:
            problem = self._check_kept()
            text = (f"all {self.n_vec} vectors as the host's after one pass over known contents (the first"
                    f" {min(KEPT_SLICE_AFTER, self.n_vec)} word by word, every vector in its thread's sums)")
        if problem:
            return guards.reason("coverage", problem)
        guards.passed(self.evidence, "coverage", text)
        return None

    def _count_reads(self, passes: int) -> str | None:
        rt = self.rt
        rt.fill(self.src, COVER_BYTE)
        try:
            rt.fill(self.dst, 0xFF)
            self.run(passes)
            if self.rows:       # a column: `unroll` rows of a workgroup's vectors, whatever the passes
                outputs, count = self.n_vec // self.tile, self.unroll * self.block
            else:
                outputs, count = self.threads, passes * self.n_vec // self.threads
            got = np.frombuffer(rt.download(self.dst, outputs * 16), np.uint32).reshape(outputs, 4)
        finally:
            self.fill_source()
        return short_reads(got, count, self.n_vec, passes, "columns" if self.rows else "threads")

    def lane_sums(self, buf) -> np.ndarray:
        """The chunk read's sums of `buf` over one pass, (threads, 4) uint32: thread x of
        workgroup b sums its share of workgroup b's slice (read_sums's chunk layout), so a vector
        counts in one thread's sums and a difference names the slice it lies in."""
        sums = self.rt.alloc(self.threads * 16)
        try:
            self.rt.launch(self.reader, self.resident, [buf, sums, *one_pass(self.n_vec)])
            return np.frombuffer(self.rt.download(sums, self.threads * 16), np.uint32).reshape(-1, 4)
        finally:
            self.rt.free(sums)

    def _slice_of(self, thread: int) -> str:
        span = self.n_vec // self.resident
        first = thread // STREAM_BLOCK * span
        return f"vectors {first} to {first + span - 1}"

    def _compare_writes(self) -> str | None:
        rt, seen = self.rt, []
        for prior in (0x00, 0xFF):
            rt.fill(self.dst, prior)
            self.run(1)
            seen.append(self.lane_sums(self.dst))
        bad = np.flatnonzero((seen[0] != seen[1]).any(axis=1))
        if not bad.size:
            return None
        return (f"one pass left vectors of the {self.n_vec}-vector buffer unwritten: the sums of {bad.size} of"
                f" {self.threads} reading threads depend on what the destination held before"
                f" (the first in {self._slice_of(int(bad[0]))})")

    def _check_kept(self) -> str | None:
        """An update (overwrites=False): one pass over a destination of 0xFF bytes (over zeros an
        update would read as a copy), checked as kept_problem checks it."""
        rt, n = self.rt, min(KEPT_SLICE_AFTER, self.n_vec)
        src = np.frombuffer(rt.download(self.src, n * 16), np.uint32).reshape(-1, 4)
        if not np.array_equal(src, filled(n)):
            return f"the source does not hold the host's fill (vectors 0 to {n - 1})"
        rt.fill(self.dst, 0xFF)
        self.passes_kept = 0
        self.run(1)
        problem = self.kept_problem(1)
        return problem and f"after one pass over known contents, {problem}"

    def kept_problem(self, passes: int) -> str | None:
        """What is wrong with an update's destination after `passes` passes over 0xFF bytes: its
        first KEPT_SLICE_AFTER vectors word by word against the host's (stored), then the whole
        buffer on the GPU, each thread's lane sums against those the passes make of the source's
        (update_sums), so no GiB crosses to the host (a slice-by-slice comparison there took 1.5 s
        of a 1 GiB buffer on the H100's host)."""
        n = min(KEPT_SLICE_AFTER, self.n_vec)
        got = np.frombuffer(self.rt.download(self.dst, n * 16), np.uint32).reshape(-1, 4)
        bad = np.flatnonzero((got != stored(self.mode, n, 0xFF, passes)).any(axis=1))
        if bad.size:
            return (f"vector {int(bad[0])} of {self.n_vec} (and {bad.size - 1} more of vectors 0 to {n - 1})"
                    f" differs from the host's")
        want = update_sums(self.lane_sums(self.src), self.n_vec // self.threads, 0xFF, passes)
        bad = np.flatnonzero((self.lane_sums(self.dst) != want).any(axis=1))
        if bad.size:
            return (f"the sums of {bad.size} of {self.threads} reading threads differ from the host's"
                    f" (the first in {self._slice_of(int(bad[0]))})")
        return None

    def after_timing(self, size: int) -> tuple[str | None, str]:
        """The measured guard. An update's destination holds what every pass since the coverage
        check's known contents made of it, the timed ones included (kept_problem). A chunk or
        stride read sums its slice once a pass: a launch of `size` passes over a source of known
        words must count them all. A write or copy's output is the same after any count of passes."""
        if not self.test.overwrites:
            passes = self.passes_kept
            problem = self.kept_problem(passes)
            if problem:
                problem = f"after the timed launches ({passes} passes since the check), {problem}"
                return problem, problem
            return None, (f"the destination holds all {passes} passes since the check, timed ones included (the"
                          f" first {min(KEPT_SLICE_AFTER, self.n_vec)} vectors word by word, every vector in its"
                          f" thread's sums)")
        if self.mode == "read" and not self.rows:
            problem = self._count_reads(size)
            if problem:
                return f"at the measured {size} passes: {problem}", problem
            return None, f"a launch of the measured {size} passes counted every vector {size} times"
        return None, "not checked: each pass overwrites the output with the same contents"

    def series(self) -> BandwidthSweep | None:
        """The read sweep, once per test, on the chunk variant."""
        return self.sweep_of(SWEEP_SAMPLE_S) if self.layout == "chunk" else None

    def sweep_of(self, sample_s: float) -> BandwidthSweep:
        if self.layout != "chunk":
            raise ValueError(f"the bandwidth sweep runs on the chunk read, not {self.layout}")
        return BandwidthSweep(self.run, self.resident, self.tile, self.n_vec * 16, sample_s,
                              self.test.per_item(self.variant))

    def close(self) -> None:
        release(self, self.rt.free, "src", "dst")
        release(self, Witness.close, "witness")
        release(self, self.rt.discard, "kernel", "filler", "reader")

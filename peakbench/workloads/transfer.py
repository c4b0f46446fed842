"""Host transfers, written once: transfer.h2d / d2h / bidir over a backend's "link", the few verbs
each API's copy path provides (peakbench/vulkan/transfer.py, cuda/transfer.py, rocm/transfer.py).

A link is:

    value_bytes                      the copies' size the test's value is measured at (the mapped
                                     read's is value_bytes(info): a kernel's loads, not an engine)
    host(nbytes, kind) -> HostBuffer host memory of `kind` ("pinned" | "pageable"); its `array`
                                     is a numpy uint8 view the workload fills and checks
    device(nbytes)                   a device buffer
    write_device(buf, data), read_device(buf, nbytes) -> np.ndarray, clear_device(buf)
                                     contents by another path than copy() (the reference's way in and out,
                                     and zeros; RuntimeBuffers gives these four through the link's runtime)
    copy(jobs, nbytes, at) -> s      every job (direction, HostBuffer, device buffer) at once, each on
                                     its own stream or queue: copies of `nbytes` back to back, one at
                                     each byte offset of `at` in both buffers (offsets()); the seconds
                                     from the first copy's start to the last one's end
    describe(kind) -> dict           what the host memory, the engine and the timer are (params)
    release(buf), close()
    issued                           optional: the bytes its copy calls handed the API (each copy's
                                     size as passed to it), added up from wherever the workload
                                     last set it to 0: the counted bytes of a launch are checked
                                     against them (after_timing)

and, where the link can time each job on its own (CUDA's streams):

    copy_each(jobs, nbytes, ats) -> (s, [s])
                                     job i's copies at the offsets ats[i], the jobs side by side from
                                     one start: the seconds until the last ends, and each job's
                                     seconds until its own last copy ends

and for the `mapped` variant of transfer.h2d (a kernel reading host memory, no copy engine):

    rt, stream                       the runtime and its stream kernel (workloads/stream.py)
    mapped(nbytes) -> HostBuffer     host memory the device's kernels address; extra["arg"] is
                                     what the runtime's launch takes for it

An item is one byte moved; a launch of size `size` is `size` copies of value_bytes per direction
(the mapped read: `size` passes of the kernel over the host buffer). Both directions at once, on
a link with copy_each, go in pieces (piece()), each direction's count in proportion to its pieces
a second (the slowest keeps size x the pieces a copy), so that both run until the launch ends:
the rate is the link's while it carries both ways, not a mix of that and the slower direction's
tail alone (PERFORMANCE_ANALYSIS.md, "Bidirectional copies, balanced"). A direction's pace is its
median over the last PACE_LAUNCHES launches, not the last one's: one launch whose h2d dipped swung
the next one's split so far that d2h ran alone for 1.4 ms of 12.6 (PERFORMANCE_ANALYSIS.md,
twentieth round). The size sweep (series) copies equal bytes each way.
"""
from __future__ import annotations

import functools
import weakref
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from peakbench.backend import each, release, release_on_failure
from peakbench.catalog.memory import STREAM_UNROLL
from peakbench.harness import guards
from peakbench.workload import Sweep, Workload
from peakbench.workloads import stream

VALUE_BYTES = 256 << 20          # large enough that a copy's fixed cost (a few us) is under 0.1%
# CUDA's copy engines (cudaMemcpyAsync, queued back to back on a stream) read the same at 64 MiB
# (h2d and d2h within 0.4%), and their page-locked buffers and checks cost a quarter of the
# time at 256 MiB: PERFORMANCE_ANALYSIS.md, "The H200 table, and CUDA's copies at 64 MiB".
ENGINE_VALUE_BYTES = 64 << 20
CPU_VALUE_BYTES = 8 << 20        # a CPU driver: its "link" is memcpy; small keeps CI fast
SWEEP_FIRST = 64 << 10
SWEEP_STEP = 4
SWEEP_SAMPLE_S = 0.004
DIRECTIONS = {"h2d": ("h2d",), "d2h": ("d2h",), "bidir": ("h2d", "d2h")}
SEEDS = {"h2d": 0x9E3779B1, "d2h": 0x85EBCA77}   # different data each way: crossed lanes fail
PIECE_BYTES = 32 << 20                           # both directions at once go in pieces of at most this
PACE_LAUNCHES = 5                                # a direction's pace: its median over this many launches
BALANCE_MOST = 4                                 # a direction gets at most this many times the slowest's


@dataclass
class HostBuffer:
    """Host memory a link made: its handle (the link's own), and a uint8 view of its bytes."""
    handle: object
    array: np.ndarray
    kind: str
    extra: dict = field(default_factory=dict)


def value_bytes(info, engine: bool = False) -> int:
    """The transfer size of a device's link: `engine` for copies a stream queues back to back
    (ENGINE_VALUE_BYTES)."""
    if info.kind == "cpu":
        return CPU_VALUE_BYTES
    return ENGINE_VALUE_BYTES if engine else VALUE_BYTES


@functools.lru_cache(maxsize=4)
def pattern(nbytes: int, seed: int) -> np.ndarray:
    """Reference bytes, cheap at a GiB: a multiplicative hash of each 32-bit word's index. Made
    once per size and seed in a process (read-only: every test of a direction shares it)."""
    words = np.arange(-(-nbytes // 4), dtype=np.uint32)
    words *= np.uint32(2654435761)               # in place: one array, no temporaries
    words ^= np.uint32(seed)
    words.setflags(write=False)
    return words.view(np.uint8)[:nbytes]


def check_bytes(got: np.ndarray, want: np.ndarray, what: str) -> str | None:
    if got.shape == want.shape and got.size % 8 == 0 and got.flags.c_contiguous and want.flags.c_contiguous:
        if np.array_equal(got.view(np.uint64), want.view(np.uint64)):     # 8 bytes a compare
            return None
    bad = np.flatnonzero(got != want)
    if bad.size:
        return f"{what}: {bad.size} of {want.size} bytes differ from the host data (first at byte {int(bad[0])})"
    return None


def offsets(nbytes: int, capacity: int, repeat: int) -> list[int]:
    """Where each of `repeat` back-to-back copies of `nbytes` starts in buffers of `capacity`
    bytes: copy k at k * nbytes, wrapped at the last whole copy that fits. Copies smaller than the
    buffers move different bytes each time, so no cache can serve a repeat: a Vulkan copy on the
    compute queue reads host memory through the GPU's L2, and the same 256 KiB-16 MiB copied
    again read 370-400 GB/s "h2d" over a 64 GB/s link (PCIe 5.0 x16): PERFORMANCE_ANALYSIS.md,
    "The rest of the chip, the memory hierarchy and the host link on the H200"."""
    slots = max(1, capacity // nbytes)
    return [(k % slots) * nbytes for k in range(repeat)]


def sweep_sizes(largest: int) -> list[int]:
    sizes, n = [], SWEEP_FIRST
    while n <= largest:
        sizes.append(n)
        n *= SWEEP_STEP
    return sizes if sizes and sizes[-1] == largest else sizes + [largest]


class RuntimeBuffers:
    """The device side of a link through its runtime (`self.rt`, peakbench/runtime.py): a link's
    device buffers, and their contents in and out by the runtime's own upload and download."""

    def device(self, nbytes: int):
        return self.rt.alloc(nbytes)

    def write_device(self, buf, data: np.ndarray) -> None:
        self.rt.upload(buf, data)

    def read_device(self, buf, nbytes: int) -> np.ndarray:
        return np.frombuffer(self.rt.download(buf, nbytes), np.uint8)

    def clear_device(self, buf) -> None:
        self.rt.fill(buf, 0)               # on the device: no host buffer of zeros crosses the link


@dataclass
class Lane:
    """One direction of a transfer: its host and device buffers and the data it must carry."""
    direction: str
    host: HostBuffer
    device: object
    data: np.ndarray


class Shelf:
    """The lanes' buffers one device's transfer tests hand on, by (direction, host memory kind,
    bytes): transfer.h2d and d2h leave theirs to bidir, which then allocates and frees none (a
    pinned 256 MiB host allocation took 90-140 ms through CUDA and its release 20-40 ms:
    PERFORMANCE_ANALYSIS.md, "Start-up, fifth round"). A lane taken from the shelf has its source
    written again, as a new lane's is. What is kept is released when the device closes
    (release_kept), each buffer by the link that kept it."""

    def __init__(self):
        self._kept: dict[tuple, tuple] = {}      # key -> (host, device, release)

    def take(self, key: tuple) -> tuple | None:
        """(host, device) kept under `key`, now the caller's; None where there are none."""
        found = self._kept.pop(key, None)
        return found[:2] if found else None

    def put(self, key: tuple, host, device, release) -> None:
        """Keep a lane's buffers (a lane of the same key kept before is released)."""
        older = self._kept.pop(key, None)
        self._kept[key] = (host, device, release)
        if older:
            _release_all([older])

    def close(self) -> None:
        kept, self._kept = list(self._kept.values()), {}
        _release_all(kept)


def _release_all(kept: list[tuple]) -> None:
    """Every (host, device, release) released, each even when one before it fails."""
    each(functools.partial(free, buf) for host, device, free in kept for buf in (host, device))


_shelves: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()     # runtime -> its Shelf


def shelf_of(rt) -> Shelf | None:
    """The shelf of a link's runtime (None for a link with none)."""
    if rt is None:
        return None
    try:
        return _shelves.setdefault(rt, Shelf())
    except TypeError:          # a runtime that cannot be weakly referenced keeps no shelf
        return None


def release_kept(rt) -> None:
    """Release what the transfer tests kept on this runtime (before it closes)."""
    try:
        shelf = _shelves.pop(rt, None)
    except TypeError:
        return
    if shelf is not None:
        shelf.close()


class TransferSweep(Sweep):
    """A transfer workload's copies over sweep_sizes, `repeat` copies a launch."""
    x, unit, digits = "transfer_bytes", "GB/s", 3

    def __init__(self, workload, sample_s: float):
        super().__init__(sweep_sizes(workload.nbytes), sample_s)
        self.workload, self.nbytes = workload, workload.nbytes

    def at(self, nbytes: int) -> None:
        self.nbytes = nbytes

    def run(self, repeat: int) -> float:
        return self.workload.run(repeat, self.nbytes)

    def items(self, repeat: int) -> int:
        return self.workload.items(repeat, self.nbytes)


class TransferWorkload(Workload):
    """One transfer test and variant (`pinned`, `pageable`) over a link."""
    cores = False               # copies: the SM clock fell to 1365 MHz under a quick run's host link

    @release_on_failure
    def __init__(self, test, variant, link):
        self.test, self.variant, self.link, self.name = test, variant, link, variant.name
        self.kind, self.nbytes = variant.name, link.value_bytes
        self.lanes: list[Lane] = []
        self.shelf = shelf_of(getattr(link, "rt", None))
        for direction in DIRECTIONS[test.dtype]:
            data = pattern(self.nbytes, SEEDS[direction])
            kept = self.shelf.take(self._key(direction)) if self.shelf else None
            host, device = kept or (link.host(self.nbytes, self.kind), None)
            lane = Lane(direction, host, device, data)
            self.lanes.append(lane)
            if lane.device is None:
                lane.device = link.device(self.nbytes)
            if direction == "d2h":
                link.write_device(lane.device, data)
            else:
                lane.host.array[:] = data
        self.balanced = len(self.lanes) > 1 and self.kind == "pinned" and hasattr(link, "copy_each")
        self.paced: deque = deque(maxlen=PACE_LAUNCHES)   # the last launches' (pieces, seconds), a lane each
        self.moved: list[int] | None = None      # each lane's bytes, the last balanced launch
        self.timed_counts: list[int] | None = None   # and its pieces
        self.issued: int | None = None           # bytes the last launch's copy calls were handed (link.issued)
        self.params = {"transfer_bytes": self.nbytes, "directions": [lane.direction for lane in self.lanes],
                       "bytes_counted": "both directions" if len(self.lanes) > 1 else test.dtype,
                       **link.describe(self.kind)}
        if self.balanced:
            self.params["pieces"] = (f"{self.per_copy()} a copy a direction, the faster direction given"
                                     " more so that both end together; the series copies equal bytes each way")
            self.params["piece_bytes"] = self.piece()
        self.evidence = {}

    def _key(self, direction: str) -> tuple:
        return direction, self.kind, self.nbytes

    def jobs(self) -> list[tuple]:
        return [(lane.direction, lane.host, lane.device) for lane in self.lanes]

    def run(self, size: int, nbytes: int | None = None) -> float:
        counts = hasattr(self.link, "issued")
        if counts:
            self.link.issued = 0
        if self.balanced and nbytes is None:
            seconds = self._run_balanced(size)
        else:
            nbytes = nbytes or self.nbytes
            seconds = self.link.copy(self.jobs(), nbytes, offsets(nbytes, self.nbytes, size))
        self.issued = self.link.issued if counts else None
        return seconds

    def items(self, size: int, nbytes: int | None = None) -> int:
        """The bytes of the launch of `size` just run: balanced, its pieces' (the runner asks
        after each launch, and no balanced transfer keeps a burst of several)."""
        if self.balanced and nbytes is None and self.moved:
            return sum(self.moved)
        return size * (nbytes or self.nbytes) * len(self.lanes)

    def piece(self) -> int:
        """The bytes of a piece: PIECE_BYTES, at least two a copy, whole pages."""
        return max(4096, min(PIECE_BYTES, self.nbytes // 2) // 4096 * 4096)

    def per_copy(self) -> int:
        """The pieces a copy of value_bytes is issued in."""
        return max(1, self.nbytes // self.piece())

    def pace(self) -> list[float] | None:
        """Each lane's pieces a second, its median over the last PACE_LAUNCHES balanced launches (None
        before the first): one launch's dip does not move it."""
        if not self.paced:
            return None
        return list(np.median([np.divide(counts, ends) for counts, ends in self.paced], axis=0))

    def counts(self, size: int) -> list[int]:
        """Each lane's pieces in a launch of `size`: the slowest lane's size x the pieces a copy,
        each other lane's in proportion to its pace (pace())."""
        pieces, pace = size * self.per_copy(), self.pace()
        if not pace:
            return [pieces] * len(self.lanes)
        slowest = min(pace)
        return [max(pieces, round(pieces * min(BALANCE_MOST, p / slowest))) for p in pace]

    def _run_balanced(self, size: int) -> float:
        counts, piece = self.counts(size), self.piece()
        seconds, ends = self.link.copy_each(self.jobs(), piece, [offsets(piece, self.nbytes, c) for c in counts])
        if all(e > 0 for e in ends):
            self.paced.append((counts, ends))
        self.moved, self.timed_counts = [c * piece for c in counts], counts
        self.params["balanced"] = {lane.direction: {"pieces": c, "ms": round(e * 1e3, 3),
                                                    "gb_s": round(c * piece / e / 1e9, 2) if e > 0 else None}
                                   for lane, c, e in zip(self.lanes, counts, ends)}
        return seconds

    def verify(self) -> str | None:
        """Each lane's copy against the host data, at a small size and at the full one (a copy
        that moves fewer bytes than asked fails the second). The destination is cleared first,
        so a copy that moves nothing fails too."""
        def check(nbytes: int) -> str | None:
            for lane in self.lanes:
                if lane.direction == "h2d":
                    self.link.clear_device(lane.device)
                else:
                    lane.host.array[:nbytes] = 0
            self.run(1, nbytes)
            for lane in self.lanes:
                got = (self.link.read_device(lane.device, nbytes) if lane.direction == "h2d"
                       else lane.host.array[:nbytes])
                problem = check_bytes(got, lane.data[:nbytes], f"{lane.direction} of {nbytes} bytes")
                if problem:
                    return problem
            return None
        return guards.at_counts((min(SWEEP_FIRST, self.nbytes), self.nbytes), check, "bytes", self.evidence)

    def after_timing(self, size: int) -> tuple[str | None, str]:
        """The measured count of copies (balanced: each lane's pieces in the last timed launch),
        each small enough that copy k lands at its own offset (offsets()), into cleared
        destinations: every lane must then hold all its data, so a copy of the launch lost or cut
        short leaves its slice empty. More copies than 4 KiB slots of the buffers are checked at as
        many as fit, in the same proportion: copies lost after the first make a launch so short
        that calibration grows it to millions of copies, which must not escape the check. Then the
        bytes the last timed launch counted (items) against those its copy calls were handed
        (link.issued, where the link counts them): a byte count off by a factor fails here."""
        # the last timed launch's bytes, counted and handed to the copy calls, before the check's own copies
        miscounted, handed = self._handed(self.items(size), self.issued)
        timed = (self.timed_counts or self.counts(size)) if self.balanced else [size] * len(self.lanes)
        fit = min(1.0, self.nbytes // 4096 / max(timed))
        counts = [max(1, int(c * fit)) for c in timed]
        if max(counts) < 2:
            if miscounted:
                return miscounted, miscounted
            return None, (f"{handed}{size} cop{'y' if size == 1 else 'ies'} a launch, checked as such by iterations"
                          if handed else f"not checked: {size} cop{'y' if size == 1 else 'ies'} a launch, checked as"
                                         f" such by iterations")
        nbytes = self.nbytes // max(counts) // 4096 * 4096
        for lane in self.lanes:
            if lane.direction == "h2d":
                self.link.clear_device(lane.device)
            else:
                lane.host.array[:] = 0
        if self.balanced:
            self.link.copy_each(self.jobs(), nbytes, [offsets(nbytes, self.nbytes, c) for c in counts])
        else:
            self.run(max(counts), nbytes)           # as many as fit, not the millions timed
        what = "pieces" if self.balanced else "copies"
        told = " and ".join(f"{c}" for c in sorted(set(counts)))
        if counts != timed:
            told += f" (of the {' and '.join(f'{c}' for c in sorted(set(timed)))} timed)"
        for lane, count in zip(self.lanes, counts):
            moved = count * nbytes
            got = self.link.read_device(lane.device, moved) if lane.direction == "h2d" else lane.host.array[:moved]
            problem = check_bytes(got, lane.data[:moved], f"{lane.direction}: {count} {what} of {nbytes} bytes")
            if problem:
                return f"the measured {told} {what} a launch, each at its own offset: {problem}", problem
        if miscounted:
            return miscounted, miscounted
        return None, f"{handed}the measured {told} {what} a launch, {nbytes} bytes each at its own offset, all arrived"

    @staticmethod
    def _handed(counted: int, issued: int | None) -> tuple[str | None, str]:
        """(problem, words for the evidence) of a launch's counted bytes against those its copy
        calls were handed (link.issued; None where the link does not count them)."""
        if issued is None:
            return None, ""
        if issued != counted:
            return f"the last timed launch counted {counted} bytes; its copy calls were handed {issued}", ""
        return None, f"its {counted} bytes counted as its copy calls were handed them; "

    def series(self) -> TransferSweep | None:
        """GB/s over transfer sizes, once per test, on the pinned variant."""
        return self.sweep_of(SWEEP_SAMPLE_S) if self.kind == "pinned" else None

    def sweep_of(self, sample_s: float) -> TransferSweep:
        return TransferSweep(self, sample_s)

    def close(self) -> None:
        """Each whole lane onto the device's shelf (or released where there is none), then the link."""
        lanes, self.lanes = self.lanes, []
        try:
            for lane in lanes:
                if self.shelf is not None and lane.host is not None and lane.device is not None:
                    self.shelf.put(self._key(lane.direction), lane.host, lane.device, self.link.release)
                    continue
                for buf in (lane.host, lane.device):
                    if buf is not None:
                        self.link.release(buf)
        finally:
            self.link.close()


class MappedReadWorkload(Workload):
    """transfer.h2d `mapped`: the stream read kernel (workloads/stream.py, chunk layout, a grid
    resident at once) reading host memory the device maps, so the GPU's own loads cross the link
    rather than a copy engine. An item is one byte read; `size` is passes over the buffer."""
    kind = "mapped"

    @release_on_failure
    def __init__(self, test, variant, link):
        self.test, self.variant, self.link, self.name = test, variant, link, variant.name
        rt = self.rt = link.rt
        self.resident = stream.resident_groups(rt)
        self.step = self.resident * stream.STREAM_BLOCK * STREAM_UNROLL
        self.n_vec = max(2 * self.step, value_bytes(rt.info) // 16 // self.step * self.step)
        self.nbytes = self.n_vec * 16
        self.host = link.mapped(self.nbytes)
        self.host.array[:] = stream.filled(self.n_vec).view(np.uint8).reshape(-1)
        self.kernel = stream.chunk_reader(rt, link.stream, STREAM_UNROLL, f"{test.name} mapped")
        self.out = rt.alloc(self.resident * stream.STREAM_BLOCK * 16)
        self.params = {**link.describe(self.kind), "transfer_bytes": self.nbytes, "directions": ["h2d"],
                       "bytes_counted": "read by the kernel",
                       "engine": f"the stream read kernel (chunk layout, {STREAM_UNROLL} 16-byte loads in flight"
                                 f" per thread) reading mapped host memory",
                       "workgroup_size": stream.STREAM_BLOCK, "workgroups": self.resident}
        self.evidence = rt.evidence(self.kernel)

    def run(self, size: int, n_vec: int | None = None) -> float:
        args = [self.host.extra["arg"], self.out, np.uint32(size), np.uint32(n_vec or self.n_vec),
                np.uint32(0xFFFFFFFF), np.uint32(0)]
        return self.rt.launch(self.kernel, self.resident, args)

    def items(self, size: int) -> int:
        return size * self.nbytes

    def verify(self) -> str | None:
        """Every thread's sum against the host's, over one and two steps of the buffer (a read of
        fewer vectors than asked fails the second), then over two steps in each of
        stream.VERIFY_PASSES passes (the measurement's `size`: a read doing fewer fails the second)."""
        def check(n: int, passes: int = 1) -> str | None:
            self.rt.fill(self.out, 0xFF)
            self.run(passes, n)
            got = np.frombuffer(self.rt.download(self.out, self.resident * stream.STREAM_BLOCK * 16), np.uint32)
            return stream.check_stream("read", got, n, self.resident, stream.STREAM_BLOCK, "chunk", passes=passes)
        steps = (self.step, 2 * self.step)
        problem = (guards.at_counts(steps, check, "vectors", self.evidence)
                   or guards.at_counts(stream.VERIFY_PASSES, lambda passes: check(steps[1], passes), "passes",
                                       self.evidence))
        if problem is None:
            guards.passed(self.evidence, "iterations", f"vectors checked at {steps[0]} and {steps[1]}, passes at"
                                                       f" {' and '.join(map(str, stream.VERIFY_PASSES))}")
        return problem

    def after_timing(self, size: int) -> tuple[str | None, str]:
        """The measured guard: one more launch of the measured `size` passes over host memory of
        COVER_WORD words, every thread's sums counting its share of each pass (a kernel doing fewer
        passes or vectors at that count fails), and the bytes those counts make against items()."""
        threads = self.resident * stream.STREAM_BLOCK
        count = size * self.n_vec // threads
        self.host.array[:] = stream.COVER_BYTE
        try:
            self.rt.fill(self.out, 0xFF)
            self.run(size)
            got = np.frombuffer(self.rt.download(self.out, threads * 16), np.uint32).reshape(threads, 4)
        finally:
            self.host.array[:] = stream.filled(self.n_vec).view(np.uint8).reshape(-1)
        problem = stream.short_reads(got, count, self.n_vec, size)
        if not problem and self.items(size) != threads * count * 16:
            problem = (f"counted {self.items(size)} bytes; the kernel's {threads} threads read {count} vectors each,"
                       f" {threads * count * 16} bytes")
        if problem:
            return f"at the measured {size} passes: {problem}", problem
        return None, (f"a launch of the measured {size} passes read every vector {size} times, the"
                      f" {self.items(size)} bytes counted")

    def close(self) -> None:
        release(self, self.link.release, "host")
        release(self, self.rt.free, "out")
        release(self, self.rt.discard, "kernel")
        self.link.close()

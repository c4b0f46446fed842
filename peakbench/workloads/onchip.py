"""On-chip memory, written once: shared-memory (LDS) read bandwidth, a dependent chase inside
shared memory, and L2 read bandwidth with the L1 bypassed; the data contract of their kernels
(shaders/onchip.cu, onchip_shared.comp, onchip_l2.comp) and the host references.

memory.shared: a resident grid (stream.resident_groups) re-reads a small window of shared
memory with 16-byte loads, 32 consecutive lanes on 32 consecutive vectors, the window moving
each pass. latency.shared: one invocation follows a random cycle of word indices held in shared
memory, between two reads of the core's cycle counter. memory.l2: the chunk read of the stream
family (stream.read_sums is its reference) over working sets inside the L2 (powers of two from
L2_LOW to L2_HIGH of it), with loads that skip the L1; the best working set is the value, every
one tested is in the params.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peakbench.backend import Unsupported, release, release_on_failure
from peakbench.harness import guards
from peakbench.harness.stats import median
from peakbench.workloads import stream
from peakbench.workload import Axis, Workload
from peakbench.workloads.chase import ROUND, SEED, ChaseKernel
from peakbench.workloads.witness import Witness

BLOCK = 256                 # invocations a workgroup, every kernel here
SLIDE = 256                 # vectors the shared read's window moves over (a power of two)
CHASE_WORDS = 2048          # the shared chase's cycle: 8 KiB, inside any GPU's shared memory
VERIFY_COUNTS = (1, 2)      # passes (reads) or rounds (chase) of the two checks
# The L2 working sets: the powers of two from L2_LOW to L2_HIGH of the L2, so the whole set
# stays resident whatever the replacement policy; the small ones find the rate of a set that
# sits in the partition nearest each SM (a 60 MiB L2 read 11.7 TB/s at 8 MiB, 10.7 at 32 MiB:
# PERFORMANCE_ANALYSIS.md, "The rest of the chip, the memory hierarchy and the host link on the H200").
L2_LOW, L2_HIGH = 1 / 32, 3 / 4
CPU_L2 = 1 << 20            # a CPU driver's (lavapipe's) L2, as a place to size from
# The L2 read's grid: eight workgroups of BLOCK a unit (a whole SM's threads on NVIDIA). Its loads
# wait hundreds of cycles, so the rate rests on how many are in flight: with the stream's two a
# unit, CUDA's 12.6 TB/s trailed Vulkan's 14.0, whose driver keeps more of the 16 loads of a trip
# in flight than ptxas; with eight, CUDA reads 17.7 and Vulkan 16.2 (four: 17.8 and 12.0, spread
# 14%): PERFORMANCE_ANALYSIS.md, "Ahead of the peers".
L2_BLOCKS_PER_UNIT = 8
# The L2 read's rate still rises with the launch's length at the 5 ms launches --quick takes
# (on an H100, CUDA read 16.2, 16.4, 16.6 and 16.7 TB/s at launches of 4.3, 8.6, 17 and 34 ms;
# Vulkan 14.8, 15.3, 15.5 and 15.6 at 4.8, 9.2, 18 and 36 ms), so every profile calibrates it to
# the default suite's 10 ms (Settings.full().sample_s): PERFORMANCE_ANALYSIS.md, "What the sparse
# matrix tests leave behind, memory.l2's launch length and the host link both ways".
L2_LAUNCH_S = 0.01
# What a shared chase loads each hop (ChaseKernel.pointer): the next address, or the next index,
# which the hop must scale into an address before the next load (one IMAD or SHF on NVIDIA: 29
# cycles a hop against 23 on the H200). SPIR-V addresses Workgroup memory by element only.
HOPS = {True: "address", False: "index"}


@dataclass(frozen=True)
class OnchipKernel:
    """One API's kernel: its source and entry point, the path its loads take, in words, and the
    most loop iterations one launch may run (llvmpipe ends a shader's loops past ~65535)."""
    source: str
    entry: str
    path: str
    max_loop: int = 1 << 24


def differs(got: np.ndarray, want: np.ndarray) -> str | None:
    got = got.reshape(want.shape)
    bad = got != want
    if bad.any():
        i = tuple(int(x) for x in np.argwhere(bad)[0])
        return f"{int(bad.sum())} of {bad.size} words differ from the host reference (first at {i})"
    return None


def shared_defines(test, variant) -> dict:
    """The shared read's defines for a variant (the workload's, and the ISA checks')."""
    return {"CHASE": 0, "UNROLL": variant.unroll, "SLIDE": SLIDE, "SUMS": min(test.accumulators, variant.unroll)}


def l2_defines(test, variant) -> dict:
    """The L2 read's defines for a variant (the workload's, and the ISA checks')."""
    return {"L2_UNROLL": variant.unroll, "UNROLL": variant.unroll, "SUMS": min(test.accumulators, variant.unroll)}


def launches(passes: int, most: int) -> tuple[int, int]:
    """(passes per launch, launches): as few launches as `most` passes each allow, all alike."""
    return stream.pass_dispatches(passes, 1, max(1, most))


# Shared-memory read ---------------------------------------------------------------------------
def shared_data(unroll: int) -> np.ndarray:
    """The vectors every workgroup copies into shared memory: the window and its slide."""
    return stream.filled(32 * unroll + SLIDE)


def shared_sums(data: np.ndarray, groups: int, passes: int, unroll: int) -> np.ndarray:
    """What the shared read stores, uint32 (groups * BLOCK, 4): in pass p, invocation t of
    workgroup w sums data[o + t % 32 + 32u], u < unroll, o = (p + t // 32 + w) & (SLIDE - 1)."""
    t = np.arange(BLOCK)
    total = np.zeros((groups, BLOCK, 4), np.uint64)
    src = data.astype(np.uint64)
    # every first index o + t % 32 (< SLIDE + 32) summed over its unroll once, then gathered
    per_first = src[np.arange(SLIDE + 32)[:, None] + 32 * np.arange(unroll)].sum(axis=1)
    for p in range(passes):
        o = (p + t[None, :] // 32 + np.arange(groups)[:, None]) & (SLIDE - 1)
        total += per_first[o + t % 32]
    return (total % (1 << 32)).astype(np.uint32).reshape(-1, 4)


class SharedReadWorkload(Workload):
    """memory.shared: every invocation of a resident grid reads `unroll` 16-byte vectors of
    shared memory a pass, `size` passes a launch. An item is one vector read."""

    @release_on_failure
    def __init__(self, test, variant, rt, kernel: OnchipKernel):
        self.test, self.rt, self.name, self.spec = test, rt, variant.name, kernel
        self.unroll = variant.unroll
        self.groups = stream.resident_groups(rt)
        self.threads = self.groups * BLOCK
        defines = shared_defines(test, variant)
        self.kernel = rt.compile(kernel.source, defines, kernel.entry, block=BLOCK, args="bbbu", label=test.name)
        self.data = shared_data(self.unroll)
        self.src = rt.alloc(self.data.nbytes)
        rt.upload(self.src, self.data)
        self.dst = rt.alloc(self.threads * 16)
        self.witness = Witness(rt)
        self.params = {"workgroup_size": BLOCK, "workgroups": self.groups, "access_bytes": test.access_bytes,
                       "unroll": self.unroll, "partial_sums": defines["SUMS"],
                       "shared_bytes_per_group": self.data.nbytes, "path": kernel.path,
                       "layout": "32 lanes read 32 consecutive 16-byte vectors, the window moving one vector a pass"}
        self.evidence = rt.evidence(self.kernel)
        # what the work guard holds the bytes counted against: the pass loop's shared-memory loads
        self.census, self.loop_items = rt.census(self.kernel, "shared"), self.unroll

    def run(self, size: int) -> float:
        per, repeat = launches(size, self.spec.max_loop)
        return self.witness.launch(self.kernel, self.groups, [self.src, self.dst], [np.uint32(per)], repeat=repeat)

    def items(self, size: int) -> int:
        return size * self.threads * self.unroll

    def verify(self) -> str | None:
        def check(passes: int) -> str | None:
            self.rt.fill(self.dst, 0xFF)
            self.witness.launch(self.kernel, self.groups, [self.src, self.dst], [np.uint32(passes)])
            got = np.frombuffer(self.rt.download(self.dst, self.threads * 16), np.uint32)
            return differs(got, shared_sums(self.data, self.groups, passes, self.unroll))
        return guards.at_counts(VERIFY_COUNTS, check, "passes", self.evidence)

    def close(self) -> None:
        release(self, self.rt.free, "src", "dst")
        release(self, Witness.close, "witness")
        release(self, self.rt.discard, "kernel")


# Shared-memory chase --------------------------------------------------------------------------
def shared_cycle(words: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """A uniformly random single cycle over `words` word indices: the visiting order, and the
    uint32 `next` array the kernels follow."""
    order = rng.permutation(words).astype(np.uint32)
    nxt = np.zeros(words, np.uint32)
    nxt[order] = np.roll(order, -1)
    return order, nxt


class SharedChaseWorkload(Workload):
    """latency.shared: invocation 0 of one workgroup follows `size` * ROUND dependent loads of a
    random cycle in shared memory. An item is one load; the value is GPU time per load, and where
    the kernel reads the core's cycle counter, the cycles per load and the clock they imply (the
    counter's cycles over the launch's GPU time) come with it."""

    @release_on_failure
    def __init__(self, test, variant, rt, kernel: ChaseKernel):
        self.test, self.variant, self.rt, self.name, self.spec = test, variant, rt, variant.name, kernel
        self.clocked = bool(rt.kernel_clock)
        defines = {"CHASE": 1, "CHASE_WORDS": CHASE_WORDS, "ROUND": ROUND, "CLOCK": int(self.clocked)}
        self.kernel = rt.compile(kernel.source, defines, kernel.entry, block=BLOCK, args="bbuu", label=test.name)
        self.order, nxt = shared_cycle(CHASE_WORDS, np.random.default_rng(SEED))
        self.next = rt.alloc(nxt.nbytes)
        rt.upload(self.next, nxt)
        self.out = rt.alloc(32)
        self.readings = []              # per launch of run(): (cycles per load, MHz they imply)
        self.params = {"chain_words": CHASE_WORDS, "node_bytes": 4, "round": ROUND, "path": kernel.path,
                       "hop": HOPS[kernel.pointer],
                       "timed": "the core's cycle counter around the loop" if self.clocked else "GPU time of the launch"}
        # No cache lines in shared memory: the chase-stride guard (a cache-level chase's) does not apply.
        self.evidence = rt.evidence(self.kernel)

    def launch(self, rounds: int) -> float:
        return self.rt.launch(self.kernel, 1, [self.next, self.out, np.uint32(rounds), np.uint32(self.order[0])])

    def readout(self) -> tuple[int, int | None]:
        """(final index, cycles of the loop or None)."""
        at = self.spec.clock_word
        w = [int(x) for x in np.frombuffer(self.rt.download(self.out, 4 * (at + 4)), np.uint32)]
        if not self.clocked:
            return w[0], None
        return w[0], (w[at + 2] | w[at + 3] << 32) - (w[at] | w[at + 1] << 32)

    def run(self, size: int) -> float:
        per, repeat = launches(size, self.spec.max_rounds)
        seconds = self.rt.launch(self.kernel, 1, [self.next, self.out, np.uint32(per), np.uint32(self.order[0])],
                                 repeat=repeat)
        cycles = self.readout()[1]      # of the last launch, from the core's own counter
        if cycles is not None:
            self.readings.append((cycles / (per * ROUND), cycles / (seconds / repeat) / 1e6))
        return seconds

    def items(self, size: int) -> int:
        return size * ROUND

    def verify(self) -> str | None:
        def check(rounds: int) -> str | None:
            self.rt.fill(self.out, 0xFF)
            self.launch(rounds)
            end, _ = self.readout()
            want = int(self.order[rounds * ROUND % CHASE_WORDS])
            return None if end == want else f"the chase ended at index {end}, not at {want}"
        return guards.at_counts(VERIFY_COUNTS, check, "rounds", self.evidence)

    def observed(self, v, spec=None) -> None:
        """With the cycle counter, the clock is its cycles over each sample's GPU time, not a
        reading taken from outside (NVML)."""
        if self.readings:
            kept = self.readings[-len(v.samples):]          # the samples' launches
            v.params["cycles"] = round(median([c for c, _ in kept]), 2)
            # each sample's latency times its own launch's clock: what the count of loads implies
            v.params["cycles_implied"] = round(median([ns * m / 1e3 for ns, (_, m) in zip(v.samples, kept)]), 2)
            v.clock_mhz = round(median([m for _, m in kept]))
            v.evidence["clock_from"] = "cycle counter cycles over GPU time"

    def close(self) -> None:
        release(self, self.rt.free, "next", "out")
        release(self, self.rt.discard, "kernel")


# L2 read --------------------------------------------------------------------------------------
def l2_bytes(rt, spec) -> tuple[int, str]:
    """The L2's size and where it comes from: the API, the spec entry, or for a CPU driver a
    stand-in; neither on a GPU is unsupported."""
    if rt.limits.l2_bytes:
        return rt.limits.l2_bytes, f"{rt.dialect} device properties"
    if spec is not None and spec.data.get("l2_mib"):
        return int(spec.data["l2_mib"] * (1 << 20)), f"spec {spec.name}"
    if rt.info.kind == "cpu":
        return CPU_L2, "a stand-in for a CPU driver"
    raise Unsupported(f"[api] the L2 size of {rt.info.name} is unknown: {rt.dialect} does not report it"
                      " and no spec entry gives it (l2_mib)")


def l2_working_sets(l2: int) -> list[int]:
    """Powers of two from L2_LOW to L2_HIGH of the L2 (at least the largest below L2_HIGH)."""
    top = 1 << (int(l2 * L2_HIGH).bit_length() - 1)
    sets = [top]
    while sets[-1] // 2 >= l2 * L2_LOW:
        sets.append(sets[-1] // 2)
    return sorted(sets)


def l2_groups(rt) -> int:
    """The L2 read's grid: L2_BLOCKS_PER_UNIT workgroups a unit, where the device says its units."""
    if rt.info.kind != "cpu" and rt.limits.units:
        return rt.limits.units * L2_BLOCKS_PER_UNIT
    return stream.resident_groups(rt)


class L2Workload(Workload):
    """memory.l2: the chunk read over a working set inside the L2, with loads that skip the L1,
    at each of l2_working_sets; the best is the value. An item is one vector read."""
    launch_s = L2_LAUNCH_S

    @release_on_failure
    def __init__(self, test, variant, rt, kernel: OnchipKernel):
        self.test, self.variant, self.rt, self.name, self.spec = test, variant, rt, variant.name, kernel
        self.unroll = variant.unroll
        self.groups = l2_groups(rt)
        self.threads, self.tile = self.groups * BLOCK, BLOCK * self.unroll
        defines = l2_defines(test, variant)
        self.kernel = rt.compile(kernel.source, defines, kernel.entry, block=BLOCK, args="bbbuuuu", label=test.name)
        self.src, self.src_vectors = None, 0
        self.dst = rt.alloc(self.threads * 16)
        self.witness = Witness(rt)
        self.point = (0, 0, 0)
        w = rt.words
        self.params = {"workgroup_size": BLOCK, "workgroups": self.groups, "access_bytes": test.access_bytes,
                       "unroll": self.unroll, "partial_sums": defines["SUMS"], "path": kernel.path,
                       "layout": f"{L2_BLOCKS_PER_UNIT} {w.group}s a unit, a slice per {w.group} a pass, the slices rotating by"
                                 " workgroups | 1 around the working set"}
        self.evidence = rt.evidence(self.kernel)
        # what the work guard holds the bytes counted against: the kernel's own loads, a pass each
        self.census, self.loop_items = rt.census(self.kernel, "memory"), self.unroll

    def source(self, ws: int) -> None:
        """A source buffer of at least `ws` bytes, filled as the stream's (stream.filled)."""
        if self.src_vectors * 16 >= ws:
            return
        release(self, self.rt.free, "src")
        self.src_vectors = ws // 16
        self.src = self.rt.alloc(ws)
        self.rt.upload(self.src, stream.filled(self.src_vectors))

    def at(self, ws: int) -> None:
        """Read working set `ws` (a power of two) from now on: stream.sweep_point's slices."""
        self.source(ws)
        self.point = stream.sweep_point(ws, self.groups, self.tile)

    def run(self, size: int) -> float:
        n, mask, shift = self.point
        per, repeat = launches(size, self.spec.max_loop // (1 + n // self.groups // self.tile))
        scalars = [np.uint32(per), np.uint32(n), np.uint32(mask), np.uint32(shift)]
        return self.witness.launch(self.kernel, self.groups, [self.src, self.dst], scalars, repeat=repeat)

    def items(self, size: int) -> int:
        return size * self.point[0]

    def verify(self) -> str | None:
        """The sums of every invocation after 1 and 2 passes over a ring of at least one tile a
        workgroup (the slices rotating as measured), against stream.read_sums."""
        ws = 1 << (self.groups * self.tile * 16 - 1).bit_length()
        self.at(ws)
        n, mask, shift = self.point

        def check(passes: int) -> str | None:
            self.rt.fill(self.dst, 0xFF)
            self.witness.launch(self.kernel, self.groups, [self.src, self.dst],
                                [np.uint32(passes), np.uint32(n), np.uint32(mask), np.uint32(shift)])
            got = np.frombuffer(self.rt.download(self.dst, self.threads * 16), np.uint32)
            return differs(got, stream.read_sums(n, self.groups, BLOCK, "chunk", passes, shift, mask))
        return guards.at_counts(VERIFY_COUNTS, check, "passes", self.evidence)

    def axis(self, spec=None) -> Axis:
        """The working sets inside the L2 (l2_working_sets), the best the value. A screening run
        takes the smallest only: it read fastest in each of 40 runs on CUDA and Vulkan (2.9-5.1%
        over the next), the bandwidth falling as the set spreads over the partitions
        (PERFORMANCE_ANALYSIS.md, "The rest of the chip, the memory hierarchy and the host link on the H200")."""
        self.l2, self.l2_from = l2_bytes(self.rt, spec)
        sets = tuple(l2_working_sets(self.l2))
        self.source(sets[-1])          # one upload for every set: the GPU does not idle between them
        return Axis("working_set_bytes", sets, "best", screen=1)

    def over_points(self, measured: dict, value) -> None:
        value.params.update({"l2_bytes": self.l2, "l2_from": self.l2_from,
                             "working_sets": {str(ws): round(v.summary.median, 1) for ws, v in measured.items()}})

    def close(self) -> None:
        release(self, self.rt.free, "src", "dst")
        release(self, Witness.close, "witness")
        release(self, self.rt.discard, "kernel")


def workload(test, variant, rt, shared: OnchipKernel, chase: ChaseKernel, l2: OnchipKernel):
    """The workload of an on-chip test, from one backend's kernels."""
    if test.kernel == "l2":
        return L2Workload(test, variant, rt, l2)
    if test.family == "latency":
        return SharedChaseWorkload(test, variant, rt, chase)
    return SharedReadWorkload(test, variant, rt, shared)

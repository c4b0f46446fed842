"""Atomic-add throughput, written once: every thread adds to its address `unroll` times per loop
iteration, on any runtime. The backend names the kernel (source, entry, defines) in an
AtomicKernel; the buffer, the grid, the items and the check against the host's sums are the
same on every API.

The kernels' contract (shaders/atomic.comp, shaders/atomic.cu): thread `gid` adds
v = gid % 5 + 1 (u32 or f32) to its word iterations * UNROLL times: out[gid] (each thread its
own), out[gid / WARP] (contended: one word per warp/wavefront), or its own shared-memory word,
stored to out[gid] at the end. The output buffer is zeroed before a checked launch, so each word
must hold steps times the sum of v over the threads that add to it: exact in float32 too
(integers far below 2^24 at the checked counts), and a different number after each count.

What the compiler made of the add is read from the machine code (the atomic census): a
compare-and-swap loop is no native add, and the variant is unsupported; a warp's adds to one
address summed first (aggregated: one atomic a warp reaches memory) is a real behaviour users
get, kept as its own variant, "<type>-aggregated", that counts the atomics the hardware does.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from peakbench.backend import Unsupported, release, release_on_failure
from peakbench.harness import guards
from peakbench.workload import Workload
from peakbench.workloads.witness import Witness

LOCAL = 256                # threads per workgroup
WAVES = 4                  # the grid fills the device this many times over
# The global tests' words start at a boundary of this many bytes of device address. Which L2
# slices a word's line lands in follows from its address: the contended words (one a warp, 32 to
# a 128-byte line, ~1K lines on an H100) read 35.5-38.0 GOPS (f32) at 16 offsets into a 2 MiB page
# of one allocation, each offset alike in two rounds, and alike at offsets 2 MiB apart
# (PERFORMANCE_ANALYSIS.md, "Where the contended atomic's words land"). Through CUDA the offset is
# the physical one too (placed so, the rate's spread over 8 allocations fell from 7.5% to 1.3%);
# through NVIDIA's Vulkan driver, which maps such a buffer in smaller pages, it is not.
PLACE = 2 << 20
VERIFY_ITERATIONS = (1, 2)
DTYPES = {"u32": np.uint32, "f32": np.float32}


@dataclass(frozen=True)
class AtomicKernel:
    """What one API runs for an atomic test's variant; `instruction` is the opcode its machine code
    must show where the platform disassembles (e.g. REDG.E.ADD), `missing` the variants this
    device cannot run, with their reasons (kept in the evidence)."""
    source: str
    entry: str
    defines: dict
    instruction: str = ""
    params: dict = field(default_factory=dict)
    evidence: dict = field(default_factory=dict)
    missing: dict = field(default_factory=dict)


def defines(test, variant, warp: int, local: int) -> dict:
    return {"IS_FLOAT": int(variant.name == "f32"), "SHARED": int(test.space == "shared"),
            "CONTENDED": int(test.contended), "WARP": warp, "LOCAL": local, "UNROLL": variant.unroll}


def words(test, threads: int, warp: int) -> int:
    """The output words: one per thread, or one per warp when contended."""
    return -(-threads // warp) if test.contended else threads


def expected(test, dtype: str, threads: int, warp: int, steps: int) -> np.ndarray:
    """The final contents of the output after `steps` adds by every thread, from zero."""
    gid = np.arange(threads)
    v = (gid % 5 + 1).astype(np.float64)
    # each thread its own word, or each warp's threads one
    per_word = np.bincount(gid // warp, weights=v, minlength=words(test, threads, warp)) if test.contended else v
    sums = per_word * steps
    return sums.astype(np.uint64).astype(DTYPES[dtype]) if dtype == "u32" else sums.astype(np.float32)


def check(test, dtype: str, threads: int, warp: int, steps: int, got: np.ndarray) -> str | None:
    want = expected(test, dtype, threads, warp, steps)
    bad = got != want
    if not bad.any():
        return None
    i = int(np.argwhere(bad)[0][0])
    return (f"{int(bad.sum())} of {bad.size} words differ from the host's sums "
            f"(first at word {i}: got {got[i]!r}, want {want[i]!r})")


def machine_code(kernel: AtomicKernel, evidence: dict, census=None) -> str | None:
    """Where the platform shows the loop's atomics (the census) or an instruction mix, the atomic
    instruction is among them (an AMDGPU mix lists only s_ and v_ opcodes: the census first)."""
    mix = census.ops if census is not None and census.ops else evidence.get("instruction_mix")
    if not mix or not kernel.instruction:
        return None
    if any(op.startswith(kernel.instruction) for op in mix):
        return None
    return f"the kernel's machine code has no {kernel.instruction} (its mix: {mix})"


def emulated(test, dtype: str, census) -> str | None:
    """Why the compiled add is no native one (a compare-and-swap loop), or None."""
    if census is None or "compare-and-swap" not in census.forms:
        return None
    return (f"[hardware] the compiler makes the {dtype} atomic add in {test.space} memory a compare-and-swap"
            f" loop ({census.source}: {', '.join(census.ops) or 'its retry loop'}): no native add to measure")


def combined(census, threads_per_address: int, warp: int) -> int:
    """How many adds one hardware atomic carries: the threads of a warp that share an address
    where the compiler aggregates them, else 1."""
    if census is None or "aggregated" not in census.forms:
        return 1
    return max(1, min(threads_per_address, warp))


def placed(rt, nbytes: int, place: bool) -> tuple[object, int, str]:
    """(buffer, word offset, how it was placed): with `place`, a buffer PLACE bytes longer, its
    words from the first PLACE boundary of device address in it, where the runtime reads the
    address; else the buffer's start."""
    if not place:
        return rt.alloc(nbytes), 0, "from the buffer's start"
    buf = rt.alloc(nbytes + PLACE)
    address = rt.address(buf)
    if address is None:
        return buf, 0, "from the buffer's start (the runtime reads no device address)"
    skip = -address % PLACE
    return buf, skip // 4, f"from a {PLACE >> 20} MiB boundary of device address ({skip} bytes into the buffer)"


class AtomicWorkload(Workload):
    """One atomic test's variant (its element type): the kernel and the output buffer. An item is
    one atomic add of one thread; of an aggregated variant, one atomic the hardware does."""

    @release_on_failure
    def __init__(self, test, variant, rt, kernel: AtomicKernel):
        self.test, self.variant, self.rt, self.name = test, variant, rt, variant.name
        self.atomic, self.dtype = kernel, variant.name
        self.local = min(LOCAL, rt.limits.max_block)
        self.warp = rt.limits.warp
        self.kernel = rt.compile(kernel.source, {**kernel.defines, **defines(test, variant, self.warp, self.local)},
                                 kernel.entry, block=self.local, args="bbuu", label=f"{test.name}-{variant.name}")
        self.groups = max(1, rt.grid_threads(WAVES) // self.local)
        self.threads = self.groups * self.local
        self.words = words(test, self.threads, self.warp)
        self.out, self.base, placement = placed(rt, self.words * 4, test.space != "shared")
        self.witness = Witness(rt)
        self.params = {"variant": variant.name, **kernel.params, "workgroup_size": self.local, "workgroups": self.groups,
                       "threads": self.threads, "unroll": variant.unroll, "space": test.space,
                       "addresses": self.words, "threads_per_address": self.threads // self.words,
                       "placement": placement}
        if rt.arch:
            self.params["arch"] = rt.arch
        self.evidence = {**rt.evidence(self.kernel), **kernel.evidence}
        if kernel.missing:
            self.evidence["variants_unsupported"] = dict(kernel.missing)
        self.census, self.loop_items = rt.census(self.kernel, "atomic"), variant.unroll
        refused = emulated(test, self.dtype, self.census)
        if refused:
            raise Unsupported(refused)
        self.combined = combined(self.census, self.threads // self.words, self.warp)
        if self.combined > 1:
            self.name = f"{variant.name}-aggregated"
            self.params["aggregated"] = (f"the compiler sums each warp's {self.combined} adds to one address"
                                         f" ({', '.join(self.census.ops)} in {self.census.source}) and one"
                                         f" atomic reaches memory: counted as the hardware's atomics")
        elif self.census is not None and "aggregated" in self.census.forms:
            self.params["aggregated"] = (f"the compiler looks for a warp's lanes of one address before each add"
                                         f" ({', '.join(self.census.ops)} in {self.census.source}); one address"
                                         f" a thread: nothing is combined, every add is counted")

    launched = last = 0     # loop iterations run since the output was last zeroed; by the last launch

    def run(self, size: int) -> float:
        self.launched, self.last = self.launched + size, size
        return self.witness.launch(self.kernel, self.groups, [self.out], [np.uint32(size), np.uint32(self.base)])

    def zero(self) -> None:
        self.rt.fill(self.out, 0)
        self.launched = 0

    def items(self, size: int) -> int:
        return self.threads * size * self.variant.unroll // self.combined

    def verify(self) -> str | None:
        """The machine code shows the atomic instruction (where the platform shows it); after one,
        then two loop iterations from a zeroed buffer, every word holds the host's sum."""
        problem = machine_code(self.atomic, self.evidence, self.census)
        if problem:
            return problem

        def check_after(n: int) -> str | None:
            self.zero()
            self.run(n)
            got = self.output()
            return check(self.test, self.dtype, self.threads, self.warp, n * self.variant.unroll, got)
        return guards.at_counts(VERIFY_ITERATIONS, check_after, "iterations", self.evidence)

    def output(self) -> np.ndarray:
        """The words the kernel adds to, from `base`."""
        end = self.base + self.words
        return np.frombuffer(self.rt.download(self.out, 4 * end), DTYPES[self.dtype])[self.base:end]

    def after_timing(self, size: int) -> tuple[str | None, str]:
        """A global output sums every launch since the last check zeroed it (calibration, warm-up
        and the timed launches): a launch lost or cut short leaves other sums. A shared-memory
        test's output is what the last timed launch summed in shared memory. Float sums are exact
        only under 2^24."""
        shared = self.test.space == "shared"
        launched = self.last if shared else self.launched
        steps = launched * self.variant.unroll
        want = expected(self.test, self.dtype, self.threads, self.warp, steps)
        if self.dtype == "f32" and float(want.max()) >= 2 ** 24:
            return None, f"not checked: the f32 sums of {steps} adds a thread are past float32's exact integers"
        got = self.output()
        problem = check(self.test, self.dtype, self.threads, self.warp, steps, got)
        what = (f"the last timed launch ({launched} iterations)" if shared else
                f"all {launched} iterations launched since the check, timed ones included")
        if problem:
            return f"after {what}: {problem}", problem
        return None, f"every word sums {what}"

    def close(self) -> None:
        release(self, self.rt.free, "out")
        release(self, Witness.close, "witness")
        release(self, self.rt.discard, "kernel")

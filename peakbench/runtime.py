"""What a backend implements for the workloads: compile, buffers, launch + GPU time, clock, evidence.

The workloads (peakbench/workloads/) are written once against this interface; Vulkan
(peakbench/vulkan/runtime.py), CUDA (peakbench/cuda/runtime.py) and HIP (peakbench/rocm/runtime.py)
each implement it. A kernel is compiled from a source file of shaders/ and its defines: the
runtime knows its own dialect (GLSL or SPIR-V assembly for Vulkan, CUDA C++ through NVRTC or
hiprtc). A launch takes the grid (workgroups in x) and the kernel's arguments in order: buffers
and numpy scalars (np.uint32, ...). Vulkan binds the buffers as descriptor bindings 0, 1, ... and
the scalars as 32-bit push constants; CUDA and HIP pass them as the kernel's parameters.
"""
from __future__ import annotations

import hashlib
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from peakbench.backend import DeviceInfo


@dataclass
class Kernel:
    """A compiled entry point with its workgroup size. `handle` is the runtime's own object;
    `binary` the code object (cubin, hsaco) where the compiler returns one, for evidence."""
    name: str
    handle: object
    block: int = 1
    binary: bytes = b""
    log: str = ""
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class LoopCensus:
    """What one invocation's main loop body does, read from the compiled kernel: `ops` counts its
    arithmetic instructions (opcode and result type, e.g. "Fma f16x2"), `work` the ops they do
    counted the catalog's way (an FMA is 2 per lane), `types` the operand types they work on
    ("f16x2", "i8x4", ...), `source` what was read (SPIR-V, SASS, AMDGPU). `note` says why
    nothing was counted, where the census could not be taken (then ops is empty). `forms`: what
    the code does in place of the native operation it is counted as (FORMS)."""
    ops: dict
    work: int
    types: frozenset
    source: str
    note: str = ""
    forms: frozenset = frozenset()


# What a census may find the compiler made of an operation (LoopCensus.forms):
#   aggregated        a warp's atomic adds to one address summed first, one atomic a warp
#   compare-and-swap  an atomic add done as a compare-and-swap loop: no native add
#   pieces            a 64-bit multiply-add built from 32-bit instructions, counted by the one
#                     instruction each has once (SASS: IMAD.WIDE.U32)
FORMS = ("aggregated", "compare-and-swap", "pieces")
# What a census counts (Runtime.census's kind): the loop's vector arithmetic in ops (or, "pieces",
# 64-bit multiply-adds by their pieces where the machine has no 64-bit multiplier), a stream's
# device loads and stores in bytes ("shared": shared memory's, LDS's), its atomic adds or its
# special-function results, one a lane.
CENSUS_KINDS = ("arithmetic", "pieces", "memory", "shared", "atomic", "special")


@dataclass(frozen=True)
class Limits:
    """The device facts the workloads size their grids and working sets from."""
    units: int                     # SMs / CUs / compute units (0 where the API does not say)
    threads_per_unit: int          # resident threads per unit (0 where unknown)
    max_block: int                 # threads per workgroup
    warp: int                      # 32 (NVIDIA), 32 or 64 (AMD), the subgroup size on Vulkan
    l2_bytes: int
    memory_bytes: int              # device memory a test may use (free memory when opened)
    shared_per_block: int = 48 << 10
    max_buffer: int = 1 << 62      # bytes one buffer may cover (Vulkan: maxStorageBufferRange)


@dataclass(frozen=True)
class Words:
    """How an API names its launch geometry in prose (params' descriptions and evidence). The JSON
    keys are the same on every API: workgroup_size (threads of one group) and workgroups (groups
    in one launch)."""
    group: str = "block"           # "workgroup" on Vulkan
    program: str = "kernel"        # "shader" on Vulkan
    launch: str = "launch"         # "dispatch" on Vulkan


class Runtime(Protocol):
    info: DeviceInfo
    limits: Limits
    dialect: str                   # "vulkan", "cuda" or "hip"
    arch: str                      # sm_90a, gfx942, ... ("" on Vulkan)
    words: Words
    kernel_clock: bool             # kernels can read the core's cycle counter (the chase uses it)

    def compile(self, source: str, defines: dict, entry: str = "main", block: int = 1,
                args: str = "", label: str = "") -> Kernel:
        """Compile shaders/<source> with `defines` for this device. `args` spells the kernel's
        parameters, one letter each: b a buffer, u a 32-bit scalar (Vulkan lays out its
        bindings and push constants from it); `label` names it in driver dumps."""

    def prefetch(self, source: str, defines: dict, entry: str = "main", block: int = 1, args: str = "",
                 label: str = "") -> None:
        """Optional: compile() into the cache only, from any thread, so a later compile() of the
        same finds it (harness/ahead.py)."""

    def alloc(self, nbytes: int): ...
    def free(self, buf) -> None: ...
    def address(self, buf) -> int | None:
        """The buffer's device address, where the runtime can read it (None where it cannot)."""
    def upload(self, buf, data) -> None:
        """The raw bytes of `data` (any C-contiguous object with the buffer protocol: bytes, a
        memoryview, a numpy array of any dtype; memoryview(data).nbytes of them) to the start of
        `buf`, finished on return."""

    def download(self, buf, nbytes: int | None = None) -> memoryview:
        """The first `nbytes` of `buf` (all of it by default) in host memory of their own: a
        memoryview of bytes (np.frombuffer reads it without a copy; it compares equal to bytes)."""

    def fill(self, buf, byte: int) -> None:
        """Every byte of the buffer set to `byte` (0xFF: NaN for floats, -1 for integers)."""

    def launch(self, kernel: Kernel, grid: int, args: Sequence, repeat: int = 1) -> float:
        """`repeat` launches of `grid` workgroups back to back, each after the one before; the
        GPU time around them, in seconds."""

    def launch_times(self, kernel: Kernel, count: int, args: Sequence = ()) -> list[float]:
        """`count` launches of one workgroup with `args` (none for the empty kernel), each timed on
        the host from submission to completion (seconds)."""

    def grid_threads(self, waves: int) -> int:
        """Threads that fill the device `waves` times over."""

    def max_groups(self, block: int) -> int:
        """The most workgroups of `block` threads one launch may have."""

    def discard(self, kernel: Kernel) -> None:
        """Release a kernel before the runtime closes (Vulkan destroys its pipeline)."""

    def memory_budget(self) -> int:
        """Bytes of device memory a test may use now."""

    def clock_mhz(self) -> float | None: ...
    def census(self, kernel: Kernel, kind: str = "arithmetic") -> LoopCensus | None:
        """What the kernel's main loop body does of `kind` (CENSUS_KINDS), read from the code the
        device runs where the platform shows it (None where it shows nothing)."""
    def evidence(self, kernel: Kernel) -> dict:
        """What the kernel became (instruction mix, driver statistics), where the platform tells."""
    def close(self) -> None: ...


def host_bytes(data, capacity: int) -> np.ndarray:
    """The raw bytes of an upload's `data` (any C-contiguous buffer), refused with a message
    where they do not fit a buffer of `capacity` bytes."""
    src = np.frombuffer(data, np.uint8)
    if src.size > capacity:
        raise ValueError(f"upload of {src.size} bytes into a {capacity}-byte buffer")
    return src


# Disassembler threads of a runtime's prefetch: half the cores, at most 8, so that the tests that
# start while they run keep the rest. A disassembler's start costs ~0.3-0.5 s of one core, and the
# listings of a cold CUDA quick run took 25 thread-seconds where NVRTC took 10-20
# (PERFORMANCE_ANALYSIS.md, "Start-up, fifth round").
DISASSEMBLERS = max(1, min(8, (os.cpu_count() or 2) // 2))
_LISTINGS_LOCK = threading.Lock()


class CompiledModules:
    """What the CUDA and HIP runtimes share: the grid and memory from Limits (their APIs report
    units and free memory), modules that stay loaded until close(), and evidence from the
    disassembled code object (each supplies disassemble()).

    prefetch() compiles on the caller's thread and leaves the listing to a disassembler thread of
    the runtime's own (DISASSEMBLERS), so compile-ahead waits for the compilers alone and the
    listings are made while the first tests run; listing() waits for a pending one rather than
    start the disassembler again."""
    limits: Limits
    arch: str
    _listings: dict[bytes, Future] | None = None      # sha256 of a code object -> its listing
    _disassemblers: ThreadPoolExecutor | None = None

    def compile(self, source: str, defines: dict, entry: str = "main", block: int = 1, args: str = "",
                label: str = "") -> Kernel:
        from peakbench.sources import SHADERS
        return self.compile_text((SHADERS / source).read_text(), defines, entry, block)

    def prefetch(self, source: str, defines: dict, entry: str = "main", block: int = 1, args: str = "",
                 label: str = "") -> None:
        """What compile() would make, made into the cache only (no module is loaded): the code
        object and its listing. Safe on any thread (harness/ahead.py runs many at once)."""
        from peakbench.sources import SHADERS
        parts, _ = self.code_object((SHADERS / source).read_text(), defines, entry)
        self._listing_later(parts[0])

    def listing_of(self, binary: bytes) -> str | None:
        """The code object's disassembly, where this runtime keeps one in the cache."""
        return None

    def listing(self, binary: bytes) -> str | None:
        """listing_of(binary): the prefetched one where a disassembler thread has it or is making it."""
        with _LISTINGS_LOCK:
            pending = (self._listings or {}).get(hashlib.sha256(binary).digest())
        return pending.result() if pending is not None else self.listing_of(binary)

    def _listing_later(self, binary: bytes) -> None:
        if type(self).listing_of is CompiledModules.listing_of or not binary:
            return
        key = hashlib.sha256(binary).digest()
        with _LISTINGS_LOCK:
            if self._listings is None:
                self._listings = {}
                self._disassemblers = ThreadPoolExecutor(DISASSEMBLERS, thread_name_prefix="disassemble")
            if key not in self._listings:
                self._listings[key] = self._disassemblers.submit(self.listing_of, binary)

    def stop_listings(self) -> None:
        """Wait for the disassembler threads (those not started are dropped); close() calls it."""
        with _LISTINGS_LOCK:
            pool, self._disassemblers = self._disassemblers, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def launch_times(self, kernel: Kernel, count: int, args: Sequence = ()) -> list[float]:
        out = []
        for _ in range(count):
            t0 = time.perf_counter()
            self._launch_one(kernel, args)     # one workgroup, waited for
            out.append(time.perf_counter() - t0)
        return out

    def grid_threads(self, waves: int) -> int:
        return waves * self.limits.units * self.limits.threads_per_unit

    def memory_budget(self) -> int:
        return self.limits.memory_bytes

    def discard(self, kernel: Kernel) -> None:
        """Nothing to do: the module stays loaded until close()."""

    def evidence(self, kernel: Kernel) -> dict:
        from peakbench.evidence.listing import evidence
        return evidence(self.disassemble(kernel), self.arch)


"""The Runtime (peakbench/runtime.py) on CuPy: NVRTC to a cubin for the exact architecture, module
loading, device buffers as CuPy byte arrays, launches timed between CUDA events."""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Sequence

import cupy as cp
import numpy as np
from cupy.cuda import nvrtc

from peakbench import cache
from peakbench.evidence import listing
from peakbench.backend import DeviceInfo
from peakbench.evidence import sass
from peakbench.runtime import CompiledModules, Kernel, Limits, LoopCensus, Words, host_bytes

MAX_DYNAMIC_SHARED = 8        # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


class CompileError(RuntimeError):
    pass


def arch_of(major: int, minor: int) -> str:
    """sm_XY, with the architecture-specific 'a' suffix from Hopper on (wgmma, setmaxnreg need it)."""
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


def _nvrtc_version() -> tuple:
    try:
        return tuple(nvrtc.getVersion())
    except Exception:
        return (0, 0)


def _bytes(text) -> bytes:
    return text if isinstance(text, bytes) else str(text).encode()


def include_dirs() -> list[str]:
    """Where cuda_fp16.h and friends are: the CUDA toolkit CuPy found, the usual place, or the
    headers of the pip-installed toolkit (cupy-cuda12x[ctk]: nvidia/cuda_runtime/include)."""
    roots = [Path(r) / "include" for r in (cp.cuda.get_cuda_path(), os.environ.get("CUDA_PATH"), "/usr/local/cuda") if r]
    roots += [Path(p) / "nvidia" / sub / "include" for p in sys.path if p for sub in ("cuda_runtime", "cu13", "cu12")]
    return [str(r) for r in roots if (r / "cuda_fp16.h").exists()][:1]


class CudaRuntime(CompiledModules):
    dialect = "cuda"
    words = Words()
    kernel_clock = True            # clock64() is the SM's cycle counter

    def __init__(self, index: int, info: DeviceInfo, props: dict, clock=None):
        self.index, self.info, self._clock = index, info, clock
        self.device = cp.cuda.Device(index)
        self.device.use()
        self.cc = (props["major"], props["minor"])
        self.arch = arch_of(*self.cc)
        free, _ = cp.cuda.runtime.memGetInfo()
        self.limits = Limits(units=props["multiProcessorCount"], threads_per_unit=props["maxThreadsPerMultiProcessor"],
                             max_block=props["maxThreadsPerBlock"], warp=props["warpSize"],
                             l2_bytes=props["l2CacheSize"], memory_bytes=int(free),
                             shared_per_block=props.get("sharedMemPerBlockOptin", 48 << 10))
        self.stream = cp.cuda.Stream(non_blocking=True)
        self._modules = []
        self._start, self._end = cp.cuda.Event(), cp.cuda.Event()

    # Compilation -------------------------------------------------------------------------------
    def code_object(self, source: str, defines: dict, kernel: str) -> tuple[list[bytes], bool]:
        """NVRTC's [cubin, PTX, log] for the source, or those cached for the same source, options,
        kernel and NVRTC version (the headers of the include folders are taken as fixed by that
        version); and whether they came from the cache. The defines go in sorted, so the key is
        the same whichever order a workload and its plan (harness/ahead.py) give them in."""
        options = [f"-arch={self.arch}", "--std=c++17", *(f"-I{d}" for d in include_dirs()),
                   *(f"-D{k}={v}" for k, v in sorted(defines.items()))]
        if _nvrtc_version() >= (12, 4):
            options.append("-pch")     # parse cuda_fp16.h and friends once per process, not per kernel
        key = cache.key(source, "\0".join(options), kernel, repr(_nvrtc_version()))
        make = functools.partial(self._nvrtc, source, options, kernel)
        return cache.remember("cubin", key, make, kernel)

    def listing_of(self, binary: bytes) -> str | None:
        return sass.disassemble(binary)

    def compile_text(self, source: str, defines: dict, kernel: str, block: int = 1) -> Kernel:
        """The cubin of code_object, loaded."""
        (binary, ptx, log), cached = self.code_object(source, defines, kernel)
        module = cp.cuda.function.Module()
        module.load(binary)
        self._modules.append(module)
        extra = {"ptx": ptx.decode(errors="replace"), **({"cached": True} if cached else {})}
        return Kernel(kernel, module.get_function(kernel), block, binary, log.decode(errors="replace"), extra)

    def _nvrtc(self, source: str, options: list[str], kernel: str) -> list[bytes]:
        """[cubin, PTX, log] of one compile."""
        prog = nvrtc.createProgram(source, f"{kernel}.cu", [], [])
        try:
            try:
                nvrtc.compileProgram(prog, options)
            except nvrtc.NVRTCError as e:
                log = nvrtc.getProgramLog(prog)
                raise CompileError(f"NVRTC could not compile {kernel} for {self.arch}: {e}\n{log}") from None
            log = nvrtc.getProgramLog(prog)
            binary = sass.whole_elf(nvrtc.getCUBIN(prog))
            ptx = nvrtc.getPTX(prog)
        finally:
            nvrtc.destroyProgram(prog)
        return [bytes(binary), _bytes(ptx), _bytes(log)]

    def disassemble(self, kernel: Kernel) -> str | None:
        """The SASS of this kernel alone (a module holds every kernel of its source), read once."""
        if "sass" not in kernel.extra:
            found = self.listing(kernel.binary)
            kernel.extra["sass"] = found and (listing.function(found, kernel.name) or None)
        return kernel.extra["sass"]

    def evidence(self, kernel: Kernel) -> dict:
        """The instruction mix, and `cached: "binary"` where the cubin was read from the cache."""
        found = super().evidence(kernel)
        listing_ = self.disassemble(kernel)
        loop = sass.loop_body(sass.with_addresses(listing_)) if listing_ else ""
        if loop:                           # the main loop's opcodes, as the Vulkan driver's SASS gives them
            found["loop_mix"] = sass.instruction_mix(loop, top=None)
        return {**found, "cached": "binary"} if kernel.extra.get("cached") else found

    def census(self, kernel: Kernel, kind: str = "arithmetic") -> LoopCensus:
        """What the main loop of the kernel's SASS does of `kind` (evidence/sass.py): arithmetic for
        the work and types guards, global loads and stores for the streams, atomics, special
        functions."""
        listing = self.disassemble(kernel)
        if kind in ("memory", "shared"):
            return sass.memory_census(listing, space=kind)
        if kind in ("atomic", "special"):
            return sass.operation_census(listing, kind)
        if kind == "pieces":
            return sass.pieces_census(listing)
        return sass.loop_census(listing)

    # Memory ------------------------------------------------------------------------------------
    def alloc(self, nbytes: int):
        with self.device:
            return cp.empty(max(1, nbytes), dtype=cp.uint8)

    def address(self, buf) -> int:
        return buf.data.ptr

    def free(self, buf) -> None:
        """Nothing to do here: CuPy frees a buffer when its last reference goes (workloads drop
        theirs in close()), and close() empties the pool."""

    def upload(self, buf, data) -> None:
        # On the launch stream, and finished before returning: launches run on a non-blocking
        # stream, which would not wait for a copy on the default one.
        src = host_bytes(data, buf.size)
        buf[: src.size].set(src, stream=self.stream)
        self.stream.synchronize()

    def download(self, buf, nbytes: int | None = None) -> memoryview:
        """Into page-locked memory from CuPy's pool: the copy runs at the link's rate, and a
        download of a size made before (a check's second count, the next test of that grid)
        reuses the block the last one freed, where a fresh pageable array is staged by the driver
        and faulted in page by page."""
        n = buf.size if nbytes is None else min(int(nbytes), buf.size)
        host = np.frombuffer(cp.cuda.alloc_pinned_memory(n), np.uint8, n)     # the array holds the block
        buf[:n].get(stream=self.stream, out=host)
        self.stream.synchronize()
        return memoryview(host)

    def fill(self, buf, byte: int) -> None:
        # cudaMemset, not ndarray.fill: CuPy compiles an elementwise kernel for any byte but zero,
        # a second of NVRTC in a cold run
        with self.device:
            cp.cuda.runtime.memsetAsync(buf.data.ptr, byte & 0xFF, buf.nbytes, self.stream.ptr)
            self.stream.synchronize()

    # Launches ----------------------------------------------------------------------------------
    def _call(self, kernel: Kernel, grid, args, shared_bytes):
        grid = grid if isinstance(grid, tuple) else (grid,)
        block = kernel.block if isinstance(kernel.block, tuple) else (kernel.block,)
        if shared_bytes > 48 << 10 and not kernel.extra.get("shared_set"):
            cp.cuda.driver.funcSetAttribute(kernel.handle.ptr, MAX_DYNAMIC_SHARED, shared_bytes)
            kernel.extra["shared_set"] = True
        kernel.handle(grid, block, tuple(args), shared_mem=shared_bytes, stream=self.stream)

    def launch(self, kernel: Kernel, grid, args: Sequence, repeat: int = 1, shared_bytes: int = 0) -> float:
        self._start.record(self.stream)
        for _ in range(repeat):
            self._call(kernel, grid, args, shared_bytes)
        self._end.record(self.stream)
        self._end.synchronize()
        return cp.cuda.get_elapsed_time(self._start, self._end) / 1e3

    def _launch_one(self, kernel: Kernel, args: Sequence = ()) -> None:
        self._call(kernel, 1, list(args), 0)
        self.stream.synchronize()

    # Sizing ------------------------------------------------------------------------------------
    def max_groups(self, block: int) -> int:
        return (1 << 31) - 1           # blocks in x of one launch

    def clock_mhz(self) -> float | None:
        return self._clock.sm_mhz() if self._clock else None

    def close(self) -> None:
        try:
            self.stop_listings()
            self.stream.synchronize()      # a kernel fault often shows only here
        finally:
            self._modules.clear()
            cp.get_default_memory_pool().free_all_blocks()
            cp.get_default_pinned_memory_pool().free_all_blocks()
            if self._clock:
                self._clock.close()

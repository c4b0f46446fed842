"""The Runtime (peakbench/runtime.py) on hip-python: hiprtc to a code object for the device's exact target (with its
sramecc/xnack features), module loading, device buffers from hipMalloc, launches timed between
HIP events.

hip-python returns a tuple (error, *values) from every call. Each call goes through `HipApi.call`,
which turns a non-success code into HipError naming the call and the code, so nothing fails
silently. The hip and hiprtc modules are passed in (create() imports them), which is also how the
tests put a fake runtime at exactly this boundary.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from peakbench import cache
from peakbench.backend import DeviceInfo, each
from peakbench.evidence.listing import run_on_file
from peakbench.evidence import amdgpu
from peakbench.rocm import targets
from peakbench.runtime import CompiledModules, Kernel, Limits, LoopCensus, Words, host_bytes


class HipError(RuntimeError):
    """A HIP or hiprtc call returned an error code (or raised inside hip-python)."""

    def __init__(self, call: str, detail: str, code: int | None = None):
        super().__init__(f"{call} failed: {detail}")
        self.call, self.code = call, code


class CompileError(RuntimeError):
    pass


def _code(err) -> int:
    return int(getattr(err, "value", err))


def _name(err) -> str:
    return getattr(err, "name", None) or str(err)


class HipApi:
    """hip and hiprtc behind one checked call."""

    def __init__(self, hip, hiprtc):
        self.hip, self.hiprtc = hip, hiprtc

    def call(self, fn, *args, **kwargs):
        """fn(*args) -> its values (one value, a tuple of several, or None); HipError when the
        returned code is not success or hip-python itself raises (bad argument, missing library)."""
        name = getattr(fn, "__name__", str(fn))
        try:
            result = fn(*args, **kwargs)
        except HipError:
            raise
        except Exception as e:
            raise HipError(name, f"{type(e).__name__}: {e}") from e
        err, values = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
        if _code(err) != 0:
            raise HipError(name, f"{_name(err)} (error {_code(err)})", _code(err))
        if not values:
            return None
        return values[0] if len(values) == 1 else values


@dataclass
class DeviceBuffer:
    """Device memory from hipMalloc: the pointer hip-python returned, and its size."""
    ptr: object
    nbytes: int

    @property
    def address(self) -> int:
        return int(self.ptr)


# numpy scalar types to the ctypes type hip-python packs by value into the launch's argument buffer.
CTYPES = {np.dtype(np.uint8): ctypes.c_uint8, np.dtype(np.int8): ctypes.c_int8,
          np.dtype(np.uint16): ctypes.c_uint16, np.dtype(np.int16): ctypes.c_int16,
          np.dtype(np.uint32): ctypes.c_uint32, np.dtype(np.int32): ctypes.c_int32,
          np.dtype(np.uint64): ctypes.c_uint64, np.dtype(np.int64): ctypes.c_int64,
          np.dtype(np.float32): ctypes.c_float, np.dtype(np.float64): ctypes.c_double}


def marshal(args: Sequence) -> tuple:
    """Kernel arguments as hip-python's `extra=` takes them: a tuple of ctypes values, which it
    lays out at their natural alignment. Buffers become their device address (a pointer
    parameter); scalars must be numpy scalars, so their width is explicit."""
    out = []
    for i, a in enumerate(args):
        if isinstance(a, DeviceBuffer):
            out.append(ctypes.c_void_p(a.address))
        elif isinstance(a, np.generic) and a.dtype in CTYPES:
            out.append(CTYPES[a.dtype](a.item()))
        else:
            raise TypeError(f"kernel argument {i}: {type(a).__name__} is not a DeviceBuffer or a numpy "
                            f"scalar (np.uint32(...), np.float32(...), ...)")
    return tuple(out)


def hip_version(v: int) -> str:
    """HIP_VERSION_MAJOR * 10^7 + MINOR * 10^5 + PATCH (60342134 -> 6.3.42134)."""
    return f"{v // 10_000_000}.{v // 100_000 % 100}.{v % 100_000}"


def include_dirs() -> list[str]:
    """Where hip/hip_fp16.h is, for sources that include it; hiprtc also carries its own copy."""
    roots = [os.environ.get("ROCM_PATH"), os.environ.get("HIP_PATH"), "/opt/rocm"]
    return [str(Path(r) / "include") for r in roots if r and (Path(r) / "include" / "hip" / "hip_fp16.h").exists()][:1]


class HipRuntime(CompiledModules):
    dialect = "hip"
    words = Words()
    kernel_clock = False           # the chase reads no cycle counter on AMD

    def __init__(self, api: HipApi, index: int, info: DeviceInfo, props: dict, clock=None):
        self.api, self.hip = api, api.hip
        self.index, self.info, self._clock = index, info, clock
        self.target = props["gcnArchName"]                  # e.g. gfx90a:sramecc+:xnack-
        self.arch = targets.base_target(self.target)        # gfx90a
        family = targets.family(self.arch)
        self.family = family.name if family else ""    # RDNA2, CDNA3, ... ("" where the table has none)
        self.api.call(self.hip.hipSetDevice, index)
        free, _total = self.api.call(self.hip.hipMemGetInfo)
        self.limits = Limits(units=props["multiProcessorCount"], threads_per_unit=props["maxThreadsPerMultiProcessor"],
                             max_block=props["maxThreadsPerBlock"], warp=props["warpSize"],
                             l2_bytes=props["l2CacheSize"], memory_bytes=int(free),
                             shared_per_block=props.get("sharedMemPerBlock") or 64 << 10)
        self.stream = self.api.call(self.hip.hipStreamCreate)
        self._start = self.api.call(self.hip.hipEventCreate)
        self._end = self.api.call(self.hip.hipEventCreate)
        self._modules = []

    # Compilation -------------------------------------------------------------------------------
    def compile_options(self, defines: dict) -> list[str]:
        """hiprtc's options; the defines sorted, so a workload's compile finds what its plan made."""
        return [f"--offload-arch={self.target}", "-O3", "-std=c++17", *(f"-I{d}" for d in include_dirs()),
                *(f"-D{k}={v}" for k, v in sorted(defines.items()))]

    def code_object(self, source: str, defines: dict, kernel: str) -> tuple[list[bytes], bool]:
        """hiprtc's [code object, log] for the source, or those cached for the same source, options
        (the exact target among them), kernel and hiprtc version; and whether they were cached."""
        options = self.compile_options(defines)
        make = functools.partial(self._hiprtc, source, options, kernel)
        if self.compiler_version:
            key = cache.key(source, "\0".join(options), kernel, self.compiler_version)
            return cache.remember("hsaco", key, make, kernel)
        return make(), False                    # no version to key it by: not cached

    def prefetch(self, source: str, defines: dict, entry: str = "main", block: int = 1, args: str = "",
                 label: str = "") -> None:
        """CompiledModules.prefetch where code objects are cached (hiprtc says its version)."""
        if self.compiler_version:
            super().prefetch(source, defines, entry, block, args, label)

    def compile_text(self, source: str, defines: dict, kernel: str, block: int = 1) -> Kernel:
        """The code object of code_object, loaded."""
        options = self.compile_options(defines)
        (code, log), cached = self.code_object(source, defines, kernel)
        module = self.api.call(self.hip.hipModuleLoadData, code)
        self._modules.append(module)
        function = self.api.call(self.hip.hipModuleGetFunction, module, kernel.encode())
        extra = {"target": self.target, "options": options, **({"cached": True} if cached else {})}
        return Kernel(kernel, function, block, code, log.decode(errors="replace"), extra)

    @functools.cached_property
    def compiler_version(self) -> str | None:
        """hiprtc's version and the HIP runtime's (its patch level); None where hiprtc cannot say."""
        try:
            rtc = self.api.call(self.api.hiprtc.hiprtcVersion)
            return f"hiprtc {rtc} hip {self.api.call(self.hip.hipRuntimeGetVersion)}"
        except (AttributeError, HipError):
            return None

    def _hiprtc(self, source: str, options: list[str], kernel: str) -> list[bytes]:
        """[code object, log] of one compile."""
        rtc = self.api.hiprtc
        prog = self.api.call(rtc.hiprtcCreateProgram, source.encode(), f"{kernel}.cu".encode(), 0, [], [])
        try:
            try:
                err = rtc.hiprtcCompileProgram(prog, len(options), [o.encode() for o in options])
            except Exception as e:
                raise HipError("hiprtcCompileProgram", f"{type(e).__name__}: {e}") from e
            err = err[0] if isinstance(err, tuple) else err      # its failure is a CompileError, with the log
            log = self._log(prog)
            if _code(err) != 0:
                raise CompileError(f"hiprtc could not compile {kernel} for {self.target}: {_name(err)}\n{log}")
            size = self.api.call(rtc.hiprtcGetCodeSize, prog)
            code = bytearray(size)
            self.api.call(rtc.hiprtcGetCode, prog, code)
        except BaseException:
            self._destroy(prog, quiet=True)          # the first error is the one to report
            raise
        self._destroy(prog)
        return [bytes(code), log.encode()]

    def _destroy(self, prog, quiet: bool = False) -> None:
        ref = prog.createRef() if hasattr(prog, "createRef") else prog
        try:
            self.api.call(self.api.hiprtc.hiprtcDestroyProgram, ref)
        except HipError:
            if not quiet:
                raise

    def _log(self, prog) -> str:
        size = self.api.call(self.api.hiprtc.hiprtcGetProgramLogSize, prog) or 0
        if size <= 1:
            return ""
        buf = bytearray(size)
        self.api.call(self.api.hiprtc.hiprtcGetProgramLog, prog, buf)
        return bytes(buf).rstrip(b"\0").decode(errors="replace")

    def disassemble(self, kernel: Kernel) -> str | None:
        """The code object's listing, read once."""
        if "listing" not in kernel.extra:
            kernel.extra["listing"] = disassemble(kernel.binary, self.arch)
        return kernel.extra["listing"]

    def evidence(self, kernel: Kernel) -> dict:
        """The instruction mix, and `cached: "binary"` where the code object was read from the cache."""
        found = super().evidence(kernel)
        return {**found, "cached": "binary"} if kernel.extra.get("cached") else found

    def census(self, kernel: Kernel, kind: str = "arithmetic") -> LoopCensus | None:
        """What the main loop of the kernel's code object does of `kind` (evidence/amdgpu.py), for
        the work and types guards."""
        listing = self.disassemble(kernel)
        if listing is None:
            why = (NO_OBJDUMP if not objdump() else
                   "the code object could not be disassembled (not an AMDGPU ELF, or a compressed bundle)")
            return LoopCensus({}, 0, frozenset(), "AMDGPU", why)
        found = amdgpu.parse(listing).get(kernel.name)
        if kind in ("memory", "shared"):
            return amdgpu.memory_census(found, space=kind)
        return amdgpu.operation_census(found, kind) if kind in ("atomic", "special") else amdgpu.census(found)

    # Memory ------------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> DeviceBuffer:
        nbytes = max(1, int(nbytes))
        return DeviceBuffer(self.api.call(self.hip.hipMalloc, nbytes), nbytes)

    def address(self, buf: DeviceBuffer) -> int:
        return buf.address

    def free(self, buf: DeviceBuffer) -> None:
        if buf.ptr is not None:
            self.api.call(self.hip.hipFree, buf.ptr)
            buf.ptr = None

    def upload(self, buf: DeviceBuffer, data) -> None:
        src = memoryview(host_bytes(data, buf.nbytes))
        host = bytearray(src) if src.readonly else src      # hip-python takes a writable buffer
        self.api.call(self.hip.hipMemcpy, buf.ptr, host, src.nbytes, self.hip.hipMemcpyKind.hipMemcpyHostToDevice)

    def download(self, buf: DeviceBuffer, nbytes: int | None = None) -> memoryview:
        n = buf.nbytes if nbytes is None else min(int(nbytes), buf.nbytes)
        host = bytearray(n)
        self.api.call(self.hip.hipMemcpy, host, buf.ptr, n, self.hip.hipMemcpyKind.hipMemcpyDeviceToHost)
        return memoryview(host)

    def fill(self, buf: DeviceBuffer, byte: int) -> None:
        self.api.call(self.hip.hipMemset, buf.ptr, byte & 0xFF, buf.nbytes)
        self.api.call(self.hip.hipDeviceSynchronize)

    # Launches ----------------------------------------------------------------------------------
    def _launch(self, kernel: Kernel, grid, extra, shared_bytes: int) -> None:
        g = tuple(grid) if isinstance(grid, tuple) else (grid,)
        b = tuple(kernel.block) if isinstance(kernel.block, tuple) else (kernel.block,)
        g, b = (g + (1, 1))[:3], (b + (1, 1))[:3]
        self.api.call(self.hip.hipModuleLaunchKernel, kernel.handle, *g, *b, sharedMemBytes=int(shared_bytes),
                      stream=self.stream, kernelParams=None, extra=extra)

    def launch(self, kernel: Kernel, grid, args: Sequence, repeat: int = 1, shared_bytes: int = 0) -> float:
        """Launch `repeat` times back to back and wait; the GPU time between the events around
        them, in seconds (HIP reports milliseconds)."""
        extra = marshal(args) or None                       # hip-python: no arguments is extra=None
        self.api.call(self.hip.hipEventRecord, self._start, self.stream)
        for _ in range(repeat):
            self._launch(kernel, grid, extra, shared_bytes)
        self.api.call(self.hip.hipEventRecord, self._end, self.stream)
        self.api.call(self.hip.hipEventSynchronize, self._end)
        ms = self.api.call(self.hip.hipEventElapsedTime, self._start, self._end)
        return float(ms) / 1e3

    def _launch_one(self, kernel: Kernel, args: Sequence = ()) -> None:
        self._launch(kernel, 1, marshal(args) or None, 0)
        self.api.call(self.hip.hipStreamSynchronize, self.stream)

    # Sizing ------------------------------------------------------------------------------------
    def max_groups(self, block: int) -> int:
        return ((1 << 32) - 1) // block      # HIP wants grid * block threads < 2^32

    def clock_mhz(self) -> float | None:
        return self._clock.gfx_mhz() if self._clock else None

    def close(self) -> None:
        """Release everything, each step even when one before it failed; then raise the first
        error (a kernel fault often shows only at this last synchronize)."""
        steps = [(self.hip.hipStreamSynchronize, self.stream)]
        steps += [(self.hip.hipModuleUnload, module) for module in self._modules]
        steps += [(self.hip.hipEventDestroy, event) for event in (self._start, self._end)]
        steps += [(self.hip.hipStreamDestroy, self.stream)]
        self._modules.clear()
        try:
            each((functools.partial(self.api.call, fn, arg) for fn, arg in steps), HipError)
        finally:
            if self._clock:
                self._clock.close()


# -- code-object disassembly (evidence) ----------------------------------------------------------
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
_OPCODE = re.compile(r"^\s*[sv]_[a-z0-9_]+\b", re.M)


def code_object(binary: bytes, arch: str | None = None) -> bytes | None:
    """The AMDGPU ELF inside `binary`: itself when it is one, else the (first, or `arch`'s) amdgcn
    entry of an uncompressed clang offload bundle; None for anything else (a compressed bundle)."""
    if binary[:4] == b"\x7fELF":
        return binary
    if not binary.startswith(BUNDLE_MAGIC):
        return None
    try:
        (count,) = struct.unpack_from("<Q", binary, len(BUNDLE_MAGIC))
        pos, found = len(BUNDLE_MAGIC) + 8, []
        for _ in range(count):
            offset, size, id_len = struct.unpack_from("<QQQ", binary, pos)
            entry_id = binary[pos + 24: pos + 24 + id_len].decode(errors="replace")
            pos += 24 + id_len
            if "amdgcn" in entry_id:
                found.append((entry_id, binary[offset: offset + size]))
    except struct.error:
        return None
    for entry_id, data in found:
        if arch is None or entry_id.split("--")[-1].split(":")[0] == arch:
            return data
    return found[0][1] if found else None


NO_OBJDUMP = "llvm-objdump not found (ROCm's, or LLVM 22's llvm-objdump-22): the loop's instructions are not counted"
# LLVM releases whose llvm-objdump knows the gfx targets of rocm/targets.py (an older one, e.g.
# LLVM 14's, aborts on gfx1100), newest first.
OBJDUMP_VERSIONS = tuple(range(30, 17, -1))


def objdump() -> str | None:
    """ROCm's llvm-objdump (it knows every gfx target), else a recent LLVM's, else one on PATH."""
    for root in (os.environ.get("ROCM_PATH"), os.environ.get("HIP_PATH"), "/opt/rocm"):
        if root and (Path(root) / "llvm" / "bin" / "llvm-objdump").exists():
            return str(Path(root) / "llvm" / "bin" / "llvm-objdump")
    found = (shutil.which(f"llvm-objdump-{v}") for v in OBJDUMP_VERSIONS)
    return next((f for f in found if f), None) or shutil.which("llvm-objdump")


def disassemble(binary: bytes, arch: str) -> str | None:
    """The AMDGCN listing of a code object where llvm-objdump is installed, else None. It is
    cached (folder amdgcn, keyed by the ELF, the target and the tool)."""
    elf = code_object(binary, arch) if binary else None
    exe = objdump() if elf else None
    if not exe:
        return None
    command = [exe, "-d", f"--mcpu={arch}"]
    key = cache.key(hashlib.sha256(elf).digest(), cache.tool_identity(exe), " ".join(command[1:]))
    text = cache.load_text("amdgcn", key)
    if text is not None:
        return text
    out = run_on_file(command, elf, "kernel.hsaco")
    if not (out and _OPCODE.search(out)):
        return None
    cache.store_text("amdgcn", key, out)
    return out

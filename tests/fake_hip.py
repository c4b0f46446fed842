"""A fake HIP runtime at hip-python's API boundary, for the ROCm backend's host code without a GPU.

FakeHip and FakeHiprtc stand in for `from hip import hip, hiprtc`: every call returns a tuple
(error, *values) as hip-python does, with hip-python's enum types, and is recorded in a shared
`calls` list. Device memory is host bytearrays behind fake addresses. Any call can be made to
return an error code (`fail`) or to raise (`raise_on`); event times come from `elapsed_ms`, each
after as long a real wait. A
kernel name may map to a Python function that plays the kernel on the fake memory (`kernels`),
so a workload's verification can run end to end. `install()` puts the pair in sys.modules.
"""
from __future__ import annotations

import ctypes
import enum
import functools
import json
import sys
import time
import types
from dataclasses import dataclass, field


class hipError_t(enum.IntEnum):
    hipSuccess = 0
    hipErrorInvalidValue = 1
    hipErrorOutOfMemory = 2
    hipErrorInvalidDevice = 101
    hipErrorInsufficientDriver = 35
    hipErrorNoDevice = 100
    hipErrorInvalidImage = 200
    hipErrorNotFound = 500
    hipErrorLaunchFailure = 719


class hipMemcpyKind(enum.IntEnum):
    hipMemcpyHostToHost = 0
    hipMemcpyHostToDevice = 1
    hipMemcpyDeviceToHost = 2
    hipMemcpyDeviceToDevice = 3


class hiprtcResult(enum.IntEnum):
    HIPRTC_SUCCESS = 0
    HIPRTC_ERROR_INVALID_INPUT = 3
    HIPRTC_ERROR_INVALID_PROGRAM = 4
    HIPRTC_ERROR_COMPILATION = 6


# The kernels that count their workgroups (peakbench/workloads/witness.py): the position of the word
# among their arguments. The fake adds each launch's workgroups to it, as the kernels' count does.
# A kernel named in COUNTS_ONLY_WITH counts only where it is built with that define (the stream
# kernel: its measured build, not the fill or the checks' reads), workgroup w in slot w % WITNESS_SLOTS.
WITNESS_ARG = {"alu": 2, "sfu": 2, "atomic": 1, "l2_read": 2, "shared_read": 2, "mma_peak": 3, "stream": 2}
COUNTS_ONLY_WITH = {"stream": "WITNESS_SLOTS"}
TIMER_TICK_MS = 1e-6      # a nanosecond, added to event times in turn (hipEventElapsedTime)
MARK = b"\0fake-hip-module\0"      # after a code object: what the fake module loader reads


class FakePointer:
    """What hipMalloc returns: int() gives the address."""

    def __init__(self, address: int):
        self.address = address

    def __int__(self) -> int:
        return self.address

    def __repr__(self) -> str:
        return f"<device 0x{self.address:x}>"


@dataclass
class Handle:
    kind: str
    serial: int
    extra: dict = field(default_factory=dict)


class hipDeviceProp_t:
    """Filled in by hipGetDeviceProperties, attribute by attribute, as hip-python's struct."""


class hipUUID:
    def __init__(self, data: bytes):
        self.bytes = data


def mi300x(**over) -> dict:
    props = dict(name=b"AMD Instinct MI300X", gcnArchName=b"gfx942:sramecc+:xnack-", multiProcessorCount=304,
                 clockRate=2_100_000, memoryClockRate=1_300_000, memoryBusWidth=8192,
                 totalGlobalMem=192 << 30, l2CacheSize=4 << 20, maxThreadsPerMultiProcessor=2048,
                 maxThreadsPerBlock=1024, warpSize=64, sharedMemPerBlock=64 << 10, integrated=0,
                 uuid=hipUUID(bytes(range(16))), pciDomainID=0, pciBusID=0x1c, pciDeviceID=0)
    props.update(over)
    return props


def rx7900xtx(**over) -> dict:
    return mi300x(name=b"Radeon RX 7900 XTX", gcnArchName=b"gfx1100", multiProcessorCount=48, clockRate=2_498_000,
                  totalGlobalMem=24 << 30, l2CacheSize=6 << 20, warpSize=32, maxThreadsPerMultiProcessor=2048,
                  uuid=hipUUID(bytes(16)), pciBusID=0x03, **over)


def r9700(**over) -> dict:
    return mi300x(name=b"AMD Radeon AI PRO R9700", gcnArchName=b"gfx1201", multiProcessorCount=64,
                  clockRate=2_920_000, totalGlobalMem=32 << 30, l2CacheSize=8 << 20, warpSize=32,
                  pciBusID=0x03, **over)


def mi355x(**over) -> dict:
    return mi300x(name=b"AMD Instinct MI355X", gcnArchName=b"gfx950:sramecc+:xnack-", multiProcessorCount=256,
                  clockRate=2_400_000, totalGlobalMem=288 << 30, pciBusID=0x05, **over)


def mi250x(**over) -> dict:
    return mi300x(name=b"AMD Instinct MI250X", gcnArchName=b"gfx90a:sramecc+:xnack-", multiProcessorCount=110,
                  clockRate=1_700_000, totalGlobalMem=64 << 30, l2CacheSize=8 << 20, pciBusID=0x29, **over)


class _Api:
    """Shared machinery: the call log, injected errors and exceptions."""
    error_type = hipError_t
    success = hipError_t.hipSuccess

    def __init__(self, calls: list, fail: dict, raise_on: dict):
        self.calls, self.fail, self.raise_on = calls, fail, raise_on

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]

    def last(self, name: str):
        """(args, kwargs) of the most recent call of `name`."""
        for n, args, kwargs in reversed(self.calls):
            if n == name:
                return args, kwargs
        raise AssertionError(f"{name} was never called; calls: {self.names()}")


class Fail(Exception):
    """Raised inside a fake call: the call returns this error code."""

    def __init__(self, code):
        self.code = code


def api(values: int = 0):
    """Record the call; return (error, None * values) if the test made it fail (or the fake raised
    Fail), else call through and put success in front."""
    def wrap(fn):
        @functools.wraps(fn)
        def call(self, *args, **kwargs):
            name = fn.__name__
            self.calls.append((name, args, kwargs))
            if name in self.raise_on:
                raise self.raise_on[name]
            if name in self.fail:
                return (self.fail[name],) + (None,) * values
            try:
                out = fn(self, *args, **kwargs)
            except Fail as f:
                return (f.code,) + (None,) * values
            out = () if out is None else (out if isinstance(out, tuple) else (out,))
            return (self.success,) + out
        return call
    return wrap


class FakeHip(_Api):
    hipError_t = hipError_t
    hipMemcpyKind = hipMemcpyKind
    hipDeviceProp_t = hipDeviceProp_t
    __version__ = "6.4.1.552.37"
    VERSION = 60_443_483              # HIP 6.4.43483

    def __init__(self, devices: list[dict] | None = None, calls: list | None = None, fail: dict | None = None,
                 raise_on: dict | None = None, elapsed_ms=2.5):
        super().__init__(calls if calls is not None else [], fail if fail is not None else {},
                         raise_on if raise_on is not None else {})
        self.devices = [mi300x()] if devices is None else devices
        self.memory: dict[int, bytearray] = {}
        self.elapsed_ms = elapsed_ms          # a number, or a function of the last launch
        self._elapsed_reads = 0
        self.kernels: dict = {}               # kernel name -> fn(fake, launch) that plays it
        self.launches: list[dict] = []
        self._next, self._serial = 0x7F00_0000_0000, 0

    def _handle(self, kind: str, **extra) -> Handle:
        self._serial += 1
        return Handle(kind, self._serial, extra)

    # devices
    @api(1)
    def hipGetDeviceCount(self):
        return len(self.devices)

    @api(1)
    def hipDriverGetVersion(self):
        return self.VERSION

    @api(1)
    def hipRuntimeGetVersion(self):
        return self.VERSION

    @api()
    def hipGetDeviceProperties(self, props, index):
        if not 0 <= index < len(self.devices):
            raise Fail(hipError_t.hipErrorInvalidDevice)
        for k, v in self.devices[index].items():
            setattr(props, k, v)

    @api()
    def hipSetDevice(self, index):
        pass

    @api(2)
    def hipMemGetInfo(self):
        total = self.devices[0]["totalGlobalMem"]
        return total - (1 << 30), total

    @api()
    def hipDeviceSynchronize(self):
        pass

    # streams and events
    @api(1)
    def hipStreamCreate(self):
        return self._handle("stream")

    @api()
    def hipStreamSynchronize(self, stream):
        pass

    @api()
    def hipStreamDestroy(self, stream):
        pass

    @api(1)
    def hipEventCreate(self):
        return self._handle("event")

    @api()
    def hipEventRecord(self, event, stream):
        pass

    @api()
    def hipEventSynchronize(self, event):
        pass

    @api()
    def hipEventDestroy(self, event):
        pass

    @api(1)
    def hipEventElapsedTime(self, start, end):
        """The time `elapsed_ms` gives, after as long a wait: no GPU time is longer than the host's
        wait for it (the timer guard holds the fake to that too)."""
        ms = self.elapsed_ms
        ms = float(ms(self.launches[-1]) if callable(ms) else ms)
        # a real timer's tick of jitter: no two launches read the same to the bit (guards.timer)
        self._elapsed_reads += 1
        ms += TIMER_TICK_MS * (self._elapsed_reads % 3)
        time.sleep(max(0.0, ms) * 1e-3)
        return ms

    # memory
    @api(1)
    def hipMalloc(self, nbytes):
        address = self._next
        self._next += (nbytes + 0xFFF) & ~0xFFF
        self.memory[address] = bytearray(nbytes)
        return FakePointer(address)

    @api()
    def hipFree(self, ptr):
        del self.memory[int(ptr)]

    @api()
    def hipMemcpy(self, dst, src, nbytes, kind):
        if kind == hipMemcpyKind.hipMemcpyHostToDevice:
            self.memory[int(dst)][:nbytes] = bytes(memoryview(src).cast("B")[:nbytes])
        elif kind == hipMemcpyKind.hipMemcpyDeviceToHost:
            memoryview(dst).cast("B")[:nbytes] = self.memory[int(src)][:nbytes]
        else:
            raise AssertionError(f"unexpected copy kind {kind!r}")

    @api()
    def hipMemset(self, ptr, value, nbytes):
        self.memory[int(ptr)][:nbytes] = bytes([value]) * nbytes

    # modules and launches
    @api(1)
    def hipModuleLoadData(self, image):
        meta = json.loads(bytes(image).rsplit(MARK, 1)[1].decode())     # FakeHiprtc's code objects
        return self._handle("module", **meta)

    @api(1)
    def hipModuleGetFunction(self, module, name):
        name = name.decode() if isinstance(name, bytes) else name
        if name != module.extra["name"]:
            raise Fail(hipError_t.hipErrorNotFound)
        return self._handle("function", name=name, options=module.extra["options"])

    @api()
    def hipModuleUnload(self, module):
        pass

    @api()
    def hipModuleLaunchKernel(self, f, gx, gy, gz, bx, by, bz, sharedMemBytes=0, stream=None,
                              kernelParams=None, extra=None):
        launch = {"function": f.extra["name"], "options": f.extra["options"], "grid": (gx, gy, gz),
                  "block": (bx, by, bz), "shared": sharedMemBytes, "stream": stream, "extra": extra}
        self.launches.append(launch)
        play = self.kernels.get(launch["function"])
        if play:
            play(self, launch)
        at, options = WITNESS_ARG.get(launch["function"]), defines(launch["options"])
        if at is not None and extra is not None and COUNTS_ONLY_WITH.get(launch["function"], "") in {"", *options}:
            slots, stride = int(options.get("WITNESS_SLOTS", 1)), int(options.get("WITNESS_STRIDE", 1))
            count = memoryview(self.buffer(extra[at]))[:((slots - 1) * stride + 1) * 4].cast("I")
            groups = gx * gy * gz
            for slot in range(min(slots, groups)):           # workgroups slot, slot + slots, ...
                count[slot * stride] = (count[slot * stride] + (groups - slot + slots - 1) // slots) % (1 << 32)

    # helpers for kernel players
    def buffer(self, arg) -> bytearray:
        """The device memory a c_void_p launch argument points to."""
        return self.memory[arg.value]


class Program:
    def __init__(self, source: bytes, name: bytes):
        self.source, self.name = source, name
        self.options: list[bytes] = []
        self.log = b""
        self.destroyed = False

    def createRef(self):
        return self


class FakeHiprtc(_Api):
    hiprtcResult = hiprtcResult
    error_type = hiprtcResult
    success = hiprtcResult.HIPRTC_SUCCESS

    def __init__(self, calls: list, fail: dict, raise_on: dict):
        super().__init__(calls, fail, raise_on)
        self.programs: list[Program] = []
        self.compile_error: str | None = None     # set: the next compiles fail with this log
        self.warning_log = ""
        # fn(name, options) -> a real code object (or None) that the fake returns in its place
        self.code_objects = None

    @api(1)
    def hiprtcCreateProgram(self, source, name, num_headers, headers, include_names):
        assert isinstance(source, bytes) and isinstance(name, bytes)
        prog = Program(source, name)
        self.programs.append(prog)
        return prog

    @api()
    def hiprtcCompileProgram(self, prog, num_options, options):
        assert num_options == len(options) and all(isinstance(o, bytes) for o in options)
        prog.options = list(options)
        if self.compile_error is not None:
            prog.log = self.compile_error.encode()
            raise Fail(hiprtcResult.HIPRTC_ERROR_COMPILATION)
        prog.log = self.warning_log.encode()

    @api(1)
    def hiprtcGetProgramLogSize(self, prog):
        return len(prog.log) + 1

    @api()
    def hiprtcGetProgramLog(self, prog, buf):
        buf[:] = prog.log + b"\0"

    @api(1)
    def hiprtcGetCodeSize(self, prog):
        return len(self._code(prog))

    @api()
    def hiprtcGetCode(self, prog, buf):
        buf[:] = self._code(prog)

    @api()
    def hiprtcDestroyProgram(self, ref):
        ref.destroyed = True

    def _code(self, prog) -> bytes:
        """A code object the fake module loader reads back: a real one from `code_objects` (or an
        ELF magic alone), then MARK and the kernel's name and options."""
        name = prog.name.decode().removesuffix(".cu")
        options = [o.decode() for o in prog.options]
        real = self.code_objects(name, options) if self.code_objects else None
        return (real or b"\x7fELF") + MARK + json.dumps({"name": name, "options": options}).encode()


def pair(devices: list[dict] | None = None, **kwargs) -> tuple[FakeHip, FakeHiprtc]:
    """A FakeHip and FakeHiprtc sharing one call log, one `fail` and one `raise_on` table."""
    hip = FakeHip(devices, **kwargs)
    return hip, FakeHiprtc(hip.calls, hip.fail, hip.raise_on)


def install(monkeypatch, hip, hiprtc) -> None:
    """Make `from hip import hip, hiprtc` return the fakes."""
    package = types.ModuleType("hip")
    package.hip, package.hiprtc = hip, hiprtc
    monkeypatch.setitem(sys.modules, "hip", package)
    monkeypatch.setitem(sys.modules, "hip.hip", hip)
    monkeypatch.setitem(sys.modules, "hip.hiprtc", hiprtc)


def defines(options: list[str]) -> dict[str, str]:
    """-DNAME=VALUE options as a dict."""
    return dict(o[2:].split("=", 1) for o in options if o.startswith("-D"))


def scalar(arg):
    """A by-value launch argument (a ctypes scalar) as a Python number."""
    assert isinstance(arg, ctypes._SimpleCData) and not isinstance(arg, ctypes.c_void_p), arg
    return arg.value

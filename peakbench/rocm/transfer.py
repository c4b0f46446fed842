"""Host transfers on ROCm: hipMemcpyAsync through the DMA engines, on the runtime's stream and, for
both directions at once, a second one (the workload is peakbench/workloads/transfer.py).

`pinned` host memory comes from hipHostMalloc, the copies timed between HIP events. `pageable`
is a numpy array, which the runtime stages through pinned buffers on the CPU: those copies are
timed on the host, from the first call to the streams' completion. `mapped` (transfer.h2d) is
hipHostMalloc memory (mapped by default) read by the stream kernel through the device pointer
hipHostGetDevicePointer gives.
"""
from __future__ import annotations

import ctypes
import functools
import time

import numpy as np

from peakbench.backend import each
from peakbench.kernels import STREAM
from peakbench.rocm.runtime import DeviceBuffer
from peakbench.workloads.transfer import HostBuffer, MappedReadWorkload, RuntimeBuffers, TransferWorkload, value_bytes


def support(test, rt) -> str | None:
    return None


def _at(memory, offset: int):
    """`offset` bytes into host or device memory, as hipMemcpyAsync takes it: the object itself at
    0, else a view of a numpy array or the address of a pointer."""
    if not offset:
        return memory
    return memory[offset:] if isinstance(memory, np.ndarray) else int(memory) + offset


class HipLink(RuntimeBuffers):
    stream = STREAM

    def __init__(self, rt):
        self.rt, self.api, self.hip = rt, rt.api, rt.hip
        self.value_bytes = value_bytes(rt.info)
        self.issued = 0                     # bytes handed to hipMemcpyAsync (workloads/transfer.py)
        self.kinds = {"h2d": self.hip.hipMemcpyKind.hipMemcpyHostToDevice,
                      "d2h": self.hip.hipMemcpyKind.hipMemcpyDeviceToHost}
        self.streams, self.events = [rt.stream], []
        self.streams.append(self.api.call(self.hip.hipStreamCreate))
        self.events = [self.api.call(self.hip.hipEventCreate) for _ in range(2)]   # start, end
        self.ends = [self.api.call(self.hip.hipEventCreate) for _ in self.streams]  # each stream's, copy_each

    def host(self, nbytes: int, kind: str) -> HostBuffer:
        if kind in ("pinned", "mapped"):
            ptr = self.api.call(self.hip.hipHostMalloc, nbytes, 0)
            view = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(int(ptr)))
            return HostBuffer(ptr, view, kind, {"src": ptr})
        array = np.zeros(nbytes, np.uint8)
        return HostBuffer(None, array, kind, {"src": array})

    def mapped(self, nbytes: int) -> HostBuffer:
        host = self.host(nbytes, "mapped")
        try:
            ptr = self.api.call(self.hip.hipHostGetDevicePointer, host.handle, 0)
        except Exception:
            self.release(host)
            raise
        host.extra["arg"] = DeviceBuffer(ptr, nbytes)       # a pointer argument of the launch; never hipFree'd
        return host

    def release(self, buf) -> None:
        if isinstance(buf, HostBuffer):
            ptr, buf.handle, buf.array = buf.handle, None, None
            buf.extra.clear()
            if ptr is not None:
                self.api.call(self.hip.hipHostFree, ptr)
        else:
            self.rt.free(buf)

    def _one(self, job, stream, o: int, nbytes: int) -> None:
        """One copy of job (direction, host, device) at byte offset `o`, on `stream`."""
        direction, host, device = job
        near, far = _at(host.extra["src"], o), _at(device.ptr, o)
        dst, src = (far, near) if direction == "h2d" else (near, far)
        self.api.call(self.hip.hipMemcpyAsync, dst, src, nbytes, self.kinds[direction], stream)
        self.issued += nbytes

    def _issue(self, jobs, nbytes: int, at: list[int]) -> None:
        """Job i on stream i; the copies of a stream back to back (one at each offset of `at`),
        the streams side by side."""
        for o in at:
            for job, stream in zip(jobs, self.streams):
                self._one(job, stream, o, nbytes)

    def copy(self, jobs, nbytes: int, at: list[int]) -> float:
        if len(jobs) > len(self.streams):
            raise ValueError(f"{len(jobs)} copies at once, {len(self.streams)} streams")
        if not any(host.kind == "pageable" for _, host, _ in jobs):
            return self.copy_each(jobs, nbytes, [at] * len(jobs))[0]
        t0 = time.perf_counter()
        self._issue(jobs, nbytes, at)
        for stream in self.streams[:len(jobs)]:
            self.api.call(self.hip.hipStreamSynchronize, stream)
        return time.perf_counter() - t0

    def copy_each(self, jobs, nbytes: int, ats: list[list[int]]) -> tuple[float, list[float]]:
        """Job i's copies at the offsets ats[i] on stream i, issued in turn, the streams from one
        start event: the seconds until the last ends, and each stream's until its own end event."""
        if len(jobs) > len(self.streams):
            raise ValueError(f"{len(jobs)} copies at once, {len(self.streams)} streams")
        call, hip = self.api.call, self.hip
        start, end = self.events
        first = self.streams[0]
        call(hip.hipEventRecord, start, first)
        for stream in self.streams[1:len(jobs)]:
            call(hip.hipStreamWaitEvent, stream, start, 0)
        for k in range(max(len(at) for at in ats)):
            for job, stream, at in zip(jobs, self.streams, ats):
                if k < len(at):
                    self._one(job, stream, at[k], nbytes)
        for stream, mark in zip(self.streams[:len(jobs)], self.ends):
            call(hip.hipEventRecord, mark, stream)
            call(hip.hipStreamWaitEvent, first, mark, 0)
        call(hip.hipEventRecord, end, first)
        call(hip.hipEventSynchronize, end)
        each = [float(call(hip.hipEventElapsedTime, start, mark)) / 1e3 for mark in self.ends[:len(jobs)]]
        return float(call(hip.hipEventElapsedTime, start, end)) / 1e3, each

    def describe(self, kind: str) -> dict:
        host = {"pinned": "page-locked host memory (hipHostMalloc)",
                "pageable": "numpy (pageable) memory, staged by the runtime",
                "mapped": "page-locked host memory (hipHostMalloc), read through hipHostGetDevicePointer"}[kind]
        return {"host_memory": host, "engine": "hipMemcpyAsync (DMA engines)",
                "streams": "one per direction",
                "timed": "HIP events" if kind != "pageable"
                else "host wall clock, first copy issued to the streams synchronized"}

    def close(self) -> None:
        """Release the second stream and the events, each even when one before it fails."""
        steps = [(self.hip.hipEventDestroy, e) for e in self.events + self.ends]
        steps += [(self.hip.hipStreamDestroy, s) for s in self.streams[1:]]
        self.events, self.ends, self.streams = [], [], self.streams[:1]
        each(functools.partial(self.api.call, fn, arg) for fn, arg in steps)


def workload(test, variant, rt):
    kind = MappedReadWorkload if variant.name == "mapped" else TransferWorkload
    return kind(test, variant, HipLink(rt))

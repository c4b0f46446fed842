"""Host transfers on CUDA: cudaMemcpyAsync through the copy engines, on the runtime's stream and,
for both directions at once, a second one (the workload is peakbench/workloads/transfer.py).

`pinned` host memory is page-locked (cudaHostAlloc), the copies timed between CUDA events. `pageable` is a numpy array: the driver stages it through its own pinned buffers on
the CPU, so those copies are timed on the host, from the first call to the streams' completion.
`mapped` (transfer.h2d) is page-locked memory mapped into the device's address space
(cudaHostAllocMapped), read by the stream kernel: with unified addressing its host pointer is
the device pointer (CUDA C++ Programming Guide, Unified Virtual Address Space).
"""
from __future__ import annotations

import ctypes
import time

import cupy as cp
import numpy as np

from peakbench.kernels import STREAM
from peakbench.workloads.transfer import HostBuffer, MappedReadWorkload, RuntimeBuffers, TransferWorkload, value_bytes

# cudaMemcpyKind and cudaHostAlloc flags (CUDA Runtime API, driver_types.h)
KIND = {"h2d": 1, "d2h": 2}
# Page-locked memory of this context alone (cudaHostAllocDefault), not CuPy's pool's portable
# kind: both ways at once read 99.6-100.1 GB/s (the least of five 98.4) where the portable kind
# read 95.1-98.2 (94.1), one way the same 55.2-55.4 (PERFORMANCE_ANALYSIS.md, "Ahead of the peers").
HOST_ALLOC_DEFAULT = 0
HOST_ALLOC_MAPPED = 2


def support(test, rt) -> str | None:
    return None


def _pointer(buf) -> int:
    return buf.data.ptr if isinstance(buf, cp.ndarray) else int(buf)


class CudaLink(RuntimeBuffers):
    stream = STREAM

    def __init__(self, rt):
        self.rt = rt
        self.value_bytes = value_bytes(rt.info, engine=True)
        self.issued = 0                     # bytes handed to cudaMemcpyAsync (workloads/transfer.py)
        with rt.device:
            self.streams = [rt.stream, cp.cuda.Stream(non_blocking=True)]
            self.start, self.end = cp.cuda.Event(), cp.cuda.Event()
            self.ends = [cp.cuda.Event() for _ in self.streams]

    def host(self, nbytes: int, kind: str) -> HostBuffer:
        if kind == "pinned":
            with self.rt.device:
                ptr = cp.cuda.runtime.hostAlloc(nbytes, HOST_ALLOC_DEFAULT)
            view = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr))
            return HostBuffer(ptr, view, kind, {"ptr": ptr})
        array = np.zeros(nbytes, np.uint8)
        return HostBuffer(array, array, kind, {"ptr": array.ctypes.data})

    def mapped(self, nbytes: int) -> HostBuffer:
        with self.rt.device:
            ptr = cp.cuda.runtime.hostAlloc(nbytes, HOST_ALLOC_MAPPED)
        view = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr))
        # the kernel's pointer parameter, passed by value as 8 bytes
        return HostBuffer(ptr, view, "mapped", {"ptr": ptr, "arg": np.uint64(ptr)})

    def release(self, buf) -> None:
        if isinstance(buf, HostBuffer):
            handle, buf.array, buf.handle = buf.handle, None, None
            buf.extra.clear()
            if buf.kind in ("mapped", "pinned"):
                cp.cuda.runtime.freeHost(handle)
        else:
            self.rt.free(buf)

    def _one(self, job, stream, o: int, nbytes: int) -> None:
        """One copy of job (direction, host, device) at byte offset `o`, on `stream`."""
        direction, host, device = job
        dst, src = (_pointer(device), host.extra["ptr"]) if direction == "h2d" else (host.extra["ptr"], _pointer(device))
        cp.cuda.runtime.memcpyAsync(dst + o, src + o, nbytes, KIND[direction], stream.ptr)
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
        with self.rt.device:
            t0 = time.perf_counter()
            self._issue(jobs, nbytes, at)
            for stream in self.streams[:len(jobs)]:
                stream.synchronize()
            return time.perf_counter() - t0

    def copy_each(self, jobs, nbytes: int, ats: list[list[int]]) -> tuple[float, list[float]]:
        """Job i's copies at the offsets ats[i] on stream i, the streams from one start event: the
        seconds until the last ends, and each stream's until its own end event."""
        if len(jobs) > len(self.streams):
            raise ValueError(f"{len(jobs)} copies at once, {len(self.streams)} streams")
        first = self.streams[0]
        with self.rt.device:
            self.start.record(first)
            for stream in self.streams[1:len(jobs)]:      # the other streams start after the start event
                stream.wait_event(self.start)
            for k in range(max(len(at) for at in ats)):      # issued in turn, so both start at once
                for job, stream, at in zip(jobs, self.streams, ats):
                    if k < len(at):
                        self._one(job, stream, at[k], nbytes)
            for stream, end in zip(self.streams[:len(jobs)], self.ends):
                end.record(stream)
                first.wait_event(end)
            self.end.record(first)
            self.end.synchronize()
            each = [cp.cuda.get_elapsed_time(self.start, end) / 1e3 for end in self.ends[:len(jobs)]]
            return cp.cuda.get_elapsed_time(self.start, self.end) / 1e3, each

    def describe(self, kind: str) -> dict:
        host = {"pinned": "page-locked host memory (cudaHostAlloc, cudaHostAllocDefault)",
                "pageable": "numpy (pageable) memory, staged by the driver",
                "mapped": "page-locked host memory mapped for the device (cudaHostAlloc, cudaHostAllocMapped)"}[kind]
        return {"host_memory": host, "engine": "cudaMemcpyAsync (copy engines)",
                "streams": "one per direction, non-blocking",
                "timed": "CUDA events" if kind != "pageable"
                else "host wall clock, first copy issued to the streams synchronized"}

    def close(self) -> None:
        self.streams[0].synchronize()
        self.streams = self.streams[:1]


def workload(test, variant, rt):
    kind = MappedReadWorkload if variant.name == "mapped" else TransferWorkload
    return kind(test, variant, CudaLink(rt))

"""GPU-to-GPU copies on CUDA (transfer.p2p; the workload is peakbench/workloads/p2p.py).

Peer access is cudaDeviceCanAccessPeer and cudaDeviceEnablePeerAccess (on NVLink the copies then
go over the GPU link). `ce` is cudaMemcpyPeerAsync on a stream of the source GPU (the copy
engines); `kernel` is shaders/p2p.cu on the destination GPU, its loads reaching the source's
memory through peer access. One non-blocking stream per GPU; a copy of several jobs (both
directions of a pair) is timed between CUDA events on the first job's GPU, the other streams
starting after the start event and joined before the end one. No multicast object is made.
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from peakbench.workloads import p2p
from peakbench.workloads.transfer import value_bytes

PEER_ACCESS_ALREADY_ENABLED = 704     # cudaErrorPeerAccessAlreadyEnabled (driver_types.h)
BLOCK = 256
BLOCKS_PER_SM = 4
UNROLL = 4


def _count() -> int:
    return int(cp.cuda.runtime.getDeviceCount())


def support(test, rt) -> str | None:
    return p2p.support(_count())


class CudaPeers:
    def __init__(self, rt):
        self.rt, self.count = rt, _count()
        self.value_bytes = value_bytes(rt.info)
        self.streams, self.events, self.functions, self.modules = {}, {}, {}, []
        self.kernel = None

    def can_access(self, a: int, b: int) -> bool:
        return bool(cp.cuda.runtime.deviceCanAccessPeer(a, b))

    def enable(self, a: int, b: int) -> None:
        with cp.cuda.Device(a):
            try:
                cp.cuda.runtime.deviceEnablePeerAccess(b)
            except cp.cuda.runtime.CUDARuntimeError as e:
                if getattr(e, "status", None) != PEER_ACCESS_ALREADY_ENABLED:
                    raise

    def alloc(self, dev: int, nbytes: int):
        with cp.cuda.Device(dev):
            return cp.empty(nbytes, dtype=cp.uint8)

    def free(self, buf) -> None:
        """CuPy frees a buffer with its last reference (the workload drops its own)."""

    def write(self, buf, data: np.ndarray) -> None:
        with buf.device:
            buf[:data.size].set(data)
            cp.cuda.Device().synchronize()

    def read(self, buf, nbytes: int) -> np.ndarray:
        with buf.device:
            return buf[:nbytes].get()

    def _stream(self, dev: int):
        if dev not in self.streams:
            with cp.cuda.Device(dev):
                self.streams[dev] = cp.cuda.Stream(non_blocking=True)
                self.events[dev] = (cp.cuda.Event(), cp.cuda.Event(), cp.cuda.Event(disable_timing=True))
        return self.streams[dev]

    def _function(self, dev: int):
        """The copy kernel, built once for this runtime's GPU and loaded on each GPU that runs it."""
        if self.kernel is None:
            self.kernel = self.rt.compile("p2p.cu", {"UNROLL": UNROLL}, "p2p_copy", block=BLOCK, args="bbu",
                                          label="transfer.p2p copy")
        if dev not in self.functions:
            if dev == self.rt.index:
                self.functions[dev] = self.kernel.handle
            else:
                with cp.cuda.Device(dev):
                    module = cp.cuda.function.Module()
                    module.load(self.kernel.binary)
                    self.modules.append(module)
                    self.functions[dev] = module.get_function("p2p_copy")
        return self.functions[dev]

    def _issue(self, job, nbytes: int, engine: str, dev: int, stream) -> None:
        src_dev, src, dst_dev, dst = job
        if engine == "ce":
            cp.cuda.runtime.memcpyPeerAsync(dst.data.ptr, dst_dev, src.data.ptr, src_dev, nbytes, stream.ptr)
            return
        grid = self.rt.limits.units * BLOCKS_PER_SM
        args = (np.uint64(src.data.ptr), np.uint64(dst.data.ptr), np.uint32(nbytes // 16))
        self._function(dev)((grid,), (BLOCK,), args, stream=stream)

    def copy(self, jobs, nbytes: int, repeat: int, engine: str) -> float:
        if nbytes % 16:
            raise ValueError(f"a peer copy of {nbytes} bytes: the copy kernel moves 16-byte words")
        issuers = [job[0] if engine == "ce" else job[2] for job in jobs]
        if len(set(issuers)) != len(issuers):
            raise ValueError(f"two copies at once on one GPU's stream: {issuers}")
        streams = [self._stream(d) for d in issuers]
        if engine == "kernel":
            for d in issuers:
                self._function(d)
        first = issuers[0]
        start, end, _ = self.events[first]
        with cp.cuda.Device(first):
            start.record(streams[0])
        for d, stream in zip(issuers[1:], streams[1:]):
            with cp.cuda.Device(d):
                stream.wait_event(start)
        for _ in range(repeat):
            for job, d, stream in zip(jobs, issuers, streams):
                with cp.cuda.Device(d):
                    self._issue(job, nbytes, engine, d, stream)
        for d, stream in zip(issuers[1:], streams[1:]):
            joined = self.events[d][2]
            with cp.cuda.Device(d):
                joined.record(stream)
            with cp.cuda.Device(first):
                streams[0].wait_event(joined)
        with cp.cuda.Device(first):
            end.record(streams[0])
            end.synchronize()
            return cp.cuda.get_elapsed_time(start, end) / 1e3

    def describe(self, engine: str) -> dict:
        common = {"peer_access": "cudaDeviceEnablePeerAccess, each way", "streams": "one per GPU, non-blocking",
                  "timed": "CUDA events on the first copy's GPU, the other GPU's stream joined by events"}
        if engine == "ce":
            return {**common, "engine": "cudaMemcpyPeerAsync (copy engines) on the source GPU's stream"}
        w = self.rt.words
        return {**common, "engine": f"p2p_copy (shaders/p2p.cu) on the destination GPU, reading the source's"
                                    f" memory through peer access, {UNROLL} 16-byte loads in flight per thread",
                w.size_key: BLOCK, w.groups_key: self.rt.limits.units * BLOCKS_PER_SM}

    def evidence(self, engine: str) -> dict:
        if engine != "kernel":
            return {}
        self._function(self.rt.index)
        return self.rt.evidence(self.kernel)

    def close(self) -> None:
        streams, self.streams, self.events, self.functions, self.modules = self.streams, {}, {}, {}, []
        for dev, stream in streams.items():
            with cp.cuda.Device(dev):
                stream.synchronize()
        if self.kernel is not None:
            kernel, self.kernel = self.kernel, None
            self.rt.discard(kernel)


def workload(test, variant, rt):
    return p2p.P2pWorkload(test, variant, CudaPeers(rt), rt)

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

from peakbench.kernels.p2p import BLOCK, PeerCopies
from peakbench.workloads import p2p
from peakbench.workloads.transfer import value_bytes

PEER_ACCESS_ALREADY_ENABLED = 704     # cudaErrorPeerAccessAlreadyEnabled (driver_types.h)


def _count() -> int:
    return int(cp.cuda.runtime.getDeviceCount())


def support(test, rt) -> str | None:
    return p2p.support(_count())


class CudaPeers(PeerCopies):
    API = {"peer_access": "cudaDeviceEnablePeerAccess, each way", "streams": "one per GPU, non-blocking",
           "timed": "CUDA events on the first copy's GPU, the other GPU's stream joined by events",
           "ce": "cudaMemcpyPeerAsync (copy engines) on the source GPU's stream"}

    def __init__(self, rt):
        super().__init__(rt)
        self.count = _count()
        self.value_bytes = value_bytes(rt.info)

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

    # The API's verbs for PeerCopies ------------------------------------------------------------
    def on(self, dev: int):
        return cp.cuda.Device(dev)

    def new_stream(self, dev: int):
        return cp.cuda.Stream(non_blocking=True), (cp.cuda.Event(), cp.cuda.Event(), cp.cuda.Event(disable_timing=True))

    def load(self, dev: int, binary: bytes):
        module = cp.cuda.function.Module()
        module.load(binary)
        self.modules.append(module)
        return module.get_function("p2p_copy")

    def issue(self, job, nbytes: int, engine: str, dev: int, stream) -> None:
        src_dev, src, dst_dev, dst = job
        if engine == "ce":
            cp.cuda.runtime.memcpyPeerAsync(dst.data.ptr, dst_dev, src.data.ptr, src_dev, nbytes, stream.ptr)
            return
        args = (np.uint64(src.data.ptr), np.uint64(dst.data.ptr), np.uint32(nbytes // 16))
        self._function(dev)((self.grid(),), (BLOCK,), args, stream=stream)

    def record(self, event, stream) -> None:
        event.record(stream)

    def wait(self, stream, event) -> None:
        stream.wait_event(event)

    def elapsed(self, start, end) -> float:
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) / 1e3

    def close(self) -> None:
        streams, self.streams, self.events, self.functions, self.modules = self.streams, {}, {}, {}, []
        for dev, stream in streams.items():
            with cp.cuda.Device(dev):
                stream.synchronize()
        self.discard_kernel()


def workload(test, variant, rt):
    return p2p.P2pWorkload(test, variant, CudaPeers(rt), rt)

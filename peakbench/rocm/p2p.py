"""GPU-to-GPU copies on ROCm (transfer.p2p; the workload is peakbench/workloads/p2p.py).

Peer access is hipDeviceCanAccessPeer and hipDeviceEnablePeerAccess (on xGMI the copies then go
over the GPU link). `ce` is hipMemcpyPeerAsync on a stream of the source GPU (its DMA engines);
`kernel` is shaders/p2p.cu on the destination GPU, its loads reaching the source's memory through
peer access. One stream per GPU; a copy of several jobs (both directions of a pair) is timed
between HIP events on the first job's GPU, the other streams starting after the start event and
joined before the end one. Every call on another GPU sets that GPU current and this runtime's
back after.
"""
from __future__ import annotations

import functools
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from peakbench.backend import each
from peakbench.kernels.p2p import BLOCK, PeerCopies
from peakbench.rocm.runtime import DeviceBuffer, HipError, marshal
from peakbench.workloads import p2p
from peakbench.workloads.transfer import value_bytes

PEER_ACCESS_ALREADY_ENABLED = 704     # hipErrorPeerAccessAlreadyEnabled (hip_runtime_api.h)


def support(test, rt) -> str | None:
    return p2p.support(int(rt.api.call(rt.hip.hipGetDeviceCount)))


@dataclass
class PeerBuffer:
    """Device memory on GPU `dev`."""
    dev: int
    buf: DeviceBuffer


class HipPeers(PeerCopies):
    API = {"peer_access": "hipDeviceEnablePeerAccess, each way", "streams": "one per GPU",
           "timed": "HIP events on the first copy's GPU, the other GPU's stream joined by events",
           "ce": "hipMemcpyPeerAsync (DMA engines) on the source GPU's stream"}

    def __init__(self, rt):
        super().__init__(rt)
        self.api, self.hip = rt.api, rt.hip
        self.count = int(self.api.call(self.hip.hipGetDeviceCount))
        self.value_bytes = value_bytes(rt.info)

    @contextmanager
    def on(self, dev: int):
        """GPU `dev` current for the calls inside, this runtime's GPU again after."""
        self.api.call(self.hip.hipSetDevice, dev)
        try:
            yield
        finally:
            self.api.call(self.hip.hipSetDevice, self.rt.index)

    def can_access(self, a: int, b: int) -> bool:
        return bool(self.api.call(self.hip.hipDeviceCanAccessPeer, a, b))

    def enable(self, a: int, b: int) -> None:
        with self.on(a):
            try:
                self.api.call(self.hip.hipDeviceEnablePeerAccess, b, 0)
            except HipError as e:
                if e.code != PEER_ACCESS_ALREADY_ENABLED:
                    raise

    def alloc(self, dev: int, nbytes: int) -> PeerBuffer:
        with self.on(dev):
            return PeerBuffer(dev, DeviceBuffer(self.api.call(self.hip.hipMalloc, nbytes), nbytes))

    def free(self, buf: PeerBuffer) -> None:
        if buf.buf.ptr is not None:
            with self.on(buf.dev):
                self.api.call(self.hip.hipFree, buf.buf.ptr)
            buf.buf.ptr = None

    def write(self, buf: PeerBuffer, data: np.ndarray) -> None:
        with self.on(buf.dev):
            self.rt.upload(buf.buf, data.tobytes())

    def read(self, buf: PeerBuffer, nbytes: int) -> np.ndarray:
        with self.on(buf.dev):
            return np.frombuffer(self.rt.download(buf.buf, nbytes), np.uint8)

    # The API's verbs for PeerCopies ------------------------------------------------------------
    def new_stream(self, dev: int):
        call, hip = self.api.call, self.hip
        return call(hip.hipStreamCreate), tuple(call(hip.hipEventCreate) for _ in range(3))  # start, end, joined

    def load(self, dev: int, binary: bytes):
        module = self.api.call(self.hip.hipModuleLoadData, binary)
        self.modules.append((dev, module))
        return self.api.call(self.hip.hipModuleGetFunction, module, b"p2p_copy")

    def issue(self, job, nbytes: int, engine: str, dev: int, stream) -> None:
        src_dev, src, dst_dev, dst = job
        if engine == "ce":
            self.api.call(self.hip.hipMemcpyPeerAsync, dst.buf.ptr, dst_dev, src.buf.ptr, src_dev, nbytes, stream)
            return
        extra = marshal([src.buf, dst.buf, np.uint32(nbytes // 16)])
        self.api.call(self.hip.hipModuleLaunchKernel, self._function(dev), self.grid(), 1, 1, BLOCK, 1, 1,
                      sharedMemBytes=0, stream=stream, kernelParams=None, extra=extra)

    def record(self, event, stream) -> None:
        self.api.call(self.hip.hipEventRecord, event, stream)

    def wait(self, stream, event) -> None:
        self.api.call(self.hip.hipStreamWaitEvent, stream, event, 0)

    def elapsed(self, start, end) -> float:
        self.api.call(self.hip.hipEventSynchronize, end)
        return float(self.api.call(self.hip.hipEventElapsedTime, start, end)) / 1e3

    def close(self) -> None:
        """Release the streams, events and modules, each even when one before it fails."""
        hip = self.hip
        steps = [(dev, hip.hipStreamSynchronize, s) for dev, s in self.streams.items()]
        steps += [(dev, hip.hipModuleUnload, m) for dev, m in self.modules]
        steps += [(dev, hip.hipEventDestroy, e) for dev, events in self.events.items() for e in events]
        steps += [(dev, hip.hipStreamDestroy, s) for dev, s in self.streams.items()]
        self.streams, self.events, self.functions, self.modules = {}, {}, {}, []
        try:
            each((functools.partial(self._call_on, dev, fn, arg) for dev, fn, arg in steps), HipError)
        finally:
            self.discard_kernel()

    def _call_on(self, dev: int, fn, arg) -> None:
        with self.on(dev):
            self.api.call(fn, arg)


def workload(test, variant, rt):
    return p2p.P2pWorkload(test, variant, HipPeers(rt), rt)

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

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from peakbench.rocm.runtime import DeviceBuffer, HipError, marshal
from peakbench.workloads import p2p
from peakbench.workloads.transfer import value_bytes

PEER_ACCESS_ALREADY_ENABLED = 704     # hipErrorPeerAccessAlreadyEnabled (hip_runtime_api.h)
BLOCK = 256
BLOCKS_PER_CU = 4
UNROLL = 4


def support(test, rt) -> str | None:
    return p2p.support(int(rt.api.call(rt.hip.hipGetDeviceCount)))


@dataclass
class PeerBuffer:
    """Device memory on GPU `dev`."""
    dev: int
    buf: DeviceBuffer


class HipPeers:
    def __init__(self, rt):
        self.rt, self.api, self.hip = rt, rt.api, rt.hip
        self.count = int(self.api.call(self.hip.hipGetDeviceCount))
        self.value_bytes = value_bytes(rt.info)
        self.streams, self.events, self.functions, self.modules = {}, {}, {}, []
        self.kernel = None

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

    def _stream(self, dev: int):
        if dev not in self.streams:
            with self.on(dev):
                self.streams[dev] = self.api.call(self.hip.hipStreamCreate)
                self.events[dev] = tuple(self.api.call(self.hip.hipEventCreate) for _ in range(3))  # start, end, joined
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
                with self.on(dev):
                    module = self.api.call(self.hip.hipModuleLoadData, self.kernel.binary)
                    self.modules.append((dev, module))
                    self.functions[dev] = self.api.call(self.hip.hipModuleGetFunction, module, b"p2p_copy")
        return self.functions[dev]

    def _issue(self, job, nbytes: int, engine: str, dev: int, stream) -> None:
        src_dev, src, dst_dev, dst = job
        if engine == "ce":
            self.api.call(self.hip.hipMemcpyPeerAsync, dst.buf.ptr, dst_dev, src.buf.ptr, src_dev, nbytes, stream)
            return
        grid = self.rt.limits.units * BLOCKS_PER_CU
        extra = marshal([src.buf, dst.buf, np.uint32(nbytes // 16)])
        self.api.call(self.hip.hipModuleLaunchKernel, self._function(dev), grid, 1, 1, BLOCK, 1, 1,
                      sharedMemBytes=0, stream=stream, kernelParams=None, extra=extra)

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
        call, hip = self.api.call, self.hip
        first = issuers[0]
        start, end, _ = self.events[first]
        with self.on(first):
            call(hip.hipEventRecord, start, streams[0])
        for d, stream in zip(issuers[1:], streams[1:]):
            with self.on(d):
                call(hip.hipStreamWaitEvent, stream, start, 0)
        for _ in range(repeat):
            for job, d, stream in zip(jobs, issuers, streams):
                with self.on(d):
                    self._issue(job, nbytes, engine, d, stream)
        for d, stream in zip(issuers[1:], streams[1:]):
            joined = self.events[d][2]
            with self.on(d):
                call(hip.hipEventRecord, joined, stream)
            with self.on(first):
                call(hip.hipStreamWaitEvent, streams[0], joined, 0)
        with self.on(first):
            call(hip.hipEventRecord, end, streams[0])
            call(hip.hipEventSynchronize, end)
            return float(call(hip.hipEventElapsedTime, start, end)) / 1e3

    def describe(self, engine: str) -> dict:
        common = {"peer_access": "hipDeviceEnablePeerAccess, each way", "streams": "one per GPU",
                  "timed": "HIP events on the first copy's GPU, the other GPU's stream joined by events"}
        if engine == "ce":
            return {**common, "engine": "hipMemcpyPeerAsync (DMA engines) on the source GPU's stream"}
        w = self.rt.words
        return {**common, "engine": f"p2p_copy (shaders/p2p.cu) on the destination GPU, reading the source's"
                                    f" memory through peer access, {UNROLL} 16-byte loads in flight per thread",
                w.size_key: BLOCK, w.groups_key: self.rt.limits.units * BLOCKS_PER_CU}

    def evidence(self, engine: str) -> dict:
        if engine != "kernel":
            return {}
        self._function(self.rt.index)
        return self.rt.evidence(self.kernel)

    def close(self) -> None:
        """Release the streams, events and modules, each even when one before it fails."""
        hip = self.hip
        steps = [(dev, hip.hipStreamSynchronize, s) for dev, s in self.streams.items()]
        steps += [(dev, hip.hipModuleUnload, m) for dev, m in self.modules]
        steps += [(dev, hip.hipEventDestroy, e) for dev, events in self.events.items() for e in events]
        steps += [(dev, hip.hipStreamDestroy, s) for dev, s in self.streams.items()]
        self.streams, self.events, self.functions, self.modules = {}, {}, {}, []
        errors = []
        for dev, fn, arg in steps:
            try:
                with self.on(dev):
                    self.api.call(fn, arg)
            except HipError as e:
                errors.append(e)
        if self.kernel is not None:
            kernel, self.kernel = self.kernel, None
            self.rt.discard(kernel)
        if errors:
            raise errors[0]


def workload(test, variant, rt):
    return p2p.P2pWorkload(test, variant, HipPeers(rt), rt)

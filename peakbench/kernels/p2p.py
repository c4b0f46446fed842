"""What CUDA's and HIP's GPU-to-GPU copies share (transfer.p2p; the workload is
peakbench/workloads/p2p.py): the copy kernel of shaders/p2p.cu, compiled once and loaded on each
GPU that runs it, and copies of several jobs at once timed between events on the first job's GPU,
every other GPU's stream starting after the start event and joined before the end one.

A backend's PeerCopies gives its API's verbs:

    on(dev)                          a context in which GPU `dev` is current
    new_stream(dev) -> (stream, (start, end, joined))   on `dev` current: its stream and events
    load(dev, binary) -> function    the copy kernel's module loaded on GPU `dev`
    issue(job, nbytes, engine, dev, stream)             one copy: the copy engines or the kernel
    record(event, stream), wait(stream, event)          on the event's GPU current
    elapsed(start, end) -> seconds   after waiting for `end`
    API                              names for describe(): peer_access, streams, timed, ce
"""
from __future__ import annotations

BLOCK = 256               # threads per block of the copy kernel
BLOCKS_PER_UNIT = 4       # blocks per SM or CU
UNROLL = 4                # 16-byte loads in flight per thread


class PeerCopies:
    API: dict = {}

    def __init__(self, rt):
        self.rt = rt
        self.streams, self.events, self.functions, self.modules = {}, {}, {}, []
        self.kernel = None

    def grid(self) -> int:
        return self.rt.limits.units * BLOCKS_PER_UNIT

    def _stream(self, dev: int):
        if dev not in self.streams:
            with self.on(dev):
                self.streams[dev], self.events[dev] = self.new_stream(dev)
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
                    self.functions[dev] = self.load(dev, self.kernel.binary)
        return self.functions[dev]

    def copy(self, jobs, nbytes: int, repeat: int, engine: str) -> float:
        """`repeat` copies of every job at once, each on its issuing GPU's stream (the source's for
        the copy engines, the destination's for the kernel); seconds from the start event to the end."""
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
        with self.on(first):
            self.record(start, streams[0])
        for d, stream in zip(issuers[1:], streams[1:]):
            with self.on(d):
                self.wait(stream, start)
        for _ in range(repeat):
            for job, d, stream in zip(jobs, issuers, streams):
                with self.on(d):
                    self.issue(job, nbytes, engine, d, stream)
        for d, stream in zip(issuers[1:], streams[1:]):
            joined = self.events[d][2]
            with self.on(d):
                self.record(joined, stream)
            with self.on(first):
                self.wait(streams[0], joined)
        with self.on(first):
            self.record(end, streams[0])
            return self.elapsed(start, end)

    def describe(self, engine: str) -> dict:
        api = self.API
        common = {"peer_access": api["peer_access"], "streams": api["streams"], "timed": api["timed"]}
        if engine == "ce":
            return {**common, "engine": api["ce"]}
        return {**common, "engine": f"p2p_copy (shaders/p2p.cu) on the destination GPU, reading the source's"
                                    f" memory through peer access, {UNROLL} 16-byte loads in flight per thread",
                "workgroup_size": BLOCK, "workgroups": self.grid()}

    def evidence(self, engine: str) -> dict:
        if engine != "kernel":
            return {}
        self._function(self.rt.index)
        return self.rt.evidence(self.kernel)

    def discard_kernel(self) -> None:
        if self.kernel is not None:
            kernel, self.kernel = self.kernel, None
            self.rt.discard(kernel)

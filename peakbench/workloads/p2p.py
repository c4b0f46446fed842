"""GPU-to-GPU copies, written once: transfer.p2p over a backend's "peers", the few verbs each
API's peer path provides (peakbench/cuda/p2p.py, rocm/p2p.py).

A peers object is:

    count                            the GPUs this process sees
    value_bytes                      the copy size every pair is measured at
    can_access(a, b) -> bool         whether GPU a can address GPU b's memory (peer access)
    enable(a, b)                     turn that access on (a second call for a pair does nothing)
    alloc(dev, nbytes), free(buf)    device memory on GPU `dev`
    write(buf, data), read(buf, nbytes) -> np.ndarray
                                     contents by another path than copy() (the reference's way in and out)
    copy(jobs, nbytes, repeat, engine) -> s
                                     every job (src_dev, src_buf, dst_dev, dst_buf) at once, each on a
                                     stream of its own, `repeat` copies of `nbytes` back to back; engine
                                     "ce" (the copy engines) or "kernel" (a copy kernel on dst_dev reading
                                     src_dev's memory); the GPU seconds from the first start to the last end
    describe(engine) -> dict         what the engine and the timer are (params)
    evidence(engine) -> dict         what the copy kernel became (the kernel engine)
    close()

A pair is measured where each of its GPUs can access the other's memory (NVLink and xGMI give
both); any other pair's cell is null and the pair is listed under `no_peer_access`. One variant
measures every ordered pair (a, b), or with `_bidir` every pair {a, b} both ways at once, the
bytes of both directions counted (its cell is the same at (a, b) and (b, a)). The variant's value
is the median over the pairs measured; the test's is the best variant's. Every variant's N x N
matrix of GB/s (null on the diagonal) goes to evidence["p2p_matrix"][variant].
"""
from __future__ import annotations

import weakref
from itertools import combinations, permutations

import numpy as np

from peakbench.backend import Unsupported, release_on_failure
from peakbench.harness import guards
from peakbench.harness.stats import summarize
from peakbench.workload import Axis, Workload
from peakbench.workloads.transfer import SWEEP_FIRST, check_bytes, pattern

ONE_GPU = ("[hardware] one GPU: transfer.p2p needs two or more (it copies between the GPUs of one"
           " machine, and this process sees {count})")
NO_PEERS = "[hardware] no pair of the {count} GPUs has peer access both ways (no GPU link between them)"
SEED = 0x27D4EB2F
SAMPLES = 3                     # per pair: the pairs, not the samples, make the test's spread

# Every variant's matrix, per runtime: each variant's workload adds its own, and the result's
# evidence holds the whole dict, so the JSON keeps every variant's matrix, not only the best's.
_MATRICES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def support(count: int) -> str | None:
    return ONE_GPU.format(count=count) if count < 2 else None


def engine_of(variant) -> tuple[str, bool]:
    """("ce" | "kernel", both ways at once) of a variant name: ce, ce_bidir, kernel, kernel_bidir."""
    engine, _, bidir = variant.name.partition("_")
    return engine, bidir == "bidir"


def device_pattern(dev: int, nbytes: int) -> np.ndarray:
    """The bytes GPU `dev` sends: different per GPU, so a copy from the wrong peer fails."""
    return pattern(nbytes, SEED ^ (dev * 0x9E3779B1 & 0xFFFFFFFF))


class P2pWorkload(Workload):
    """One transfer.p2p variant over every pair of a backend's peers."""

    @release_on_failure
    def __init__(self, test, variant, peers, rt):
        self.test, self.variant, self.peers, self.name = test, variant, peers, variant.name
        self.engine, self.bidir = engine_of(variant)
        self.nbytes, self.count = peers.value_bytes, peers.count
        n = self.count
        self.access = [[None if a == b else bool(peers.can_access(a, b)) for b in range(n)] for a in range(n)]
        linked = [(a, b) for a, b in combinations(range(n), 2) if self.access[a][b] and self.access[b][a]]
        self.no_access = [[a, b] for a, b in permutations(range(n), 2)
                          if not (self.access[a][b] and self.access[b][a])]
        if not linked:
            raise Unsupported(NO_PEERS.format(count=n))
        for a, b in linked:
            peers.enable(a, b)
            peers.enable(b, a)
        # one job list per measurement: an ordered pair, or both directions of a pair at once
        self.pairs = tuple(((a, b), (b, a)) for a, b in linked) if self.bidir \
            else tuple(((a, b),) for a, b in sorted(linked + [(b, a) for a, b in linked]))
        self.pair = self.pairs[0]
        gpus = sorted({g for pair in linked for g in pair})
        self.buffers, self.sent = {}, {}   # GPU -> [source, destination]; the bytes its source holds
        for g in gpus:
            self.buffers[g] = [peers.alloc(g, self.nbytes)]
            self.buffers[g].append(peers.alloc(g, self.nbytes))
            self.sent[g] = device_pattern(g, self.nbytes)
            peers.write(self.buffers[g][0], self.sent[g])
        self.matrices = _MATRICES.setdefault(rt, {})
        self.params = {"transfer_bytes": self.nbytes, "gpus": n, "pairs": len(self.pairs),
                       "bytes_counted": "both directions" if self.bidir else "one direction",
                       "value_from": "the median over the pairs measured"
                                     + (" (each pair both ways at once)" if self.bidir else " (ordered pairs)"),
                       **peers.describe(self.engine)}
        if self.no_access:
            self.params["no_peer_access"] = self.no_access
        self.evidence = dict(peers.evidence(self.engine))

    def jobs(self, pair) -> list[tuple]:
        return [(a, self.buffers[a][0], b, self.buffers[b][1]) for a, b in pair]

    def copy(self, pair, repeat: int, nbytes: int | None = None) -> float:
        return self.peers.copy(self.jobs(pair), nbytes or self.nbytes, repeat, self.engine)

    def axis(self, spec=None) -> Axis:
        """Every pair, each calibrated, warmed up and timed SAMPLES times; the value the median
        over the pairs. The size reported is the most copies a sample of any pair took."""
        return Axis("pair", self.pairs, "median", samples=SAMPLES)

    def at(self, pair) -> None:
        self.pair = pair

    def run(self, repeat: int) -> float:
        return self.copy(self.pair, repeat)

    def items(self, repeat: int) -> int:
        return repeat * self.nbytes * len(self.pair)

    def over_points(self, measured: dict, value) -> None:
        """Each pair's median GB/s in the N x N matrix (null where not measured)."""
        matrix = [[None] * self.count for _ in range(self.count)]
        for pair, v in measured.items():
            for a, b in pair:
                matrix[a][b] = round(v.summary.median, 3)
        self.matrices[self.name] = matrix
        value.samples = [round(x, 3) for x in value.samples]
        value.summary = summarize(value.samples)
        value.evidence.update({"p2p_matrix": self.matrices, "p2p_access": self.access})

    def verify(self) -> str | None:
        """Every pair's copy checked against its source GPU's bytes, at a small size and at the
        full one (a copy of fewer bytes than asked fails the second). Each destination holds the
        complement of what it must receive first, so a copy that moves nothing fails on every byte."""
        def check(nbytes: int) -> str | None:
            for pair in self.pairs:
                for a, b in pair:
                    self.peers.write(self.buffers[b][1], ~self.sent[a][:nbytes])
                self.copy(pair, 1, nbytes)
                for a, b in pair:
                    got = self.peers.read(self.buffers[b][1], nbytes)
                    problem = check_bytes(got, self.sent[a][:nbytes], f"GPU {a} to GPU {b}, {nbytes} bytes")
                    if problem:
                        return problem
            return None
        return guards.at_counts((min(SWEEP_FIRST, self.nbytes), self.nbytes), check, "bytes", self.evidence)

    def close(self) -> None:
        buffers, self.buffers, self.sent = getattr(self, "buffers", {}), {}, {}
        for pair in buffers.values():
            for buf in pair:
                self.peers.free(buf)
        self.peers.close()

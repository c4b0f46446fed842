"""transfer.p2p's workload against a peers object of numpy memory (no API): every pair verified
and measured, pairs without peer access null in the matrix and listed, both directions of a
pair counted, every variant's matrix kept, planted faults caught (a copy that moves nothing, a
short copy, bytes from the wrong GPU), one GPU unsupported, and the session's result."""
from __future__ import annotations

import re
import time

import numpy as np
import pytest

from peakbench.backend import Unsupported
from peakbench.catalog import transfer as catalog
from peakbench.harness import guards, runner
from peakbench.harness.runner import Settings
from peakbench.harness.session import run_test, with_spec
from peakbench.specs import load_database, find
from peakbench.workloads import p2p

TEST = catalog.P2P
VARIANTS = {v.name: v for v in TEST.variants}
QUICK = Settings(sample_s=0.001, warmup_s=0.0, min_samples=3, max_samples=3, budget_s=0.2)
NBYTES = 1 << 20
MS = 1.0                  # GPU time of one copy of NBYTES on one stream


class FakePeers:
    """`count` GPUs; `links`: the (a, b) where a can access b's memory. A copy of several jobs
    runs them side by side: its time is MS per copy of the busiest stream."""

    def __init__(self, count=4, links=None):
        self.count, self.value_bytes = count, NBYTES
        self.links = set(links if links is not None else
                         ((a, b) for a in range(count) for b in range(count) if a != b))
        self.enabled, self.copies, self.closed = set(), [], 0
        self.short, self.skip, self.swap = 0, False, False
        self.live = {}

    def can_access(self, a, b):
        return (a, b) in self.links

    def enable(self, a, b):
        assert (a, b) in self.links, f"enabled GPU {a}'s access to {b} without a link"
        self.enabled.add((a, b))

    def alloc(self, dev, nbytes):
        buf = np.zeros(nbytes, np.uint8)
        self.live[id(buf)] = dev
        return buf

    def free(self, buf):
        del self.live[id(buf)]

    def write(self, buf, data):
        buf[:data.size] = data

    def read(self, buf, nbytes):
        return buf[:nbytes].copy()

    def copy(self, jobs, nbytes, repeat, engine):
        for src_dev, src, dst_dev, dst in jobs:
            assert (dst_dev, src_dev) in self.enabled and (src_dev, dst_dev) in self.enabled
            self.copies.append((engine, src_dev, dst_dev, nbytes, repeat))
            if self.skip:
                continue
            source = jobs[0][1] if self.swap else src            # every destination gets the first GPU's bytes
            n = nbytes - self.short
            dst[:n] = source[:n]
        return repeat * MS / 1e3 * nbytes / NBYTES

    def describe(self, engine):
        return {"engine": engine}

    def evidence(self, engine):
        return {"kernel": "p2p_copy"} if engine == "kernel" else {}

    def close(self):
        self.closed += 1


class Rt:
    """A runtime's stand-in: the key the matrices of one device's variants share."""


def workload(peers, name="ce", rt=None):
    return p2p.P2pWorkload(TEST, VARIANTS[name], peers, rt or Rt())


def test_the_catalog_entry_counts_bytes_and_offers_both_engines_both_ways():
    assert (TEST.unit, TEST.kernel, TEST.per_item(VARIANTS["ce"])) == ("GB/s", "p2p", 1)
    assert list(VARIANTS) == ["ce", "ce_bidir", "kernel", "kernel_bidir"]
    assert [p2p.engine_of(v) for v in TEST.variants] == [("ce", False), ("ce", True), ("kernel", False),
                                                         ("kernel", True)]


def test_one_gpu_is_unsupported_with_the_reason():
    assert p2p.support(1) == ("[hardware] one GPU: transfer.p2p needs two or more (it copies between the GPUs"
                              " of one machine, and this process sees 1)")
    assert p2p.support(2) is None


def take(w, clock):
    """The runner's measurement of a P2P workload (its axis of pairs)."""
    return runner.take(w, w.test, w.variant, QUICK, clock, runner.Load())


@pytest.mark.parametrize("name", VARIANTS)
def test_every_pair_is_verified_measured_and_in_the_matrix(name):
    peers = FakePeers(4)
    w = workload(peers, name)
    try:
        assert w.verify() is None
        assert w.evidence["guards"]["iterations"]["why"] == f"bytes checked at 65536 and {NBYTES}"
        checked = {(c[1], c[2]) for c in peers.copies}
        assert checked == {(a, b) for a in range(4) for b in range(4) if a != b}
        v = take(w, lambda: 1500.0)
        matrix = v.evidence["p2p_matrix"][name]
        one_way = NBYTES / (MS / 1e3) / 1e9
        want = 2 * one_way if name.endswith("_bidir") else one_way
        for a in range(4):
            assert matrix[a][a] is None
            assert all(matrix[a][b] == pytest.approx(want, rel=1e-3) for b in range(4) if b != a)
        assert v.summary.samples == (6 if name.endswith("_bidir") else 12)      # pairs {a, b} or (a, b)
        assert v.clock_mhz == 1500.0
        assert v.params["bytes_counted"] == ("both directions" if name.endswith("_bidir") else "one direction")
    finally:
        w.close()
    assert not peers.live and peers.closed == 1


def test_bidirectional_runs_both_directions_at_once_and_counts_both():
    peers = FakePeers(2)
    w = workload(peers, "kernel_bidir")
    try:
        peers.copies.clear()
        seconds = w.copy(w.pairs[0], 3)
        assert seconds == pytest.approx(3e-3)                 # side by side: the time of one stream
        assert sorted((c[1], c[2]) for c in peers.copies) == [(0, 1), (1, 0)]
        w.at(w.pairs[0])
        assert w.items(3) == 2 * 3 * NBYTES
    finally:
        w.close()


def test_pairs_without_peer_access_are_null_and_listed():
    linked = {(0, 1), (1, 0), (1, 2), (2, 1), (0, 2), (2, 0), (3, 0)}   # GPU 3 reaches 0, not back
    peers = FakePeers(4, linked)
    w = workload(peers, "ce")
    try:
        assert w.verify() is None
        v = take(w, lambda: None)
        matrix = v.evidence["p2p_matrix"]["ce"]
        assert all(matrix[3][b] is None and matrix[b][3] is None for b in range(4))
        assert all(matrix[a][b] for a in range(3) for b in range(3) if a != b)
        assert v.params["no_peer_access"] == [[0, 3], [1, 3], [2, 3], [3, 0], [3, 1], [3, 2]]
        assert v.evidence["p2p_access"][3] == [True, False, False, None]
        assert (3, 0) not in peers.enabled and v.summary.samples == 6
    finally:
        w.close()


def test_no_linked_pair_is_unsupported():
    with pytest.raises(Unsupported, match=r"^\[hardware\] no pair of the 2 GPUs has peer access both ways"):
        workload(FakePeers(2, {(0, 1)}))


@pytest.mark.parametrize("fault, found", [
    ("skip", "GPU 0 to GPU 1, 65536 bytes: 65536 of 65536 bytes differ from the host data (first at byte 0)"),
    ("short", "GPU 0 to GPU 1, 65536 bytes: 1 of 65536 bytes differ from the host data (first at byte 65535)"),
    ("swap", "GPU 1 to GPU 0, 65536 bytes: ")])
def test_a_planted_fault_fails_verification(fault, found):
    """A copy that moves nothing, one a byte short, one that delivers the other GPU's bytes."""
    peers = FakePeers(2)
    w = workload(peers, "ce_bidir")
    try:
        setattr(peers, fault, 1 if fault == "short" else True)
        assert found in w.verify()
    finally:
        w.close()


def test_a_copy_short_only_at_the_full_size_is_the_iterations_guard():
    peers = FakePeers(2)
    w = workload(peers, "ce")
    copy = peers.copy

    def short_at_full(jobs, nbytes, repeat, engine):
        peers.short = 1 if nbytes == NBYTES else 0
        return copy(jobs, nbytes, repeat, engine)
    peers.copy = short_at_full
    try:
        problem = w.verify()
        assert problem.startswith("guard iterations: output after 1048576 bytes differs from the host's"
                                  " (it matched after 65536): GPU 0 to GPU 1, 1048576 bytes: 1 of 1048576 bytes differ")
    finally:
        w.close()


def test_every_variant_matrix_is_kept_in_one_runs_evidence():
    rt, matrices = Rt(), []
    for name in ("ce", "kernel_bidir"):
        w = workload(FakePeers(2), name, rt)
        try:
            matrices.append(take(w, lambda: None).evidence["p2p_matrix"])
        finally:
            w.close()
    assert matrices[0] is matrices[1] and set(matrices[0]) == {"ce", "kernel_bidir"}
    assert set(workload(FakePeers(2), "ce", Rt()).matrices) == set()          # another device: its own


class Device:
    """The Device interface over FakePeers, as a backend's table would serve it."""

    def __init__(self, count=4, peers=None):
        self.info = type("Info", (), {"kind": "gpu", "name": "Test GPU"})()
        self.count, self.rt, self.make_peers = count, Rt(), peers or FakePeers
        self.peers = []

    def support(self, test):
        return p2p.support(self.count)

    def variants(self, test):
        return test.variants

    def prepare(self, test, variant, settings=None, spec=None):
        peers = self.make_peers(self.count)
        self.peers.append(peers)
        return p2p.P2pWorkload(test, variant, peers, self.rt)

    def clock_mhz(self):
        return None


def test_the_session_reports_the_best_variant_median_with_every_matrix_and_the_spec():
    spec = find(load_database(), "NVIDIA H200 SXM")
    device = Device(4)
    result = run_test(device, TEST, QUICK, lambda line: None, spec)
    assert result.status == "ok", result.reason
    one_way = round(NBYTES / (MS / 1e3) / 1e9, 3)
    assert result.params["variant"] in ("ce_bidir", "kernel_bidir")
    assert result.value == pytest.approx(2 * one_way, rel=1e-3)
    assert set(result.evidence["p2p_matrix"]) == set(VARIANTS)
    shown = with_spec(result, spec)
    assert shown.spec_value == 900.0 and shown.pct_of_spec == pytest.approx(100 * result.value / 900, abs=0.1)
    assert all(p.closed == 1 and not p.live for p in device.peers)


def test_the_session_reports_one_gpu_unsupported():
    result = run_test(Device(1), TEST, QUICK, lambda line: None)
    assert result.status == "unsupported" and result.reason.startswith("[hardware] one GPU: transfer.p2p needs two")


class TimedPeers(FakePeers):
    """Copies that take the time they report (the host waits it out, as for a GPU's copy), each
    reading one GPU time to the bit unless `tick` gives the timer a real one's jitter."""
    tick = 0.0

    def copy(self, jobs, nbytes, repeat, engine):
        seconds = super().copy(jobs, nbytes, repeat, engine)
        time.sleep(seconds)
        self.copied = getattr(self, "copied", 0) + 1
        return seconds + self.tick * (self.copied % 3)


class JitteredPeers(TimedPeers):
    tick = 1e-9


# Pairs timed 3 times with no warm-up time, in launches of the timer guard's MIN_WALL_S or more
LONG = Settings(sample_s=0.003, warmup_s=0.0, min_samples=3, max_samples=3, budget_s=0.2)


def test_a_pair_whose_every_copy_reads_one_time_fails_the_timer_guard():
    result = run_test(Device(2, TimedPeers), TEST, LONG, lambda line: None)
    assert result.status == "failed" and "a time replayed, not measured" in result.reason, result.reason


def test_a_pair_timed_as_a_real_timer_reads_is_ok():
    result = run_test(Device(2, JitteredPeers), TEST, LONG, lambda line: None)
    assert result.status == "ok", result.reason
    why = result.evidence["guards"]["timer"]["why"]
    launches = re.search(r"GPU times in (\d+) launches", why)
    assert launches and int(launches.group(1)) >= guards.REPLAYED_LAUNCHES, why

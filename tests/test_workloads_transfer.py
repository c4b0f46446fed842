"""The transfer workload against a link made of numpy arrays: what it verifies (planted faults
caught at the size they show), what it counts, the sweep, and that it releases what it made."""
from __future__ import annotations

import numpy as np
import pytest

from peakbench.catalog import Catalog, transfer as catalog
from peakbench.harness import runner
from peakbench.harness.runner import rate
from peakbench.workloads import transfer
from peakbench.workloads.transfer import HostBuffer, TransferWorkload

GBS = 10e9         # the fake link's rate per direction


class NumpyLink:
    """Device buffers are numpy arrays; copy() moves the bytes and reports nbytes / GBS seconds per
    copy. `fault`: "short" moves half of a copy larger than 64 KiB, "none" moves nothing,
    "crossed" puts the h2d data in every device buffer, "first" moves a launch's first copy only."""

    def __init__(self, value_bytes=1 << 20, fault=None):
        self.value_bytes, self.fault = value_bytes, fault
        self.live, self.calls, self.closed = set(), [], False

    def host(self, nbytes, kind):
        buf = HostBuffer(object(), np.zeros(nbytes, np.uint8), kind)
        self.live.add(id(buf))
        return buf

    def device(self, nbytes):
        buf = np.zeros(nbytes, np.uint8)
        self.live.add(id(buf))
        return buf

    def write_device(self, buf, data):
        buf[:data.size] = data

    def read_device(self, buf, nbytes):
        return buf[:nbytes].copy()

    def clear_device(self, buf):
        buf[:] = 0

    def copy(self, jobs, nbytes, at):
        self.calls.append(([j[0] for j in jobs], nbytes, len(at)))
        self.offsets = list(at)
        moved = 0 if self.fault == "none" else nbytes // 2 if self.fault == "short" and nbytes > 65536 else nbytes
        h2d = next((host for d, host, _ in jobs if d == "h2d"), None)
        for o in at[:1] if self.fault == "first" else at:
            part = slice(o, o + moved)
            for direction, host, device in jobs:
                if direction == "h2d" or self.fault == "crossed":
                    device[part] = (h2d or host).array[part]
                else:
                    host.array[part] = device[part]
        return len(at) * nbytes / GBS

    def describe(self, kind):
        return {"host_memory": kind}

    def release(self, buf):
        self.live.remove(id(buf))

    def close(self):
        self.closed = True


TESTS = {t.name: t for t in catalog.HOST_LINK}


def make(name, kind="pinned", **link):
    test = TESTS[name]
    variant = next(v for v in test.variants if v.name == kind)
    link = NumpyLink(**link)
    return TransferWorkload(test, variant, link), link


def test_the_catalog_has_three_directions_two_host_memories_and_counts_bytes():
    assert [t.name for t in catalog.HOST_LINK] == ["transfer.h2d", "transfer.d2h", "transfer.bidir"]
    for t in catalog.HOST_LINK:
        kinds = ["pinned", "pageable"] + (["mapped"] if t.name == "transfer.h2d" else [])
        assert t.unit == "GB/s" and t.kernel == "transfer" and [v.name for v in t.variants] == kinds
        assert t.per_item(t.variants[0]) == 1
    assert Catalog(list(catalog.HOST_LINK)).select(["transfer.*"]) == list(catalog.HOST_LINK)


@pytest.mark.parametrize("name", TESTS)
@pytest.mark.parametrize("kind", ["pinned", "pageable"])
def test_a_correct_link_verifies_at_two_sizes(name, kind):
    w, link = make(name, kind)
    assert w.verify() is None
    assert w.evidence["guards"]["iterations"]["why"] == f"bytes checked at 65536 and {1 << 20}"
    assert [c[1] for c in link.calls] == [65536, 1 << 20]
    assert w.params["transfer_bytes"] == 1 << 20 and w.params["host_memory"] == kind


@pytest.mark.parametrize("name", TESTS)
def test_a_copy_that_moves_nothing_fails_at_the_first_size(name):
    w, _ = make(name, fault="none")
    problem = w.verify()
    assert problem.startswith(("h2d of 65536 bytes: 65", "d2h of 65536 bytes: 65")), problem
    assert "differ from the host data" in problem


@pytest.mark.parametrize("name", TESTS)
def test_a_copy_that_moves_part_fails_at_the_full_size(name):
    w, _ = make(name, fault="short")
    problem = w.verify()
    assert problem.startswith("guard iterations: output after 1048576 bytes differs"), problem
    assert f"first at byte {(1 << 20) // 2}" in problem


def test_bidir_with_its_directions_crossed_fails():
    w, _ = make("transfer.bidir", fault="crossed")
    assert "d2h of 65536 bytes" in w.verify()


def test_each_direction_carries_its_own_data():
    w, _ = make("transfer.bidir")
    h2d, d2h = w.lanes
    assert (h2d.direction, d2h.direction) == ("h2d", "d2h")
    assert not np.array_equal(h2d.data, d2h.data)
    assert np.array_equal(d2h.device, d2h.data) and np.array_equal(h2d.host.array, h2d.data)


def test_bidir_counts_the_bytes_of_both_directions_and_runs_them_at_once():
    w, link = make("transfer.bidir")
    seconds = w.run(3)
    assert link.calls[-1] == (["h2d", "d2h"], 1 << 20, 3)
    assert w.items(3) == 2 * 3 * (1 << 20)
    assert rate(w.items(3), seconds, 1, "GB/s") == pytest.approx(2 * GBS / 1e9)
    one, _ = make("transfer.h2d")
    assert one.items(3) == 3 * (1 << 20)


def test_the_sweep_is_a_series_of_sizes_on_the_pinned_variant_only():
    w, link = make("transfer.h2d", value_bytes=4 << 20)
    series = runner.sweep(w.series()).series()
    assert series["transfer_bytes"] == [64 << 10, 256 << 10, 1 << 20, 4 << 20]
    assert series["GB/s"] == pytest.approx([GBS / 1e9] * 4)
    assert {c[1] for c in link.calls} == set(series["transfer_bytes"])
    pageable, _ = make("transfer.h2d", "pageable")
    assert pageable.series() is None


def test_sweep_sizes_end_at_the_value_size():
    assert transfer.sweep_sizes(1 << 20) == [64 << 10, 256 << 10, 1 << 20]
    assert transfer.sweep_sizes(2 << 20) == [64 << 10, 256 << 10, 1 << 20, 2 << 20]


@pytest.mark.parametrize("name", TESTS)
def test_close_releases_every_buffer_and_the_link(name):
    w, link = make(name)
    assert link.live
    w.close()
    assert not link.live and link.closed
    w.close()                     # twice is safe


def test_a_failed_allocation_releases_what_was_made():
    class Failing(NumpyLink):
        def device(self, nbytes):
            if self.live:
                raise MemoryError("no device memory")
            return super().device(nbytes)
    link = Failing(1 << 20)
    with pytest.raises(MemoryError):
        TransferWorkload(TESTS["transfer.h2d"], TESTS["transfer.h2d"].variants[0], link)
    assert not link.live and link.closed


def test_the_pattern_is_cheap_deterministic_and_not_constant():
    a = transfer.pattern(1 << 20, 1)
    assert a.dtype == np.uint8 and a.size == 1 << 20
    assert np.array_equal(a, transfer.pattern(1 << 20, 1)) and not np.array_equal(a, transfer.pattern(1 << 20, 2))
    assert len(np.unique(a)) == 256
    assert transfer.pattern(7, 1).size == 7


def test_back_to_back_copies_move_different_bytes_until_the_buffer_wraps():
    assert transfer.offsets(65536, 1 << 20, 5) == [0, 65536, 131072, 196608, 262144]
    assert transfer.offsets(1 << 20, 1 << 20, 3) == [0, 0, 0]           # the value's size: the whole buffer
    assert transfer.offsets(100, 250, 5) == [0, 100, 0, 100, 0]          # only whole copies fit
    w, link = make("transfer.d2h")
    quarter = w.nbytes // 4
    w.run(6, quarter)                     # what a size sweep's launch asks of the link
    assert link.offsets == [0, quarter, 2 * quarter, 3 * quarter, 0, quarter]
    w.run(2)
    assert link.offsets == [0, 0]


class UnevenLink(NumpyLink):
    """A link that times each direction (copy_each) and carries both ways at once unevenly, as an
    H100 host did (nvbandwidth: h2d 48.32 GB/s while d2h runs, d2h 30.77 while h2d runs, one way
    alone 55): a direction that ends first leaves the other the link to itself. `lose`: the last
    piece of the faster direction is never copied."""
    BOTH = {"h2d": 48.32e9, "d2h": 30.77e9}
    ALONE = 55e9

    def __init__(self, lose=False, **kw):
        super().__init__(**kw)
        self.lose = lose

    def copy_each(self, jobs, nbytes, ats):
        for (direction, host, device), at in zip(jobs, ats):
            for o in at[:-1] if self.lose and len(at) > min(len(a) for a in ats) else at:
                if direction == "h2d":
                    device[o:o + nbytes] = host.array[o:o + nbytes]
                else:
                    host.array[o:o + nbytes] = device[o:o + nbytes]
        left = {d: len(at) * nbytes for (d, _, _), at in zip(jobs, ats)}
        t, ends = 0.0, {}
        while left:
            rates = self.BOTH if len(left) == 2 else {d: self.ALONE for d in left}
            step = min(left[d] / rates[d] for d in left)
            t += step
            for d in list(left):
                left[d] -= rates[d] * step
                if left[d] <= 1e-6:
                    ends[d], left = t, {k: v for k, v in left.items() if k != d}
        return t, [ends[d] for d, _, _ in jobs]


def launch(w, size: int) -> float:
    """GB/s of one launch of `size`: its bytes asked for after it ran, as the runner asks."""
    seconds = w.run(size)
    return rate(w.items(size), seconds, 1, "GB/s")


def test_both_directions_are_balanced_to_end_together_and_read_the_links_rate_both_ways():
    """Equal bytes each way read 73.3 GB/s on such a link (the slower direction's tail alone),
    where it carries 79.1 both ways: the faster direction given more pieces reads that."""
    test = TESTS["transfer.bidir"]
    w = TransferWorkload(test, test.variants[0], UnevenLink(value_bytes=8 << 20))
    first = launch(w, 2)
    assert first == pytest.approx(73.3, abs=0.2)
    for _ in range(6):
        balanced = launch(w, 2)
    assert balanced == pytest.approx(48.32 + 30.77, rel=0.01), balanced
    pieces = w.params["balanced"]
    slow = 2 * w.per_copy()                                    # the slower direction: size x pieces a copy
    assert pieces["d2h"]["pieces"] == slow and abs(pieces["h2d"]["pieces"] / slow - 48.32 / 30.77) < 0.1, pieces
    assert w.items(2) == (pieces["h2d"]["pieces"] + pieces["d2h"]["pieces"]) * w.piece()
    # the measured guard copies the balanced counts, each piece at its own offset
    problem, why = w.after_timing(2)
    assert problem is None and why.startswith(f"the measured {slow} and {pieces['h2d']['pieces']} pieces a launch"), why
    # one direction alone, or pageable memory, is copied whole, as before
    one = TransferWorkload(TESTS["transfer.h2d"], TESTS["transfer.h2d"].variants[0], UnevenLink())
    pageable = TransferWorkload(test, next(v for v in test.variants if v.name == "pageable"), UnevenLink())
    assert not one.balanced and not pageable.balanced and "pieces" not in one.params | pageable.params


class DippingLink(UnevenLink):
    """UnevenLink whose h2d carries 0.8x its rate in one launch (the `dip`-th), as one launch's did
    on an H200 (PERFORMANCE_ANALYSIS.md, twentieth round)."""

    def __init__(self, dip, **kw):
        super().__init__(**kw)
        self.dip, self.launches = dip, 0

    def copy_each(self, jobs, nbytes, ats):
        self.launches += 1
        self.BOTH = dict(UnevenLink.BOTH, h2d=0.8 * UnevenLink.BOTH["h2d"]) if self.launches == self.dip else UnevenLink.BOTH
        return super().copy_each(jobs, nbytes, ats)


def test_one_launchs_dip_does_not_swing_the_next_launchs_split():
    """The split follows each direction's median pace over the last launches: paced by the dipped
    launch alone, the next two gave d2h so many pieces that h2d ended early and d2h ran alone
    (read 2.7% and 1.1% low here)."""
    test = TESTS["transfer.bidir"]
    w = TransferWorkload(test, test.variants[0], DippingLink(dip=15, value_bytes=8 << 20))
    rates = [launch(w, 16) for _ in range(18)]
    steady, dipped = rates[13], rates[14]
    assert steady == pytest.approx(48.32 + 30.77, rel=0.005), rates
    assert dipped < 0.9 * steady, rates                  # the dip itself is measured as it was
    assert rates[15:] == pytest.approx([steady] * 3, rel=0.001), rates


def test_a_lost_piece_of_the_balanced_copies_fails_the_measured_guard():
    test = TESTS["transfer.bidir"]
    w = TransferWorkload(test, test.variants[0], UnevenLink(value_bytes=8 << 20, lose=True))
    for _ in range(4):
        w.run(2)
    problem, _ = w.after_timing(2)
    assert problem and problem.startswith(f"the measured {2 * w.per_copy()} and ") and "h2d:" in problem, problem


def test_a_direction_whose_time_reads_almost_nothing_gets_at_most_four_times_the_pieces():
    class Instant(UnevenLink):
        def copy_each(self, jobs, nbytes, ats):
            seconds, ends = super().copy_each(jobs, nbytes, ats)
            return seconds, [ends[0], 1e-9]
    test = TESTS["transfer.bidir"]
    w = TransferWorkload(test, test.variants[0], Instant(value_bytes=8 << 20))
    w.run(2)
    w.run(2)
    assert w.params["balanced"]["d2h"]["pieces"] == transfer.BALANCE_MOST * 2 * w.per_copy()


@pytest.mark.parametrize("most, copy, piece", [(32 << 20, 64 << 20, 32 << 20), (1 << 20, 8 << 20, 1 << 20),
                                               (32 << 20, 8 << 20, 4 << 20), (32 << 20, 12 << 10, 4 << 10),
                                               (32 << 20, 4 << 10, 4 << 10)])
def test_pieces_are_32_mib_at_most_two_a_copy_at_least_and_whole_pages(monkeypatch, most, copy, piece):
    """Pieces of 32 MiB, half the copy where that is less, never under a page: a 64 MiB copy is
    not cut into 8 MiB pieces, with which an H200's d2h lane read lower (PERFORMANCE_ANALYSIS.md,
    twentieth round, item 1)."""
    assert transfer.PIECE_BYTES == 32 << 20
    monkeypatch.setattr(transfer, "PIECE_BYTES", most)       # the cap, where a copy of 256 MiB would meet it
    test = TESTS["transfer.bidir"]
    w = TransferWorkload(test, test.variants[0], UnevenLink(value_bytes=copy))
    assert w.piece() == piece and w.params["piece_bytes"] == piece
    assert w.per_copy() == max(1, copy // piece) and w.params["pieces"].startswith(f"{w.per_copy()} a copy")


def test_copies_lost_after_the_first_fail_the_measured_guard_even_at_millions_a_launch():
    """A launch that does its first copy only is so short that calibration grows it to max_size
    copies, more than the buffers have 4 KiB slots for: it is checked at as many as fit."""
    w, _ = make("transfer.h2d", fault="first")
    problem, _ = w.after_timing(1 << 24)
    assert problem and problem.startswith("the measured 256 (of the 16777216 timed) copies a launch"), problem
    good, link = make("transfer.h2d")
    assert good.after_timing(1 << 24) == (None, "the measured 256 (of the 16777216 timed) copies a launch, 4096"
                                                " bytes each at its own offset, all arrived")
    assert link.calls[-1] == (["h2d"], 4096, 256)          # the copies checked are the copies told

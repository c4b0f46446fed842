"""Host transfers on ROCm against the fake HIP runtime, extended here with page-locked host memory
and asynchronous copies: the calls the link makes (hipHostMalloc, hipMemcpyAsync on one stream per
direction, the events around them), the bytes they move, verification catching a short copy, and
every resource released."""
from __future__ import annotations

import ctypes
import time

import numpy as np
import pytest

import fake_hip
from fake_hip import FakePointer, api
from peakbench.catalog import transfer as catalog
from peakbench.harness.runner import Settings
from peakbench.harness.session import run_test
from peakbench.workloads import transfer
from peakbench.workloads import transfer as workload

TESTS = {t.name: t for t in catalog.HOST_LINK}
QUICK = Settings(sample_s=0.001, warmup_s=0.0, min_samples=3, max_samples=3, budget_s=0.2)
MS = 0.5           # a copy's time where a test sets the fake's `ms` (copies on two streams run side by side)


class TransferHip(fake_hip.FakeHip):
    """FakeHip with host memory that is real (ctypes buffers at real addresses, as hipHostMalloc's
    pointer is) and hipMemcpyAsync. `short`: bytes an async copy leaves out."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.host: dict[int, ctypes.Array] = {}
        self.copies: list[tuple] = []
        self.waits: list[tuple] = []
        self.short = 0
        self.ms = None                 # ms a copy of copy_bytes on its stream, where set
        self.copy_bytes = 1 << 20
        self.lane: dict = {}           # each stream's time in ms (the `ms` model)

    @api(1)
    def hipHostMalloc(self, nbytes, flags):
        buf = ctypes.create_string_buffer(nbytes)
        self.host[ctypes.addressof(buf)] = buf
        return FakePointer(ctypes.addressof(buf))

    @api()
    def hipHostFree(self, ptr):
        del self.host[int(ptr)]

    @api(1)
    def hipHostGetDevicePointer(self, ptr, flags):
        assert int(ptr) in self.host, "not page-locked host memory"
        return FakePointer(int(ptr))

    @staticmethod
    def _inside(allocations: dict, address: int, nbytes: int):
        """The bytes at `address` of the allocation holding all `nbytes` of them, or None."""
        for base, buf in allocations.items():
            view = memoryview(buf).cast("B")
            if base <= address and address + nbytes <= base + len(view):
                return view[address - base:address - base + nbytes]
        return None

    def _bytes(self, ptr, nbytes) -> memoryview:
        if isinstance(ptr, np.ndarray):
            assert ptr.size >= nbytes, "a copy past the end of a host array"
            return memoryview(ptr).cast("B")[:nbytes]
        address = int(ptr)
        found = self._inside(self.memory, address, nbytes)
        if found is None:
            found = self._inside(self.host, address, nbytes)
        assert found is not None, f"0x{address:x} + {nbytes} is not inside device or page-locked host memory"
        return found

    @api()
    def hipMemcpyAsync(self, dst, src, nbytes, kind, stream):
        self.copies.append((kind, nbytes, stream, int(dst) if not isinstance(dst, np.ndarray) else dst.ctypes.data))
        if self.ms is not None:
            self.lane[stream.serial] = self.lane.get(stream.serial, 0.0) + self.ms * nbytes / self.copy_bytes
        device_side = dst if kind == fake_hip.hipMemcpyKind.hipMemcpyHostToDevice else src
        assert self._inside(self.memory, int(device_side), nbytes), "the device side of a copy is not device memory"
        n = nbytes - self.short
        self._bytes(dst, n)[:] = self._bytes(src, n)

    @api()
    def hipStreamWaitEvent(self, stream, event, flags):
        self.waits.append((stream, event))
        self.lane[stream.serial] = max(self.lane.get(stream.serial, 0.0), event.extra.get("ms", 0.0))

    @api()
    def hipEventRecord(self, event, stream):
        event.extra["at"] = time.perf_counter()
        event.extra["ms"] = self.lane.get(stream.serial, 0.0)

    @api(1)
    def hipEventElapsedTime(self, start, end):
        """The host time between the events' records (the guards compare GPU and host time); with
        `ms` set, each stream's time: `ms` a copy (a piece of 1/k of a copy's bytes 1/k of it),
        streams side by side, a wait taking the time of the event it waits for."""
        if self.ms is None:
            return (end.extra["at"] - start.extra["at"]) * 1e3
        return end.extra["ms"] - start.extra["ms"]


def play_stream_read(hip, launch):
    """mem.cu `stream`, MODE 0 LAYOUT 0 (the chunk read) with mask all ones and shift 0: each
    thread's sum of its slice's vectors, read from the memory the source pointer names (here: the
    page-locked host buffer)."""
    options = fake_hip.defines(launch["options"])
    assert (options["MODE"], options["LAYOUT"]) == ("0", "0"), options
    src, dst, passes, n, mask, shift = launch["extra"]
    assert (fake_hip.scalar(mask), fake_hip.scalar(shift)) == (0xFFFFFFFF, 0)
    blocks, block, n = launch["grid"][0], launch["block"][0], fake_hip.scalar(n)
    vectors = np.frombuffer(ctypes.string_at(src.value, n * 16), np.uint32).astype(np.uint64)
    sums = vectors.reshape(blocks, -1, block, 4).sum(axis=1) * fake_hip.scalar(passes) % (1 << 32)
    hip.buffer(dst)[:blocks * block * 16] = sums.astype(np.uint32).tobytes()


@pytest.fixture
def hip(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "amdsmi", None)
    monkeypatch.setattr(workload, "VALUE_BYTES", 1 << 20)
    hip = TransferHip([fake_hip.mi300x()])
    hip.kernels["stream"] = play_stream_read
    fake_hip.install(monkeypatch, hip, fake_hip.FakeHiprtc(hip.calls, hip.fail, hip.raise_on))
    return hip


@pytest.fixture
def device(hip):
    import peakbench.rocm
    dev = peakbench.rocm.create().open(0)
    yield dev
    dev.close()


@pytest.mark.parametrize("name", TESTS)
def test_every_transfer_test_verifies_and_measures(device, hip, name):
    result = run_test(device, TESTS[name], QUICK, lambda line: None)
    assert result.status == "ok", result.reason
    kinds = {"pinned", "pageable"} | ({"mapped"} if name == "transfer.h2d" else set())
    assert result.value > 0 and set(result.params["variants"]) == kinds
    assert result.params["engine"] == "hipMemcpyAsync (DMA engines)"
    assert result.series["transfer_bytes"][-1] == 1 << 20
    assert hip.host                                   # kept for the next transfer test...
    workload.release_kept(device.rt)
    assert not hip.host                               # ...every page-locked buffer freed as the device closes


def test_bidir_puts_each_direction_on_its_own_stream_in_pieces_timed_to_each_streams_end(device, hip):
    test = TESTS["transfer.bidir"]
    w = device.prepare(test, test.variants[0])
    try:
        hip.calls.clear()
        hip.copies.clear()
        hip.ms = MS
        assert w.run(2) == pytest.approx(2 * MS / 1e3)       # the two streams side by side
        assert w.items(2) == 2 * 2 * (1 << 20)
        kinds = fake_hip.hipMemcpyKind
        h2d = [c for c in hip.copies if c[0] == kinds.hipMemcpyHostToDevice]
        d2h = [c for c in hip.copies if c[0] == kinds.hipMemcpyDeviceToHost]
        assert len(h2d) == len(d2h) == 2 * w.per_copy() and {c[1] for c in h2d} == {w.piece()}
        assert {c[2].serial for c in h2d} != {c[2].serial for c in d2h}
        assert {c[2].serial for c in h2d} == {device.rt.stream.serial}
        names = [c[0] for c in hip.calls]
        assert names[0] == "hipEventRecord" and names[-4:] == ["hipEventSynchronize"] + ["hipEventElapsedTime"] * 3
        assert names.count("hipStreamWaitEvent") == 3      # the second stream after the start, the end after both
        rate = round(2 * w.per_copy() * w.piece() / 1e-3 / 1e9, 2)
        assert w.params["balanced"] == {d: {"pieces": 2 * w.per_copy(), "ms": 1.0, "gb_s": rate} for d in ("h2d", "d2h")}
    finally:
        w.close()


def test_the_faster_direction_is_given_more_pieces(device, hip):
    """d2h at twice h2d's pace: after one launch it carries twice the pieces, and both end together."""
    test = TESTS["transfer.bidir"]
    w = device.prepare(test, test.variants[0])
    try:
        hip.ms = MS
        real = hip.hipMemcpyAsync

        def paced(dst, src, nbytes, kind, stream):
            out = real(dst, src, nbytes, kind, stream)
            if kind == fake_hip.hipMemcpyKind.hipMemcpyDeviceToHost:      # half the time a d2h piece
                hip.lane[stream.serial] -= MS * nbytes / hip.copy_bytes / 2
            return out
        hip.hipMemcpyAsync = paced
        w.run(1)
        seconds = w.run(1)
        assert w.params["balanced"]["h2d"]["pieces"] == w.per_copy() and w.params["balanced"]["d2h"]["pieces"] == 2 * w.per_copy()
        assert w.params["balanced"]["h2d"]["ms"] == w.params["balanced"]["d2h"]["ms"] == pytest.approx(seconds * 1e3)
    finally:
        w.close()


@pytest.mark.parametrize("kind", [0, 1], ids=["pinned", "pageable"])
def test_repeated_small_copies_move_successive_parts_of_the_buffers(device, hip, kind):
    test = TESTS["transfer.d2h"]
    w = device.prepare(test, test.variants[kind])
    try:
        lane, quarter = w.lanes[0], w.nbytes // 4
        lane.host.array[:] = 0
        hip.copies.clear()
        w.run(3, quarter)
        assert [c[1] for c in hip.copies] == [quarter] * 3
        assert np.array_equal(lane.host.array[:3 * quarter], lane.data[:3 * quarter])
        assert not lane.host.array[3 * quarter:].any()
    finally:
        w.close()


def test_pinned_memory_is_hip_host_malloc_and_pageable_is_numpy(device, hip):
    for kind, want in (("pinned", "hipHostMalloc"), ("pageable", None)):
        test = TESTS["transfer.h2d"]
        hip.calls.clear()
        w = device.prepare(test, next(v for v in test.variants if v.name == kind))
        try:
            made = [c[0] for c in hip.calls if c[0] == "hipHostMalloc"]
            assert made == ([want] if want else [])
            assert w.verify() is None
            assert w.params["host_memory"].startswith("page-locked" if want else "numpy")
        finally:
            w.close()


def test_h2d_moves_the_host_bytes_into_device_memory(device, hip):
    test = TESTS["transfer.h2d"]
    w = device.prepare(test, test.variants[0])
    try:
        lane = w.lanes[0]
        w.run(1)
        assert bytes(hip.memory[lane.device.address]) == lane.data.tobytes()
    finally:
        w.close()


@pytest.mark.parametrize("name", TESTS)
def test_a_short_copy_fails_the_verification(device, hip, name):
    hip.short = 1
    result = run_test(device, TESTS[name], QUICK, lambda line: None)
    assert result.status == "failed"
    assert "of 65536 bytes: 1 of 65536 bytes differ from the host data (first at byte 65535)" in result.reason


def test_a_failing_copy_names_the_call(device, hip):
    hip.fail["hipMemcpyAsync"] = fake_hip.hipError_t.hipErrorInvalidValue
    result = run_test(device, TESTS["transfer.d2h"], QUICK, lambda line: None)
    assert result.status == "failed"
    assert "hipMemcpyAsync failed: hipErrorInvalidValue (error 1)" in result.reason
    workload.release_kept(device.rt)
    assert not hip.host


def test_close_destroys_the_second_stream_and_the_events(device, hip):
    test = TESTS["transfer.h2d"]
    before = len([c for c in hip.calls if c[0] == "hipStreamCreate"])
    created_before = len([c for c in hip.calls if c[0] == "hipEventCreate"])
    w = device.prepare(test, test.variants[0])
    assert len([c for c in hip.calls if c[0] == "hipStreamCreate"]) == before + 1
    w.close()
    names = [c[0] for c in hip.calls]
    # every event it made (start, end and each stream's end), destroyed once
    assert names.count("hipEventDestroy") == names.count("hipEventCreate") - created_before == 4
    assert names.count("hipStreamDestroy") == 1
    assert names.count("hipHostFree") == 0            # the lane's buffers kept for the next transfer test
    device.close()
    assert [c[0] for c in hip.calls].count("hipHostFree") == 1


def test_the_mapped_read_runs_the_stream_kernel_on_the_host_buffer(device, hip):
    test = TESTS["transfer.h2d"]
    w = device.prepare(test, test.variants[2])
    try:
        assert w.verify() is None
        launch = hip.launches[-1]
        assert launch["function"] == "stream" and launch["extra"][0].value == int(w.host.handle)
        assert launch["grid"][0] == w.resident and w.params["host_memory"].endswith("hipHostGetDevicePointer")
        w.host.array[16] ^= 0xFF                   # host data the kernel's sums must see
        assert "differ from the host reference" in w.verify()
    finally:
        w.close()
    assert not hip.host

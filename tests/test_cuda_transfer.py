"""The CUDA link against a fake CuPy at the calls it makes (no GPU here): page-locked memory from
cudaHostAlloc (default flags) freed on release, cudaMemcpyAsync with the right kinds and pointers, one stream per direction
from one start event to each stream's end event, pageable copies timed on the host; the workload end to end on
it, a short copy caught. tests/test_gpu_transfer.py runs the real one."""
from __future__ import annotations

import ctypes
import importlib
import sys
import types
from contextlib import nullcontext

import numpy as np
import pytest

from peakbench.catalog import transfer as catalog
from peakbench.workloads import transfer as workload

TESTS = {t.name: t for t in catalog.HOST_LINK}


class FakeCupy:
    """What cuda/transfer.py uses of CuPy; device memory is host memory behind ndarrays."""

    def __init__(self):
        self.log, self.short, self.elapsed_ms = [], 0, 2.0
        cp = types.ModuleType("cupy")
        fake = self

        class ndarray:
            def __init__(self, n):
                self.host = np.zeros(n, np.uint8)
                self.data = types.SimpleNamespace(ptr=self.host.ctypes.data)

        class Stream:
            count = 0

            def __init__(self, non_blocking=False):
                Stream.count += 1
                self.ptr = 0x1000 * Stream.count
                self.non_blocking = non_blocking

            def synchronize(self):
                fake.log.append(("sync", self.ptr))

            def wait_event(self, event):
                fake.log.append(("wait", self.ptr, event.name))

        class Event:
            count = 0

            def __init__(self, disable_timing=False):
                Event.count += 1
                self.name = f"event{Event.count}" + ("-untimed" if disable_timing else "")

            def record(self, stream):
                fake.log.append(("record", self.name, stream.ptr))

            def synchronize(self):
                fake.log.append(("event-sync", self.name))

        def memcpy_async(dst, src, n, kind, stream):
            fake.log.append(("copy", kind, n, stream))
            ctypes.memmove(dst, src, n - fake.short)

        def host_alloc(n, flags):
            buf = (ctypes.c_uint8 * n)()
            fake.log.append(("hostAlloc", n, flags))
            fake.mapped[ctypes.addressof(buf)] = (buf, flags)
            return ctypes.addressof(buf)

        def free_host(ptr):
            del fake.mapped[ptr]

        self.mapped = {}
        runtime = types.SimpleNamespace(memcpyAsync=memcpy_async, hostAlloc=host_alloc, freeHost=free_host)
        cp.ndarray, cp.cuda = ndarray, types.SimpleNamespace(
            Stream=Stream, Event=Event, runtime=runtime,
            get_elapsed_time=lambda a, b: fake.elapsed_ms)
        self.module = cp


class FakeRuntime:
    def __init__(self, cp):
        self.cp = cp
        self.info = types.SimpleNamespace(name="NVIDIA H200", kind="gpu")
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.device = nullcontext()

    def alloc(self, n):
        return self.cp.ndarray(n)

    def free(self, buf):
        pass

    def upload(self, buf, data):
        buf.host[:len(data)] = np.frombuffer(data, np.uint8)

    def download(self, buf, n):
        return buf.host[:n].tobytes()

    def fill(self, buf, byte):
        buf.host[:] = byte


@pytest.fixture
def fake(monkeypatch):
    fake = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake.module)
    monkeypatch.delitem(sys.modules, "peakbench.cuda.transfer", raising=False)
    monkeypatch.setattr(workload, "VALUE_BYTES", 1 << 20)
    monkeypatch.setattr(workload, "ENGINE_VALUE_BYTES", 1 << 20)
    module = importlib.import_module("peakbench.cuda.transfer")
    yield fake, module, FakeRuntime(fake.module)
    sys.modules.pop("peakbench.cuda.transfer", None)


def prepare(module, rt, name, kind="pinned"):
    test = TESTS[name]
    return module.workload(test, next(v for v in test.variants if v.name == kind), rt)


@pytest.mark.parametrize("name", TESTS)
@pytest.mark.parametrize("kind", ["pinned", "pageable"])
def test_every_test_verifies_on_the_fake(fake, name, kind):
    cp, module, rt = fake
    w = prepare(module, rt, name, kind)
    try:
        assert w.verify() is None
        # page-locked with the default flags (0): not the portable kind, which read 2-4% slower both ways
        assert [e for e in cp.log if e[0] == "hostAlloc"] == ([("hostAlloc", 1 << 20, 0)] * len(w.lanes)
                                                              if kind == "pinned" else [])
    finally:
        w.close()
    workload.release_kept(rt)
    assert not cp.mapped                      # every page-locked buffer freed as the device closes


def test_bidir_takes_the_buffers_h2d_and_d2h_kept_and_writes_their_sources_again(fake):
    """transfer.h2d and d2h leave their lanes on the device's shelf; bidir allocates no host
    memory of its own, writes each source again (a source changed since is no excuse to fail or
    pass), and verifies; everything is freed once, as the device closes."""
    cp, module, rt = fake
    kept = {}
    for name in ("transfer.h2d", "transfer.d2h"):
        w = prepare(module, rt, name)
        assert w.verify() is None
        kept[w.lanes[0].direction] = (w.lanes[0].host.handle, w.lanes[0].device)
        w.close()
    assert len(cp.mapped) == 2 and len([e for e in cp.log if e[0] == "hostAlloc"]) == 2
    kept["h2d"][1].host[:] = 0                      # neither source may be trusted as left
    np.ctypeslib.as_array((ctypes.c_uint8 * (1 << 20)).from_address(kept["h2d"][0]))[:] = 0
    kept["d2h"][1].host[:] = 7
    w = prepare(module, rt, "transfer.bidir")
    try:
        assert {lane.direction: (lane.host.handle, lane.device) for lane in w.lanes} == kept
        assert len([e for e in cp.log if e[0] == "hostAlloc"]) == 2          # none of its own
        assert w.verify() is None
        w.run(4)
        problem, _ = w.after_timing(4)
        assert problem is None
    finally:
        w.close()
    assert len(cp.mapped) == 2                      # on the shelf again
    workload.release_kept(rt)
    assert not cp.mapped
    workload.release_kept(rt)                       # nothing kept: nothing to do


@pytest.mark.parametrize("name", TESTS)
def test_the_counted_bytes_meet_the_bytes_handed_to_cuda(fake, name, monkeypatch):
    """Balanced or not, a launch's counted bytes are the bytes its cudaMemcpyAsync calls were
    handed; counted twice, the measured guard fails."""
    cp, module, rt = fake
    w = prepare(module, rt, name)
    try:
        w.run(2)
        cp.log.clear()
        w.run(2)
        handed = sum(e[2] for e in cp.log if e[0] == "copy")
        assert w.issued == handed == w.items(2)
        problem, said = w.after_timing(2)
        assert problem is None and said.startswith(f"its {handed} bytes counted as its copy calls were handed"), said
        items = type(w).items
        monkeypatch.setattr(type(w), "items", lambda self, *a, **k: 2 * items(self, *a, **k))
        w.run(2)
        problem, _ = w.after_timing(2)
        assert problem and "copy calls were handed" in problem
    finally:
        w.close()
    workload.release_kept(rt)


def test_copies_have_the_cuda_kinds_and_pointers(fake):
    cp, module, rt = fake
    w = prepare(module, rt, "transfer.bidir")
    try:
        cp.log.clear()
        w.run(1)
        copies = [e for e in cp.log if e[0] == "copy"]
        piece = (1 << 20) // 2                     # both ways at once: in pieces (half a copy here), in turn
        assert w.piece() == piece and w.params["piece_bytes"] == piece
        assert [(c[1], c[2]) for c in copies] == [(1, piece), (2, piece)] * w.per_copy()
        assert {c[3] for c in copies[::2]} == {rt.stream.ptr} and rt.stream.ptr not in {c[3] for c in copies[1::2]}
        h2d, d2h = w.lanes
        assert np.array_equal(h2d.device.host, h2d.data)
        assert np.array_equal(d2h.host.array, d2h.data)
    finally:
        w.close()


def test_repeated_small_copies_move_successive_parts_of_the_buffers(fake):
    cp, module, rt = fake
    w = prepare(module, rt, "transfer.h2d")
    try:
        lane = w.lanes[0]
        lane.device.host[:] = 0
        quarter = w.nbytes // 4
        w.run(3, quarter)
        assert np.array_equal(lane.device.host[:3 * quarter], lane.data[:3 * quarter])
        assert not lane.device.host[3 * quarter:].any()
    finally:
        w.close()


def test_bidir_is_timed_from_one_start_to_each_streams_end_event(fake):
    cp, module, rt = fake
    w = prepare(module, rt, "transfer.bidir")
    try:
        cp.log.clear()
        assert w.run(3) == pytest.approx(2e-3)
        assert w.items(3) == 2 * 3 * (1 << 20)
        steps = [e[0] for e in cp.log]
        pieces = 3 * w.per_copy()
        assert steps == ["record", "wait"] + ["copy"] * 2 * pieces + ["record", "wait"] * 2 + ["record", "event-sync"]
        start, second = cp.log[0][1], cp.log[1][1]
        assert cp.log[1] == ("wait", second, start) and second != rt.stream.ptr
        first_end, second_end = cp.log[-6][1], cp.log[-4][1]
        assert cp.log[-6] == ("record", first_end, rt.stream.ptr) and cp.log[-4] == ("record", second_end, second)
        assert cp.log[-3] == ("wait", rt.stream.ptr, second_end)     # the first waits for the second's end
        assert cp.log[-2] == ("record", cp.log[-1][1], rt.stream.ptr) and cp.log[-2][1] not in (start, first_end)
        rate = round(pieces * w.piece() / 2e-3 / 1e9, 2)      # each direction's GB/s while the other ran
        assert w.params["balanced"] == {d: {"pieces": pieces, "ms": 2.0, "gb_s": rate} for d in ("h2d", "d2h")}
    finally:
        w.close()


def test_pageable_copies_are_host_timed_and_synchronize_each_stream(fake):
    cp, module, rt = fake
    w = prepare(module, rt, "transfer.bidir", "pageable")
    try:
        cp.log.clear()
        seconds = w.run(1)
        assert 0 < seconds < 1 and not any(e[0] in ("record", "event-sync") for e in cp.log)
        assert [e for e in cp.log if e[0] == "sync"] == [("sync", rt.stream.ptr), ("sync", w.link.streams[1].ptr)]
        assert w.params["timed"].startswith("host wall clock")
    finally:
        w.close()


def test_a_short_copy_fails(fake):
    cp, module, rt = fake
    cp.short = 1
    w = prepare(module, rt, "transfer.d2h")
    try:
        assert "d2h of 65536 bytes: 1 of 65536 bytes differ" in w.verify()
    finally:
        w.close()


def test_mapped_memory_is_host_alloc_mapped_passed_as_its_pointer_and_freed(fake):
    cp, module, rt = fake
    link = module.CudaLink(rt)
    host = link.mapped(4096)
    ((address, (buf, flags)),) = cp.mapped.items()
    assert flags == 2                                   # cudaHostAllocMapped
    assert host.extra["arg"] == np.uint64(address) and host.extra["arg"].dtype == np.uint64
    host.array[:] = 7
    assert bytes(buf) == b"\x07" * 4096                # the view is that memory
    assert module.workload.__name__ == "workload" and link.stream.source == "mem.cu"
    link.release(host)
    assert not cp.mapped and host.array is None

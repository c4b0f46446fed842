"""transfer.p2p on CUDA against a fake CuPy of four GPUs at the calls cuda/p2p.py makes:
cudaDeviceCanAccessPeer and cudaDeviceEnablePeerAccess (once per direction, an "already enabled"
error taken as done), cudaMemcpyPeerAsync on the source GPU's stream, the copy kernel loaded on
and launched from the destination GPU, both directions on two GPUs' streams between one pair of
events; the session's result, pairs without access, planted faults, one GPU; and shaders/p2p.cu
through nvcc for sm_90a. tests/test_gpu_p2p.py runs the real one."""
from __future__ import annotations

import ctypes
import importlib
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from peakbench.catalog import transfer as catalog
from peakbench.harness.runner import Settings
from peakbench.harness.session import run_test
from peakbench.runtime import Words
from peakbench.workloads import transfer

TEST = catalog.P2P
VARIANTS = {v.name: v for v in TEST.variants}
QUICK = Settings(sample_s=0.001, warmup_s=0.0, min_samples=3, max_samples=3, budget_s=0.2)
NBYTES = 1 << 20
MS = 0.5                  # GPU time of one copy of NBYTES


class FakeCupy:
    """What cuda/p2p.py uses of CuPy. Device memory is numpy memory, each array on the GPU that
    was current when it was made; `links` are the (a, b) where GPU a can access GPU b."""

    def __init__(self, count=4, links=None):
        self.count, self.current = count, 0
        self.links = set(links if links is not None else
                         ((a, b) for a in range(count) for b in range(count) if a != b))
        self.enabled, self.log, self.pending = set(), [], []
        self.short, self.already = 0, set()
        fake = self
        cp = types.ModuleType("cupy")
        cp.uint8 = np.uint8

        class CUDARuntimeError(RuntimeError):
            def __init__(self, status):
                super().__init__(f"cudaError {status}")
                self.status = status

        class Device:
            def __init__(self, index=None):
                self.id = fake.current if index is None else index

            def __enter__(self):
                self.before, fake.current = fake.current, self.id
                return self

            def __exit__(self, *exc):
                fake.current = self.before

            def synchronize(self):
                fake.log.append(("device-sync", self.id))

        class ndarray:
            def __init__(self, host, device):
                self.host, self.device = host, Device(device)
                self.data = types.SimpleNamespace(ptr=host.ctypes.data)

            def __getitem__(self, key):
                return ndarray(self.host[key], self.device.id)

            def set(self, data):
                assert fake.current == self.device.id, "set() off its GPU"
                self.host[:] = data

            def get(self):
                assert fake.current == self.device.id, "get() off its GPU"
                return self.host.copy()

        fake.owner = {}

        def empty(n, dtype):
            arr = ndarray(np.zeros(n, np.uint8), fake.current)
            fake.owner[arr.data.ptr] = fake.current
            return arr

        class Stream:
            count = 0

            def __init__(self, non_blocking=False):
                Stream.count += 1
                self.ptr, self.device = 0x1000 * Stream.count, fake.current

            def synchronize(self):
                fake.log.append(("sync", self.device))

            def wait_event(self, event):
                fake.log.append(("wait", self.device, event.device))

        class Event:
            def __init__(self, disable_timing=False):
                self.device, self.timed = fake.current, not disable_timing

            def record(self, stream):
                assert stream.device == self.device == fake.current, "an event recorded on another GPU's stream"
                fake.log.append(("record", self.device, self.timed))

            def synchronize(self):
                fake.log.append(("event-sync", self.device))

        class Function:
            def __init__(self, device):
                self.device = device

            def __call__(self, grid, block, args, stream=None):
                src, dst, n = (int(a) for a in args)
                assert fake.current == self.device == stream.device, "the kernel off its module's GPU"
                assert fake.owner[dst] == self.device, "the kernel writes another GPU's memory"
                assert (self.device, fake.owner[src]) in fake.enabled, "a peer read without peer access"
                assert isinstance(args[0], np.uint64) and isinstance(args[2], np.uint32)
                fake.log.append(("kernel", fake.owner[src], self.device, grid, block))
                fake.pending.append(stream.ptr)
                ctypes.memmove(dst, src, n * 16 - fake.short)

        class Module:
            def load(self, binary):
                assert binary == b"cubin"
                self.device = fake.current

            def get_function(self, name):
                assert name == "p2p_copy"
                return Function(self.device)

        def enable(peer):
            if (fake.current, peer) in fake.enabled or (fake.current, peer) in fake.already:
                raise CUDARuntimeError(704)
            fake.enabled.add((fake.current, peer))

        def memcpy_peer_async(dst, dst_dev, src, src_dev, n, stream):
            assert (fake.owner[dst], fake.owner[src]) == (dst_dev, src_dev)
            fake.log.append(("copy", src_dev, dst_dev, n, stream))
            fake.pending.append(stream)
            ctypes.memmove(dst, src, n - fake.short)

        def elapsed(start, end):
            """MS per copy on the busiest stream since the last reading."""
            per_stream = {s: fake.pending.count(s) for s in set(fake.pending)}
            fake.pending.clear()
            return MS * max(per_stream.values(), default=0)

        runtime = types.SimpleNamespace(
            getDeviceCount=lambda: fake.count, deviceCanAccessPeer=lambda a, b: int((a, b) in fake.links),
            deviceEnablePeerAccess=enable, memcpyPeerAsync=memcpy_peer_async, CUDARuntimeError=CUDARuntimeError)
        cp.empty, cp.ndarray = empty, ndarray
        cp.cuda = types.SimpleNamespace(Device=Device, Stream=Stream, Event=Event, runtime=runtime,
                                        function=types.SimpleNamespace(Module=Module), get_elapsed_time=elapsed)
        self.module = cp


class FakeRuntime:
    """What cuda/p2p.py uses of the CUDA runtime: its GPU, compile (NVRTC), evidence."""
    words = Words()

    def __init__(self, fake, index=0):
        self.fake, self.index = fake, index
        self.info = types.SimpleNamespace(name="NVIDIA H200", kind="gpu")
        self.limits = types.SimpleNamespace(units=132)
        self.compiled, self.discarded = [], []

    def compile(self, source, defines, entry, block, args, label):
        self.compiled.append((source, defines, entry, block, args))
        with self.fake.module.cuda.Device(self.index):
            module = self.fake.module.cuda.function.Module()
            module.load(b"cubin")
        return types.SimpleNamespace(handle=module.get_function(entry), binary=b"cubin")

    def evidence(self, kernel):
        return {"sass_opcodes": {"LDG.E.128": 4, "STG.E.128": 4}}

    def discard(self, kernel):
        self.discarded.append(kernel)


@pytest.fixture
def fake(monkeypatch):
    cp = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", cp.module)
    monkeypatch.delitem(sys.modules, "peakbench.cuda.p2p", raising=False)
    monkeypatch.setattr(transfer, "VALUE_BYTES", NBYTES)
    module = importlib.import_module("peakbench.cuda.p2p")
    yield cp, module, FakeRuntime(cp)
    sys.modules.pop("peakbench.cuda.p2p", None)


class Device:
    """The Device interface with the CUDA capability module, as cuda/capabilities.py serves it."""

    def __init__(self, module, rt, only=None):
        self.module, self.rt, self.only = module, rt, only
        self.info = types.SimpleNamespace(kind="gpu", name="NVIDIA H200")

    def support(self, test):
        return self.module.support(test, self.rt)

    def variants(self, test):
        return tuple(v for v in test.variants if self.only in (None, v.name))

    def prepare(self, test, variant, settings=None, spec=None):
        return self.module.workload(test, variant, self.rt)

    def clock_mhz(self):
        return None


def test_the_table_names_the_module():
    from peakbench.cuda.capabilities import TABLE     # needs no CuPy: the module is imported when asked
    assert TABLE.modules["p2p"] == "peakbench.cuda.p2p"


def test_the_session_measures_every_ordered_pair_on_four_gpus(fake):
    cp, module, rt = fake
    result = run_test(Device(module, rt), TEST, QUICK, lambda line: None)
    assert result.status == "ok", result.reason
    one_way = round(NBYTES / (MS / 1e3) / 1e9, 3)
    matrices = result.evidence["p2p_matrix"]
    assert set(matrices) == set(VARIANTS)
    for name, matrix in matrices.items():
        want = 2 * one_way if name.endswith("_bidir") else one_way
        assert [matrix[a][a] for a in range(4)] == [None] * 4
        assert all(matrix[a][b] == pytest.approx(want) for a in range(4) for b in range(4) if a != b), name
    assert result.value == pytest.approx(2 * one_way) and result.params["variant"].endswith("_bidir")
    assert cp.enabled == {(a, b) for a in range(4) for b in range(4) if a != b}
    assert rt.compiled[0][:3] == ("p2p.cu", {"UNROLL": 4}, "p2p_copy")
    assert len(rt.discarded) == 2                         # the kernel variants' kernels released


def test_ce_copies_run_on_the_source_gpus_stream_and_kernels_on_the_destination(fake):
    cp, module, rt = fake
    for name, kind, issuer in (("ce", "copy", 1), ("kernel", "kernel", 2)):
        w = module.workload(TEST, VARIANTS[name], rt)
        try:
            pair = next(p for p in w.pairs if p == ((1, 2),))
            cp.log.clear()
            w.copy(pair, 2)
            issued = [e for e in cp.log if e[0] == kind]
            assert len(issued) == 2 and all(e[1:3] == (1, 2) for e in issued)
            stream = w.peers.streams[issuer]
            assert stream.device == issuer and set(w.peers.streams) == {issuer}
            if kind == "copy":
                assert {e[4] for e in issued} == {stream.ptr}
            else:
                assert issued[0][3:] == ((132 * 4,), (256,))
            assert np.array_equal(w.buffers[2][1].host, w.peers.read(w.buffers[1][0], NBYTES))
        finally:
            w.close()


def test_both_directions_run_on_two_gpus_between_one_pair_of_events(fake):
    cp, module, rt = fake
    w = module.workload(TEST, VARIANTS["ce_bidir"], rt)
    try:
        cp.log.clear()
        assert w.copy(w.pairs[0], 3) == pytest.approx(3 * MS / 1e3)      # side by side
        steps = [e for e in cp.log if e[0] != "copy"]
        assert steps == [("record", 0, True), ("wait", 1, 0), ("record", 1, False), ("wait", 0, 1),
                         ("record", 0, True), ("event-sync", 0)]
        assert sorted({e[1:3] for e in cp.log if e[0] == "copy"}) == [(0, 1), (1, 0)]
        w.at(w.pairs[0])
        assert w.items(3) == 2 * 3 * NBYTES
    finally:
        w.close()


def test_peer_access_already_enabled_is_taken_as_done_and_any_other_error_raised(fake):
    cp, module, rt = fake
    cp.already = {(0, 1)}                   # another part of the process enabled it
    peers = module.CudaPeers(rt)
    peers.enable(0, 1)
    peers.enable(2, 3)
    assert cp.enabled == {(2, 3)} and cp.current == 0        # the runtime's GPU current again
    error = cp.module.cuda.runtime.CUDARuntimeError

    def unsupported(peer):
        raise error(217)                   # cudaErrorPeerAccessUnsupported
    cp.module.cuda.runtime.deviceEnablePeerAccess = unsupported
    with pytest.raises(error, match="217"):
        peers.enable(1, 0)


def test_pairs_without_peer_access_are_null_in_the_matrix(fake):
    cp, module, rt = fake
    cp.links = {(0, 1), (1, 0), (2, 3), (3, 2), (0, 2)}   # two linked pairs; 0 -> 2 one way only
    result = run_test(Device(module, rt), TEST, QUICK, lambda line: None)
    assert result.status == "ok", result.reason
    matrix = result.evidence["p2p_matrix"]["ce"]
    measured = {(a, b) for a in range(4) for b in range(4) if matrix[a][b] is not None}
    assert measured == {(0, 1), (1, 0), (2, 3), (3, 2)}
    assert [0, 2] in result.params["no_peer_access"] and [2, 0] in result.params["no_peer_access"]
    assert (0, 2) not in cp.enabled


@pytest.mark.parametrize("name", ["ce", "kernel_bidir"])
def test_a_short_copy_fails_the_session(fake, name):
    cp, module, rt = fake
    cp.short = 16
    result = run_test(Device(module, rt, name), TEST, QUICK, lambda line: None)
    assert result.status == "failed"
    assert f"variant {name}: GPU 0 to GPU 1, 65536 bytes: 16 of 65536 bytes differ from the host data" in result.reason


def test_one_gpu_is_unsupported(fake):
    cp, module, rt = fake
    cp.count = 1
    result = run_test(Device(module, rt), TEST, QUICK, lambda line: None)
    assert result.status == "unsupported"
    assert result.reason == ("[hardware] one GPU: transfer.p2p needs two or more (it copies between the GPUs of"
                             " one machine, and this process sees 1)")


def test_no_multicast_object_is_made():
    for backend in ("cuda", "rocm"):
        source = (Path(__file__).parents[1] / "peakbench" / backend / "p2p.py").read_text()
        assert "cuMulticast" not in source and "NVLS" not in source and "hipMulticast" not in source


SHADER = Path(__file__).parents[1] / "shaders" / "p2p.cu"
NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"


def nvdisasm() -> str | None:
    found = shutil.which("nvdisasm")
    if found:
        return found
    for path in Path(sys.prefix).glob("lib/python*/site-packages/nvidia/*/bin/nvdisasm"):
        return str(path)
    return None


@pytest.mark.skipif(not Path(NVCC).exists() or not nvdisasm(), reason="needs nvcc and nvdisasm")
def test_the_copy_kernel_keeps_four_16_byte_loads_in_flight_before_its_stores(tmp_path):
    cubin = tmp_path / "p2p.cubin"
    subprocess.run([NVCC, "-arch=sm_90a", "-cubin", "-DUNROLL=4", "-o", str(cubin), str(SHADER)], check=True)
    sass = subprocess.run([nvdisasm(), "-c", str(cubin)], check=True, capture_output=True, text=True).stdout
    memory = [line.split()[1] for line in sass.splitlines() if "LDG" in line or "STG" in line]
    assert memory[:8] == ["LDG.E.128.CONSTANT"] * 4 + ["STG.E.128"] * 4

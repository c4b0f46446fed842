"""transfer.p2p on ROCm against the fake HIP runtime, extended here with four GPUs, the current
device, peer access and hipMemcpyPeerAsync: every pair measured through the session, the DMA
copies on the source GPU's stream and the copy kernel on the destination's, each call on its
GPU and this runtime's GPU current after, pairs without access null, a short copy caught, one
GPU unsupported, everything released; and Vulkan's reason."""
from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest

from helpers import fixture, fixture_absent

import fake_hip
from fake_hip import Fail, FakeHip, api
from peakbench.catalog import transfer as catalog
from peakbench.harness.runner import Settings
from peakbench.harness.session import run_test
from peakbench.workloads import transfer

TEST = catalog.P2P
VARIANTS = {v.name: v for v in TEST.variants}
QUICK = Settings(sample_s=0.001, warmup_s=0.0, min_samples=3, max_samples=3, budget_s=0.2)
NBYTES = 1 << 20
MS = 0.5                  # GPU time of one copy of NBYTES


class P2pHip(FakeHip):
    """FakeHip with a current device, memory owned by the GPU it was made on, peer access
    (`links`: the (a, b) where a can access b) and peer copies. `short`: bytes a copy leaves out."""

    def __init__(self, count=4, links=None, **kwargs):
        super().__init__([fake_hip.mi300x(pciBusID=0x10 + i) for i in range(count)], **kwargs)
        self.current, self.owner, self.enabled, self.pending = 0, {}, set(), []
        self.links = set(links if links is not None else
                         ((a, b) for a in range(count) for b in range(count) if a != b))
        self.short = 0
        self.kernels["p2p_copy"] = self.play_copy

    @api()
    def hipSetDevice(self, index):
        if not 0 <= index < len(self.devices):
            raise Fail(fake_hip.hipError_t.hipErrorInvalidDevice)
        self.current = index

    @api(1)
    def hipMalloc(self, nbytes):
        ptr = FakeHip.hipMalloc.__wrapped__(self, nbytes)
        self.owner[int(ptr)] = self.current
        return ptr

    @api(1)
    def hipStreamCreate(self):
        return self._handle("stream", device=self.current)

    @api(1)
    def hipEventCreate(self):
        return self._handle("event", device=self.current)

    @api()
    def hipEventRecord(self, event, stream):
        assert event.extra["device"] == stream.extra["device"] == self.current, "an event on another GPU's stream"

    @api()
    def hipStreamWaitEvent(self, stream, event, flags):
        assert stream.extra["device"] == self.current

    @api(1)
    def hipEventElapsedTime(self, start, end):
        """MS per copy on the busiest stream since the last reading."""
        counts = {s: self.pending.count(s) for s in set(self.pending)}
        self.pending.clear()
        return MS * max(counts.values(), default=0)

    @api(1)
    def hipDeviceCanAccessPeer(self, a, b):
        return int((a, b) in self.links)

    @api()
    def hipDeviceEnablePeerAccess(self, peer, flags):
        if (self.current, peer) in self.enabled:
            raise Fail(704)                 # hipErrorPeerAccessAlreadyEnabled
        if (self.current, peer) not in self.links:
            raise Fail(217)                 # hipErrorPeerAccessUnsupported
        self.enabled.add((self.current, peer))

    @api()
    def hipMemcpyPeerAsync(self, dst, dst_dev, src, src_dev, nbytes, stream):
        assert (self.owner[int(dst)], self.owner[int(src)]) == (dst_dev, src_dev)
        assert stream.extra["device"] == src_dev == self.current, "a peer copy off the source GPU's stream"
        self.pending.append(stream.serial)
        self.calls.append(("copied", (src_dev, dst_dev), {}))
        n = nbytes - self.short
        self.memory[int(dst)][:n] = self.memory[int(src)][:n]

    @api(1)
    def hipModuleLoadData(self, image):
        module = FakeHip.hipModuleLoadData.__wrapped__(self, image)
        module.extra["device"] = self.current
        return module

    @api(1)
    def hipModuleGetFunction(self, module, name):
        function = FakeHip.hipModuleGetFunction.__wrapped__(self, module, name)
        function.extra["device"] = module.extra["device"]
        return function

    def play_copy(self, hip, launch):
        """shaders/p2p.cu: dst[i] = src[i] over n_vec 16-byte words, on the destination GPU."""
        src, dst, n = launch["extra"]
        device = self.current
        assert launch["stream"].extra["device"] == device, "the kernel off its GPU's stream"
        assert self.owner[dst.value] == device and (device, self.owner[src.value]) in self.enabled
        self.pending.append(launch["stream"].serial)
        count = fake_hip.scalar(n) * 16 - self.short
        self.memory[dst.value][:count] = self.memory[src.value][:count]


@pytest.fixture
def hip(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "amdsmi", None)
    monkeypatch.setattr(transfer, "VALUE_BYTES", NBYTES)
    hip = P2pHip()
    fake_hip.install(monkeypatch, hip, fake_hip.FakeHiprtc(hip.calls, hip.fail, hip.raise_on))
    return hip


def open_device():
    import peakbench.rocm
    return peakbench.rocm.create().open(0)


def test_the_session_measures_every_pair_and_releases_everything(hip):
    dev = open_device()
    try:
        result = run_test(dev, TEST, QUICK, lambda line: None)
    finally:
        dev.close()
    assert result.status == "ok", result.reason
    one_way = round(NBYTES / (MS / 1e3) / 1e9, 3)
    for name, matrix in result.evidence["p2p_matrix"].items():
        want = 2 * one_way if name.endswith("_bidir") else one_way
        assert all((matrix[a][b] is None) == (a == b) for a in range(4) for b in range(4))
        assert all(matrix[a][b] == pytest.approx(want) for a in range(4) for b in range(4) if a != b), name
    assert set(result.evidence["p2p_matrix"]) == set(VARIANTS)
    assert result.params["engine"].startswith("hipMemcpyPeerAsync") or result.params["engine"].startswith("p2p_copy")
    assert hip.enabled == {(a, b) for a in range(4) for b in range(4) if a != b}
    assert hip.memory == {} and hip.current == 0
    names = [c[0] for c in hip.calls]
    assert names.count("hipStreamCreate") == names.count("hipStreamDestroy")
    assert names.count("hipEventCreate") == names.count("hipEventDestroy")
    assert names.count("hipModuleLoadData") == names.count("hipModuleUnload") == 2 * 4   # per kernel variant, per GPU


def test_the_dma_copy_is_on_the_source_gpu_and_the_kernel_on_the_destination(hip):
    dev = open_device()
    try:
        for name in ("ce", "kernel"):
            w = dev.prepare(TEST, VARIANTS[name])
            try:
                hip.calls.clear()
                w.copy([(2, 3)], 1)
                assert hip.current == 0                          # the runtime's GPU again
                if name == "ce":
                    assert [c[1] for c in hip.calls if c[0] == "copied"] == [(2, 3)]
                else:
                    launch = hip.launches[-1]
                    assert launch["function"] == "p2p_copy" and launch["grid"] == (304 * 4, 1, 1)
                    assert launch["block"] == (256, 1, 1) and launch["stream"].extra["device"] == 3
                got = w.peers.read(w.buffers[3][1], NBYTES)
                assert np.array_equal(got, w.peers.read(w.buffers[2][0], NBYTES))
            finally:
                w.close()
    finally:
        dev.close()


def test_pairs_without_peer_access_are_null(hip):
    hip.links = {(0, 1), (1, 0), (0, 3)}
    dev = open_device()
    try:
        result = run_test(dev, TEST, QUICK, lambda line: None)
    finally:
        dev.close()
    assert result.status == "ok", result.reason
    matrix = result.evidence["p2p_matrix"]["kernel"]
    assert {(a, b) for a in range(4) for b in range(4) if matrix[a][b] is not None} == {(0, 1), (1, 0)}
    assert len(result.params["no_peer_access"]) == 10


def test_a_short_copy_fails(hip):
    hip.short = 1
    dev = open_device()
    try:
        result = run_test(dev, TEST, QUICK, lambda line: None)
    finally:
        dev.close()
    assert result.status == "failed"
    assert "variant ce: GPU 0 to GPU 1, 65536 bytes: 1 of 65536 bytes differ from the host data" in result.reason
    assert hip.memory == {}


def test_a_failing_peer_copy_names_the_call(hip):
    hip.fail["hipMemcpyPeerAsync"] = fake_hip.hipError_t.hipErrorInvalidValue
    dev = open_device()
    try:
        result = run_test(dev, TEST, QUICK, lambda line: None)
    finally:
        dev.close()
    assert result.status == "failed"
    assert "hipMemcpyPeerAsync failed: hipErrorInvalidValue (error 1)" in result.reason


def test_one_gpu_is_unsupported(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "amdsmi", None)
    hip = P2pHip(count=1)
    fake_hip.install(monkeypatch, hip, fake_hip.FakeHiprtc(hip.calls, hip.fail, hip.raise_on))
    dev = open_device()
    try:
        result = run_test(dev, TEST, QUICK, lambda line: None)
    finally:
        dev.close()
    assert result.status == "unsupported"
    assert result.reason.startswith("[hardware] one GPU: transfer.p2p needs two or more")


def test_the_table_names_the_module():
    from peakbench.rocm.capabilities import TABLE
    assert TABLE.modules["p2p"] == "peakbench.rocm.p2p"


def test_vulkan_reports_no_peer_copy():
    from peakbench.vulkan import capabilities
    reason = capabilities.TABLE.support(TEST, rt=None)
    assert reason.startswith("[api] Vulkan has no peer-to-peer copy between devices")


HEADERS = fixture("hip-headers-rocm-6.3.tgz")


@pytest.mark.skipif(not shutil.which("clang-22") or not HEADERS.exists(),
                    reason=fixture_absent(HEADERS.name) or "needs clang-22 (scripts/rocm-isa-deps.sh)")
@pytest.mark.parametrize("target, wave", [("gfx942", 64), ("gfx1100", 32)])
def test_the_copy_kernel_keeps_four_16_byte_loads_in_flight_on_amd(tmp_path, target, wave):
    """shaders/p2p.cu through clang-22 as hiprtc builds it (the HIP runtime header included)."""
    with tarfile.open(HEADERS) as tar:
        tar.extractall(tmp_path, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    rocm = next(p.parents[2] for p in tmp_path.glob("*/include/hip/hip_runtime.h"))
    source = Path(__file__).resolve().parents[1] / "shaders" / "p2p.cu"
    done = subprocess.run(["clang-22", "-x", "hip", "--cuda-device-only", "-nogpulib", f"--rocm-path={rocm}",
                           "--hip-version=6.3", f"--offload-arch={target}", "-O3", "-std=c++17",
                           f"-D__AMDGCN_WAVEFRONT_SIZE={wave}", "-include", "hip/hip_runtime.h", "-DUNROLL=4",
                           "-S", "-o", "-", str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    memory = re.findall(r"^\s*(global_load_dwordx4|global_load_b128|global_store_dwordx4|global_store_b128)\b",
                        done.stdout, re.M)
    assert [m.split("_")[1] for m in memory[:8]] == ["load"] * 4 + ["store"] * 4, memory

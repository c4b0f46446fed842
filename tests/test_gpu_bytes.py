"""On a real NVIDIA GPU (the H200), through CUDA (CuPy) and Vulkan: upload takes bytes, a
memoryview and numpy arrays of any dtype, raw bytes, and download returns them as a memoryview of
memory of its own; Vulkan's 64 MiB staging buffer carries a copy larger than itself in pieces,
allocated once; the ALU check of compute.fp64 reads the whole 132 MiB output and compares every
value of every thread, passing on the real kernel, failing when a workgroup never ran, in well
under a second. Run with `pytest --gpu tests/test_gpu_bytes.py`."""
from __future__ import annotations

import time

import numpy as np
import pytest

from peakbench.catalog import default_catalog
from peakbench.vulkan import device as vk_device

pytestmark = pytest.mark.gpu
CATALOG = default_catalog()
BIG = 200 << 20                    # more than Vulkan's staging buffer (STAGING_MAX, 64 MiB): four pieces


def vulkan_gpu(vulkan_device):
    if vulkan_device.info.kind == "cpu":
        pytest.skip(f"Vulkan device 0 is {vulkan_device.info.name}, not a GPU")
    return vulkan_device


@pytest.fixture(params=["cuda", "vulkan"])
def device(request):
    if request.param == "cuda":
        return request.getfixturevalue("cuda_device")
    return vulkan_gpu(request.getfixturevalue("vulkan_device"))


@pytest.mark.parametrize("data", [
    bytes(range(256)) * 17,
    memoryview(bytearray(range(255, -1, -1)) * 9),
    np.arange(3 * 1000, dtype=np.float64).reshape(3, 1000) / 3,
    np.frombuffer(np.arange(4098, dtype=np.uint16).tobytes(), np.uint16),      # read-only
], ids=["bytes", "memoryview", "float64 2-D", "uint16 read-only"])
def test_upload_takes_any_contiguous_buffer_and_download_returns_its_bytes(device, data):
    rt = device.rt
    raw = bytes(memoryview(data).cast("B"))
    buf = rt.alloc(len(raw) + 64)
    try:
        rt.fill(buf, 0xA5)
        rt.upload(buf, data)
        got = rt.download(buf)
        assert isinstance(got, memoryview) and len(got) == len(raw) + 64
        assert len(rt.download(buf, 0)) == 0 and bytes(rt.download(buf, 5)) == raw[:5]
        assert got[:len(raw)] == raw and bytes(got[len(raw):]) == b"\xa5" * 64
        if isinstance(data, np.ndarray):
            assert np.array_equal(np.frombuffer(got, data.dtype, count=data.size).reshape(data.shape), data)
        with pytest.raises(ValueError):
            rt.upload(buf, np.zeros(len(raw) + 65, np.uint8))
        with pytest.raises(ValueError, match="contiguous"):
            rt.upload(buf, np.arange(64, dtype=np.uint32)[::2])
    finally:
        rt.free(buf)


def test_a_large_copy_round_trips_and_downloads_are_memory_of_their_own(device):
    rt = device.rt
    data = np.random.default_rng(7).integers(0, 2**63, BIG // 8, dtype=np.uint64)
    buf = rt.alloc(BIG)
    try:
        rt.upload(buf, data)
        first = rt.download(buf)
        assert np.array_equal(np.frombuffer(first, np.uint64), data)
        rt.fill(buf, 0)
        assert not np.frombuffer(rt.download(buf, 4096), np.uint64).any()
        assert np.array_equal(np.frombuffer(first, np.uint64), data)      # the first one is unchanged
    finally:
        rt.free(buf)


def test_vulkan_stages_through_one_buffer(vulkan_device, monkeypatch):
    rt = vulkan_gpu(vulkan_device).rt
    calls = []
    allocate = vk_device.vk.vkAllocateMemory
    monkeypatch.setattr(vk_device.vk, "vkAllocateMemory", lambda *a, **k: calls.append(1) or allocate(*a, **k))
    buf = rt.alloc(BIG)
    try:
        for i in range(3):
            rt.upload(buf, np.full(BIG, i, np.uint8))
            assert np.all(np.frombuffer(rt.download(buf), np.uint8) == i)
        # The device buffer, and at most one staging buffer (none where an earlier copy grew it).
        assert len(calls) <= 2
        assert rt.dev._staging.size == vk_device.STAGING_MAX
    finally:
        rt.free(buf)


@pytest.mark.parametrize("name", ["compute.fp64", "compute.int32"])
def test_the_alu_check_reads_every_thread_fast_and_catches_a_missing_workgroup(device, monkeypatch, name):
    test = CATALOG.get(name)
    variant = device.variants(test)[-1]
    w = device.prepare(test, variant)
    try:
        t0 = time.perf_counter()
        assert w.verify() is None
        seconds = time.perf_counter() - t0
        out_mib = w.threads * test.accumulators * variant.width * (8 if name == "compute.fp64" else 4) / 2**20
        print(f"{device.rt.dialect} {name} {variant.name}: verify {seconds:.3f} s, twice {out_mib:.0f} MiB")
        assert seconds < 1.0, f"verify took {seconds:.2f} s"
        local = w.threads // w.groups
        monkeypatch.setattr(w, "run", lambda size: w.rt.launch(w.kernel, w.groups - 1, [w.out, w.inp, np.uint32(size)]))
        problem = w.verify() or ""
        if name == "compute.fp64":
            assert f"{local} of {w.threads} threads wrote no result" in problem, problem
        else:
            assert f"values differ from the host reference (first at ({w.threads - local}, 0, 0)" in problem, problem
    finally:
        w.close()

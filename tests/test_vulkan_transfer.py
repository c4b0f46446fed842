"""Host transfers on lavapipe, for real: every test and variant verifies and measures through the
session, the bytes land where they should, and a copy that moves too few bytes is caught."""
from __future__ import annotations

import numpy as np
import pytest

from peakbench.catalog import transfer as catalog
from peakbench.harness.runner import Settings
from peakbench.harness.session import run_test
from peakbench.workloads import transfer

TESTS = {t.name: t for t in catalog.HOST_LINK}
QUICK = Settings(sample_s=0.002, warmup_s=0.0, min_samples=3, max_samples=3, budget_s=0.2)


@pytest.fixture(scope="module")
def vk_transfer(vulkan_device):
    from peakbench.vulkan import transfer
    return transfer


@pytest.mark.parametrize("name", TESTS)
def test_every_transfer_test_runs_and_verifies_with_a_size_series(vulkan_device, name):
    result = run_test(vulkan_device, TESTS[name], QUICK, lambda line: None)
    assert result.status == "ok", result.reason
    kinds = {"pinned", "pageable"} | ({"mapped"} if name == "transfer.h2d" else set())
    assert result.value > 0 and set(result.params["variants"]) == kinds
    assert result.evidence["guards"]["iterations"]["why"].startswith("bytes checked at 65536 and")
    series = result.series
    assert series["x"] == "transfer_bytes" and series["transfer_bytes"][-1] == result.params["transfer_bytes"]
    assert all(r > 0 for r in series["GB/s"])
    assert result.params["engine"] == "vkCmdCopyBuffer" or result.params["variant"] == "mapped"


def test_h2d_puts_the_host_bytes_in_device_memory(vulkan_device, vk_transfer):
    test = TESTS["transfer.h2d"]
    w = vulkan_device.prepare(test, test.variants[0])
    try:
        lane = w.lanes[0]
        lane.host.array[:4096] = np.arange(4096) % 251
        w.run(1, 4096)
        got = np.frombuffer(vulkan_device.rt.download(lane.device, 4096), np.uint8)
        assert np.array_equal(got, np.arange(4096) % 251)
    finally:
        w.close()


@pytest.mark.parametrize("kind", [0, 1], ids=["pinned", "pageable"])
def test_repeated_small_copies_move_successive_parts_of_the_buffers(vulkan_device, vk_transfer, kind):
    # Copies of the same bytes again could be served by a cache (the H200 read 370-400 GB/s "h2d").
    test = TESTS["transfer.h2d"]
    w = vulkan_device.prepare(test, test.variants[kind])
    try:
        lane, quarter = w.lanes[0], w.nbytes // 4
        vulkan_device.rt.fill(lane.device, 0)
        w.run(3, quarter)
        got = np.frombuffer(vulkan_device.rt.download(lane.device, w.nbytes), np.uint8)
        assert np.array_equal(got[:3 * quarter], lane.data[:3 * quarter]) and not got[3 * quarter:].any()
    finally:
        w.close()


def test_pageable_memory_is_numpy_staged_and_timed_on_the_host(vulkan_device, vk_transfer):
    test = TESTS["transfer.d2h"]
    w = vulkan_device.prepare(test, test.variants[1])
    try:
        host = w.lanes[0].host
        assert host.handle is None and isinstance(host.array, np.ndarray) and "staging" in host.extra
        assert w.params["timed"].startswith("host wall clock")
        assert w.verify() is None
    finally:
        w.close()
    transfer.release_kept(vulkan_device.rt)
    assert host.extra == {}


@pytest.mark.parametrize("name", TESTS)
def test_a_copy_of_too_few_bytes_fails_the_verification(vulkan_device, vk_transfer, name, monkeypatch):
    copy = vk_transfer.VulkanLink.copy
    monkeypatch.setattr(vk_transfer.VulkanLink, "copy",
                        lambda self, jobs, nbytes, at: copy(self, jobs, nbytes - 16 if nbytes > 65536 else nbytes, at))
    result = run_test(vulkan_device, TESTS[name], QUICK, lambda line: None)
    assert result.status == "failed"
    assert "guard iterations: variant pinned: output after" in result.reason
    assert "16 of" in result.reason and "bytes differ from the host data" in result.reason


def test_the_queue_is_described(vulkan_device, vk_transfer):
    test = TESTS["transfer.bidir"]
    w = vulkan_device.prepare(test, test.variants[0])
    try:
        assert w.params["queue"].startswith(f"queue family {vulkan_device.rt.dev.family} (compute)")
        assert w.params["bytes_counted"] == "both directions"
        assert w.items(2) == 2 * 2 * w.nbytes
    finally:
        w.close()


def test_the_mapped_read_sums_host_memory_and_a_short_read_is_caught(vulkan_device, vk_transfer):
    test = TESTS["transfer.h2d"]
    w = vulkan_device.prepare(test, test.variants[2])
    try:
        assert w.host.handle is w.host.extra["arg"] and w.params["bytes_counted"] == "read by the kernel"
        assert w.verify() is None
        assert w.evidence["guards"]["iterations"]["why"] == f"vectors checked at {w.step} and {2 * w.step}, passes at 1 and 2"
        assert w.items(3) == 3 * w.nbytes and w.run(1) > 0
        w.host.array[2 * w.step * 16 - 1] ^= 1        # the host's byte changes: the kernel's sums must too
        problem = w.verify()
        assert problem.startswith("guard iterations: output after") and "1 of" in problem
    finally:
        w.close()
    assert w.host is None


def test_host_memory_is_system_memory_where_the_device_has_both(vk_transfer):
    from types import SimpleNamespace as NS
    local, host = vk_transfer.LOCAL, vk_transfer.HOST
    props = NS(memoryTypeCount=3, memoryTypes=[NS(propertyFlags=local), NS(propertyFlags=local | host),
                                               NS(propertyFlags=host)])
    assert vk_transfer.host_memory_type(props, 0b111) == 2        # not the resizable BAR's type 1
    assert vk_transfer.host_memory_type(props, 0b011) == 1        # only device-local host memory: take it
    assert vk_transfer.host_memory_type(props, 0b001) is None

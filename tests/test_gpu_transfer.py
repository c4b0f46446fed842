"""On a real NVIDIA GPU (the H200), through CUDA and Vulkan: transfer.h2d, d2h and bidir verified
and measured on both backends through the CLI; CUDA's pinned copies near the link's practical
rate (an H200 SXM moved 55.3 GB/s each way with nvbandwidth's copy-engine test); bidir above one
direction (two copy engines at once); the size sweep rising to its largest size; and, with CuPy
directly, page-locked bytes arriving exactly. Run with `pytest --gpu tests/test_gpu_transfer.py`."""
from __future__ import annotations

import numpy as np
import pytest

from helpers import cuda_and_vulkan_runs

pytestmark = pytest.mark.gpu

# 98% of nvbandwidth's host_to_device_memcpy_ce / device_to_host_memcpy_ce on the H200 board
# (55.35 and 55.32 GB/s, issue 16): the target; the test fails only under 90% of it, so a
# slower board still says by how much in the message.
NVBANDWIDTH = {"transfer.h2d": 55.35, "transfer.d2h": 55.32}


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    return cuda_and_vulkan_runs(request, tmp_path_factory, "transfer.*")


def test_every_transfer_ran_verified_on_both_backends(runs):
    p, by_backend = runs
    assert p.returncode == 0, p.stderr
    for backend in ("cuda", "vulkan"):
        for name in ("transfer.h2d", "transfer.d2h", "transfer.bidir"):
            r = by_backend[backend][name]
            assert r["status"] == "ok", f"{backend} {name}: {r['reason']}"
            kinds = {"pinned", "pageable"} | ({"mapped"} if name == "transfer.h2d" else set())
            assert set(r["params"]["variants"]) == kinds
            # copies are checked at two sizes; the mapped read (h2d's fastest on Vulkan) at two sizes
            # and over one and two passes, as memory.read is
            checked = r["evidence"]["guards"]["iterations"]["why"]
            mapped = r["params"].get("best") == "mapped" or r["params"].get("variant") == "mapped"
            assert checked.startswith("vectors checked at" if mapped else "bytes checked at"), (r["params"], checked)


def test_cuda_pinned_copies_reach_the_copy_engine_rate(runs):
    _, by_backend = runs
    cuda = by_backend["cuda"]
    for name, peer in NVBANDWIDTH.items():
        pinned = cuda[name]["params"]["variants"]["pinned"]["median"]
        assert pinned >= 0.90 * peer, f"{name}: {pinned:.2f} GB/s pinned, {100 * pinned / peer:.1f}% of nvbandwidth's {peer}"
        assert pinned > cuda[name]["params"]["variants"]["pageable"]["median"]


def test_a_kernel_reading_mapped_host_memory_crosses_the_link(runs):
    _, by_backend = runs
    for backend in ("cuda", "vulkan"):
        mapped = by_backend[backend]["transfer.h2d"]["params"]["variants"]["mapped"]["median"]
        # over PCIe Gen5 x16 (64 GB/s a direction): not device memory, and not a few GB/s either
        assert 10 < mapped < 70, f"{backend}: the mapped read ran at {mapped} GB/s"


def test_cuda_bidir_runs_both_directions_at_once(runs):
    _, by_backend = runs
    cuda = by_backend["cuda"]
    one_way = max(cuda["transfer.h2d"]["value"], cuda["transfer.d2h"]["value"])
    assert cuda["transfer.bidir"]["value"] > 1.3 * one_way, (cuda["transfer.bidir"]["value"], one_way)


def test_vulkan_bidir_copies_each_way_on_a_queue_of_its_own_at_once(runs):
    """NVIDIA's driver has a transfer-only family of two queues: both directions run at once, the
    faster given more pieces, where on one queue they ran one after the other (bidir = one way)."""
    _, by_backend = runs
    vulkan = by_backend["vulkan"]
    bidir = vulkan["transfer.bidir"]
    pinned = bidir["params"]["variants"]["pinned"]["median"]
    one_way = max(vulkan[n]["params"]["variants"]["pinned"]["median"] for n in ("transfer.h2d", "transfer.d2h"))
    assert "a queue each" in bidir["params"]["queue"], bidir["params"]["queue"]
    assert pinned > 1.1 * one_way, (pinned, one_way)


def test_the_sweep_rises_to_its_largest_transfer(runs):
    _, by_backend = runs
    series = by_backend["cuda"]["transfer.h2d"]["series"]
    rates = series["GB/s"]
    assert series["transfer_bytes"][-1] == 256 << 20
    assert rates[-1] > 1.5 * rates[0] and rates[-1] >= 0.95 * max(rates), rates


def test_percent_of_the_link_shows_where_the_spec_has_it(runs):
    _, by_backend = runs
    r = by_backend["cuda"]["transfer.h2d"]
    if r["spec_value"] is None:
        pytest.skip("the spec entry has no host_link_gbs yet")
    assert r["spec_value"] == 64 and 70 <= r["pct_of_spec"] <= 100, r


def test_pinned_bytes_arrive_exactly_through_cupy(request):
    cp = pytest.importorskip("cupy")
    from peakbench.cuda import transfer
    from peakbench.workloads.transfer import HostBuffer, pattern
    from peakbench.backend import load
    backend = load("cuda")
    try:
        device = backend.open(0)
        try:
            link = transfer.CudaLink(device.rt)
            n = 3 << 20
            host = link.host(n, "pinned")
            back = link.host(n, "pinned")
            dev = link.device(n)
            host.array[:] = pattern(n, 7)
            link.copy([("h2d", host, dev)], n, [0])
            assert np.array_equal(cp.asnumpy(dev), pattern(n, 7))
            seconds = link.copy([("d2h", back, dev)], n, [0, 0])
            assert np.array_equal(back.array, pattern(n, 7)) and seconds > 0
            link.close()
        finally:
            device.close()
    finally:
        backend.close()

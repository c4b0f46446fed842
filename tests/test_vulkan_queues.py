"""The copy queues (peakbench/vulkan/queues.py): the timing of copies on queues of their own, a
span that does not fit the host's clock refused, each direction of a balanced transfer on its own
queue, and, for real on the session's Vulkan device, one queue of its family driven through the
same path (lavapipe has no transfer-only family: the link then copies on the compute queue)."""
from __future__ import annotations

import numpy as np
import pytest
import vulkan as vk

from peakbench.vulkan import queues, transfer
from peakbench.vulkan.queues import CopyQueues, CopyTimingError, span
from peakbench.workloads.transfer import offsets

MASK = (1 << 64) - 1


def test_the_span_runs_from_the_first_start_to_the_last_end():
    seconds, ends = span([(1000, 11_000), (1500, 9000)], MASK, 1.0, wall_s=20e-6)
    assert seconds == pytest.approx(10e-6) and ends == pytest.approx([10e-6, 8e-6])


def test_a_counter_that_wraps_is_read_through_the_wrap():
    bits32 = (1 << 32) - 1
    seconds, ends = span([(bits32 - 99, 900), (bits32 - 49, 400)], bits32, 2.0, wall_s=1.0)
    assert seconds == pytest.approx(2000e-9) and ends == pytest.approx([2000e-9, 1000e-9])


@pytest.mark.parametrize("ticks, wall", [([(0, 3_000_000), (500, 2_000_000)], 1e-3),    # longer than the host saw
                                         ([(0, 1000), (1 << 40, (1 << 40) + 1000)], 1.0)])    # two clocks
def test_a_span_the_hosts_clock_contradicts_is_an_error_not_a_rate(ticks, wall):
    with pytest.raises(CopyTimingError, match="not one clock"):
        span(ticks, MASK, 1.0, wall)


def test_only_a_family_that_copies_alone_and_keeps_time_is_taken():
    def family(flags, stamps=64, count=2):
        return type("Family", (), {"queueFlags": flags, "timestampValidBits": stamps, "queueCount": count})
    T, C, G = vk.VK_QUEUE_TRANSFER_BIT, vk.VK_QUEUE_COMPUTE_BIT, vk.VK_QUEUE_GRAPHICS_BIT
    assert queues.transfer_family([family(G | C | T), family(T | 0x8), family(C | T)]) == 1
    assert queues.transfer_family([family(G | C | T), family(T, stamps=0), family(T)]) == 2
    assert queues.transfer_family([family(G | C | T), family(C | T)]) is None


class FakeCopyQueues:
    """Records which copies each queue was given; each queue 'takes' 1 ms a copy."""

    def __init__(self):
        self.given = []

    def run(self, records):
        self.given = []
        for record in records:
            calls = []
            record(calls)
            self.given.append(calls)
        return max(len(c) for c in self.given) * 1e-3, [len(c) * 1e-3 for c in self.given]


def test_each_direction_of_a_balanced_transfer_copies_on_a_queue_of_its_own(vulkan_device, monkeypatch):
    rt = vulkan_device.rt
    monkeypatch.setattr(rt.dev, "copy_queues", FakeCopyQueues())
    monkeypatch.setattr(rt.dev, "copy_family", 1)
    monkeypatch.setattr(vk, "vkCmdCopyBuffer", lambda cmd, src, dst, n, regions: cmd.append(
        (src, dst, regions[0].srcOffset, regions[0].size)))
    link = transfer.VulkanLink(rt)
    host = type("Host", (), {"extra": {}, "handle": type("B", (), {"handle": "host"})})
    device = type("Dev", (), {"handle": "device"})
    jobs = [("h2d", host, device), ("d2h", host, device)]
    seconds, ends = link.copy_each(jobs, 4096, [offsets(4096, 16384, 3), offsets(4096, 16384, 5)])
    h2d, d2h = link.dev.copy_queues.given
    assert h2d == [("host", "device", o, 4096) for o in (0, 4096, 8192)]
    assert d2h == [("device", "host", o, 4096) for o in (0, 4096, 8192, 12288, 0)]
    assert (seconds, ends) == (5e-3, [3e-3, 5e-3]) and link.issued == 8 * 4096
    assert "transfer-only family 1, a queue each" in link.describe("pinned")["queue"]


def test_without_copy_queues_the_link_copies_on_the_compute_queue(vulkan_device):
    rt = vulkan_device.rt
    if rt.dev.copy_queues is not None:
        pytest.skip(f"{rt.info.name} has copy queues")
    link = transfer.VulkanLink(rt)
    assert not hasattr(link, "copy_each")
    assert link.describe("pinned")["queue"].startswith(f"queue family {rt.dev.family} (compute), the device's one queue")


def test_a_copy_queue_copies_and_times_for_real(vulkan_device):
    """The session's device: its compute family's queue driven as a copy queue (a family copies
    whatever else it does); the bytes arrive and the span is the queue's own time."""
    dev = vulkan_device.rt.dev
    families = vk.vkGetPhysicalDeviceQueueFamilyProperties(dev.physical)
    family = dev.copy_family if dev.copy_family is not None else dev.family
    bits = families[family].timestampValidBits
    if not bits:
        pytest.skip("no timestamps on the queue family")
    copies = CopyQueues(dev.device, family, 1, (1 << bits) - 1, dev.caps.timestamp_period_ns)
    link = transfer.VulkanLink(vulkan_device.rt)
    host, target = link.host(1 << 16, "pinned"), link.device(1 << 16)
    try:
        host.array[:] = np.arange(1 << 16, dtype=np.uint32).view(np.uint8)[:1 << 16]
        vulkan_device.rt.dev.fill(target, 0)
        seconds, ends = copies.run([link._copies([("h2d", host, target)], 1 << 14, offsets(1 << 14, 1 << 16, 4))])
        assert 0 < seconds == ends[0] < 1.0
        assert bytes(vulkan_device.rt.dev.download(target, 1 << 16)) == host.array.tobytes()
        with pytest.raises(ValueError, match="2 copies at once, 1 copy queues"):
            copies.run([lambda cmd: None] * 2)
    finally:
        copies.close()
        link.release(host)
        link.release(target)

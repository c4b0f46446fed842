"""The copy engines' queues: a device's transfer-only queue family (one that copies and does
nothing else), opened beside the compute queue, so that transfer.bidir can copy each way on a
queue of its own. Copies of both directions in one command buffer on the compute queue ran one
after the other on an H100 (board acbf12ca: 41 GB/s both ways where h2d alone read 34 and d2h 52); on two queues of
the transfer family, the faster direction given more copies, they ran at once: 58 GB/s
(PERFORMANCE_ANALYSIS.md, "Start-up, sixth round").

Each queue has its own command buffer, fence and pair of timestamp queries. The launch is timed
from the earlier start to the later end, the two queues' timestamps read on one clock: the
device's time domain, which every vkCmdWriteTimestamp of the device uses
(VK_KHR_calibrated_timestamps, VK_TIME_DOMAIN_DEVICE_KHR). That span is checked against each
queue's own time and the host's clock around the whole launch (`span`): a span out of those
bounds is an error, never a number."""
from __future__ import annotations

import time
from dataclasses import dataclass

import vulkan as vk

ffi = vk.ffi
COPY_QUEUES = 2                      # one a direction
FENCE_TIMEOUT_S = 120.0
QUEUE_TYPES = vk.VK_QUEUE_GRAPHICS_BIT | vk.VK_QUEUE_COMPUTE_BIT
SLACK_S = 1e-4                       # the host's clock read around submissions and waits, at most this early


class CopyTimingError(RuntimeError):
    """The copy queues' timestamps do not fit the host's clock: no rate can be taken from them."""


def transfer_family(families) -> int | None:
    """The first queue family that copies and does nothing else (the copy engines), with
    timestamps, or None."""
    for i, f in enumerate(families):
        if f.queueFlags & vk.VK_QUEUE_TRANSFER_BIT and not f.queueFlags & QUEUE_TYPES and f.timestampValidBits:
            return i
    return None


def writes_made_visible(cmd) -> None:
    """Record a barrier that makes every write before it available to later submissions, on any
    queue, and to the host: a fence wait orders execution but does not make device writes visible
    by itself."""
    vk.vkCmdPipelineBarrier(cmd, vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                            vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | vk.VK_PIPELINE_STAGE_HOST_BIT, 0,
                            1, [vk.VkMemoryBarrier(srcAccessMask=vk.VK_ACCESS_MEMORY_WRITE_BIT,
                                                   dstAccessMask=vk.VK_ACCESS_MEMORY_READ_BIT
                                                   | vk.VK_ACCESS_MEMORY_WRITE_BIT | vk.VK_ACCESS_HOST_READ_BIT)],
                            0, None, 0, None)


def span(ticks: list[tuple[int, int]], mask: int, period_ns: float, wall_s: float) -> tuple[float, list[float]]:
    """(seconds from the earliest start to the latest end, each queue's seconds from that start to
    its own end) of queues' (start, end) timestamps; CopyTimingError where the span is shorter
    than a queue's own time or longer than the host saw the whole launch take (`wall_s`)."""
    first = min(start for start, _ in ticks)
    ends = [((end - first) & mask) * period_ns * 1e-9 for _, end in ticks]
    own = [((end - start) & mask) * period_ns * 1e-9 for start, end in ticks]
    seconds = max(ends)
    if any(o > seconds for o in own) or seconds > wall_s + SLACK_S:
        raise CopyTimingError(f"the copy queues' timestamps span {seconds * 1e3:.3f} ms, each queue's own "
                              f"{', '.join(f'{o * 1e3:.3f}' for o in own)} ms, the host saw "
                              f"{wall_s * 1e3:.3f} ms: not one clock")
    return seconds, ends


@dataclass
class CopyQueue:
    queue: object
    pool: object
    cmd: object
    fence: object
    queries: object


class CopyQueues:
    """`count` queues of the transfer-only family `family` of a created device."""

    def __init__(self, device, family: int, count: int, mask: int, period_ns: float):
        self.device, self.family, self.mask, self.period_ns = device, family, mask, period_ns
        self.queues: list[CopyQueue] = []
        try:
            for index in range(count):
                self.queues.append(self._open(index))
        except Exception:
            self.close()
            raise

    def _open(self, index: int) -> CopyQueue:
        d = self.device
        pool = vk.vkCreateCommandPool(d, vk.VkCommandPoolCreateInfo(
            flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, queueFamilyIndex=self.family), None)
        try:
            cmd = vk.vkAllocateCommandBuffers(d, vk.VkCommandBufferAllocateInfo(
                commandPool=pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]
            fence = vk.vkCreateFence(d, vk.VkFenceCreateInfo(), None)
        except Exception:
            vk.vkDestroyCommandPool(d, pool, None)
            raise
        try:
            queries = vk.vkCreateQueryPool(d, vk.VkQueryPoolCreateInfo(
                queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=2), None)
        except Exception:
            vk.vkDestroyFence(d, fence, None)
            vk.vkDestroyCommandPool(d, pool, None)
            raise
        return CopyQueue(vk.vkGetDeviceQueue(d, self.family, index), pool, cmd, fence, queries)

    def run(self, records: list) -> tuple[float, list[float]]:
        """records[i](cmd) recorded on queue i between its two timestamps, all submitted, then all
        waited for: span()'s (seconds, each queue's end)."""
        if len(records) > len(self.queues):
            raise ValueError(f"{len(records)} copies at once, {len(self.queues)} copy queues")
        used = self.queues[:len(records)]
        for q, record in zip(used, records):
            self._record(q, record)
        t0 = time.perf_counter()
        for q in used:
            vk.vkQueueSubmit(q.queue, 1, [vk.VkSubmitInfo(pCommandBuffers=[q.cmd])], q.fence)
        try:
            for q in used:
                vk.vkWaitForFences(self.device, 1, [q.fence], vk.VK_TRUE, int(FENCE_TIMEOUT_S * 1e9))
        finally:
            wall = time.perf_counter() - t0
            for q in used:
                vk.vkResetFences(self.device, 1, [q.fence])
        ticks = []
        for q in used:
            got = ffi.new("uint64_t[2]")
            vk.vkGetQueryPoolResults(self.device, q.queries, 0, 2, 16, got, 8,
                                     vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
            ticks.append((got[0], got[1]))
        return span(ticks, self.mask, self.period_ns, wall)

    @staticmethod
    def _record(q: CopyQueue, record) -> None:
        vk.vkResetCommandBuffer(q.cmd, 0)
        vk.vkBeginCommandBuffer(q.cmd, vk.VkCommandBufferBeginInfo(flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
        vk.vkCmdResetQueryPool(q.cmd, q.queries, 0, 2)
        vk.vkCmdWriteTimestamp(q.cmd, vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, q.queries, 0)
        record(q.cmd)
        vk.vkCmdWriteTimestamp(q.cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, q.queries, 1)
        writes_made_visible(q.cmd)
        vk.vkEndCommandBuffer(q.cmd)

    def close(self) -> None:
        d = self.device
        for q in self.queues:
            vk.vkDestroyQueryPool(d, q.queries, None)
            vk.vkDestroyFence(d, q.fence, None)
            vk.vkDestroyCommandPool(d, q.pool, None)
        self.queues = []

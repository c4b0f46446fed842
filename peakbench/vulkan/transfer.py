"""Host transfers on Vulkan: vkCmdCopyBuffer between host-visible and device-local buffers,
timed with timestamp queries (the workload is peakbench/workloads/transfer.py). One direction
copies on the compute queue; both at once (transfer.bidir), where the device has a transfer-only
queue family of two queues, copy each on a queue of their own (queues.py), the faster direction
given more pieces (copy_each); elsewhere both go in one command buffer on the compute queue.

`pinned` host memory is a buffer the driver allocated host-visible and coherent, mapped for the
test's life: the copy reads or writes it directly. `pageable` is ordinary numpy memory: each copy
goes through a host-visible staging buffer (a memcpy on the CPU, then vkCmdCopyBuffer), and is
timed on the host, memcpy included, since the GPU's timestamps cannot see the CPU's part.
`mapped` (transfer.h2d) binds such a host-memory buffer as the stream read shader's source.
"""
from __future__ import annotations

import time

import numpy as np
import vulkan as vk

from peakbench.vulkan.kernels import STREAM
from peakbench.vulkan.device import Buffer
from peakbench.vulkan.queues import transfer_family
from peakbench.workloads.transfer import HostBuffer, MappedReadWorkload, RuntimeBuffers, TransferWorkload, value_bytes

ffi = vk.ffi
HOST = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
LOCAL = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
USAGE = (vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
         | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT)


def support(test, rt) -> str | None:
    return None


def host_memory_type(props, bits: int) -> int | None:
    """A host-visible coherent memory type in system memory: not device-local, where the device
    has one (device-local host-visible memory, a resizable BAR, is on the far side of the link:
    copies to it would not cross it); else any host-visible one (a CPU or integrated GPU)."""
    types = [(i, props.memoryTypes[i].propertyFlags) for i in range(props.memoryTypeCount) if bits & (1 << i)]
    host = [(i, f) for i, f in types if f & HOST == HOST]
    system = [i for i, f in host if not f & LOCAL]
    return (system or [i for i, _ in host] or [None])[0]


class VulkanLink(RuntimeBuffers):
    """The link verbs on the runtime's device: its compute queue, and its copy queues where it
    opened them (then copy_each, which the workload balances both directions with)."""

    stream = STREAM

    def __init__(self, rt):
        self.rt, self.dev = rt, rt.dev
        self.value_bytes = value_bytes(rt.info)
        self.issued = 0                     # bytes of the regions handed to vkCmdCopyBuffer (workloads/transfer.py)
        if self.dev.copy_queues is not None:
            self.copy_each = self._copy_each

    def device(self, nbytes: int) -> Buffer:
        return self.dev.buffer(nbytes, copied=True)

    # Memory -----------------------------------------------------------------------------------
    def _mapped(self, nbytes: int, kind: str) -> HostBuffer:
        """A buffer in host memory (host_memory_type), mapped for its life."""
        d = self.dev.device
        handle = vk.vkCreateBuffer(d, vk.VkBufferCreateInfo(size=nbytes, usage=USAGE, **self.dev.sharing(True)), None)
        memory = None
        try:
            req = vk.vkGetBufferMemoryRequirements(d, handle)
            index = host_memory_type(self.dev.memory_props, req.memoryTypeBits)
            if index is None:
                raise RuntimeError(f"no host-visible coherent memory type for a {nbytes}-byte buffer")
            memory = vk.vkAllocateMemory(d, vk.VkMemoryAllocateInfo(allocationSize=req.size, memoryTypeIndex=index), None)
            vk.vkBindBufferMemory(d, handle, memory, 0)
            view = np.frombuffer(vk.vkMapMemory(d, memory, 0, nbytes, 0), np.uint8, nbytes)
        except Exception:
            if memory is not None:
                vk.vkFreeMemory(d, memory, None)
            vk.vkDestroyBuffer(d, handle, None)
            raise
        flags = self.dev.memory_props.memoryTypes[index].propertyFlags
        return HostBuffer(Buffer(handle, memory, nbytes), view, kind, {"memory_type": index, "flags": flags})

    def host(self, nbytes: int, kind: str) -> HostBuffer:
        if kind == "pinned":
            return self._mapped(nbytes, kind)
        host = HostBuffer(None, np.zeros(nbytes, np.uint8), kind)
        host.extra["staging"] = self._mapped(nbytes, "staging")
        return host

    def mapped(self, nbytes: int) -> HostBuffer:
        host = self._mapped(nbytes, "mapped")
        host.extra["arg"] = host.handle          # a Buffer: the launch binds it as a storage buffer
        return host

    def release(self, buf) -> None:
        if isinstance(buf, HostBuffer):
            staging = buf.extra.pop("staging", None)
            if staging is not None:
                self.release(staging)
            if buf.handle is not None:
                handle, buf.handle, buf.array = buf.handle, None, None
                vk.vkUnmapMemory(self.dev.device, handle.memory)
                vk.vkDestroyBuffer(self.dev.device, handle.handle, None)
                vk.vkFreeMemory(self.dev.device, handle.memory, None)
        else:
            self.rt.free(buf)

    # Copies -----------------------------------------------------------------------------------
    def _record(self, jobs, nbytes: int, at: list[int], timed: bool):
        """Every job's copies in one command buffer, with no barrier between them (both directions
        of bidir on the one queue: they ran one after the other); a copy at each offset of `at`."""
        dev = self.dev

        def record(cmd):
            if timed:
                vk.vkCmdResetQueryPool(cmd, dev.query_pool, 0, 2)
                vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, dev.query_pool, 0)
            self._copies(jobs, nbytes, at)(cmd)
            if timed:
                vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, dev.query_pool, 1)
        return record

    def _copies(self, jobs, nbytes: int, at: list[int]):
        """A recorder of the jobs' copies of `nbytes`, one at each offset of `at`, in turn."""
        regions = {o: [vk.VkBufferCopy(o, o, nbytes)] for o in set(at)}

        def record(cmd):
            for o in at:
                for direction, host, device in jobs:
                    src = (host.extra.get("staging") or host).handle
                    pair = (src.handle, device.handle) if direction == "h2d" else (device.handle, src.handle)
                    vk.vkCmdCopyBuffer(cmd, *pair, 1, regions[o])
                    self.issued += regions[o][0].size
        return record

    def _copy_each(self, jobs, nbytes: int, ats: list[list[int]]) -> tuple[float, list[float]]:
        """Job i's copies at the offsets ats[i] on copy queue i, all submitted at once: the seconds
        from the first start to the last end, and each queue's until its own end."""
        return self.dev.copy_queues.run([self._copies([job], nbytes, at) for job, at in zip(jobs, ats)])

    def copy(self, jobs, nbytes: int, at: list[int]) -> float:
        dev = self.dev
        if any(host.kind == "pageable" for _, host, _ in jobs):
            return self._staged(jobs, nbytes, at)
        timed = bool(dev.timestamp_mask)
        t0 = time.perf_counter()
        dev._submit(self._record(jobs, nbytes, at, timed))
        wall = time.perf_counter() - t0
        if not timed:
            return wall
        ticks = ffi.new("uint64_t[2]")
        vk.vkGetQueryPoolResults(dev.device, dev.query_pool, 0, 2, 16, ticks, 8,
                                 vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
        return ((ticks[1] - ticks[0]) & dev.timestamp_mask) * dev.caps.timestamp_period_ns * 1e-9

    def _staged(self, jobs, nbytes: int, at: list[int]) -> float:
        """Pageable copies: the CPU's memcpy into (or out of) the staging buffer and the GPU's
        copy, one after the other, at each offset of `at`; host wall time."""
        records = {o: self._record(jobs, nbytes, [o], False) for o in set(at)}
        t0 = time.perf_counter()
        for o in at:
            part = slice(o, o + nbytes)
            for direction, host, _ in jobs:
                if direction == "h2d":
                    np.copyto(host.extra["staging"].array[part], host.array[part])
            self.dev._submit(records[o])
            for direction, host, _ in jobs:
                if direction == "d2h":
                    np.copyto(host.array[part], host.extra["staging"].array[part])
        return time.perf_counter() - t0

    def describe(self, kind: str) -> dict:
        dev = self.dev
        if dev.copy_queues is not None:
            queue = (f"queue family {dev.family} (compute) for one direction; both directions (pinned): "
                     f"transfer-only family {dev.copy_family}, a queue each")
        else:
            queue = f"queue family {dev.family} (compute), the device's one queue for copies"
            found = transfer_family(vk.vkGetPhysicalDeviceQueueFamilyProperties(dev.physical))
            if found is not None:
                queue += f"; transfer-only family {found} has fewer than two queues"
        index = host_memory_type(dev.memory_props, ~0)
        where = f"memory type {index}, {'device-local' if dev.memory_props.memoryTypes[index].propertyFlags & LOCAL else 'not device-local'}"
        host = {"pinned": f"driver-allocated host-visible coherent memory ({where}), mapped; copied directly",
                "pageable": f"numpy (pageable) memory, memcpy to or from a host-visible staging buffer ({where}) on each copy",
                "mapped": f"driver-allocated host-visible coherent memory ({where}), bound as the shader's storage buffer"}[kind]
        gpu_timed = kind != "pageable" and dev.timestamp_mask
        return {"host_memory": host, "engine": "vkCmdCopyBuffer", "queue": queue,
                "timed": "timestamp queries" if gpu_timed else "host wall clock, submit to fence (the CPU's memcpy included)"}

    def close(self) -> None:
        pass


def workload(test, variant, rt):
    kind = MappedReadWorkload if variant.name == "mapped" else TransferWorkload
    return kind(test, variant, VulkanLink(rt))

"""When does the host learn that an empty Vulkan dispatch ended, by each signal it can poll? Each
launch of one invocation writes a new word into host-visible memory and signals a fence and a
timeline semaphore; the launches take turns at which one the host polls from the submission:
the word (the GPU's own write, as CUDA's synchronize spins on a word in host memory), the
semaphore's counter (vkGetSemaphoreCounterValue) or the fence (vkGetFenceStatus, what
launch.overhead polls), then wait for the rest untimed. Medians per signal, the NVIDIA interrupts
the launches raised (/proc/interrupts) and the CPUs the loop ran on. launch.overhead read
13.6-16 us in most processes and 43-54 us in some, the whole process one or the other
(PERFORMANCE_ANALYSIS.md, "Vulkan's slow fence"). From the repository, on a GPU with the
`vulkan` package:

    python3 scripts/probes/vulkan_sync.py [launches per signal]
"""
import json
import statistics
import sys
import time

import numpy as np
import vulkan as vk

import peakbench.vulkan.device as vulkan_device
from peakbench.backend import load
from peakbench.workloads.launch import lcg

ffi, raw = vk.ffi, vk.lib
NOT_READY = 1
SIGNALS = ("word", "semaphore", "fence")
GIVE_UP_S = 1.0


def with_timeline_semaphores(chain):
    """peakbench's device creation, with the timeline-semaphore feature turned on as well."""
    def chained(*structs):
        for s in structs:
            if ffi.typeof(s) == ffi.typeof("VkPhysicalDeviceVulkan12Features*"):
                s.timelineSemaphore = 1
        return chain(*structs)
    return chained


def interrupts() -> dict[str, int]:
    """NVIDIA's interrupt lines: their count over all CPUs, by line."""
    found = {}
    try:
        with open("/proc/interrupts") as f:
            cpus = len(f.readline().split())
            for line in f:
                if "nvidia" in line:
                    parts = line.split()
                    found[parts[0].rstrip(":")] = sum(int(p) for p in parts[1:1 + cpus] if p.isdigit())
    except OSError:
        pass
    return found


def cpu_now() -> int:
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


def main() -> int:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    vulkan_device._chain = with_timeline_semaphores(vulkan_device._chain)
    backend = load("vulkan")
    device = backend.open(0)
    rt = device.rt
    dev = rt.dev
    kernel = rt.compile("empty.comp", {"SPIN": 1}, "main", block=1, args="bu", label="sync-probe")
    buf = dev.buffer(4, host_visible=True)
    mapped = ffi.new("void**")
    assert raw.vkMapMemory(dev.device, buf.memory, 0, 4, 0, mapped) == 0
    word = ffi.cast("volatile uint32_t*", mapped[0])
    rt._bind(kernel, [buf, np.uint32(1)])
    p = kernel.handle
    kind = vk.VkSemaphoreTypeCreateInfo(semaphoreType=vk.VK_SEMAPHORE_TYPE_TIMELINE, initialValue=0)
    semaphore = vk.vkCreateSemaphore(dev.device, vk.VkSemaphoreCreateInfo(pNext=kind), None)
    cmds = []
    for steps in (1, 2):
        cmd = vk.vkAllocateCommandBuffers(dev.device, vk.VkCommandBufferAllocateInfo(
            commandPool=dev.command_pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]
        vk.vkBeginCommandBuffer(cmd, vk.VkCommandBufferBeginInfo())
        vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, p.handle)
        vk.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, [p.descriptor_set], 0, None)
        vk.vkCmdPushConstants(cmd, p.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, 4, ffi.new("uint32_t[]", [steps]))
        vk.vkCmdDispatch(cmd, 1, 1, 1)
        vk.vkCmdPipelineBarrier(cmd, vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, vk.VK_PIPELINE_STAGE_HOST_BIT, 0, 1,
                                [vk.VkMemoryBarrier(srcAccessMask=vk.VK_ACCESS_SHADER_WRITE_BIT,
                                                    dstAccessMask=vk.VK_ACCESS_HOST_READ_BIT)], 0, None, 0, None)
        vk.vkEndCommandBuffer(cmd)
        cmds.append((ffi.new("VkCommandBuffer[1]", [cmd]), lcg(steps)))
    semaphores = ffi.new("VkSemaphore[1]", [semaphore])
    value = ffi.new("uint64_t[1]")
    timeline = ffi.new("VkTimelineSemaphoreSubmitInfo*", {"sType": vk.VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                                           "signalSemaphoreValueCount": 1, "pSignalSemaphoreValues": value})
    infos = [ffi.new("VkSubmitInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, "pNext": timeline,
                                       "commandBufferCount": 1, "pCommandBuffers": c,
                                       "signalSemaphoreCount": 1, "pSignalSemaphores": semaphores}) for c, _ in cmds]
    fences = ffi.new("VkFence[1]", [dev.fence])
    counter = ffi.new("uint64_t*")
    seen = {s: [] for s in SIGNALS}
    late, wrong, cpus, before = {s: 0 for s in SIGNALS}, 0, set(), interrupts()

    def fence_signaled() -> bool:
        return raw.vkGetFenceStatus(dev.device, dev.fence) != NOT_READY

    def counted(v) -> bool:
        raw.vkGetSemaphoreCounterValue(dev.device, semaphore, counter)
        return counter[0] >= v

    warm = 3 * 10
    for i in range(warm + 3 * count):
        signal = SIGNALS[i % 3]
        (cmd_info, want), v = (infos[i % 2], cmds[i % 2][1]), i + 1
        value[0] = v
        t0 = time.perf_counter()
        assert raw.vkQueueSubmit(dev.queue, 1, cmd_info, dev.fence) == 0
        done = {"word": lambda: word[0] == want, "semaphore": lambda: counted(v), "fence": fence_signaled}[signal]
        polls = 0
        while not done():
            polls += 1
            if not polls % 1024 and time.perf_counter() - t0 > GIVE_UP_S:
                late[signal] += 1
                break
        t = time.perf_counter() - t0
        while not fence_signaled():      # untimed: the command buffers are reused
            pass
        raw.vkResetFences(dev.device, 1, fences)
        if i >= warm:
            seen[signal].append(t)
            cpus.add(cpu_now())
        wrong += word[0] != want         # the word after the fence: the launch's own write
    after = interrupts()
    raw.vkUnmapMemory(dev.device, buf.memory)
    vk.vkDestroySemaphore(dev.device, semaphore, None)
    print(json.dumps({
        "launches_per_signal": count,
        **{f"{s}_us": round(statistics.median(seen[s]) * 1e6, 2) for s in SIGNALS},
        **{f"{s}_p90_us": round(sorted(seen[s])[int(0.9 * len(seen[s]))] * 1e6, 2) for s in SIGNALS},
        "late": late, "word_wrong_after_fence": wrong, "nvidia_interrupts": {k: after.get(k, 0) - v for k, v in before.items()},
        "cpus": sorted(cpus)}))
    device.close()
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

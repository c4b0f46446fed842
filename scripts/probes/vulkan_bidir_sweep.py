"""Vulkan host copies both ways at once, through the bindings alone (no peakbench layers): every pair
of queues (transfer-only, compute-only, the universal family), piece sizes from 8 to 256 MiB, each
system-memory type, and host memory the driver imported from an anonymous mapping
(VK_EXT_external_memory_host). Prints GB/s over the span of the queues' timestamps, each queue's
own rate, and one direction alone on the same queues. Run on a GPU with the `vulkan` package:
`python3 scripts/probes/vulkan_bidir_sweep.py` (PERFORMANCE_ANALYSIS.md, "Start-up, seventh round")."""
import mmap
import os
import sys
import time

import numpy as np
import vulkan as vk

ffi = vk.ffi
MiB = 1 << 20
N = int(os.environ.get("PROBE_MIB", 256)) * MiB
HOST = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
LOCAL = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
EXT = "VK_EXT_external_memory_host"

inst = vk.vkCreateInstance(vk.VkInstanceCreateInfo(pApplicationInfo=vk.VkApplicationInfo(apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))), None)
pd = vk.vkEnumeratePhysicalDevices(inst)[0]
fams = vk.vkGetPhysicalDeviceQueueFamilyProperties(pd)
exts = {e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(pd, None)}
GFX, CMP = vk.VK_QUEUE_GRAPHICS_BIT, vk.VK_QUEUE_COMPUTE_BIT
roles = {"u": next(i for i, f in enumerate(fams) if f.queueFlags & (GFX | CMP))}
transfer_only = [i for i, f in enumerate(fams) if f.queueFlags & vk.VK_QUEUE_TRANSFER_BIT and not f.queueFlags & (GFX | CMP)]
if transfer_only:
    roles["t"] = transfer_only[0]
async_compute = [i for i, f in enumerate(fams) if f.queueFlags & CMP and not f.queueFlags & GFX and i != roles["u"]]
if async_compute:
    roles["a"] = async_compute[0]
COUNT = 2
pr = ffi.new("float[2]", [1.0, 1.0])
FAMS = sorted(set(roles.values()))
qcis = [vk.VkDeviceQueueCreateInfo(queueFamilyIndex=f, queueCount=min(COUNT, fams[f].queueCount), pQueuePriorities=pr) for f in FAMS]
dev = vk.vkCreateDevice(pd, vk.VkDeviceCreateInfo(pQueueCreateInfos=qcis, ppEnabledExtensionNames=[EXT] if EXT in exts else []), None)
period = vk.vkGetPhysicalDeviceProperties(pd).limits.timestampPeriod
mp = vk.vkGetPhysicalDeviceMemoryProperties(pd)
print(f"families {[(i, hex(f.queueFlags), f.queueCount) for i, f in enumerate(fams)]} roles {roles} {EXT}: {EXT in exts}")


def buffer(size):
    return vk.vkCreateBuffer(dev, vk.VkBufferCreateInfo(
        size=size, usage=vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT,
        sharingMode=vk.VK_SHARING_MODE_CONCURRENT, queueFamilyIndexCount=len(FAMS), pQueueFamilyIndices=FAMS,
        pNext=ext_info if importing else ffi.NULL), None)


importing, ext_info = False, ffi.NULL


def allocated(mtype):
    b = buffer(N)
    req = vk.vkGetBufferMemoryRequirements(dev, b)
    m = vk.vkAllocateMemory(dev, vk.VkMemoryAllocateInfo(allocationSize=req.size, memoryTypeIndex=mtype), None)
    vk.vkBindBufferMemory(dev, b, m, 0)
    if mp.memoryTypes[mtype].propertyFlags & HOST == HOST:
        v = vk.vkMapMemory(dev, m, 0, N, 0)
        ffi.memmove(v, b"\x01" * 4096, 4096)
    return b


KEEP = []


def imported():
    """A buffer over an anonymous mapping the driver imports (pins) itself."""
    global importing, ext_info
    region = mmap.mmap(-1, N, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    array = np.frombuffer(region, np.uint8)
    array[:] = 1
    KEEP.append((region, array))
    pointer = ffi.cast("void *", array.ctypes.data)
    kind = vk.VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT
    get = vk.vkGetDeviceProcAddr(dev, "vkGetMemoryHostPointerPropertiesEXT")
    props = get(dev, kind, pointer)
    importing, ext_info = True, vk.VkExternalMemoryBufferCreateInfo(handleTypes=kind)
    try:
        b = buffer(N)
    finally:
        importing, ext_info = False, ffi.NULL
    req = vk.vkGetBufferMemoryRequirements(dev, b)
    bits = req.memoryTypeBits & props.memoryTypeBits
    mtype = next(i for i in range(mp.memoryTypeCount) if bits >> i & 1)
    m = vk.vkAllocateMemory(dev, vk.VkMemoryAllocateInfo(
        allocationSize=N, memoryTypeIndex=mtype,
        pNext=vk.VkImportMemoryHostPointerInfoEXT(handleType=kind, pHostPointer=pointer)), None)
    vk.vkBindBufferMemory(dev, b, m, 0)
    return b, mtype


class Queue:
    def __init__(self, fam, idx):
        self.q = vk.vkGetDeviceQueue(dev, fam, idx)
        self.pool = vk.vkCreateCommandPool(dev, vk.VkCommandPoolCreateInfo(flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, queueFamilyIndex=fam), None)
        self.cmd = vk.vkAllocateCommandBuffers(dev, vk.VkCommandBufferAllocateInfo(commandPool=self.pool, level=0, commandBufferCount=1))[0]
        self.fence = vk.vkCreateFence(dev, vk.VkFenceCreateInfo(), None)
        self.pool_q = vk.vkCreateQueryPool(dev, vk.VkQueryPoolCreateInfo(queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=2), None)

    def record(self, src, dst, piece, count):
        vk.vkResetCommandBuffer(self.cmd, 0)
        vk.vkBeginCommandBuffer(self.cmd, vk.VkCommandBufferBeginInfo(flags=1))
        vk.vkCmdResetQueryPool(self.cmd, self.pool_q, 0, 2)
        vk.vkCmdWriteTimestamp(self.cmd, vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, self.pool_q, 0)
        for k in range(count):
            o = (k * piece) % N
            vk.vkCmdCopyBuffer(self.cmd, src, dst, 1, [vk.VkBufferCopy(o, o, piece)])
        vk.vkCmdWriteTimestamp(self.cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, self.pool_q, 1)
        vk.vkEndCommandBuffer(self.cmd)

    def submit(self):
        vk.vkQueueSubmit(self.q, 1, [vk.VkSubmitInfo(pCommandBuffers=[self.cmd])], self.fence)

    def wait(self):
        vk.vkWaitForFences(dev, 1, [self.fence], vk.VK_TRUE, 10 ** 10)
        vk.vkResetFences(dev, 1, [self.fence])

    def ticks(self):
        t = ffi.new("uint64_t[2]")
        vk.vkGetQueryPoolResults(dev, self.pool_q, 0, 2, 16, t, 8, vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
        return t[0], t[1]


queues = {f"{r}{i}": Queue(f, i) for r, f in roles.items() for i in range(min(COUNT, fams[f].queueCount))}


def run(jobs, rounds=5):
    """jobs: (queue, src, dst, piece, count) submitted together; the median round's GB/s over the
    span of all the queues' timestamps, and each queue's own GB/s."""
    out = []
    for _ in range(rounds):
        for q, s, d, piece, count in jobs:
            q.record(s, d, piece, count)
        for q, *_ in jobs:
            q.submit()
        for q, *_ in jobs:
            q.wait()
        ticks = [q.ticks() for q, *_ in jobs]
        span = (max(b for _, b in ticks) - min(a for a, _ in ticks)) * period * 1e-9
        each = [piece * count / ((b - a) * period * 1e-9) / 1e9 for (a, b), (_, _, _, piece, count) in zip(ticks, jobs)]
        out.append((sum(piece * count for *_, piece, count in jobs) / span / 1e9, each))
    out.sort(key=lambda r: r[0])
    return out[len(out) // 2]


def line(name, jobs):
    total, each = run(jobs)
    print(f"{name:58s} {total:7.2f} GB/s  per queue {' '.join(f'{e:6.2f}' for e in each)}", flush=True)
    return total


system = [i for i in range(mp.memoryTypeCount) if mp.memoryTypes[i].propertyFlags & HOST == HOST and not mp.memoryTypes[i].propertyFlags & LOCAL]
local = next(i for i in range(mp.memoryTypeCount) if mp.memoryTypes[i].propertyFlags & LOCAL)
print("memory types", [(i, hex(mp.memoryTypes[i].propertyFlags)) for i in range(mp.memoryTypeCount)], "system", system)
ds, dd = allocated(local), allocated(local)
hosts = {f"type{i}": (allocated(i), allocated(i)) for i in system}
if EXT in exts:
    try:
        (a, ta), (b, tb) = imported(), imported()
        hosts[f"imported(type{ta})"] = (a, b)
    except Exception as e:                      # a driver may refuse an import: say so and go on
        print("import failed:", type(e).__name__, e)

first = hosts[next(iter(hosts))]
h2d = lambda q, piece=N, count=4, h=first: (queues[q], h[0], ds, piece, count)
d2h = lambda q, piece=N, count=4, h=first: (queues[q], dd, h[1], piece, count)
for q in queues:
    line(f"h2d alone on {q}", [h2d(q)])
    line(f"d2h alone on {q}", [d2h(q)])
for a in queues:
    for b in queues:
        if a != b:
            line(f"bidir h2d {a} + d2h {b}", [h2d(a), d2h(b)])
if "t1" in queues:
    line("h2d on t0 + u0, d2h on t1", [h2d("t0", count=2), h2d("u0", count=2), d2h("t1")])
pair = ("t0", "t1") if "t1" in queues else tuple(list(queues)[:2]) if len(queues) > 1 else ("u0", "u0")
for piece in sorted({min(p, N) for p in (8 * MiB, 32 * MiB, 64 * MiB, 256 * MiB)}):
    count = 4 * N // piece
    line(f"bidir {pair} pieces of {piece // MiB} MiB", [h2d(pair[0], piece, count), d2h(pair[1], piece, count)])
for name, h in hosts.items():
    line(f"{name}: h2d alone {pair[0]}", [h2d(pair[0], h=h)])
    line(f"{name}: d2h alone {pair[1]}", [d2h(pair[1], h=h)])
    line(f"{name}: bidir {pair}", [h2d(pair[0], h=h), d2h(pair[1], h=h)])
    line(f"{name}: bidir {pair} h2d x3 d2h x6", [h2d(pair[0], count=3, h=h), d2h(pair[1], count=6, h=h)])

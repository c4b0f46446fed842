"""Vulkan host copies of 256 MiB on the compute queue against the transfer-only family's queues, one
direction and both at once (one command buffer, two queues, unequal copies a queue): GB/s from the
host's clock, from the span of the queues' timestamps and per queue. Run on a GPU with the
`vulkan` package: `python3 scripts/probes/vulkan_copy_queues.py` (PERFORMANCE_ANALYSIS.md,
"Start-up, sixth round")."""
import time, sys
import vulkan as vk
ffi = vk.ffi
MiB = 1 << 20
N = 256 * MiB
inst = vk.vkCreateInstance(vk.VkInstanceCreateInfo(pApplicationInfo=vk.VkApplicationInfo(apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))), None)
pd = vk.vkEnumeratePhysicalDevices(inst)[0]
fams = vk.vkGetPhysicalDeviceQueueFamilyProperties(pd)
for i, f in enumerate(fams):
    print(f"family {i}: flags 0x{f.queueFlags:x} count {f.queueCount} ts {f.timestampValidBits} gran {f.minImageTransferGranularity.width}")
C = 0
T = next(i for i, f in enumerate(fams) if f.queueFlags & vk.VK_QUEUE_TRANSFER_BIT and not f.queueFlags & (vk.VK_QUEUE_GRAPHICS_BIT | vk.VK_QUEUE_COMPUTE_BIT))
A = next((i for i, f in enumerate(fams) if i != C and f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT and not f.queueFlags & vk.VK_QUEUE_GRAPHICS_BIT), None)
nt = min(2, fams[T].queueCount)
pr = ffi.new("float[2]", [1.0, 1.0])
qcis = [vk.VkDeviceQueueCreateInfo(queueFamilyIndex=C, queueCount=min(2, fams[C].queueCount), pQueuePriorities=pr),
        vk.VkDeviceQueueCreateInfo(queueFamilyIndex=T, queueCount=nt, pQueuePriorities=pr)]
if A is not None:
    qcis.append(vk.VkDeviceQueueCreateInfo(queueFamilyIndex=A, queueCount=2, pQueuePriorities=pr))
FAMS = sorted({C, T} | ({A} if A is not None else set()))
dev = vk.vkCreateDevice(pd, vk.VkDeviceCreateInfo(pQueueCreateInfos=qcis), None)
props = vk.vkGetPhysicalDeviceProperties(pd)
period = props.limits.timestampPeriod
mp = vk.vkGetPhysicalDeviceMemoryProperties(pd)
HOST = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
LOCAL = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
def buf(host, mtype=None):
    b = vk.vkCreateBuffer(dev, vk.VkBufferCreateInfo(size=N, usage=vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                                     sharingMode=vk.VK_SHARING_MODE_CONCURRENT if True else 0,
                                                     queueFamilyIndexCount=len(FAMS), pQueueFamilyIndices=FAMS), None)
    req = vk.vkGetBufferMemoryRequirements(dev, b)
    want = [i for i in range(mp.memoryTypeCount) if req.memoryTypeBits >> i & 1 and
            ((mp.memoryTypes[i].propertyFlags & HOST == HOST and not mp.memoryTypes[i].propertyFlags & LOCAL) if host
             else mp.memoryTypes[i].propertyFlags & LOCAL)]
    m = vk.vkAllocateMemory(dev, vk.VkMemoryAllocateInfo(allocationSize=req.size, memoryTypeIndex=want[0] if mtype is None else mtype), None)
    vk.vkBindBufferMemory(dev, b, m, 0)
    if host:
        v = vk.vkMapMemory(dev, m, 0, N, 0); ffi.memmove(v, b"\x01" * 4096, 4096)
    return b
hs, hd, ds, dd = buf(True), buf(True), buf(False), buf(False)
class Q:
    def __init__(self, fam, idx):
        self.q = vk.vkGetDeviceQueue(dev, fam, idx)
        self.pool = vk.vkCreateCommandPool(dev, vk.VkCommandPoolCreateInfo(flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, queueFamilyIndex=fam), None)
        self.cmd = vk.vkAllocateCommandBuffers(dev, vk.VkCommandBufferAllocateInfo(commandPool=self.pool, level=0, commandBufferCount=1))[0]
        self.fence = vk.vkCreateFence(dev, vk.VkFenceCreateInfo(), None)
        self.qp = vk.vkCreateQueryPool(dev, vk.VkQueryPoolCreateInfo(queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=2), None)
        self.ts = fams[fam].timestampValidBits
    def record(self, pairs, reps):
        vk.vkResetCommandBuffer(self.cmd, 0)
        vk.vkBeginCommandBuffer(self.cmd, vk.VkCommandBufferBeginInfo(flags=1))
        if self.ts:
            vk.vkCmdResetQueryPool(self.cmd, self.qp, 0, 2)
            vk.vkCmdWriteTimestamp(self.cmd, vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, self.qp, 0)
        for _ in range(reps):
            for s, d in pairs:
                vk.vkCmdCopyBuffer(self.cmd, s, d, 1, [vk.VkBufferCopy(0, 0, N)])
        if self.ts:
            vk.vkCmdWriteTimestamp(self.cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, self.qp, 1)
        vk.vkEndCommandBuffer(self.cmd)
    def submit(self):
        vk.vkQueueSubmit(self.q, 1, [vk.VkSubmitInfo(pCommandBuffers=[self.cmd])], self.fence)
    def wait(self):
        vk.vkWaitForFences(dev, 1, [self.fence], vk.VK_TRUE, 10**10); vk.vkResetFences(dev, 1, [self.fence])
    def ticks(self):
        t = ffi.new("uint64_t[2]")
        vk.vkGetQueryPoolResults(dev, self.qp, 0, 2, 16, t, 8, vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
        return t[0], t[1]
qc = Q(C, 0); qc2 = Q(C, 1)
qt = [Q(T, i) for i in range(nt)]
qa = [Q(A, i) for i in range(2)] if A is not None else []
H2D, D2H = (hs, ds), (dd, hd)
def one(spec, reps=4, rounds=5, each_reps=None):
    """spec: list of (queue, pairs); all submitted, then all waited."""
    out = []
    for _ in range(rounds):
        for k, (q, pairs) in enumerate(spec): q.record(pairs, each_reps[k] if each_reps else reps)
        t0 = time.perf_counter()
        for q, _ in spec: q.submit()
        for q, _ in spec: q.wait()
        wall = time.perf_counter() - t0
        tk = [q.ticks() for q, _ in spec]
        span = (max(b for a, b in tk) - min(a for a, b in tk)) * period * 1e-9
        each = [(b - a) * period * 1e-9 for a, b in tk]
        rr = each_reps or [reps] * len(spec)
        nbytes = sum(len(p) * r for (_, p), r in zip(spec, rr)) * N
        out.append((nbytes / wall / 1e9, nbytes / span / 1e9, [round(len(p) * r * N / e / 1e9, 2) for (_, p), e, r in zip(spec, each, rr)]))
    out.sort()
    return out[len(out) // 2]
def show(name, spec, each_reps=None):
    r = one(spec, each_reps=each_reps)
    print(f"{name:44s} wall {r[0]:7.2f}  span {r[1]:7.2f}  per-queue {r[2]}")
show("h2d compute queue", [(qc, [H2D])])
show("h2d transfer queue 0", [(qt[0], [H2D])])
show("d2h compute queue", [(qc, [D2H])])
show("d2h transfer queue 0", [(qt[0], [D2H])])
show("bidir one compute cmd", [(qc, [H2D, D2H])])
show("bidir one transfer cmd", [(qt[0], [H2D, D2H])])
if nt > 1: show("bidir transfer q0 h2d + q1 d2h", [(qt[0], [H2D]), (qt[1], [D2H])])
show("bidir transfer q0 h2d + compute d2h", [(qt[0], [H2D]), (qc, [D2H])])
show("bidir compute q0 h2d + compute q1 d2h", [(qc, [H2D]), (qc2, [D2H])])
if qa: show("bidir async-compute q0 h2d + q1 d2h", [(qa[0], [H2D]), (qa[1], [D2H])])
if qa: show("h2d async-compute queue", [(qa[0], [H2D])])

for i in range(mp.memoryTypeCount):
    print(f"memory type {i}: flags 0x{mp.memoryTypes[i].propertyFlags:x} heap {mp.memoryTypes[i].heapIndex}")
if nt > 1:
    for rr in ((3, 5), (2, 4), (3, 6)):
        show(f"bidir tq0 h2d x{rr[0]} + tq1 d2h x{rr[1]}", [(qt[0], [H2D]), (qt[1], [D2H])], each_reps=list(rr))
for i in range(mp.memoryTypeCount):
    f = mp.memoryTypes[i].propertyFlags
    if f & HOST == HOST and not f & LOCAL:
        hs2, hd2 = buf(True, i), buf(True, i)
        show(f"h2d type {i} (0x{f:x}) compute", [(qc, [(hs2, ds)])])
        show(f"h2d type {i} (0x{f:x}) transfer", [(qt[0], [(hs2, ds)])])
        show(f"d2h type {i} (0x{f:x}) transfer", [(qt[0], [(dd, hd2)])])

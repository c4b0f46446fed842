"""A logical device: queue, buffers, compute pipelines, and dispatches timed with timestamp queries."""
from __future__ import annotations

import os
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import vulkan as vk
from vulkan._vulkan import lib as vk_lib

from peakbench.backend import DeviceInfo, error_text
from peakbench.runtime import host_bytes
from peakbench.telemetry import ClockReader
from peakbench.vulkan.driver_cache import Code, DriverCache, PipelineCode, dump_name, fingerprint
from peakbench.vulkan.queues import COPY_QUEUES, CopyQueues, transfer_family, writes_made_visible
from peakbench.vulkan.probe import (EXT_ATOMIC_FLOAT, EXT_BFLOAT16, EXT_COOPMAT, EXT_COOPMAT2, EXT_EXECUTABLE_PROPERTIES,
                                       EXT_FLOAT8, EXT_SHADER_CLOCK, EXT_SM_BUILTINS, STYPE_BFLOAT16_FEATURES, STYPE_COOPMAT2_FEATURES,
                                       STYPE_FLOAT8_FEATURES, Capabilities, _chain, _new, _raw, _string)

ffi = vk.ffi
FENCE_TIMEOUT_S = 120.0
CPU_THREADS_PER_CORE = 256
FALLBACK_THREADS = 1 << 20
# The host-visible buffer uploads and downloads go through: made at the first copy's size (at
# least STAGING_MIN), kept for the device's life, grown to at most STAGING_MAX (larger copies
# go through it in pieces), so a copy costs no allocation.
STAGING_MIN = 1 << 20
STAGING_MAX = 64 << 20
# Vulkan 1.2 bits the `vulkan` package does not name.
SHADER_DEVICE_ADDRESS_BIT = 0x00020000      # VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT
MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT = 0x2    # VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT


class VulkanError(Exception):
    """A Vulkan call that failed on the device; the test that hit it is reported failed."""


@dataclass
class Buffer:
    handle: object
    memory: object
    size: int


@dataclass
class Pipeline:
    handle: object
    layout: object
    set_layout: object
    pool: object
    descriptor_set: object
    module: object
    statistics: dict
    code: Code          # the machine code the driver made of it, where its cache shows it
    label: str = ""


def instruction_counts(text: str) -> dict:
    """Mnemonic histogram of a disassembly: the first upper-case word of each line after any
    address comment and predicate, e.g. '/*0070*/ @P0 FFMA R1, ...' counts FFMA."""
    counts = Counter()
    for line in text.splitlines():
        line = re.sub(r"/\*.*?\*/", " ", line).strip()
        m = re.match(r"(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\b", line)
        if m:
            counts[m.group(1)] += 1
    return dict(counts.most_common(24))


class VulkanDevice:
    def __init__(self, physical, info: DeviceInfo, caps: Capabilities, cache: DriverCache | None = None):
        self.physical, self.info, self.caps = physical, info, caps
        self.code = PipelineCode(cache, info, self.driver_label)
        self.device = None
        self.lost: str | None = None      # why the device can no longer be used, once it cannot
        self._keep = []
        families = vk.vkGetPhysicalDeviceQueueFamilyProperties(physical)
        compute = [i for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT]
        timed = [i for i in compute if families[i].timestampValidBits]
        self.family = (timed or compute)[0]
        bits = families[self.family].timestampValidBits
        self.timestamp_mask = (1 << bits) - 1 if bits else 0
        # the copy engines' own family, where it has a queue a direction (queues.py)
        copies = transfer_family(families)
        self.copy_family = copies if copies is not None and families[copies].queueCount >= COPY_QUEUES else None
        self.copy_queues: CopyQueues | None = None
        self.memory_props = vk.vkGetPhysicalDeviceMemoryProperties(physical)
        self._buffers: list[Buffer] = []
        self._staging: Buffer | None = None        # uploads and downloads go through it
        self._mapped: np.ndarray | None = None     # its bytes, mapped
        self._pipelines: list[Pipeline] = []
        # The driver's cache records are matched to a pipeline by what its creation appended, so
        # creations from several threads (compile-ahead) take turns.
        self._creating = threading.Lock()
        self.command_pool = self.fence = self.query_pool = self.clock = None
        self.launch_split = None       # where submit_times's time went (RawLaunch)
        self._create_device()
        try:
            if self.copy_family is not None:
                bits = families[self.copy_family].timestampValidBits
                self.copy_queues = CopyQueues(self.device, self.copy_family, COPY_QUEUES, (1 << bits) - 1,
                                              caps.timestamp_period_ns)
            self.queue = vk.vkGetDeviceQueue(self.device, self.family, 0)
            self.command_pool = vk.vkCreateCommandPool(self.device, vk.VkCommandPoolCreateInfo(
                flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, queueFamilyIndex=self.family), None)
            self.cmd = vk.vkAllocateCommandBuffers(self.device, vk.VkCommandBufferAllocateInfo(
                commandPool=self.command_pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]
            self.fence = vk.vkCreateFence(self.device, vk.VkFenceCreateInfo(), None)
            self.query_pool = vk.vkCreateQueryPool(self.device, vk.VkQueryPoolCreateInfo(
                queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=2), None)
            self.clock = ClockReader.for_device(info)
        except Exception:
            self.close()
            raise

    # -- device creation -------------------------------------------------------------------
    def _create_device(self):
        f = self.caps.features
        f2 = _new("VkPhysicalDeviceFeatures2", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2)
        f2.features.shaderFloat64 = f["shaderFloat64"]
        f2.features.shaderInt64 = f["shaderInt64"]
        f2.features.shaderInt16 = f["shaderInt16"]
        f11 = _new("VkPhysicalDeviceVulkan11Features", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES)
        f11.storageBuffer16BitAccess = f["storageBuffer16BitAccess"]
        f12 = _new("VkPhysicalDeviceVulkan12Features", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES)
        f12.shaderFloat16, f12.shaderInt8 = f["shaderFloat16"], f["shaderInt8"]
        f12.storageBuffer8BitAccess = f["storageBuffer8BitAccess"]
        f12.vulkanMemoryModel = f["vulkanMemoryModel"]      # glslang's cooperative matrices use it
        # with the memory model on, a buffer atomic of device scope (GLSL's atomicAdd) needs this too;
        # Vulkan 1.3 requires both of every device
        f12.vulkanMemoryModelDeviceScope = f["vulkanMemoryModelDeviceScope"]
        f12.bufferDeviceAddress = f["bufferDeviceAddress"]  # the pointer chase follows device addresses
        f13 = _new("VkPhysicalDeviceVulkan13Features", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES)
        f13.shaderIntegerDotProduct = f["shaderIntegerDotProduct"]
        f13.maintenance4 = f["maintenance4"]
        chain, extensions = [f2, f11, f12, f13], []
        raw = []    # (extension, structure, members from word 4) for structures the headers lack
        if self.caps.has("shaderBFloat16Type"):
            raw.append((EXT_BFLOAT16, _raw(STYPE_BFLOAT16_FEATURES, 8),
                        [1, f["shaderBFloat16DotProduct"], f["shaderBFloat16CooperativeMatrix"]]))
        if self.caps.has("shaderFloat8"):
            raw.append((EXT_FLOAT8, _raw(STYPE_FLOAT8_FEATURES, 8), [1, f["shaderFloat8CooperativeMatrix"]]))
        if self.caps.has("cooperativeMatrixWorkgroupScope"):
            raw.append((EXT_COOPMAT2, _raw(STYPE_COOPMAT2_FEATURES, 12), [1, f["cooperativeMatrixFlexibleDimensions"]]))
        for extension, struct, members in raw:
            for i, value in enumerate(members):
                struct[4 + i] = int(value)
            chain.append(struct)
            extensions.append(extension)
        # Extension feature structures the headers do have: one feature bit each.
        for feature, ctype, stype, extension in (
                ("cooperativeMatrix", "VkPhysicalDeviceCooperativeMatrixFeaturesKHR",
                 vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR, EXT_COOPMAT),
                ("shaderSubgroupClock", "VkPhysicalDeviceShaderClockFeaturesKHR",
                 vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CLOCK_FEATURES_KHR, EXT_SHADER_CLOCK),
                ("shaderSMBuiltins", "VkPhysicalDeviceShaderSMBuiltinsFeaturesNV",
                 vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_FEATURES_NV, EXT_SM_BUILTINS),
                ("pipelineExecutableInfo", "VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR",
                 vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
                 EXT_EXECUTABLE_PROPERTIES)):
            if self.caps.has(feature):
                struct = _new(ctype, stype)
                setattr(struct, feature, 1)
                chain.append(struct)
                extensions.append(extension)
        if self.caps.has("shaderBufferFloat32AtomicAdd") or self.caps.has("shaderSharedFloat32AtomicAdd"):
            struct = _new("VkPhysicalDeviceShaderAtomicFloatFeaturesEXT",
                          vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES_EXT)
            struct.shaderBufferFloat32AtomicAdd = f["shaderBufferFloat32AtomicAdd"]
            struct.shaderSharedFloat32AtomicAdd = f["shaderSharedFloat32AtomicAdd"]
            chain.append(struct)
            extensions.append(EXT_ATOMIC_FLOAT)
        _chain(*chain)
        # The priority array is held here: one the wrapper makes from a list inside a nested
        # structure can be freed before vkCreateDevice reads it (the validation layer saw garbage).
        priorities = ffi.new(f"float[{COPY_QUEUES}]", [1.0] * COPY_QUEUES)
        queues = [vk.VkDeviceQueueCreateInfo(queueFamilyIndex=self.family, queueCount=1, pQueuePriorities=priorities)]
        if self.copy_family is not None:
            queues.append(vk.VkDeviceQueueCreateInfo(queueFamilyIndex=self.copy_family, queueCount=COPY_QUEUES,
                                                     pQueuePriorities=priorities))
        info = vk.VkDeviceCreateInfo(pNext=f2, pQueueCreateInfos=queues, ppEnabledExtensionNames=extensions)
        self._keep += [*chain, priorities, *queues]
        try:
            self.device = vk.vkCreateDevice(self.physical, info, None)
        except vk.VkError as e:
            raise VulkanError(f"vkCreateDevice failed: {type(e).__name__}") from None

    # -- memory ----------------------------------------------------------------------------
    def _memory_type(self, bits: int, flags: int) -> int | None:
        for i in range(self.memory_props.memoryTypeCount):
            if bits & (1 << i) and (self.memory_props.memoryTypes[i].propertyFlags & flags) == flags:
                return i
        return None

    def sharing(self, copied: bool) -> dict:
        """A buffer's sharing: with the copy queues too where it is `copied` there, else the compute
        queue's alone."""
        if copied and self.copy_queues is not None:
            return {"sharingMode": vk.VK_SHARING_MODE_CONCURRENT, "queueFamilyIndexCount": 2,
                    "pQueueFamilyIndices": [self.family, self.copy_family]}
        return {"sharingMode": vk.VK_SHARING_MODE_EXCLUSIVE}

    def buffer(self, size: int, host_visible: bool = False, copied: bool = False) -> Buffer:
        """`copied`: also used on the copy queues (transfer.bidir's device buffers)."""
        usage = (vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
                 | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT)
        addressed = self.caps.has("bufferDeviceAddress") and not host_visible
        if addressed:
            usage |= SHADER_DEVICE_ADDRESS_BIT
        handle = vk.vkCreateBuffer(self.device, vk.VkBufferCreateInfo(size=size, usage=usage, **self.sharing(copied)), None)
        req = vk.vkGetBufferMemoryRequirements(self.device, handle)
        flags = (vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
                 if host_visible else vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)
        index = self._memory_type(req.memoryTypeBits, flags)
        if index is None:
            vk.vkDestroyBuffer(self.device, handle, None)
            raise VulkanError(f"no memory type with flags 0x{flags:x} for a {size}-byte buffer")
        try:
            flags_info = vk.VkMemoryAllocateFlagsInfo(flags=MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT) if addressed else None
            memory = vk.vkAllocateMemory(self.device, vk.VkMemoryAllocateInfo(
                pNext=flags_info, allocationSize=req.size, memoryTypeIndex=index), None)
        except vk.VkError as e:
            vk.vkDestroyBuffer(self.device, handle, None)
            raise VulkanError(f"vkAllocateMemory of {req.size} bytes failed: {type(e).__name__}") from None
        vk.vkBindBufferMemory(self.device, handle, memory, 0)
        buf = Buffer(handle, memory, size)
        self._buffers.append(buf)
        return buf

    def address(self, buf: Buffer) -> int:
        """The buffer's device address (bufferDeviceAddress)."""
        info = vk.VkBufferDeviceAddressInfo(buffer=buf.handle)
        return int(vk_lib.vkGetBufferDeviceAddress(self.device, ffi.addressof(info)))   # the wrapper mistakes its uint64 result

    def memory_budget(self) -> int:
        """Bytes this process may use in the largest device-local heap (VK_EXT_memory_budget where
        the driver has it, else the heap's size)."""
        props = self.memory_props
        local = [i for i in range(props.memoryHeapCount)
                 if props.memoryHeaps[i].flags & vk.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT] or [0]
        sizes = {i: props.memoryHeaps[i].size for i in local}
        if "VK_EXT_memory_budget" in self.caps.extensions:
            budget = _new("VkPhysicalDeviceMemoryBudgetPropertiesEXT",
                          vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT)
            p2 = _new("VkPhysicalDeviceMemoryProperties2", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2)
            p2.pNext = ffi.cast("void*", budget)
            vk.vkGetPhysicalDeviceMemoryProperties2(self.physical, p2)
            sizes = {i: min(sizes[i], budget.heapBudget[i] or sizes[i]) for i in local}
        return max(sizes.values())

    def free(self, buf: Buffer) -> None:
        vk.vkDestroyBuffer(self.device, buf.handle, None)
        vk.vkFreeMemory(self.device, buf.memory, None)
        self._buffers.remove(buf)

    def upload(self, buf: Buffer, data) -> None:
        """`data`: any C-contiguous buffer (bytes, memoryview, numpy array), its raw bytes copied
        to the start of `buf` through the staging buffer."""
        src = host_bytes(data, buf.size)
        for at, n, stage in self._pieces(src.size):
            stage[:n] = src[at:at + n]
            self._submit(lambda cmd: vk.vkCmdCopyBuffer(cmd, self._staging.handle, buf.handle, 1,
                                                        [vk.VkBufferCopy(0, at, n)]))

    def download(self, buf: Buffer, size: int | None = None) -> memoryview:
        """The first `size` bytes of `buf` (all of it by default), in host memory of their own."""
        size = buf.size if size is None else min(size, buf.size)
        out = np.empty(size, np.uint8)
        for at, n, stage in self._pieces(size):
            self._submit(lambda cmd: vk.vkCmdCopyBuffer(cmd, buf.handle, self._staging.handle, 1,
                                                        [vk.VkBufferCopy(at, 0, n)]))
            out[at:at + n] = stage[:n]
        return memoryview(out)

    def _pieces(self, nbytes: int):
        """(offset, length, the mapped staging bytes) for each piece of a copy of `nbytes`, through
        one host-visible buffer per device, mapped once and grown as needed up to STAGING_MAX."""
        want = min(nbytes, STAGING_MAX)
        have = self._staging.size if self._staging else 0
        if want > have:
            size = min(STAGING_MAX, max(want, 2 * have, STAGING_MIN))
            self._drop_staging()
            staging = self.buffer(size, host_visible=True)
            try:
                mapped = vk.vkMapMemory(self.device, staging.memory, 0, size, 0)
            except vk.VkError as e:
                self.free(staging)
                raise VulkanError(f"vkMapMemory of the {size}-byte staging buffer failed: {type(e).__name__}") from None
            self._staging, self._mapped = staging, np.frombuffer(mapped, np.uint8)
        for at in range(0, nbytes, STAGING_MAX):
            yield at, min(STAGING_MAX, nbytes - at), self._mapped

    def _drop_staging(self) -> None:
        if self._staging is not None:
            self._mapped = None
            vk.vkUnmapMemory(self.device, self._staging.memory)
            self.free(self._staging)
            self._staging = None

    def fill(self, buf: Buffer, word: int) -> None:
        self._submit(lambda cmd: vk.vkCmdFillBuffer(cmd, buf.handle, 0, buf.size & ~3, word))

    # -- pipelines -------------------------------------------------------------------------
    def pipeline(self, code: bytes, bindings: int, local_size: int, push_bytes: int = 4,
                 label: str = "kernel") -> Pipeline:
        d = self.device
        module = vk.vkCreateShaderModule(d, vk.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code), None)
        set_layout = vk.vkCreateDescriptorSetLayout(d, vk.VkDescriptorSetLayoutCreateInfo(pBindings=[
            vk.VkDescriptorSetLayoutBinding(binding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                            descriptorCount=1, stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT)
            for i in range(bindings)]), None)
        layout = vk.vkCreatePipelineLayout(d, vk.VkPipelineLayoutCreateInfo(
            pSetLayouts=[set_layout], pPushConstantRanges=[vk.VkPushConstantRange(
                stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT, offset=0, size=push_bytes)]), None)
        spec_data = ffi.new("uint32_t[1]", [local_size])
        spec = vk.VkSpecializationInfo(
            pMapEntries=[vk.VkSpecializationMapEntry(constantID=0, offset=0, size=4)],
            dataSize=4, pData=spec_data)
        capture = self.caps.has("pipelineExecutableInfo")
        flags = (vk.VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR
                 | vk.VK_PIPELINE_CREATE_CAPTURE_INTERNAL_REPRESENTATIONS_BIT_KHR) if capture else 0
        stage = vk.VkPipelineShaderStageCreateInfo(stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=module,
                                                   pName="main", pSpecializationInfo=spec)
        with self._creating:
            before = self.code.mark()
            try:
                handle = vk.vkCreateComputePipelines(d, None, 1, [vk.VkComputePipelineCreateInfo(
                    flags=flags, stage=stage, layout=layout)], None)[0]
            except vk.VkError as e:
                vk.vkDestroyPipelineLayout(d, layout, None)
                vk.vkDestroyDescriptorSetLayout(d, set_layout, None)
                vk.vkDestroyShaderModule(d, module, None)
                raise VulkanError(f"vkCreateComputePipelines failed: {type(e).__name__}") from None
            code_found = self.code.created(before, fingerprint(code, local_size, bindings, push_bytes, flags),
                                           local_size)
        pool = dset = None
        if bindings:
            pool = vk.vkCreateDescriptorPool(d, vk.VkDescriptorPoolCreateInfo(maxSets=1, pPoolSizes=[
                vk.VkDescriptorPoolSize(type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount=bindings)]), None)
            dset = vk.vkAllocateDescriptorSets(d, vk.VkDescriptorSetAllocateInfo(
                descriptorPool=pool, pSetLayouts=[set_layout]))[0]
        stats = self._statistics(handle, label) if capture else {}
        p = Pipeline(handle, layout, set_layout, pool, dset, module, stats, code_found, label)
        self._pipelines.append(p)
        return p

    def disassemble_ahead(self, code: bytes, bindings: int, local_size: int, push_bytes: int, label: str) -> None:
        """Make the pipeline once and disassemble the machine code the driver's cache shows for it,
        on this thread (compile-ahead), so the run's pipeline finds its listing done; nothing where
        there is no machine code to read (PipelineCode.note)."""
        if self.code.note:
            return
        p = self.pipeline(code, bindings, local_size, push_bytes, label)
        try:
            self.code.disassemble_now(p.code)
        finally:
            self.destroy(p)

    def sass(self, p: Pipeline) -> str:
        """The pipeline's SASS listing, once disassembled ("" where there is none); with
        PEAKBENCH_DUMP_DIR set, also written there as <label>-sass.txt."""
        listing = self.code.finish(p.code)
        dump = os.environ.get("PEAKBENCH_DUMP_DIR")
        if listing and dump:
            Path(dump).mkdir(parents=True, exist_ok=True)
            (Path(dump) / dump_name(p.label)).write_text(listing)
        return listing

    def destroy(self, p: Pipeline) -> None:
        self.sass(p)                 # completes the evidence handed out for it
        vk.vkDestroyPipeline(self.device, p.handle, None)
        if p.pool is not None:
            vk.vkDestroyDescriptorPool(self.device, p.pool, None)
        vk.vkDestroyPipelineLayout(self.device, p.layout, None)
        vk.vkDestroyDescriptorSetLayout(self.device, p.set_layout, None)
        vk.vkDestroyShaderModule(self.device, p.module, None)
        self._pipelines.remove(p)

    def bind(self, p: Pipeline, buffers: list[Buffer]) -> None:
        writes = [vk.VkWriteDescriptorSet(
            dstSet=p.descriptor_set, dstBinding=i, descriptorCount=1,
            descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
            pBufferInfo=[vk.VkDescriptorBufferInfo(buffer=b.handle, offset=0, range=b.size)])
            for i, b in enumerate(buffers)]
        vk.vkUpdateDescriptorSets(self.device, len(writes), writes, 0, None)

    def _statistics(self, pipeline, label: str) -> dict:
        """The driver's own statistics per pipeline executable (registers, binary size, ...) and,
        where it returns its compiled code as text, a count of the instructions in it."""
        try:
            get_props = vk.vkGetDeviceProcAddr(self.device, "vkGetPipelineExecutablePropertiesKHR")
            get_stats = vk.vkGetDeviceProcAddr(self.device, "vkGetPipelineExecutableStatisticsKHR")
            out = {}
            execs = get_props(self.device, vk.VkPipelineInfoKHR(pipeline=pipeline))
            for i, e in enumerate(execs):
                name = _string(e.name)
                values = {}
                for s in get_stats(self.device, vk.VkPipelineExecutableInfoKHR(pipeline=pipeline, executableIndex=i)):
                    fmt, v = s.format, s.value
                    values[_string(s.name)] = (bool(v.b32) if fmt == vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR
                                               else v.i64 if fmt == vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR
                                               else v.u64 if fmt == vk.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR
                                               else v.f64)
                out[name] = values
                for rep_name, text in self._representations(pipeline, i):
                    values[f"instructions ({rep_name})"] = instruction_counts(text)
                    dump = os.environ.get("PEAKBENCH_DUMP_DIR")
                    if dump:
                        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{label}-{name}-{rep_name}")
                        Path(dump).mkdir(parents=True, exist_ok=True)
                        (Path(dump) / f"{safe}.txt").write_text(text)
            return out
        except Exception as e:  # evidence is best effort; the measurement does not depend on it
            return {"error": f"{type(e).__name__}: {error_text(e)}"}

    def _representations(self, pipeline, index: int) -> list[tuple[str, str]]:
        """Text internal representations of one executable (the package's wrapper skips the
        third call that fills pData, so the entry point is called directly)."""
        name = b"vkGetPipelineExecutableInternalRepresentationsKHR"
        fn = ffi.cast("PFN_vkGetPipelineExecutableInternalRepresentationsKHR",
                      vk_lib.vkGetDeviceProcAddr(self.device, name))
        info = _new("VkPipelineExecutableInfoKHR", vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR)
        info.pipeline, info.executableIndex = pipeline, index
        count = ffi.new("uint32_t*")
        fn(self.device, info, count, ffi.NULL)
        reps = ffi.new("VkPipelineExecutableInternalRepresentationKHR[]", count[0])
        for r in reps:
            r.sType = vk.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INTERNAL_REPRESENTATION_KHR
        fn(self.device, info, count, reps)
        data = [ffi.new("char[]", r.dataSize) for r in reps]
        for r, d in zip(reps, data):
            r.pData = d
        fn(self.device, info, count, reps)
        return [(_string(r.name), ffi.string(d).decode(errors="replace"))
                for r, d in zip(reps, data) if r.isText]

    # -- submission ------------------------------------------------------------------------
    def _submit(self, record) -> None:
        if self.lost:
            raise VulkanError(self.lost)
        vk.vkResetCommandBuffer(self.cmd, 0)
        vk.vkBeginCommandBuffer(self.cmd, vk.VkCommandBufferBeginInfo(
            flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
        record(self.cmd)
        writes_made_visible(self.cmd)
        vk.vkEndCommandBuffer(self.cmd)
        self._run(self.cmd)

    def _run(self, cmd) -> None:
        """Submit a recorded command buffer and wait for it; a timeout or a lost device ends
        this device's use (the command buffer and fence may still be pending)."""
        try:
            vk.vkQueueSubmit(self.queue, 1, [vk.VkSubmitInfo(pCommandBuffers=[cmd])], self.fence)
            vk.vkWaitForFences(self.device, 1, [self.fence], vk.VK_TRUE, int(FENCE_TIMEOUT_S * 1e9))
        except vk.VkTimeout:
            self.lost = f"the GPU did not finish within {FENCE_TIMEOUT_S:.0f} s (fence timeout); device abandoned"
            raise VulkanError(self.lost) from None
        except vk.VkErrorDeviceLost:
            self.lost = "VK_ERROR_DEVICE_LOST: the driver lost the device"
            raise VulkanError(self.lost) from None
        vk.vkResetFences(self.device, 1, [self.fence])

    def dispatch(self, p: Pipeline, groups: int, push: list[int], timestamps: bool = True, repeat: int = 1) -> float:
        """Run one dispatch (or `repeat`, each waiting for the one before, as CUDA launches on one
        stream do) and return its GPU time in seconds (timestamps, else wall clock;
        timestamps=False times submit to fence on the host, for launch overhead)."""
        values = ffi.new("uint32_t[]", push)
        timed = timestamps and bool(self.timestamp_mask)

        def record(cmd):
            if timed:
                vk.vkCmdResetQueryPool(cmd, self.query_pool, 0, 2)
            vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, p.handle)
            if p.descriptor_set is not None:
                vk.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1,
                                           [p.descriptor_set], 0, None)
            vk.vkCmdPushConstants(cmd, p.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, 4 * len(push), values)
            if timed:
                vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, self.query_pool, 0)
            for i in range(repeat):
                if i:
                    vk.vkCmdPipelineBarrier(cmd, vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                            vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, [vk.VkMemoryBarrier(
                                                srcAccessMask=vk.VK_ACCESS_SHADER_WRITE_BIT,
                                                dstAccessMask=vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT)],
                                            0, None, 0, None)
                vk.vkCmdDispatch(cmd, groups, 1, 1)
            if timed:
                vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, self.query_pool, 1)

        t0 = time.perf_counter()
        self._submit(record)
        wall = time.perf_counter() - t0
        if not timed:
            return wall
        ticks = ffi.new("uint64_t[2]")
        vk.vkGetQueryPoolResults(self.device, self.query_pool, 0, 2, 16, ticks, 8,
                                 vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
        delta = (ticks[1] - ticks[0]) & self.timestamp_mask
        return delta * self.caps.timestamp_period_ns * 1e-9

    def submit_times(self, p: Pipeline, count: int, push: list[int] = ()) -> list[float]:
        """Submit-to-completion wall times (s) of one dispatch of one workgroup, recorded once and
        resubmitted: what a launch costs the host, without command recording in the measurement.
        The loop calls the driver through cffi's raw functions with its structures built once
        (the bindings' wrappers build and convert them on every call, ~10 us each on lavapipe), and
        polls the fence with vkGetFenceStatus, as CUDA's synchronize spins. `launch_split` keeps
        where the time went: the submission call, the wait until the fence reads signaled, one
        bare driver call, and a blocking vkWaitForFences of the same dispatch for comparison."""
        cmd = vk.vkAllocateCommandBuffers(self.device, vk.VkCommandBufferAllocateInfo(
            commandPool=self.command_pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]
        try:
            vk.vkBeginCommandBuffer(cmd, vk.VkCommandBufferBeginInfo())
            vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, p.handle)
            if p.descriptor_set is not None:
                vk.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1,
                                           [p.descriptor_set], 0, None)
            if push:
                vk.vkCmdPushConstants(cmd, p.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, 4 * len(push),
                                      ffi.new("uint32_t[]", list(push)))
            vk.vkCmdDispatch(cmd, 1, 1, 1)
            vk.vkEndCommandBuffer(cmd)
            launch = RawLaunch(self, cmd)
            times, parts = [], []
            for _ in range(count):
                total, submit = launch.polled()
                times.append(total)
                parts.append(submit)
            blocking = [launch.blocking() for _ in range(min(count, SPLIT_BLOCKING))]
            self.launch_split = {
                "submit_us": _us(parts), "until_signaled_us": _us([t - s for t, s in zip(times, parts)]),
                "driver_call_us": _us(launch.bare_calls(SPLIT_CALLS)), "blocking_wait_us": _us(blocking),
                "path": "vkQueueSubmit, then vkGetFenceStatus until signaled (cffi's raw functions,"
                        " structures built once); blocking_wait_us: vkWaitForFences instead"}
            return times
        finally:
            vk.vkFreeCommandBuffers(self.device, self.command_pool, 1, [cmd])

    # -- sizing and naming -----------------------------------------------------------------
    def grid_threads(self, waves: int) -> int:
        """Invocations that fill the device `waves` times over: units x resident invocations per
        unit where Vulkan reveals them, a few hundred per core on a CPU driver, else 2^20 (more
        than any GPU holds at once)."""
        caps = self.caps
        if self.info.kind == "cpu":
            return (caps.units or 1) * CPU_THREADS_PER_CORE
        if caps.units and caps.threads_per_unit:
            return waves * caps.units * caps.threads_per_unit
        return FALLBACK_THREADS

    @property
    def driver_label(self) -> str:
        return f"{self.info.extra.get('driver_name', '')} {self.info.driver}".strip()

    def clock_mhz(self) -> float | None:
        return self.clock.sm_mhz() if self.clock else None

    def close(self) -> None:
        if self.device is None:
            return
        try:
            vk.vkDeviceWaitIdle(self.device)
        except vk.VkError:
            pass      # a lost device: destroy what we can
        for p in list(self._pipelines):
            self.destroy(p)
        self._drop_staging()
        for b in list(self._buffers):
            self.free(b)
        if self.query_pool is not None:
            vk.vkDestroyQueryPool(self.device, self.query_pool, None)
        if self.copy_queues is not None:
            self.copy_queues.close()
        if self.fence is not None:
            vk.vkDestroyFence(self.device, self.fence, None)
        if self.command_pool is not None:
            vk.vkDestroyCommandPool(self.device, self.command_pool, None)
        vk.vkDestroyDevice(self.device, None)
        self.device = None
        self.code.close()
        if self.clock:
            self.clock.close()


SPLIT_BLOCKING = 50        # blocking waits timed beside the polled launches, for launch_split
SPLIT_CALLS = 200          # bare driver calls timed for launch_split
NOT_READY = 1              # VK_NOT_READY: vkGetFenceStatus on an unsignaled fence


def _us(seconds: list[float]) -> float | None:
    if not seconds:
        return None
    ordered = sorted(seconds)
    return round(ordered[len(ordered) // 2] * 1e6, 2)


class RawLaunch:
    """One recorded command buffer submitted through cffi's raw functions (vulkan._vulkan.lib),
    with its VkSubmitInfo and fence array built once: the fewest host instructions between two
    launches that Python allows. A lost device or a fence that never signals ends the device's
    use, as _run does."""

    def __init__(self, dev: "VulkanDevice", cmd):
        self.dev = dev
        self.cmds = ffi.new("VkCommandBuffer[1]", [cmd])
        self.info = ffi.new("VkSubmitInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, "commandBufferCount": 1,
                                              "pCommandBuffers": self.cmds})
        self.fences = ffi.new("VkFence[1]", [dev.fence])

    def _check(self, code: int, what: str) -> None:
        if code == vk.VK_ERROR_DEVICE_LOST:
            self.dev.lost = "VK_ERROR_DEVICE_LOST: the driver lost the device"
            raise VulkanError(self.dev.lost)
        if code < 0:
            raise VulkanError(f"{what} returned {code}")

    def polled(self) -> tuple[float, float]:
        """(submission to a signaled fence, the submission call alone), in seconds."""
        dev, lib = self.dev, vk_lib
        t0 = time.perf_counter()
        self._check(lib.vkQueueSubmit(dev.queue, 1, self.info, dev.fence), "vkQueueSubmit")
        t1 = time.perf_counter()
        status, polls = lib.vkGetFenceStatus(dev.device, dev.fence), 0
        while status == NOT_READY:
            status, polls = lib.vkGetFenceStatus(dev.device, dev.fence), polls + 1
            if not polls % 4096 and time.perf_counter() - t0 > FENCE_TIMEOUT_S:
                dev.lost = f"the GPU did not finish within {FENCE_TIMEOUT_S:.0f} s (fence timeout); device abandoned"
                raise VulkanError(dev.lost)
        t2 = time.perf_counter()
        self._check(status, "vkGetFenceStatus")
        lib.vkResetFences(dev.device, 1, self.fences)
        return t2 - t0, t1 - t0

    def blocking(self) -> float:
        """Submission to the return of a blocking vkWaitForFences, in seconds."""
        dev, lib = self.dev, vk_lib
        t0 = time.perf_counter()
        self._check(lib.vkQueueSubmit(dev.queue, 1, self.info, dev.fence), "vkQueueSubmit")
        code = lib.vkWaitForFences(dev.device, 1, self.fences, 1, int(FENCE_TIMEOUT_S * 1e9))
        t = time.perf_counter() - t0
        if code == vk.VK_TIMEOUT:
            dev.lost = f"the GPU did not finish within {FENCE_TIMEOUT_S:.0f} s (fence timeout); device abandoned"
            raise VulkanError(dev.lost)
        self._check(code, "vkWaitForFences")
        lib.vkResetFences(dev.device, 1, self.fences)
        return t

    def bare_calls(self, count: int) -> list[float]:
        """Times of one driver call that does no work (vkGetFenceStatus on an unsignaled fence):
        the cost of crossing from Python into the driver."""
        dev, lib, out = self.dev, vk_lib, []
        for _ in range(count):
            t0 = time.perf_counter()
            lib.vkGetFenceStatus(dev.device, dev.fence)
            out.append(time.perf_counter() - t0)
        return out

"""Probes of the DRAM read and write on Vulkan, on one board in one run (the CUDA half is
cuda_stream_paths.py); not peakbench tests. On the first Vulkan device:

1. The shipped read (chunk, stride), write and copy, twice: the run-to-run spread.
2. SPIR-V's Nontemporal memory operand (SPIR-V 1.4) on the stream's loads and stores. GLSL has
   no way to say it (the pinned glslang predates GL_EXT_nontemporal_keyword), so the probe adds
   it to the disassembled module and reassembles it.
3. The read's shape: workgroups per compute unit x partial sums, 16 loads in flight.
4. The write and the read against buffer size, 128 MiB to 2 GiB.
5. The rows read as shipped (LAYOUT 2) with 16 and 32 rows, against the same shader edited to
   read contiguous tiles (the reverted tile read's addressing).
6. The write under the Vulkan memory model (its stores may compile otherwise), and laid out as
   rows or as tiles taken w % tiles, several passes in one dispatch.
7. Section 1 again, after the probe's allocations (earlier runs saw writes slow down after
   other 1 GiB buffers were made and freed).
8. Section 1 with pipelines made without VK_KHR_pipeline_executable_properties' capture flags
   (peakbench asks for statistics and internal representations where the driver has them).
9. The write, copy and read on buffers made otherwise: exportable memory (an opaque fd, as
   memory shared with CUDA must be), and storage-only usage (no transfer bits).
10. Allocation churn: a 1 GiB read stream made, read and freed twelve times; then one read
   again after 2 and 5 s idle; then eight made and kept.
11. The driver's own commands: vkCmdFillBuffer and vkCmdCopyBuffer over the 1 GiB buffers, 16
   in one command buffer, after 0.5 s of them untimed.
12. Section 1 on a second logical device whose queue is from a compute-only family (peakbench
   takes the first compute family with timestamps: NVIDIA's graphics family).
13. Whose is the write's ceiling, Vulkan's memory or Vulkan's execution: a 1 GiB buffer made by
   Vulkan and exported (opaque fd), imported into CUDA (cuImportExternalMemory), and written by
   both APIs' write kernels, against CUDA's kernel on its own memory. Needs CuPy.
14. The write with tiles handed out by an atomic ticket, in the order workgroups start rather
   than by workgroup ID: does the order the driver launches workgroups in hold the write back?

Sections run by number: python3 experiments/probes/vulkan_stream_paths.py 5 6 (all by default).

Run on the GPU machine from the repository root: python3 experiments/probes/vulkan_stream_paths.py
"""
from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import peakbench.vulkan.memory as vulkan_memory  # noqa: E402
from peakbench.harness import sweeps  # noqa: E402
from peakbench.vulkan import create  # noqa: E402
from peakbench.vulkan.memory import LOCAL  # noqa: E402
from peakbench.vulkan.shaders import TARGET_ENV, _run, compile_shader, tool  # noqa: E402
from vulkan_memory import gbs, stream, tile_gbs  # noqa: E402

MIB = 1 << 20


def nontemporal(code: bytes) -> bytes:
    """The module with Nontemporal on every load and store through a storage-buffer uvec4."""
    with tempfile.TemporaryDirectory() as tmp:
        spv, text, out = Path(tmp) / "in.spv", Path(tmp) / "in.spvasm", Path(tmp) / "out.spv"
        spv.write_bytes(code)
        _run([tool("spirv-dis"), str(spv), "-o", str(text)], "spirv-dis")
        lines, pointers, edited = text.read_text().splitlines(), set(), 0
        for k, line in enumerate(lines):
            m = re.match(r"\s*(%\w+) = OpAccessChain %_ptr_StorageBuffer_v4uint ", line)
            if m:
                pointers.add(m.group(1))
            m = re.match(r"\s*(?:%\w+ = OpLoad %v4uint|OpStore) (%\w+)", line)
            if m and m.group(1) in pointers:
                assert len(line.split()) == (5 if "OpLoad" in line else 3), f"memory operands already: {line}"
                lines[k], edited = line + " Nontemporal", edited + 1
        assert edited, "no storage-buffer access found"
        text.write_text("\n".join(lines) + "\n")
        _run([tool("spirv-as"), "--target-env", TARGET_ENV, str(text), "-o", str(out)], "spirv-as")
        _run([tool("spirv-val"), "--target-env", TARGET_ENV, str(out)], "spirv-val")
        return out.read_bytes()


def read_gbs(dev, w, code: bytes, groups: int, label: str, passes: int = 16) -> tuple[float, dict]:
    """GB/s of a chunk read shader over w's whole buffer with `groups` workgroups."""
    p = dev.pipeline(code, bindings=2, local_size=LOCAL, push_bytes=16, label=label)
    try:
        dev.bind(p, [w.src, w.dst])
        n = w.n_vec // (groups * LOCAL * 16) * groups * LOCAL * 16
        push = [passes, n, 0xFFFFFFFF, 0]
        dev.dispatch(p, groups, push)
        seconds = np.median([dev.dispatch(p, groups, push) for _ in range(5)])
        return passes * n * 16 / seconds / 1e9, p.statistics.get("CS", {})
    finally:
        dev.destroy(p)


def shipped(dev) -> None:
    print("1. shipped kernels, twice (GB/s)")
    for test, layout, unroll in (("memory.read", "chunk", 16), ("memory.read", "stride", 16),
                                 ("memory.write", "tile", 1), ("memory.copy", "tile", 1)):
        w = stream(dev, test, layout, unroll)
        try:
            problem = w.verify()
            print(f"   {test} {layout}: {gbs(w):.0f} {gbs(w):.0f}" + (f" ({problem})" if problem else ""))
        finally:
            w.close()


def nontemporal_variants(dev) -> None:
    print("2. Nontemporal loads and stores (GB/s)")
    w = stream(dev, "memory.read", "chunk", 16)
    try:
        code = compile_shader("mem_stream.comp", {"MODE": 0, "UNROLL": 16, "LAYOUT": 0})
        plain, _ = read_gbs(dev, w, code, w.resident, "read")
        marked, _ = read_gbs(dev, w, nontemporal(code), w.resident, "read-nt")
        print(f"   memory.read chunk: plain {plain:.0f}, Nontemporal {marked:.0f}")
    finally:
        w.close()
    for test in ("memory.write", "memory.copy"):
        w = stream(dev, test, "tile", 1)
        try:
            code = compile_shader("mem_stream.comp", {"MODE": sweeps.MODES[w.mode], "UNROLL": 1})
            plain = tile_gbs(dev, w, code, LOCAL, 1, "tile")
            marked = tile_gbs(dev, w, nontemporal(code), LOCAL, 1, "tile-nt")
            print(f"   {test} tile: plain {plain:.0f}, Nontemporal {marked:.0f}")
        finally:
            w.close()


def read_shapes(dev) -> None:
    print("3. read shape: workgroups per unit x partial sums, 16 loads in flight (GB/s)")
    w = stream(dev, "memory.read", "chunk", 16)
    try:
        units = w.resident // sweeps.READ_BLOCKS_PER_UNIT
        for per_unit, sums in ((2, 8), (3, 8), (4, 4), (2, 16), (6, 2)):
            code = compile_shader("mem_stream.comp", {"MODE": 0, "UNROLL": 16, "LAYOUT": 0, "SUMS": sums})
            rates = [read_gbs(dev, w, code, units * per_unit, "shape") for _ in range(2)]
            stats = rates[0][1]
            print(f"   {per_unit} x {sums:2d}: {max(r for r, _ in rates):6.0f} ({stats.get('Register Count')} registers, "
                  f"{stats.get('Shared Memory Size')} B shared)")
    finally:
        w.close()


def sizes(dev) -> None:
    print("4. buffer size (GB/s)")
    shipped_bytes = vulkan_memory.working_bytes
    try:
        for mib in (128, 512, 1024, 2048):
            if mib * MIB > min(dev.caps.max_storage_buffer_range, dev.memory_budget() // 4):
                continue
            vulkan_memory.working_bytes = lambda dev, b=mib * MIB: b
            row = []
            for test, layout, unroll in (("memory.read", "chunk", 16), ("memory.write", "tile", 1)):
                w = stream(dev, test, layout, unroll)
                try:
                    row.append(f"{test} {gbs(w, max(2, 16384 // mib)):.0f}")
                finally:
                    w.close()
            print(f"   {mib:5d} MiB: " + ", ".join(row))
    finally:
        vulkan_memory.working_bytes = shipped_bytes


def rows_read(dev) -> None:
    print("5. the rows read as shipped, and with contiguous tiles instead, 16 passes a dispatch (GB/s)")
    from vulkan_memory import glsl
    from peakbench.vulkan.shaders import SHADERS
    text = (SHADERS / "mem_stream.comp").read_text()
    rows_at = "acc[u % SUMS] += src[u * row + at];"
    tiles_at = "acc[u % SUMS] += src[column * gl_WorkGroupSize.x * UNROLL + gl_LocalInvocationID.x + u * gl_WorkGroupSize.x];"
    assert rows_at in text
    w = stream(dev, "memory.read", "chunk", 16)
    try:
        for label, code in (("rows", text), ("tiles", text.replace(rows_at, tiles_at))):
            for local, unroll in ((LOCAL, 16), (LOCAL, 32), (1024, 16), (1024, 32)):
                p = dev.pipeline(glsl(code, {"MODE": 0, "UNROLL": unroll, "LAYOUT": 2}), bindings=2, local_size=local,
                                 push_bytes=16, label=label)
                try:
                    dev.bind(p, [w.src, w.dst])
                    n = w.n_vec // (local * unroll) * local * unroll
                    groups, push = 16 * (n // (local * unroll)), [1, n, 0xFFFFFFFF, 0]
                    dev.dispatch(p, groups, push)
                    seconds = np.median([dev.dispatch(p, groups, push) for _ in range(5)])
                    stats = p.statistics.get("CS", {})
                    print(f"   {label:5s} {local:4d} x {unroll}: {16 * n * 16 / seconds / 1e9:6.0f}  "
                          f"({stats.get('Register Count')} registers)")
                finally:
                    dev.destroy(p)
    finally:
        w.close()


WRITE_BASE = """    uint tile = gl_WorkGroupID.x % (push.n_vec / (gl_WorkGroupSize.x * UNROLL));
    uint base = tile * gl_WorkGroupSize.x * UNROLL + gl_LocalInvocationID.x;"""


def write_paths(dev) -> None:
    print("6. the write under the Vulkan memory model, and laid out otherwise (GB/s)")
    from vulkan_memory import glsl
    from peakbench.vulkan.shaders import SHADERS
    text = (SHADERS / "mem_stream.comp").read_text()
    version = "#version 450\n"
    model = text.replace(version, version + "#extension GL_KHR_memory_scope_semantics : require\n#pragma use_vulkan_memory_model\n", 1)
    step = "        uint j = base + u * gl_WorkGroupSize.x;"
    assert WRITE_BASE in text and step in text
    layouts = {"tiles w % tiles": text,        # as shipped since 2026-11-30
               "rows": text.replace(WRITE_BASE, "    uint row = push.n_vec / UNROLL;\n    uint base = (gl_WorkGroupID.x % (row / gl_WorkGroupSize.x))"
                                                " * gl_WorkGroupSize.x + gl_LocalInvocationID.x;").replace(step, "        uint j = base + u * row;")}
    w = stream(dev, "memory.write", "tile", 1)
    try:
        row = []
        for label, code in (("one dispatch a pass", text), ("the same, Vulkan memory model", model)):
            row.append(f"{label} {tile_gbs(dev, w, glsl(code, {'MODE': 1, 'UNROLL': 1}), LOCAL, 1, label):.0f}")
        print("   " + ", ".join(row))
        for label, code in layouts.items():
            for unroll in (1, 4, 16):
                p = dev.pipeline(glsl(code, {"MODE": 1, "UNROLL": unroll}), bindings=2, local_size=LOCAL, push_bytes=16, label=label)
                try:
                    dev.bind(p, [w.src, w.dst])
                    groups, push = 8 * (w.n_vec // (LOCAL * unroll)), [1, w.n_vec, 0xFFFFFFFF, 0]
                    dev.dispatch(p, groups, push)
                    seconds = np.median([dev.dispatch(p, groups, push) for _ in range(3)])
                    print(f"   {label:16s} x {unroll:2d}, 8 passes a dispatch: {8 * w.n_vec * 16 / seconds / 1e9:6.0f}")
                finally:
                    dev.destroy(p)
    finally:
        w.close()


def again(dev) -> None:
    print("7. after the allocations above:", end=" ")
    shipped(dev)


def without_capture(dev) -> None:
    print("8. without the pipeline capture flags:", end=" ")
    has = dev.caps.has
    dev.caps.has = lambda name: False if name == "pipelineExecutableInfo" else has(name)
    try:
        shipped(dev)
    finally:
        dev.caps.has = has


def allocations(dev) -> None:
    print("9. buffers made otherwise (GB/s)")
    import vulkan as vk
    from peakbench.vulkan import device as vulkan_device
    create_buffer, allocate = vulkan_device.vk.vkCreateBuffer, vulkan_device.vk.vkAllocateMemory
    fd = vk.VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT

    def exportable_buffer(device, info, allocator):
        info = vk.VkBufferCreateInfo(size=info.size, usage=info.usage, sharingMode=info.sharingMode,
                                     pNext=vk.VkExternalMemoryBufferCreateInfo(handleTypes=fd))
        return create_buffer(device, info, allocator)

    def exportable_memory(device, info, allocator):
        info = vk.VkMemoryAllocateInfo(allocationSize=info.allocationSize, memoryTypeIndex=info.memoryTypeIndex,
                                       pNext=vk.VkExportMemoryAllocateInfo(handleTypes=fd))
        return allocate(device, info, allocator)

    def storage_only(device, info, allocator):
        info = vk.VkBufferCreateInfo(size=info.size, usage=vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                                     sharingMode=info.sharingMode)
        return create_buffer(device, info, allocator)

    modes = {"plain": (create_buffer, allocate), "exportable (opaque fd)": (exportable_buffer, exportable_memory),
             "storage-only usage": (storage_only, allocate)}
    for label, (make, alloc) in modes.items():
        vulkan_device.vk.vkCreateBuffer, vulkan_device.vk.vkAllocateMemory = make, alloc
        row = []
        try:
            for test, layout, unroll in (("memory.write", "tile", 1), ("memory.copy", "tile", 1), ("memory.read", "chunk", 16)):
                w = stream(dev, test, layout, unroll)
                try:
                    # verify fills and downloads through transfers, which storage-only buffers lack
                    problem = None if label == "storage-only usage" else w.verify()
                    row.append(f"{test} {gbs(w):.0f}" + (f" ({problem})" if problem else ""))
                finally:
                    w.close()
        except Exception as e:                       # a driver that refuses the combination says so
            row.append(f"failed: {type(e).__name__}: {e}")
        finally:
            vulkan_device.vk.vkCreateBuffer, vulkan_device.vk.vkAllocateMemory = create_buffer, allocate
        print(f"   {label}: " + ", ".join(row))


def churn(dev) -> None:
    import time
    print("10. allocation churn (GB/s, seconds since the section began)")
    t0 = time.perf_counter()
    for i in range(12):
        w = stream(dev, "memory.read", "chunk", 16)
        try:
            print(f"   made and freed #{i + 1}: {gbs(w):.0f} at {time.perf_counter() - t0:.2f} s")
        finally:
            w.close()
    w = stream(dev, "memory.read", "chunk", 16)
    try:
        for pause in (0, 2, 5):
            time.sleep(pause)
            print(f"   one buffer after {pause} s idle: {gbs(w):.0f} at {time.perf_counter() - t0:.2f} s")
    finally:
        w.close()
    kept = []
    try:
        for i in range(8):
            kept.append(stream(dev, "memory.read", "chunk", 16))
            print(f"   made and kept #{i + 1}: {gbs(kept[-1]):.0f} at {time.perf_counter() - t0:.2f} s")
    finally:
        for w in kept:
            w.close()


def commands(dev) -> None:
    import time
    import vulkan as vk
    from peakbench.vulkan.device import ffi
    print("11. the driver's fill and copy commands, 1 GiB (GB/s)")
    w = stream(dev, "memory.copy", "tile", 1)
    size = w.n_vec * 16
    stage = vk.VK_PIPELINE_STAGE_TRANSFER_BIT
    barrier = vk.VkMemoryBarrier(srcAccessMask=vk.VK_ACCESS_TRANSFER_WRITE_BIT,
                                 dstAccessMask=vk.VK_ACCESS_TRANSFER_READ_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT)

    def timed(op) -> float:
        def record(cmd):
            vk.vkCmdResetQueryPool(cmd, dev.query_pool, 0, 2)
            vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, dev.query_pool, 0)
            for i in range(16):
                if i:
                    vk.vkCmdPipelineBarrier(cmd, stage, stage, 0, 1, [barrier], 0, None, 0, None)
                op(cmd)
            vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, dev.query_pool, 1)
        dev._submit(record)
        ticks = ffi.new("uint64_t[2]")
        vk.vkGetQueryPoolResults(dev.device, dev.query_pool, 0, 2, 16, ticks, 8,
                                 vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
        return ((ticks[1] - ticks[0]) & dev.timestamp_mask) * dev.caps.timestamp_period_ns * 1e-9

    fill = lambda cmd: vk.vkCmdFillBuffer(cmd, w.dst.handle, 0, size, 0x9E3779B9)    # noqa: E731
    copy = lambda cmd: vk.vkCmdCopyBuffer(cmd, w.src.handle, w.dst.handle, 1, [vk.VkBufferCopy(0, 0, size)])  # noqa: E731
    try:
        for label, op, counted in (("vkCmdFillBuffer (write)", fill, 1), ("vkCmdCopyBuffer (read + write)", copy, 2)):
            end = time.perf_counter() + 0.5
            while time.perf_counter() < end:
                timed(op)
            rate = 16 * counted * size / float(np.median([timed(op) for _ in range(5)])) / 1e9
            print(f"   {label}: {rate:.0f}")
        got = np.frombuffer(dev.download(w.dst, 1 << 20), np.uint32)
        want = sweeps.filled(1 << 16).ravel()
        print(f"   the copy's first MiB matches the source: {bool((got == want).all())}")
    finally:
        w.close()


def compute_family(dev) -> None:
    from peakbench.vulkan import device as vulkan_device
    families = vulkan_device.vk.vkGetPhysicalDeviceQueueFamilyProperties

    def compute_only(physical):
        out = families(physical)
        for f in out:
            if f.queueFlags & vulkan_device.vk.VK_QUEUE_GRAPHICS_BIT:
                f.queueFlags &= ~vulkan_device.vk.VK_QUEUE_COMPUTE_BIT
        return out
    vulkan_device.vk.vkGetPhysicalDeviceQueueFamilyProperties = compute_only
    backend = create()
    try:
        other = backend.open(0)
    except IndexError:                     # every compute family also does graphics (lavapipe)
        print("12. no compute-only queue family")
        backend.close()
        return
    finally:
        vulkan_device.vk.vkGetPhysicalDeviceQueueFamilyProperties = families
    try:
        print(f"12. on queue family {other.family} (the default device uses {dev.family}):", end=" ")
        shipped(other)
    finally:
        other.close()
        backend.close()


def interop(dev) -> None:
    import ctypes
    import vulkan as vk
    try:
        import cupy as cp
    except ImportError:
        print("13. no CuPy")
        return
    from peakbench.vulkan import device as vulkan_device
    from cuda_memory import SOURCE as CUDA_SOURCE, kernel
    from cuda_stream_paths import seconds
    print("13. one buffer written by both APIs (GB/s)")
    fd_type = vk.VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT
    make_info = vk.VkDeviceCreateInfo

    def with_fd_extension(**kw):          # the exporting device needs VK_KHR_external_memory_fd
        kw["ppEnabledExtensionNames"] = list(kw.get("ppEnabledExtensionNames") or []) + ["VK_KHR_external_memory_fd"]
        return make_info(**kw)
    create_buffer, allocate = vulkan_device.vk.vkCreateBuffer, vulkan_device.vk.vkAllocateMemory

    def exportable_buffer(device, info, allocator):
        return create_buffer(device, vk.VkBufferCreateInfo(size=info.size, usage=info.usage, sharingMode=info.sharingMode,
                                                           pNext=vk.VkExternalMemoryBufferCreateInfo(handleTypes=fd_type)),
                             allocator)

    def exportable_memory(device, info, allocator):
        return allocate(device, vk.VkMemoryAllocateInfo(allocationSize=info.allocationSize, memoryTypeIndex=info.memoryTypeIndex,
                                                        pNext=vk.VkExportMemoryAllocateInfo(handleTypes=fd_type)), allocator)

    class Handle(ctypes.Union):
        _fields_ = [("fd", ctypes.c_int), ("pair", ctypes.c_void_p * 2)]

    class MemoryDesc(ctypes.Structure):           # CUDA_EXTERNAL_MEMORY_HANDLE_DESC
        _fields_ = [("type", ctypes.c_int), ("handle", Handle), ("size", ctypes.c_ulonglong),
                    ("flags", ctypes.c_uint), ("reserved", ctypes.c_uint * 16)]

    class BufferDesc(ctypes.Structure):           # CUDA_EXTERNAL_MEMORY_BUFFER_DESC
        _fields_ = [("offset", ctypes.c_ulonglong), ("size", ctypes.c_ulonglong), ("flags", ctypes.c_uint),
                    ("reserved", ctypes.c_uint * 16)]

    vulkan_device.vk.VkDeviceCreateInfo = with_fd_extension
    backend = create()
    try:
        other = backend.open(0)
    finally:
        vulkan_device.vk.VkDeviceCreateInfo = make_info
    vulkan_device.vk.vkCreateBuffer, vulkan_device.vk.vkAllocateMemory = exportable_buffer, exportable_memory
    try:
        w = stream(other, "memory.write", "tile", 1)
    finally:
        vulkan_device.vk.vkCreateBuffer, vulkan_device.vk.vkAllocateMemory = create_buffer, allocate
    cuda, memory = ctypes.CDLL("libcuda.so.1"), ctypes.c_void_p()
    try:
        size = vk.vkGetBufferMemoryRequirements(other.device, w.dst.handle).size
        get_fd = vk.vkGetDeviceProcAddr(other.device, "vkGetMemoryFdKHR")
        fd = get_fd(other.device, vk.VkMemoryGetFdInfoKHR(memory=w.dst.memory, handleType=fd_type))
        vulkan_rate = gbs(w)
        cp.cuda.Device(0).use()
        own = cp.zeros(w.n_vec * 4, dtype=cp.uint32)              # makes CuPy's context current
        pointer = ctypes.c_ulonglong()
        desc = MemoryDesc(type=1, size=size)                       # CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD
        desc.handle.fd = fd
        assert cuda.cuImportExternalMemory(ctypes.byref(memory), ctypes.byref(desc)) == 0, "cuImportExternalMemory"
        assert cuda.cuExternalMemoryGetMappedBuffer(ctypes.byref(pointer), memory,
                                                    ctypes.byref(BufferDesc(offset=0, size=w.n_vec * 16))) == 0
        shared = cp.ndarray((w.n_vec * 4,), cp.uint32,
                            cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(pointer.value, w.n_vec * 16, None), 0))
        write = kernel(CUDA_SOURCE, "stream", MODE=1, UNROLL=1)

        def cuda_rate(buffer) -> float:
            args = (buffer, buffer, np.uint32(1), np.uint32(w.n_vec), np.uint32(0xFFFFFFFF), np.uint32(0))

            def sixteen():
                for _ in range(16):
                    write((w.n_vec // 256,), (256,), args)
            return 16 * w.n_vec * 16 / seconds(sixteen, 3) / 1e9
        other.fill(w.dst, 0xFFFFFFFF)
        on_vulkan = cuda_rate(shared)
        cp.cuda.Device(0).synchronize()
        seen = np.frombuffer(other.download(w.dst, 1 << 16), np.uint32).reshape(-1, 4)[:, 0]
        on_cuda = cuda_rate(own)
        print(f"   Vulkan's kernel, Vulkan's memory: {vulkan_rate:.0f}")
        print(f"   CUDA's kernel, the same Vulkan memory: {on_vulkan:.0f} (its words read back through Vulkan: "
              f"{bool((seen == np.arange(4096)).all())})")
        print(f"   CUDA's kernel, CUDA's memory: {on_cuda:.0f}")
        print(f"   Vulkan's kernel again: {gbs(w):.0f}")
        del shared
    finally:
        if memory.value:
            cuda.cuDestroyExternalMemory(memory)
        w.close()
        other.close()
        backend.close()


TICKET = """
    uint tiles = push.n_vec / (gl_WorkGroupSize.x * UNROLL);
    if (gl_LocalInvocationID.x == 0) ticket = atomicAdd(next_tile, 1u) % tiles;
    barrier();
    uint base = ticket * gl_WorkGroupSize.x * UNROLL + gl_LocalInvocationID.x;"""


def ticket_write(dev) -> None:
    from vulkan_memory import glsl
    from peakbench.vulkan.shaders import SHADERS
    print("14. the write by workgroup ID and by atomic ticket, 8 passes a dispatch (GB/s)")
    text = (SHADERS / "mem_stream.comp").read_text()
    dst = "layout(std430, binding = 1) restrict writeonly buffer Dst { uvec4 dst[]; };"
    assert WRITE_BASE in text and dst in text
    by_id = text                               # as shipped: tile = workgroup ID % tiles
    ticket = text.replace(dst, dst + "\nlayout(std430, binding = 2) buffer Ticket { uint next_tile; };\nshared uint ticket;")
    ticket = ticket.replace(WRITE_BASE, TICKET)
    w = stream(dev, "memory.write", "tile", 1)
    counter = dev.buffer(256)
    try:
        for unroll in (1, 4):
            row = []
            for label, code, bindings in (("workgroup ID", by_id, 2), ("ticket", ticket, 3)):
                p = dev.pipeline(glsl(code, {"MODE": 1, "UNROLL": unroll}), bindings=bindings, local_size=LOCAL,
                                 push_bytes=16, label=label)
                try:
                    dev.fill(w.dst, 0xFFFFFFFF)            # what the check below reads is this config's
                    dev.bind(p, [w.src, w.dst, counter][:bindings])
                    groups, push, times = 8 * (w.n_vec // (LOCAL * unroll)), [1, w.n_vec, 0xFFFFFFFF, 0], []
                    for k in range(6):
                        dev.fill(counter, 0)
                        times.append(dev.dispatch(p, groups, push))
                    row.append(f"{label} {8 * w.n_vec * 16 / float(np.median(times[1:])) / 1e9:.0f}")
                finally:
                    dev.destroy(p)
            check = np.frombuffer(dev.download(w.dst, 1 << 16), np.uint32).reshape(-1, 4)[:, 0]
            print(f"   {unroll} a thread: " + ", ".join(row) + f" (the ticket's tiles written right: {bool((check == np.arange(4096)).all())})")
    finally:
        dev.free(counter)
        w.close()


SECTIONS = {"1": shipped, "2": nontemporal_variants, "3": read_shapes, "4": sizes, "5": rows_read, "6": write_paths,
            "7": again, "8": without_capture, "9": allocations,
            "10": churn, "11": commands, "12": compute_family,
            "13": interop, "14": ticket_write}


def main(chosen: list[str]) -> None:
    backend = create()
    dev = backend.open(0)
    try:
        print(dev.info.name, dev.driver_label)
        for key, section in SECTIONS.items():
            if not chosen or key in chosen:
                section(dev)
    finally:
        dev.close()
        backend.close()


if __name__ == "__main__":
    main(sys.argv[1:])

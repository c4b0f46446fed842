"""Probes behind the Vulkan memory kernels' shape, and what does not explain the write gap to
CUDA; not peakbench tests. On the first Vulkan device:

1. The write with other buffer qualifiers and other data (zeros, the index, random words).
2. The read's partial sums (SUMS in shaders/mem_stream.comp): the driver's register count and
   shared-memory spill, and the rate from L1 (64 KiB), L2 (4 MiB) and DRAM (the stream buffer).
3. Write and copy tiles: workgroup size x vectors per thread.
4. Write and copy with and without the barrier between repeated dispatches.
5. Write, copy and read in dedicated allocations (VK_KHR_dedicated_allocation, core 1.1).
6. 1 again, after the allocations of 2-5 (on the H200 some of the variants then wrote slower).

Run on the GPU machine from the repository root: python3 experiments/probes/vulkan_memory.py
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import vulkan as vk

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from peakbench.catalog import Variant, default_catalog  # noqa: E402
from peakbench.harness import sweeps  # noqa: E402
from peakbench.vulkan import create  # noqa: E402
from peakbench.vulkan import device as vulkan_device  # noqa: E402
from peakbench.vulkan.memory import LOCAL, StreamWorkload  # noqa: E402
from peakbench.vulkan.shaders import SHADERS, TARGET_ENV, _run, compile_shader, tool  # noqa: E402

CATALOG = default_catalog()


def stream(dev, test: str, layout: str, unroll: int) -> StreamWorkload:
    return StreamWorkload(CATALOG.get(test), Variant(layout, width=4, ops_per_step=16, unroll=unroll), dev)


def gbs(w: StreamWorkload, passes: int = 16) -> float:
    w.run(4)
    return w.work(passes) / float(np.median([w.run(passes) for _ in range(3)])) / 1e9


def read_sums(dev) -> None:
    print("2. read partial sums (GB/s)")
    w = stream(dev, "memory.read", "chunk", 16)
    try:
        for sums in (16, 8, 4, 2):
            p = dev.pipeline(compile_shader("mem_stream.comp", {"MODE": 0, "UNROLL": 16, "LAYOUT": 0, "SUMS": sums}),
                             bindings=2, local_size=LOCAL, push_bytes=16, label=f"sums{sums}")
            dev.bind(p, [w.src, w.dst])
            rates = []
            for ws in (64 << 10, 4 << 20, 0):
                n, mask, shift = sweeps.sweep_point(ws, w.resident, w.tile) if ws else (w.n_vec, 0xFFFFFFFF, 0)
                passes = max(1, int(8e9 // (n * 16)))
                seconds = np.median([dev.dispatch(p, w.resident, [passes, n, mask, shift]) for _ in range(5)])
                rates.append(passes * n * 16 / seconds / 1e9)
            stats = p.statistics.get("CS", {})
            print(f"   sums {sums:2d}: {stats.get('Register Count')} registers, {stats.get('Shared Memory Size')} B shared, "
                  f"L1 {rates[0]:7.0f}, L2 {rates[1]:7.0f}, DRAM {rates[2]:6.0f}")
            dev.destroy(p)
    finally:
        w.close()


def tile_gbs(dev, w: StreamWorkload, code: bytes, local: int, unroll: int, label: str) -> float:
    """GB/s of a write/copy tile shader on w's buffers: 16 dispatches, one per pass, after 4 (as
    memory.write and memory.copy ran until 2026-11-30)."""
    p = dev.pipeline(code, bindings=2, local_size=local, push_bytes=16, label=label)
    try:
        dev.bind(p, [w.src, w.dst])
        groups, push = w.n_vec // (local * unroll), [1, w.n_vec, 0xFFFFFFFF, 0]
        dev.dispatch(p, groups, push, repeat=4)
        seconds = np.median([dev.dispatch(p, groups, push, repeat=16) for _ in range(3)])
        return w.work(16) / seconds / 1e9
    finally:
        dev.destroy(p)


def tile_shapes(dev) -> None:
    print("3. write/copy tiles, workgroup size x vectors per thread (GB/s)")
    for test in ("memory.write", "memory.copy"):
        w = stream(dev, test, "tile", 1)
        row = []
        try:
            for local in (128, 256, 1024):
                for unroll in (1, 4):
                    code = compile_shader("mem_stream.comp", {"MODE": sweeps.MODES[w.mode], "UNROLL": unroll})
                    row.append(f"{local}x{unroll} {tile_gbs(dev, w, code, local, unroll, 'tile'):.0f}")
        finally:
            w.close()
        print(f"   {test}: " + ", ".join(row))


def barriers(dev) -> None:
    print("4. repeated dispatches with and without the barrier between them (GB/s)")
    barrier = vulkan_device.vk.vkCmdPipelineBarrier
    for test in ("memory.write", "memory.copy"):
        w = stream(dev, test, "tile", 1)
        try:
            with_barrier = gbs(w)
            vulkan_device.vk.vkCmdPipelineBarrier = lambda *args, **kwargs: None
            try:
                without = gbs(w)
            finally:
                vulkan_device.vk.vkCmdPipelineBarrier = barrier
        finally:
            w.close()
        print(f"   {test}: with {with_barrier:.0f}, without {without:.0f}")


def dedicated(dev) -> None:
    print("5. plain vs dedicated allocations (GB/s)")
    create_buffer, allocate = vulkan_device.vk.vkCreateBuffer, vulkan_device.vk.vkAllocateMemory
    last = {}

    def create_and_remember(device, info, allocator):
        last["buffer"] = create_buffer(device, info, allocator)
        return last["buffer"]

    def allocate_dedicated(device, info, allocator):
        info = vk.VkMemoryAllocateInfo(allocationSize=info.allocationSize, memoryTypeIndex=info.memoryTypeIndex,
                                       pNext=vk.VkMemoryDedicatedAllocateInfo(buffer=last["buffer"]))
        return allocate(device, info, allocator)

    for label in ("plain", "dedicated"):
        if label == "dedicated":
            vulkan_device.vk.vkCreateBuffer, vulkan_device.vk.vkAllocateMemory = create_and_remember, allocate_dedicated
        row = []
        try:
            for test, layout, unroll in (("memory.write", "tile", 1), ("memory.copy", "tile", 1), ("memory.read", "chunk", 16)):
                w = stream(dev, test, layout, unroll)
                try:
                    problem = w.verify()
                    row.append(f"{test} {gbs(w):.0f}" + (f" ({problem})" if problem else ""))
                finally:
                    w.close()
        finally:
            vulkan_device.vk.vkCreateBuffer, vulkan_device.vk.vkAllocateMemory = create_buffer, allocate
        print(f"   {label}: " + ", ".join(row))


def glsl(text: str, defines: dict) -> bytes:
    """SPIR-V of an edited copy of a shader (compile_shader takes files from shaders/ only)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "edited.comp", Path(tmp) / "edited.spv"
        src.write_text(text)
        _run([tool("glslangValidator"), "-V", "--target-env", TARGET_ENV,
              *[f"-D{k}={v}" for k, v in defines.items()], str(src), "-o", str(out)], "edited shader")
        return out.read_bytes()


def write_variants(dev, title: str = "1. the write with other qualifiers and data (GB/s)") -> None:
    print(title)
    text = (SHADERS / "mem_stream.comp").read_text()
    store = "        dst[j] = uvec4(j, j ^ 0x5bd1e995U, ~j, j * 2654435761U);"
    declaration = "restrict writeonly buffer Dst"
    variants = {"as shipped": text,
                "no restrict/writeonly": text.replace(declaration, "buffer Dst"),
                "coherent": text.replace(declaration, "coherent writeonly buffer Dst"),
                "zeros": text.replace(store, "        dst[j] = uvec4(0);"),
                "index": text.replace(store, "        dst[j] = uvec4(j);"),
                "random": text.replace(store, "        dst[j] = uvec4(hash(4 * j), hash(4 * j + 1), hash(4 * j + 2), hash(4 * j + 3));")}
    w = stream(dev, "memory.write", "tile", 1)
    row = []
    try:
        for name, variant in variants.items():
            row.append(f"{name} {tile_gbs(dev, w, glsl(variant, {'MODE': 1, 'UNROLL': 1}), LOCAL, 1, name):.0f}")
    finally:
        w.close()
    print("   " + ", ".join(row))


def main() -> None:
    backend = create()
    dev = backend.open(0)
    try:
        print(dev.info.name, dev.driver_label)
        write_variants(dev)
        read_sums(dev)
        tile_shapes(dev)
        barriers(dev)
        dedicated(dev)
        write_variants(dev, "6. the same write variants, after the allocations above (GB/s)")
    finally:
        dev.close()
        backend.close()


if __name__ == "__main__":
    main()

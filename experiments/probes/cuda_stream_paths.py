"""Probes of the DRAM read and write on CUDA (CuPy), all on one board in one run, so that boards
(whose rates differ by more than the effects looked for) do not enter; not peakbench tests.

1. The shipped chunk read (shaders/mem.cu) on three fresh 1 GiB allocations: how much one
   board's rate moves with where its buffer lands.
2. The chunk read's load instruction, written as PTX: the compiler's default (LDG.E.128.CONSTANT),
   and .nc with the L1::no_allocate eviction priority and/or the L2::256B prefetch size, and .cs.
3. Bytes in flight per SM: workgroups per SM x threads x loads in flight x partial sums.
4. Buffer size, 256 MiB to 4 GiB: the chunk read and the write (the write one launch a pass,
   16 in a row, as it shipped until 2026-11-30).
5. gpu-benches' L2-cache kernel (the issue's 4.70 TB/s target came from it), written anew: 1024
   threads a block, 32 independent 8-byte loads a thread, block b reading column b mod `run` of
   a 32-row data set, 100000 blocks; at 0.1-4 GiB, on this board. And the write against size.
6. Which of that pattern's traits matter: the same rows of columns with other element types,
   block sizes and row counts, one pass a launch or 100000 blocks; the chunk read with all its
   loads issued first, or with a register budget (launch bounds) that keeps them in flight.
7. The rows read as shipped (shaders/mem.cu, LAYOUT 2) with 16 and 32 rows, against the same
   kernel edited to read contiguous tiles (the reverted tile read's addressing).

8. The write's store instruction (cache operators, memory-model orderings) and 9. the write
   laid out as rows or as tiles taken b % tiles, several passes in one launch.
10. The driver's own cudaMemsetAsync and cudaMemcpyAsync (device to device) over 1 GiB.
11. The stride read (shaders/mem.cu LAYOUT 1, which reads 3.86-3.91 TB/s in peakbench where
   Vulkan's reads 4.53-4.64) with 16, 8, 4 and 1 partial sums, against the chunk read.

Run on the GPU machine from the repository root: python3 experiments/probes/cuda_stream_paths.py [section ...]
"""
from __future__ import annotations

import sys
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_memory import COLUMNS, kernel, seconds as timed  # noqa: E402
from peakbench.harness import sweeps  # noqa: E402

SOURCE = (Path(__file__).resolve().parents[2] / "shaders" / "mem.cu").read_text()
GIB, MIB = 1 << 30, 1 << 20

# The shipped chunk read with its load written out (LOAD 0: plain C++, as shipped; 1: PTX QUAL).
CHUNK = r'''
__device__ __forceinline__ uint4 load(const uint4* p) {
#if LOAD
    uint4 v;
    asm(QUAL " {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
#else
    return *p;
#endif
}
#ifndef FIRST
#define FIRST 0
#endif
#ifdef BOUNDS
extern "C" __global__ void __launch_bounds__(256, BOUNDS)
#else
extern "C" __global__ void
#endif
chunk(const uint4* __restrict__ src, uint4* __restrict__ dst, unsigned passes, unsigned n_vec) {
    uint4 acc[SUMS];
#pragma unroll
    for (int u = 0; u < SUMS; u++) acc[u] = make_uint4(0, 0, 0, 0);
    const unsigned span = n_vec / gridDim.x, lane = blockDim.x;
    for (unsigned pass = 0; pass < passes; pass++) {
        const unsigned base = blockIdx.x * span + threadIdx.x;
        for (unsigned i = 0; i < span; i += lane * UNROLL) {
#if FIRST   // every load issued before the first add
            uint4 v[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) v[u] = load(src + base + i + u * lane);
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                acc[u % SUMS].x += v[u].x; acc[u % SUMS].y += v[u].y; acc[u % SUMS].z += v[u].z; acc[u % SUMS].w += v[u].w;
            }
#else
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                uint4 v = load(src + base + i + u * lane);
                acc[u % SUMS].x += v.x; acc[u % SUMS].y += v.y; acc[u % SUMS].z += v.z; acc[u % SUMS].w += v.w;
            }
#endif
        }
    }
    uint4 sum = acc[0];
#pragma unroll
    for (int u = 1; u < SUMS; u++) { sum.x += acc[u].x; sum.y += acc[u].y; sum.z += acc[u].z; sum.w += acc[u].w; }
    dst[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
'''

# The buffer as ROWS rows; block b (mod `cols`) reads column b of every row, so the blocks running
# at once advance as ROWS fronts through memory (gpu-benches' pattern, in peakbench's terms).
ROWS = r'''
extern "C" __global__ void rows(const elem* __restrict__ src, elem* __restrict__ dst, unsigned row_len, unsigned cols) {
    const size_t at = (size_t)(blockIdx.x % cols) * blockDim.x + threadIdx.x;
    elem v[NROWS];
#pragma unroll
    for (int r = 0; r < NROWS; r++) v[r] = src[(size_t)r * row_len + at];
    total s = 0;
#pragma unroll
    for (int r = 0; r < NROWS; r++) s += SUM(v[r]);
    if (s == (total)1234567) dst[threadIdx.x] = v[0];                    // keeps the loads
}
'''

ELEMENTS = {"double": "typedef double elem; typedef double total;\n#define SUM(v) (v)\n",
            "uint2": "typedef uint2 elem; typedef unsigned total;\n#define SUM(v) (v.x + v.y)\n",
            "uint4": "typedef uint4 elem; typedef unsigned total;\n#define SUM(v) (v.x + v.y + v.z + v.w)\n"}

QUALIFIERS = {
    "ld.global.nc": "ld.global.nc.v4.u32",
    "nc.L1::no_allocate": "ld.global.nc.L1::no_allocate.v4.u32",
    "nc.L2::256B": "ld.global.nc.L2::256B.v4.u32",
    "nc.L1::no_allocate.L2::256B": "ld.global.nc.L1::no_allocate.L2::256B.v4.u32",
    "ld.global.cs": "ld.global.cs.v4.u32",
}
# (workgroups per SM, threads, loads in flight, partial sums); the first is the shipped shape
SHAPES = [(2, 256, 16, 16), (3, 256, 16, 8), (4, 256, 16, 4), (4, 256, 8, 8), (8, 256, 8, 1),
          (2, 256, 32, 8), (1, 1024, 16, 4), (2, 1024, 8, 2)]


def seconds(launch, reps: int = 5) -> float:
    """Median GPU seconds of `reps` launches, after one untimed."""
    launch()
    return timed(launch, reps)


def filled(nbytes: int):
    buffer = cp.empty(nbytes // 4, dtype=cp.uint32)
    fill = kernel(SOURCE, "stream", MODE=3)
    fill((1024,), (256,), (buffer, buffer, np.uint32(1), np.uint32(nbytes // 16), np.uint32(0xFFFFFFFF), np.uint32(0)))
    return buffer


def read_gbs(f, blocks: int, block: int, unroll: int, src, dst, nbytes: int, passes: int = 16) -> float:
    n = nbytes // 16 // (blocks * block * unroll) * blocks * block * unroll
    args = (src, dst, np.uint32(passes), np.uint32(n), np.uint32(0xFFFFFFFF), np.uint32(0))
    return passes * n * 16 / seconds(lambda: f((blocks,), (block,), args)) / 1e9


def chunk_gbs(f, blocks: int, block: int, unroll: int, src, dst, nbytes: int, passes: int = 16) -> float:
    n = nbytes // 16 // (blocks * block * unroll) * blocks * block * unroll
    args = (src, dst, np.uint32(passes), np.uint32(n))
    return passes * n * 16 / seconds(lambda: f((blocks,), (block,), args)) / 1e9


def write_gbs(buffer, nbytes: int) -> float:
    """The write kernel one launch a pass, 16 launches (peakbench's memory.write did this until
    2026-11-30; it now launches all passes at once)."""
    f, n = kernel(SOURCE, "stream", MODE=1, UNROLL=1), nbytes // 16
    args = (buffer, buffer, np.uint32(1), np.uint32(n), np.uint32(0xFFFFFFFF), np.uint32(0))

    def sixteen():
        for _ in range(16):
            f((n // 256,), (256,), args)
    return 16 * nbytes / seconds(sixteen, 3) / 1e9


def fresh_buffers(ctx) -> None:
    print(f"1. shipped chunk read, {ctx.blocks} blocks of 256, on fresh 1 GiB buffers (GB/s)")
    buffers = [filled(GIB) for _ in range(3)]
    print("   " + ", ".join(f"{read_gbs(ctx.shipped, ctx.blocks, 256, 16, b, ctx.dst, GIB):.0f}" for b in buffers))


def load_instructions(ctx) -> None:
    print("2. the chunk read's load instruction (GB/s, registers)")
    src = filled(GIB)
    rows = {"as shipped (C++ load)": kernel(CHUNK, "chunk", LOAD=0, UNROLL=16, SUMS=16)}
    for label, qual in QUALIFIERS.items():
        rows[label] = kernel(CHUNK, "chunk", LOAD=1, QUAL=f'"{qual}"', UNROLL=16, SUMS=16)
    for label, f in rows.items():
        rates = [chunk_gbs(f, ctx.blocks, 256, 16, src, ctx.dst, GIB) for _ in range(2)]
        print(f"   {label:30s} {max(rates):6.0f}  ({f.attributes['num_regs']} registers)")


def in_flight(ctx) -> None:
    print("3. bytes in flight per SM: blocks/SM x threads x loads x sums (GB/s)")
    src = filled(GIB)
    for per_sm, block, unroll, sums in SHAPES:
        f = kernel(CHUNK, "chunk", LOAD=0, UNROLL=unroll, SUMS=sums)
        regs, kib = f.attributes["num_regs"], per_sm * block * unroll * 16 // 1024
        rate = max(chunk_gbs(f, ctx.sms * per_sm, block, unroll, src, ctx.dst, GIB) for _ in range(2))
        print(f"   {per_sm} x {block:4d} x {unroll:2d} x {sums:2d}: {rate:6.0f}  ({regs} registers, {kib} KiB in flight per SM)")


def sizes(ctx) -> None:
    big = filled(4 * GIB)
    print("4. buffer size: shipped read (GB/s)")
    for mib in (256, 512, 1024, 2048, 4096 - 16):
        passes = max(2, 16384 // mib)
        print(f"   {mib:5d} MiB: read {read_gbs(ctx.shipped, ctx.blocks, 256, 16, big, ctx.dst, mib * MIB, passes):6.0f}")
    print("5. gpu-benches' L2-cache pattern on this board, and the shipped write against size (GB/s)")
    f = kernel(COLUMNS, "columns")
    for run in (400, 1200, 2400, 4096, 16000):
        rate = 100000 * 32 * 1024 * 8 / seconds(lambda: f((100000,), (1024,), (big, ctx.dst, np.uint32(run))))
        print(f"   data set {run * 256 / 1024:6.0f} MiB: {rate / 1e9:6.0f}")
    for mib in (256, 1024, 4096 - 16):
        print(f"   write {mib:5d} MiB: {write_gbs(big, mib * MIB):6.0f}")


def pattern_traits(ctx) -> None:
    src, dst = filled(GIB), ctx.dst
    print("6. what gpu-benches' pattern has that the chunk read lacks, 1 GiB (GB/s)")
    f = kernel(COLUMNS, "columns")
    print(f"   gpu-benches' pattern: {100000 * 32 * 1024 * 8 / seconds(lambda: f((100000,), (1024,), (src, dst, np.uint32(4096)))) / 1e9:6.0f}")
    for t, size, block, rows in (("double", 8, 1024, 32), ("uint2", 8, 1024, 32), ("uint4", 16, 1024, 32),
                                 ("uint4", 16, 1024, 16), ("uint4", 16, 512, 16), ("uint4", 16, 256, 16),
                                 ("uint4", 16, 256, 32), ("double", 8, 256, 32)):
        f = kernel(ELEMENTS[t] + ROWS, "rows", NROWS=rows)
        row_len = GIB // size // rows
        cols = row_len // block

        def once():
            for _ in range(4):
                f((cols,), (block,), (src, dst, np.uint32(row_len), np.uint32(cols)))
        big_grid = seconds(lambda: f((100000,), (block,), (src, dst, np.uint32(row_len), np.uint32(cols))))
        print(f"   rows {t:6s} {block:4d} x {rows}: one pass a launch {4 * GIB / seconds(once) / 1e9:6.0f}, "
              f"100000 blocks {100000 * block * rows * size / big_grid / 1e9:6.0f}  ({f.attributes['num_regs']} registers)")
    for per_sm, unroll, sums, extra in ((2, 16, 1, {"FIRST": 1}), (4, 16, 1, {"FIRST": 1}), (8, 8, 1, {"FIRST": 1}),
                                        (2, 16, 16, {"BOUNDS": 2}), (2, 16, 1, {"FIRST": 1, "BOUNDS": 2}),
                                        (2, 32, 8, {"BOUNDS": 2}), (4, 16, 4, {"BOUNDS": 4}), (4, 8, 8, {"BOUNDS": 4})):
        f = kernel(CHUNK, "chunk", LOAD=0, UNROLL=unroll, SUMS=sums, **extra)
        rate = max(chunk_gbs(f, ctx.sms * per_sm, 256, unroll, src, dst, GIB) for _ in range(2))
        print(f"   chunk {per_sm} x 256 x {unroll:2d} x {sums:2d} {extra}: {rate:6.0f}  ({f.attributes['num_regs']} registers)")


def rows_read(ctx) -> None:
    print("7. the rows read as shipped, and with contiguous tiles instead, 1 GiB, 16 passes a launch (GB/s)")
    src = filled(GIB)
    rows_at = "uint4 v = src[u * row + at];"
    tiles_at = "uint4 v = src[column * blockDim.x * UNROLL + threadIdx.x + u * blockDim.x];"
    assert rows_at in SOURCE
    for label, code in (("rows", SOURCE), ("tiles", SOURCE.replace(rows_at, tiles_at))):
        for block, unroll in ((256, 16), (256, 32), (1024, 16), (1024, 32)):
            f = kernel(code, "stream", MODE=0, UNROLL=unroll, LAYOUT=2)
            n = GIB // 16
            columns = n // (block * unroll)
            args = (src, ctx.dst, np.uint32(1), np.uint32(n), np.uint32(0xFFFFFFFF), np.uint32(0))
            rate = max(16 * GIB / seconds(lambda: f((16 * columns,), (block,), args)) / 1e9 for _ in range(2))
            print(f"   {label:5s} {block:4d} x {unroll}: {rate:6.0f}  ({f.attributes['num_regs']} registers)")


# The write's store as PTX, in the flavours a compiler may pick (the Vulkan write runs 6% under
# CUDA's with the same tiles: does one of these reproduce it?), and the write laid out as rows or
# as tiles taken b % tiles, with 8 passes in one launch.
STORE = "        dst[j] = make_uint4(j, j ^ 0x5bd1e995U, ~j, j * 2654435761U);"
STORES = {"default": None, "st.global.wb": "st.global.wb.v4.u32", "st.global.cg": "st.global.cg.v4.u32",
          "st.global.cs": "st.global.cs.v4.u32", "st.global.wt": "st.global.wt.v4.u32",
          "st.relaxed.gpu": "st.relaxed.gpu.global.v4.u32", "st.release.gpu": "st.release.gpu.global.v4.u32",
          "st.volatile": "st.volatile.global.v4.u32", "st.L1::no_allocate": "st.global.L1::no_allocate.v4.u32",
          "st.relaxed.sys": "st.relaxed.sys.global.v4.u32", "st.relaxed.cta": "st.relaxed.cta.global.v4.u32",
          "st.L1::evict_first": "st.global.L1::evict_first.v4.u32", "st.L1::evict_last": "st.global.L1::evict_last.v4.u32"}
SHIPPED_BASE = """    const unsigned tile = blockIdx.x % (n_vec / (blockDim.x * UNROLL));
    const unsigned base = tile * blockDim.x * UNROLL + threadIdx.x;"""
WRITE_LAYOUTS = {      # tiles taken b % tiles are what ships since 2026-11-30
    "tiles b % tiles": SHIPPED_BASE,
    "rows": "    const unsigned row = n_vec / UNROLL, base = (blockIdx.x % (row / blockDim.x)) * blockDim.x + threadIdx.x;",
}


def write_paths(ctx) -> None:
    print("8. the write's store instruction, 1 GiB, 16 launches (GB/s)")
    buffer, n = cp.empty(GIB // 4, dtype=cp.uint32), GIB // 16
    args = (buffer, buffer, np.uint32(1), np.uint32(n), np.uint32(0xFFFFFFFF), np.uint32(0))
    assert STORE in SOURCE
    for label, qual in STORES.items():
        if qual is None:
            code = SOURCE
        else:
            code = SOURCE.replace(STORE, "        { uint4 w = make_uint4(j, j ^ 0x5bd1e995U, ~j, j * 2654435761U); "
                                         f'asm volatile("{qual} [%0], {{%1, %2, %3, %4}};" :: "l"(dst + j), '
                                         '"r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w) : "memory"); }')
        f = kernel(code, "stream", MODE=1, UNROLL=1)

        def sixteen():
            for _ in range(16):
                f((n // 256,), (256,), args)
        print(f"   {label:20s} {16 * GIB / seconds(sixteen, 3) / 1e9:6.0f}")
    print("9. the write laid out otherwise, 8 passes in one launch (GB/s)")
    assert SHIPPED_BASE in SOURCE
    for label, base in WRITE_LAYOUTS.items():
        for unroll in (1, 4, 16):
            code = SOURCE.replace(SHIPPED_BASE, base)
            if label == "rows":
                code = code.replace("const unsigned j = base + u * blockDim.x;", "const unsigned j = base + u * row;")
            f = kernel(code, "stream", MODE=1, UNROLL=unroll)
            grid = 8 * (n // (256 * unroll))
            print(f"   {label:16s} x {unroll:2d}: {8 * GIB / seconds(lambda: f((grid,), (256,), args), 3) / 1e9:6.0f}")


def driver_commands(ctx) -> None:
    print("10. cudaMemsetAsync and cudaMemcpyAsync, 1 GiB, 16 at a time (GB/s)")
    src, dst = filled(GIB), cp.empty(GIB // 4, dtype=cp.uint32)
    stream = cp.cuda.get_current_stream().ptr
    rt = cp.cuda.runtime

    def memset():
        for _ in range(16):
            rt.memsetAsync(dst.data.ptr, 0x5A, GIB, stream)

    def memcpy():
        for _ in range(16):
            rt.memcpyAsync(dst.data.ptr, src.data.ptr, GIB, rt.memcpyDeviceToDevice, stream)
    print(f"   cudaMemsetAsync (write): {16 * GIB / seconds(memset, 3) / 1e9:.0f}")
    print(f"   cudaMemcpyAsync (read + write): {32 * GIB / seconds(memcpy, 3) / 1e9:.0f}")
    print(f"   the copy matches the source: {bool((dst[:1 << 18] == src[:1 << 18]).all())}")


def stride_sums(ctx) -> None:
    print("11. the stride and chunk reads by partial sums, 1 GiB, 16 passes (GB/s)")
    src = filled(GIB)
    for layout in (1, 0):
        row = []
        for sums in (16, 8, 4, 1):
            f = kernel(SOURCE, "stream", MODE=0, UNROLL=16, LAYOUT=layout, SUMS=sums)
            row.append(f"{sums} sums {read_gbs(f, ctx.blocks, 256, 16, src, ctx.dst, GIB):.0f} ({f.attributes['num_regs']} registers)")
        print(f"   {('chunk', 'stride')[layout]}: " + ", ".join(row))


SECTIONS = {"1": fresh_buffers, "2": load_instructions, "3": in_flight, "4": sizes, "6": pattern_traits,
            "7": rows_read, "8": write_paths, "10": driver_commands,
            "11": stride_sums}


class Context:
    def __init__(self):
        self.sms = cp.cuda.Device(0).attributes["MultiProcessorCount"]
        self.blocks = self.sms * sweeps.READ_BLOCKS_PER_UNIT
        self.shipped = kernel(SOURCE, "stream", MODE=0, UNROLL=16, LAYOUT=0)
        self.dst = cp.zeros(1 << 22, dtype=cp.uint32)


def main(chosen: list[str]) -> None:
    """Sections by number (4 or 5 runs both, as do 8 or 9), all by default."""
    ctx = Context()
    chosen = [{"5": "4", "9": "8"}.get(key, key) for key in chosen]
    for key, section in SECTIONS.items():
        if not chosen or key in chosen:
            section(ctx)
            cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main(sys.argv[1:])

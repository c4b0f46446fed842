"""Probes behind two design choices of the memory kernels, on CUDA (CuPy); not peakbench tests.

1. The read's partial sums (SUMS in shaders/mem.cu): registers, and the rate from L1 (64 KiB),
   L2 (4 MiB) and DRAM (the 1 GiB stream), for 16, 8 and 1 sums.
2. The sweep's layout past the L2: rotating slices (harness/sweeps.py) with 8, 32 and 128 passes
   per launch, private slices (what the sweep uses there), and one block per 64 KiB tile with
   indices wrapped at the working set (blocks dispatched in order, none resident for long).
3. The access pattern of gpu-benches' L2-cache benchmark, written anew, at its 0.1-0.6 GB sizes:
   blocks of 1024 threads, 32 independent 8-byte loads a thread, block b reading column b mod
   `run` of a (32 rows x run columns x 8 KiB) data set; 100000 blocks. Its 4.70 TB/s on "this
   same H200" is the issue's target: this shows what the pattern reads on the board at hand.
4. The write with other data (zeros, the index, random words): the pattern is not the limit.

Run on the GPU machine from the repository root: python3 experiments/probes/cuda_memory.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from peakbench.harness import sweeps  # noqa: E402

SOURCE = (Path(__file__).resolve().parents[2] / "shaders" / "mem.cu").read_text()
BLOCK, UNROLL, GIB = 256, 16, 1 << 30
TILE = BLOCK * UNROLL
ONE_TILE_PER_BLOCK = r'''
extern "C" __global__ void tile(const uint4* __restrict__ src, uint4* __restrict__ dst, unsigned mask) {
    const unsigned base = blockIdx.x * blockDim.x * 16 + threadIdx.x;
    uint4 s = make_uint4(0, 0, 0, 0);
    uint4 v[16];
#pragma unroll
    for (int u = 0; u < 16; u++) v[u] = src[(base + u * blockDim.x) & mask];
#pragma unroll
    for (int u = 0; u < 16; u++) { s.x += v[u].x; s.y += v[u].y; s.z += v[u].z; s.w += v[u].w; }
    if (s.x == 0x12345678u && s.y == 0x9abcdef0u) dst[threadIdx.x] = s;   // keeps the loads
}
'''


COLUMNS = r'''
extern "C" __global__ void columns(const double* __restrict__ src, double* __restrict__ dst, unsigned run) {
    double s = 0.0;
#pragma unroll
    for (int i = 0; i < 32; i++)
        s += src[(size_t)i * blockDim.x * run + (blockIdx.x % run) * blockDim.x + threadIdx.x];
    if (s == 1.25) dst[threadIdx.x] = s;                                     // keeps the loads
}
'''


def kernel(code: str, name: str, **defines):
    options = tuple(f"-D{k}={v}" for k, v in defines.items())
    return cp.RawModule(code=code, options=options, backend="nvrtc").get_function(name)


def seconds(launch, reps: int = 5) -> float:
    start, end, times = cp.cuda.Event(), cp.cuda.Event(), []
    for _ in range(reps):
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return float(np.median(times))


def read_rate(f, blocks, src, dst, n, mask, shift, passes) -> float:
    args = (src, dst, np.uint32(passes), np.uint32(n), np.uint32(mask), np.uint32(shift))
    return passes * n * 16 / seconds(lambda: f((blocks,), (BLOCK,), args)) / 1e9


def main() -> None:
    device = cp.cuda.Device(0)
    blocks = device.attributes["MultiProcessorCount"] * sweeps.READ_BLOCKS_PER_UNIT
    src, dst = cp.empty(GIB // 4, dtype=cp.uint32), cp.zeros(1 << 22, dtype=cp.uint32)
    fill = kernel(SOURCE, "stream", MODE=3)
    fill((1024,), (BLOCK,), (dst, src, np.uint32(1), np.uint32(GIB // 16), np.uint32(0xFFFFFFFF), np.uint32(0)))
    stream_n = GIB // 16 // (blocks * TILE) * blocks * TILE

    print(f"1. read partial sums ({blocks} blocks of {BLOCK}, {UNROLL} loads in flight; GB/s)")
    for sums in (16, 8, 1):
        f = kernel(SOURCE, "stream", MODE=0, UNROLL=UNROLL, LAYOUT=0, SUMS=sums)
        rates = []
        for ws in (64 << 10, 4 << 20):
            n, mask, shift = sweeps.sweep_point(ws, blocks, TILE)
            rates.append(read_rate(f, blocks, src, dst, n, mask, shift, max(1, int(8e9 // (n * 16)))))
        rates.append(read_rate(f, blocks, src, dst, stream_n, 0xFFFFFFFF, 0, 16))
        print(f"   sums {sums:2d}: {f.attributes['num_regs']:3d} registers, L1 {rates[0]:7.0f}, "
              f"L2 {rates[1]:7.0f}, DRAM {rates[2]:6.0f}")

    print("2. sweep layouts past the L2 (GB/s)")
    f = kernel(SOURCE, "stream", MODE=0, UNROLL=UNROLL, LAYOUT=0)
    tile = kernel(ONE_TILE_PER_BLOCK, "tile")
    shift = sweeps.sweep_shift(blocks)
    for mib in (16, 32, 64, 128, 256, 512):
        ws = mib << 20
        n = blocks * sweeps.sweep_span(ws, blocks, TILE)
        rotating = [read_rate(f, blocks, src, dst, n, ws // 16 - 1, shift, p) for p in (8, 32, 128)]
        pn = blocks * (ws // 16 // blocks // TILE * TILE)    # none below one tile a block
        private = read_rate(f, blocks, src, dst, pn, 0xFFFFFFFF, 0, max(8, int(8e9 // (pn * 16)))) if pn else 0.0
        grid = max(ws // (TILE * 16), int(8e9 // (TILE * 16)))
        tiles = grid * TILE * 16 / seconds(lambda: tile((grid,), (BLOCK,), (src, dst, np.uint32(ws // 16 - 1))))
        print(f"   {mib:4d} MiB: rotating 8/32/128 passes {rotating[0]:6.0f} {rotating[1]:6.0f} {rotating[2]:6.0f}, "
              f"private {private:6.0f}, one block per tile {tiles / 1e9:6.0f}")
    gpu_benches_pattern(src, dst)
    write_data(src)


def gpu_benches_pattern(src, dst) -> None:
    print("3. gpu-benches' L2-cache access pattern (GB/s)")
    f, blocks = kernel(COLUMNS, "columns"), 100000
    for run in (400, 1200, 2400, 4096):
        rate = blocks * 32 * 1024 * 8 / seconds(lambda: f((blocks,), (1024,), (src, dst, np.uint32(run))))
        print(f"   data set {run * 256 / 1024:5.0f} MiB: {rate / 1e9:6.0f}")


def write_data(buffer) -> None:
    """Last: it overwrites the filled buffer. One launch a pass, as memory.write ran until
    2026-11-30 ("as shipped" then)."""
    print("4. the write tile with other data (GB/s)")
    store = "        dst[j] = make_uint4(j, j ^ 0x5bd1e995U, ~j, j * 2654435761U);"
    variants = {"as shipped": SOURCE, "zeros": SOURCE.replace(store, "        dst[j] = make_uint4(0, 0, 0, 0);"),
                "index": SOURCE.replace(store, "        dst[j] = make_uint4(j, j, j, j);"),
                "random": SOURCE.replace(store, "        dst[j] = make_uint4(hash(4 * j), hash(4 * j + 1), hash(4 * j + 2), hash(4 * j + 3));")}
    n, row = GIB // 16, []
    for name, code in variants.items():
        f = kernel(code, "stream", MODE=1, UNROLL=1)
        args = (buffer, buffer, np.uint32(1), np.uint32(n), np.uint32(0xFFFFFFFF), np.uint32(0))

        def sixteen():
            for _ in range(16):
                f((n // BLOCK,), (BLOCK,), args)
        sixteen()
        row.append(f"{name} {16 * GIB / seconds(sixteen, 3) / 1e9:.0f}")
    print("   " + ", ".join(row))


if __name__ == "__main__":
    main()

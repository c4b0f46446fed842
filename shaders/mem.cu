// Memory bandwidth, latency and launch kernels for CUDA and HIP: the same contract as
// shaders/mem_stream.comp, mem_chase.comp and empty.comp (peakbench/workloads/ checks all).
//
// stream: 16-byte accesses, UNROLL in flight per thread, in the layout that measured fastest
// for each (PERFORMANCE_ANALYSIS.md, "The DRAM read reaches 98% of the datasheet; the board sets the rest"):
// - read: LAYOUT 2 (rows): the buffer as UNROLL rows of n_vec / UNROLL vectors; block b reads
//   column b % columns of every row (columns = row / blockDim), so the blocks running at once
//   advance as UNROLL fronts through memory. `passes` is ignored: the host launches passes *
//   columns blocks, short-lived and taken in order, so a fast SM takes more of them and no SM
//   waits for a slow one's share. Each block stores its column's total at dst[column].
//   LAYOUT 0 (chunk) and 1 (stride) are a grid small enough to be resident at once (two blocks
//   per SM/CU), `passes` sweeps in the kernel (bytes per launch = passes * n_vec * 16): block b
//   reads slice b + pass * shift of n_vec / blocks vectors, its index wrapped at `mask`, or the
//   whole grid strides through the buffer. The fastest layout differed between boards (the
//   finding above), so all run and the fastest counts.
// - write, copy: one tile of blockDim * UNROLL vectors per block, block b on tile b % tiles: the
//   blocks retire in order, so the stores advance through memory as one front; the host launches
//   passes * tiles blocks (n_vec * 16 bytes written a pass; copy counts read + written,
//   2 * n_vec * 16). A tile comes round again a whole buffer later, long out of the L2 (a pass
//   loop inside a resident block would rewrite lines still there).
// MODE 0 read: every lane of every vector is summed (a sum of only .x would let the compiler
//   narrow the 16-byte loads); each thread of the chunk and stride reads stores its sum, which
//   the host checks. The stream runs the chunk with shift 0 and mask all ones; the cache sweep
//   with mask = working set - 1 and shift = blocks | 1, so every line comes back one working set
//   of traffic later and a block never finds its next slice in its own L1 (mem_stream.comp says
//   more).
// MODE 1 write: v[j] = pattern(j); MODE 2 copy: dst[i] = src[i]; MODE 3 fill: src[i] =
//   hash(i), the random-looking data every test reads (nothing compressible); MODE 4 update:
//   dst[i] += src[i] (two reads and a write), in the write's tiles.
// The measured stream kernel (not the fill or the checks' reads) counts its blocks as their first
//   act, where the add waits behind none of the tile's traffic: block b adds one to slot
//   b % WITNESS_SLOTS, WITNESS_STRIDE words apart, through the parameter after dst
//   (workloads/witness.py: a write's 4 KiB tiles run about 10^9 a second, too many adds for one word).
// Defines: MODE, UNROLL, LAYOUT, SUMS, WITNESS_SLOTS, WITNESS_STRIDE (stream); CLOCK, ROUND, POINTER (chase). n_vec is a multiple of threads * UNROLL
// (the rows read: of blockDim * UNROLL).
//
// chase: one thread follows a random single cycle of nodes one cache line apart (ROUND loads per
// round, defined by workloads/chase.py); every load depends on the one before. POINTER=1 (what
// the backends run): a pointer chase, each node's first 8 bytes the next node's address, written
// by chase_link from the index chain the host uploads, so each load's value is the next load's
// address (load to use: no address arithmetic between loads). POINTER=0: an index chase, each
// load's value the next node's word index. The load is the vector-memory path of an ordinary
// kernel: on CUDA ld.global.ca (cached in L1, as the issue asks), on HIP a global_load whose
// address is kept in vector registers (a uniform address would become a scalar s_load, the
// cache path no ordinary data load takes). Either way the final word index is stored. With
// CLOCK=1 the loop is bracketed by clock64(), the SM's cycle counter, so cycles per load need
// no outside clock reading.
#if defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_runtime.h>
__device__ __forceinline__ unsigned chase_load(const unsigned* next, unsigned i) {
    asm volatile("" : "+v"(i));            // the index lives in a VGPR: a per-lane (vector) load
    return next[i];
}
typedef const void* __attribute__((address_space(1))) const* global_node;   // global, not flat, loads
__device__ __forceinline__ const void* chase_step(const void* p) {
    asm volatile("" : "+v"(p));            // the address lives in VGPRs: a per-lane (vector) load
    return *(global_node)p;
}
#else
__device__ __forceinline__ unsigned chase_load(const unsigned* next, unsigned i) {
    unsigned v;
    asm volatile("ld.global.ca.u32 %0, [%1];" : "=r"(v) : "l"(next + i) : "memory");
    return v;
}
__device__ __forceinline__ const void* chase_step(const void* p) {
    const void* v;
    asm volatile("ld.global.ca.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
#endif

#ifndef MODE
#define MODE 0
#endif
#ifndef UNROLL
#define UNROLL 4
#endif
#ifndef LAYOUT
#define LAYOUT 0
#endif
#ifndef SUMS
#define SUMS UNROLL   // the read's partial sums: one per load in flight (mem_stream.comp says why)
#endif

__device__ __forceinline__ unsigned hash(unsigned x) {   // lowbias32: a bijection, good avalanche
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
    return x;
}

__device__ __forceinline__ unsigned warp_sum(unsigned v) {
#if defined(__HIP_PLATFORM_AMD__)
    for (int offset = warpSize / 2; offset; offset >>= 1) v += __shfl_xor(v, offset);
#else
    for (int offset = 16; offset; offset >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
#endif
    return v;
}

__device__ __forceinline__ uint4 block_sum(uint4 v) {   // every thread's vector added up; valid in thread 0
    __shared__ uint4 part[32];            // one per warp: 1024 threads / 32 lanes at most
    v = make_uint4(warp_sum(v.x), warp_sum(v.y), warp_sum(v.z), warp_sum(v.w));
    if (threadIdx.x % warpSize == 0) part[threadIdx.x / warpSize] = v;
    __syncthreads();
    if (threadIdx.x == 0)
        for (unsigned w = 1; w < blockDim.x / warpSize; w++) {
            v.x += part[w].x; v.y += part[w].y; v.z += part[w].z; v.w += part[w].w;
        }
    return v;
}

#if MODE == 0 && LAYOUT == 2
#define STREAM_BOUNDS __launch_bounds__(1024)   // the rows read's blocks: up to 1024 threads
#else
#define STREAM_BOUNDS
#endif

#ifdef WITNESS_SLOTS
#define WITNESS_PARAM , unsigned* __restrict__ workgroups_done
#else
#define WITNESS_PARAM
#endif

extern "C" __global__ void STREAM_BOUNDS stream(const uint4* __restrict__ src, uint4* __restrict__ dst WITNESS_PARAM,
                                                unsigned passes, unsigned n_vec, unsigned mask, unsigned shift) {
#ifdef WITNESS_SLOTS
    if (threadIdx.x == 0) atomicAdd(workgroups_done + (blockIdx.x % WITNESS_SLOTS) * WITNESS_STRIDE, 1u);
#endif
#if MODE == 3
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n_vec; i += gridDim.x * blockDim.x)
        dst[i] = make_uint4(hash(4 * i), hash(4 * i + 1), hash(4 * i + 2), hash(4 * i + 3));
#elif MODE == 0
    uint4 acc[SUMS];
#pragma unroll
    for (int u = 0; u < SUMS; u++) acc[u] = make_uint4(0, 0, 0, 0);
#if LAYOUT == 0
    const unsigned span = n_vec / gridDim.x, lane = blockDim.x;
    for (unsigned pass = 0; pass < passes; pass++) {
        const unsigned base = (blockIdx.x + pass * shift) * span + threadIdx.x;
        for (unsigned i = 0; i < span; i += lane * UNROLL)
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                uint4 v = src[(base + i + u * lane) & mask];
                acc[u % SUMS].x += v.x; acc[u % SUMS].y += v.y; acc[u % SUMS].z += v.z; acc[u % SUMS].w += v.w;
            }
    }
#elif LAYOUT == 1
    const unsigned base = blockIdx.x * blockDim.x + threadIdx.x, lane = gridDim.x * blockDim.x;
    for (unsigned pass = 0; pass < passes; pass++)
        for (unsigned i = 0; i < n_vec; i += lane * UNROLL)
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                uint4 v = src[base + i + u * lane];
                acc[u % SUMS].x += v.x; acc[u % SUMS].y += v.y; acc[u % SUMS].z += v.z; acc[u % SUMS].w += v.w;
            }
#else
    const unsigned row = n_vec / UNROLL, column = blockIdx.x % (row / blockDim.x);
    const unsigned at = column * blockDim.x + threadIdx.x;
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        uint4 v = src[u * row + at];
        acc[u % SUMS].x += v.x; acc[u % SUMS].y += v.y; acc[u % SUMS].z += v.z; acc[u % SUMS].w += v.w;
    }
#endif
    uint4 sum = acc[0];
#pragma unroll
    for (int u = 1; u < SUMS; u++) { sum.x += acc[u].x; sum.y += acc[u].y; sum.z += acc[u].z; sum.w += acc[u].w; }
#if LAYOUT == 2
    sum = block_sum(sum);
    if (threadIdx.x == 0) dst[column] = sum;
#else
    dst[blockIdx.x * blockDim.x + threadIdx.x] = sum;
#endif
#else
    const unsigned tile = blockIdx.x % (n_vec / (blockDim.x * UNROLL));
    const unsigned base = tile * blockDim.x * UNROLL + threadIdx.x;
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        const unsigned j = base + u * blockDim.x;
#if MODE == 1
        dst[j] = make_uint4(j, j ^ 0x5bd1e995U, ~j, j * 2654435761U);
#elif MODE == 4
        const uint4 a = dst[j], b = src[j];
        dst[j] = make_uint4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
#else
        dst[j] = src[j];
#endif
    }
#endif
}

#ifdef ROUND          // the chase, where the host names its round length (workloads/chase.py)
extern "C" __global__ void chase(const unsigned* __restrict__ next, unsigned* __restrict__ out, unsigned rounds,
                                 unsigned start) {
#if POINTER
    const void* i = next + start;
#else
    unsigned i = start;
#endif
#if CLOCK
    long long t0 = clock64();
#endif
    for (unsigned r = 0; r < rounds; r++)
#pragma unroll 16
#if POINTER
        for (int n = 0; n < ROUND; n++) i = chase_step(i);
#else
        for (int n = 0; n < ROUND; n++) i = chase_load(next, i);
#endif
#if CLOCK
    long long t1 = clock64();
    *(long long*)(out + 2) = t0;      // 8-byte aligned: words 2-3 and 4-5
    *(long long*)(out + 4) = t1;
#endif
#if POINTER
    out[0] = (unsigned)((const unsigned*)i - next);
#else
    out[0] = i;
#endif
}

// The pointer chain from the index chain, in place: node k (word k * stride) held the next node's
// word index and now holds its address, 8 bytes at the node's start (stride >= 2 words).
extern "C" __global__ void chase_link(unsigned* next, unsigned nodes, unsigned stride) {
    const unsigned k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < nodes) {
        unsigned* node = next + k * stride;     // word indices fit 32 bits: chains < 16 GiB
        *(const void**)node = next + *node;
    }
}
#endif

#if defined(SPIN) && SPIN
// launch.overhead's completion check (workloads/launch.py): one thread steps a 32-bit LCG
// `iterations` times from 1 and stores it, as shaders/empty.comp does.
extern "C" __global__ void empty(unsigned* out, unsigned iterations) {
    unsigned x = 1u;
    for (unsigned i = 0; i < iterations; i++) x = x * 1664525u + 1013904223u;
    out[0] = x;
}
#else
extern "C" __global__ void empty() {}
#endif

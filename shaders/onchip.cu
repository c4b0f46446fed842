// On-chip memory for CUDA and HIP: the contract of shaders/onchip_shared.comp and onchip_l2.comp
// (peakbench/workloads/onchip.py holds the host references and the defines).
//
// shared_read (memory.shared): each block copies WINDOW + SLIDE vectors of 16 bytes from `src`
// into shared memory, then in each of `passes` passes thread t (lane l = t % 32 of group
// g = t / 32) of block b reads the UNROLL vectors s[o + l + 32u], u < UNROLL, with
// o = (p + g + b) & (SLIDE - 1): 32 consecutive lanes read 32 consecutive 16-byte vectors
// (LDS.128 / ds_read_b128, no bank conflict), and the window moves each pass, so no load can be
// hoisted out of the pass loop. Every lane of every vector is added into SUMS partial sums;
// thread t stores their total at dst[b * blockDim + t]:
//   bytes read from shared memory per launch = passes * threads * UNROLL * 16
// shared_chase (latency.shared): the block copies a random single cycle of CHASE_WORDS word
// indices from `next` into shared memory (as addresses, below), then thread 0 follows it for
// rounds * ROUND dependent loads (each loaded word is the next address), between two clock64()
// reads stored at words 2-5 of `out` after the index it ended at (out[0]).
// l2_read (memory.l2): the chunk read of shaders/mem.cu `stream` (LAYOUT 0: block b reads slice
// b + pass * shift of n_vec / blocks vectors, its index wrapped at `mask`) with loads that skip
// the L1: ld.global.cg on CUDA (LDG.E.128.STRONG.GPU: cached in the L2 only), a nontemporal
// load on HIP. Each thread stores its sum at dst[b * blockDim + t]:
//   bytes read per launch = passes * n_vec * 16
// Defines: shared_read UNROLL, SLIDE, SUMS; shared_chase CHASE_WORDS, ROUND, CLOCK; l2_read
// L2_UNROLL, SUMS.
// The chase keeps addresses, not indices, so each step is one load whose value is the next
// address (no address arithmetic between loads): on CUDA 32-bit shared-window addresses read by
// ld.shared (LDS R, [R]), on HIP byte offsets from the array (ds_read_b32 with the array's
// offset as the immediate).
#if defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_runtime.h>
typedef unsigned l2_vec __attribute__((ext_vector_type(4)));
__device__ __forceinline__ uint4 l2_load(const uint4* p) {
    l2_vec v = __builtin_nontemporal_load(reinterpret_cast<const l2_vec*>(p));
    return make_uint4(v.x, v.y, v.z, v.w);
}
__device__ __forceinline__ unsigned chase_base(const unsigned*) { return 0; }
__device__ __forceinline__ unsigned chase_step(const unsigned* s, unsigned a) {
    return *reinterpret_cast<const unsigned*>(reinterpret_cast<const char*>(s) + a);
}
#else
__device__ __forceinline__ uint4 l2_load(const uint4* p) { return __ldcg(p); }
__device__ __forceinline__ unsigned chase_base(const unsigned* s) { return (unsigned)__cvta_generic_to_shared(s); }
__device__ __forceinline__ unsigned chase_step(const unsigned*, unsigned a) {
    unsigned v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
    return v;
}
#endif

__device__ __forceinline__ void add(uint4& acc, uint4 v) {
    acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
}

__device__ __forceinline__ uint4 total(const uint4* acc, int n) {
    uint4 sum = acc[0];
    for (int k = 1; k < n; k++) add(sum, acc[k]);
    return sum;
}

#ifdef SLIDE
#define WINDOW (32 * UNROLL)
extern "C" __global__ void __launch_bounds__(256) shared_read(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                                              unsigned* __restrict__ workgroups_done,
                                                              unsigned passes) {
    __shared__ uint4 s[WINDOW + SLIDE];
    for (unsigned i = threadIdx.x; i < WINDOW + SLIDE; i += blockDim.x) s[i] = src[i];
    __syncthreads();
    const unsigned lane = threadIdx.x % 32, group = threadIdx.x / 32 + blockIdx.x;
    uint4 acc[SUMS];
#pragma unroll
    for (int k = 0; k < SUMS; k++) acc[k] = make_uint4(0, 0, 0, 0);
    for (unsigned p = 0; p < passes; p++) {
        const uint4* w = s + ((p + group) & (SLIDE - 1)) + lane;   // one address a pass, then immediates
#pragma unroll
        for (int u = 0; u < UNROLL; u++) add(acc[u % SUMS], w[32 * u]);
    }
    dst[blockIdx.x * blockDim.x + threadIdx.x] = total(acc, SUMS);
    if (threadIdx.x == 0) atomicAdd(workgroups_done, 1u);     // workloads/witness.py
}
#endif

#ifdef CHASE_WORDS
extern "C" __global__ void shared_chase(const unsigned* __restrict__ next, unsigned* __restrict__ out, unsigned rounds,
                                        unsigned start) {
    __shared__ unsigned s[CHASE_WORDS];
    const unsigned base = chase_base(s);
    for (unsigned i = threadIdx.x; i < CHASE_WORDS; i += blockDim.x) s[i] = base + 4 * next[i];
    __syncthreads();
    if (threadIdx.x != 0) return;
    unsigned a = base + 4 * start;
#if CLOCK
    long long t0 = clock64();
#endif
    for (unsigned r = 0; r < rounds; r++)
#pragma unroll 16
        for (int n = 0; n < ROUND; n++) a = chase_step(s, a);
#if CLOCK
    long long t1 = clock64();
    *(long long*)(out + 2) = t0;      // 8-byte aligned: words 2-3 and 4-5
    *(long long*)(out + 4) = t1;
#endif
    out[0] = (a - base) / 4;
}
#endif

#ifdef L2_UNROLL
extern "C" __global__ void __launch_bounds__(256) l2_read(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                                          unsigned* __restrict__ workgroups_done, unsigned passes,
                                                          unsigned n_vec, unsigned mask,
                                                          unsigned shift) {
    uint4 acc[SUMS];
#pragma unroll
    for (int k = 0; k < SUMS; k++) acc[k] = make_uint4(0, 0, 0, 0);
    const unsigned span = n_vec / gridDim.x, lane = blockDim.x;
    for (unsigned pass = 0; pass < passes; pass++) {
        const unsigned base = (blockIdx.x + pass * shift) * span + threadIdx.x;
        for (unsigned i = 0; i < span; i += lane * L2_UNROLL)
#pragma unroll
            for (int u = 0; u < L2_UNROLL; u++) add(acc[u % SUMS], l2_load(src + ((base + i + u * lane) & mask)));
    }
    dst[blockIdx.x * blockDim.x + threadIdx.x] = total(acc, SUMS);
    if (threadIdx.x == 0) atomicAdd(workgroups_done, 1u);     // workloads/witness.py
}
#endif

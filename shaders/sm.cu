// Per-SM maps for CUDA and HIP (peakbench/workloads/sm.py holds the contract's host side; the
// same as shaders/sm.comp). Every workgroup notes the unit it ran on (CUDA %smid, HIP __smid())
// and that unit's cycle counter (clock64) after a barrier before and after its timed work, in
// rec[6 b .. 6 b + 5] = unit, 0, start (low word, high word), end (low, high).
// CHASE 0, sm.fp32: each thread advances ACC float accumulators by UNROLL steps x = fma(x, b, c)
// a loop iteration, from x = t % 1024 + k (t its index in the grid, k the accumulator) with
// b = c = 1 given at launch (as their bits),
// and stores their sum at sink[t]:
//   ops per workgroup = blockDim * iterations * UNROLL * ACC * 2
// CHASE 1, sm.l2_latency: thread 0 of each workgroup follows the chain next[] (word indices,
// a random cycle over one word a LINE) for iterations * STEPS dependent loads that skip the L1
// (ld.global.cg on CUDA, a nontemporal load on HIP), from node (b * 7919) mod nodes (its word
// index: node * LINE_WORDS), and stores
// the index it ended at in sink[b].
// Defines: CHASE; UNROLL, ACC (fp32); STEPS, LINE_WORDS (chase: words from one node to the next).
#if defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_runtime.h>
__device__ __forceinline__ unsigned unit_id() { return __smid(); }
__device__ __forceinline__ unsigned next_of(const unsigned* p) { return __builtin_nontemporal_load(p); }
#else
__device__ __forceinline__ unsigned unit_id() {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}
__device__ __forceinline__ unsigned next_of(const unsigned* p) { return __ldcg(p); }
#endif

__device__ __forceinline__ void note(unsigned* rec, long long t0, long long t1) {
    unsigned* r = rec + 6 * blockIdx.x;
    r[0] = unit_id();
    r[1] = 0;
    *(long long*)(r + 2) = t0;        // 8-byte aligned: words 2-3 and 4-5
    *(long long*)(r + 4) = t1;
}

#if CHASE
extern "C" __global__ void sm_map(unsigned* __restrict__ sink, unsigned* __restrict__ rec,
                                  const unsigned* __restrict__ next, unsigned iterations, unsigned nodes) {
    if (threadIdx.x != 0) return;
    unsigned i = (blockIdx.x * 7919u) % nodes * LINE_WORDS;
    long long t0 = clock64();
#pragma unroll 1
    for (unsigned r = 0; r < iterations; r++)
#pragma unroll
        for (int s = 0; s < STEPS; s++) i = next_of(next + i);
    long long t1 = clock64();
    sink[blockIdx.x] = i;
    note(rec, t0, t1);
}
#else
extern "C" __global__ void sm_map(float* __restrict__ sink, unsigned* __restrict__ rec, unsigned b_bits,
                                  unsigned c_bits, unsigned iterations) {
    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    const float b = __uint_as_float(b_bits), c = __uint_as_float(c_bits);
    float acc[ACC];
#pragma unroll
    for (int k = 0; k < ACC; k++) acc[k] = (float)((t % 1024u) + k);
    __syncthreads();
    long long t0 = clock64();
#pragma unroll 1
    for (unsigned i = 0; i < iterations; i++)
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
#pragma unroll
            for (int k = 0; k < ACC; k++) acc[k] = fmaf(acc[k], b, c);
    __syncthreads();
    long long t1 = clock64();
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < ACC; k++) sum += acc[k];
    sink[t] = sum;
    if (threadIdx.x == 0) note(rec, t0, t1);
}
#endif

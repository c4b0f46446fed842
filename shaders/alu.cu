// Vector-ALU peaks for CUDA and HIP: one source, the contract of peakbench/catalog/alu_reference.py
// (the same as shaders/alu_fma.comp and alu_dot4x8.spvasm), so one host reference checks all.
// Each thread advances ACC independent accumulators of WIDTH scalar lanes, UNROLL steps per loop
// iteration, and stores every accumulator at out[(gid * ACC + k) * WIDTH + lane]:
//   ops per thread = iterations * UNROLL * ACC * ops_per_step   (catalog/compute.py)
// Lanes travel in E, the element one instruction works on: double, float, long long, int, short; __half2 and
// bfloat162 hold two lanes (HFMA2 / HFMA2.BF16: 4 ops); dot4x8 packs four 8-bit lanes in an int
// (DP4A: 8 ops). Steps: floats x = fma(x, b, c); integers x = x * b + c; dot4x8 x = x + dot(x, b).
// Defines: E, STEP_DOT4X8, VEC (elements per accumulator), ACC, UNROLL; SEEDS, the seed rows
// (workloads/alu.py defines it).
#if defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_fp16.h>
#include <hip/hip_bf16.h>
typedef __hip_bfloat162 bfloat162;
#if defined(__GFX11__) || defined(__GFX12__)     // RDNA3/4: the mixed-sign dot, both signed here
#define DOT4(a, b, c) __builtin_amdgcn_sudot4(true, (a), true, (b), (c), false)
#else
#define DOT4(a, b, c) __builtin_amdgcn_sdot4((a), (b), (c), false)
#endif
#else
#include <cuda_fp16.h>
#include <cuda_bf16.h>
typedef __nv_bfloat162 bfloat162;
#define DOT4(a, b, c) __dp4a((a), (b), (c))
#endif

__device__ __forceinline__ double step(double x, double b, double c) { return fma(x, b, c); }
__device__ __forceinline__ float step(float x, float b, float c) { return fmaf(x, b, c); }
__device__ __forceinline__ __half2 step(__half2 x, __half2 b, __half2 c) { return __hfma2(x, b, c); }
__device__ __forceinline__ bfloat162 step(bfloat162 x, bfloat162 b, bfloat162 c) { return __hfma2(x, b, c); }
__device__ __forceinline__ short step(short x, short b, short c) { return (short)(x * b + c); }
// 64-bit wraps through unsigned arithmetic (signed overflow is undefined in C++); NVIDIA and AMD
// have no 64-bit multiplier, so each step becomes 32-bit pieces (IMAD.WIDE.U32 + IMAD, v_mad_u64_u32).
__device__ __forceinline__ long long step(long long x, long long b, long long c) {
    return (long long)((unsigned long long)x * (unsigned long long)b + (unsigned long long)c);
}
#if STEP_DOT4X8
__device__ __forceinline__ int step(int x, int b, int) { return DOT4(x, b, x); }
#else
__device__ __forceinline__ int step(int x, int b, int c) { return x * b + c; }
#endif

extern "C" __global__ void alu(E* __restrict__ out, const E* __restrict__ in, unsigned* __restrict__ workgroups_done,
                               unsigned iterations) {
    const unsigned gid = blockIdx.x * blockDim.x + threadIdx.x;
    // Input: SEEDS seed rows of VEC elements, then b and c rows (dot4x8: b only).
    const E* b = in + SEEDS * VEC;
    const E* c = b + VEC;
    E acc[ACC][VEC], bb[VEC], cc[VEC];
#pragma unroll
    for (int v = 0; v < VEC; v++) {
        bb[v] = b[v];
        cc[v] = STEP_DOT4X8 ? bb[v] : c[v];
    }
#pragma unroll
    for (int k = 0; k < ACC; k++)
#pragma unroll
        for (int v = 0; v < VEC; v++) acc[k][v] = in[((gid * ACC + k) % SEEDS) * VEC + v];
#pragma unroll 1      // one iteration a loop trip: the work guard counts its body exactly
    for (unsigned i = 0; i < iterations; i++)
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
#pragma unroll
            for (int k = 0; k < ACC; k++)
#pragma unroll
                for (int v = 0; v < VEC; v++) acc[k][v] = step(acc[k][v], bb[v], cc[v]);
#pragma unroll
    for (int k = 0; k < ACC; k++)
#pragma unroll
        for (int v = 0; v < VEC; v++) out[(gid * ACC + k) * VEC + v] = acc[k][v];
    if (threadIdx.x == 0) atomicAdd(workgroups_done, 1u);     // workloads/witness.py
}

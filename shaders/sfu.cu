// Special-function throughput for CUDA and HIP: one source, the contract of
// peakbench/workloads/sfu.py (the same as shaders/sfu.comp), so one host reference checks all.
// Each thread advances ACC independent chains, UNROLL steps per loop iteration; a step is
//   t = fma(t, m, d)                (once per step for all chains: a target that moves)
//   x[k] = fma(F(x[k]), a[k], t)    (per chain: one function result, counted as 1 op)
// and stores every chain at out[gid * ACC + k]:
//   results per thread = iterations * UNROLL * ACC             (catalog/sfu.py)
// F is the hardware's approximate path: PTX rcp/rsqrt/sqrt/ex2/lg2/sin.approx.ftz.f32 (MUFU),
// AMDGPU v_rcp/v_rsq/v_sqrt/v_exp/v_log/v_sin_f32 (v_sin_f32 takes revolutions: x / 2pi first).
// Defines: one of FN_RCP, FN_RSQRT, FN_SQRT, FN_EXP2, FN_LOG2, FN_SIN; ACC, UNROLL; SEEDS, the
// seed count (workloads/sfu.py defines it).
#if defined(__HIP_PLATFORM_AMD__)
#define APPROX(name, ptx, amd) \
    __device__ __forceinline__ float name(float x) { return amd; }
#else
#define APPROX(name, ptx, amd) \
    __device__ __forceinline__ float name(float x) { float y; asm(ptx " %0, %1;" : "=f"(y) : "f"(x)); return y; }
#endif

#if defined(FN_RCP)
APPROX(fn, "rcp.approx.ftz.f32", __builtin_amdgcn_rcpf(x))
#elif defined(FN_RSQRT)
APPROX(fn, "rsqrt.approx.ftz.f32", __builtin_amdgcn_rsqf(x))
#elif defined(FN_SQRT)
APPROX(fn, "sqrt.approx.ftz.f32", __builtin_amdgcn_sqrtf(x))
#elif defined(FN_EXP2)
APPROX(fn, "ex2.approx.ftz.f32", __builtin_amdgcn_exp2f(x))
#elif defined(FN_LOG2)
APPROX(fn, "lg2.approx.ftz.f32", __builtin_amdgcn_logf(x))
#elif defined(FN_SIN)
APPROX(fn, "sin.approx.ftz.f32", __builtin_amdgcn_sinf(x * 0.15915494309189535f))
#else
#error "define one of FN_RCP, FN_RSQRT, FN_SQRT, FN_EXP2, FN_LOG2, FN_SIN"
#endif

extern "C" __global__ void sfu(float* __restrict__ out, const float* __restrict__ in,
                               unsigned* __restrict__ workgroups_done, unsigned iterations) {
    const unsigned gid = blockIdx.x * blockDim.x + threadIdx.x;
    // Input: SEEDS seeds, ACC multipliers a[k], then t, m, d.
    const float* a = in + SEEDS;
    const float* tmd = a + ACC;
    float x[ACC], aa[ACC];
    float t = tmd[0];
    const float m = tmd[1], d = tmd[2];
#pragma unroll
    for (int k = 0; k < ACC; k++) {
        x[k] = in[(gid * ACC + k) % SEEDS];
        aa[k] = a[k];
    }
#pragma unroll 1      // one iteration a loop trip: the work guard counts its body exactly
    for (unsigned i = 0; i < iterations; i++)
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            t = fmaf(t, m, d);
#pragma unroll
            for (int k = 0; k < ACC; k++) x[k] = fmaf(fn(x[k]), aa[k], t);
        }
#pragma unroll
    for (int k = 0; k < ACC; k++) out[gid * ACC + k] = x[k];
    if (threadIdx.x == 0) atomicAdd(workgroups_done, 1u);     // workloads/witness.py
}

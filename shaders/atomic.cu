// Atomic-add throughput for CUDA and HIP: one source, the contract of peakbench/workloads/atomic.py
// (the same as shaders/atomic.comp). Each thread adds v = gid % 5 + 1 to its address UNROLL times
// per loop iteration:
//   atomic adds per thread = iterations * UNROLL                 (catalog/atomic.py)
// Addresses: global memory, out[base + gid] (each thread its own) or out[base + gid / WARP]
// (CONTENDED: one per warp/wavefront); SHARED: a shared-memory word per thread, s[threadIdx.x],
// stored to out[base + gid] at the end. `base` places the words where the workload chose (at a
// 2 MiB boundary). The sums are unused, so the compiler may issue the reduction form (RED on NVIDIA).
// Defines: IS_FLOAT (f32, else u32), SHARED, CONTENDED, WARP, LOCAL (the block size), UNROLL.
#if IS_FLOAT
typedef float T;
#else
typedef unsigned T;
#endif

#if defined(__HIP_PLATFORM_AMD__) && IS_FLOAT
// HIP's atomicAdd(float) on global memory is a compare-and-swap loop unless the build allows
// unsafe FP atomics; unsafeAtomicAdd issues the hardware's float add (global_atomic_add_f32).
#define ADD(p, v) unsafeAtomicAdd((p), (v))
#else
#define ADD(p, v) atomicAdd((p), (v))
#endif

extern "C" __global__ void atomic(T* __restrict__ out, unsigned* __restrict__ workgroups_done, unsigned iterations,
                                   unsigned base) {
    out += base;
    const unsigned gid = blockIdx.x * blockDim.x + threadIdx.x;
    const T v = (T)(gid % 5 + 1);
#if SHARED
    __shared__ T s[LOCAL];
    T* at = s + threadIdx.x;
    *at = 0;
#else
    T* at = out + (CONTENDED ? gid / WARP : gid);
#endif
#pragma unroll 1      // one iteration a loop trip: the work guard counts its body exactly
    for (unsigned i = 0; i < iterations; i++)
#pragma unroll
        for (int u = 0; u < UNROLL; u++) ADD(at, v);
#if SHARED
    out[gid] = *at;
#endif
    if (threadIdx.x == 0) atomicAdd(workgroups_done, 1u);     // workloads/witness.py
}

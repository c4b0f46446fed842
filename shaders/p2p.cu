// GPU-to-GPU copy for CUDA and HIP (transfer.p2p, variant kernel; peakbench/workloads/p2p.py):
// launched on the destination GPU, it reads the source GPU's memory through peer access and
// writes its own. 16-byte words, UNROLL loads in flight per thread before their stores (a
// peer's load latency is microseconds), the grid striding through n_vec words; one pass a launch.
#if defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_runtime.h>
#endif
#ifndef UNROLL
#define UNROLL 4
#endif

extern "C" __global__ void p2p_copy(const uint4* __restrict__ src, uint4* __restrict__ dst, unsigned int n_vec) {
    const unsigned int threads = gridDim.x * blockDim.x;
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (UNROLL - 1) * threads < n_vec; i += UNROLL * threads) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = src[i + u * threads];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) dst[i + u * threads] = v[u];
    }
    for (; i < n_vec; i += threads) dst[i] = src[i];
}

// The vendor GEMM's operands for CUDA and HIP, made on the device where they are used
// (peakbench/workloads/gemm.py, Operand): 32-bit word w of an operand is
//     ((hash(offset + w) & keep) | set) + add
// with keep, set and add taken for even or odd w (an FP64 element's two words differ), so every
// element is an exact value of its type with |x| in [0.5, 2) and random mantissa bits. The host
// makes the same words for the rows it checks. Grid-stride: any grid covers `words`.

#if defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_runtime.h>
#endif

__device__ __forceinline__ unsigned hash(unsigned x) {   // lowbias32, as mem.cu's fill
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
    return x;
}

extern "C" __global__ void gemm_fill(unsigned* __restrict__ dst, unsigned words, unsigned offset,
                                     unsigned keep0, unsigned set0, unsigned add0,
                                     unsigned keep1, unsigned set1, unsigned add1) {
    unsigned stride = gridDim.x * blockDim.x;
    for (unsigned w = blockIdx.x * blockDim.x + threadIdx.x; w < words; w += stride) {
        unsigned x = hash(offset + w);
        dst[w] = (w & 1u) ? ((x & keep1) | set1) + add1 : ((x & keep0) | set0) + add0;
    }
}

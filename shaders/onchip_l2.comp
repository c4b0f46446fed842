#version 450
// L2 read bandwidth, kernel family "l2" (peakbench/catalog/onchip.py), the contract of
// shaders/onchip.cu `l2_read`: the chunk read of mem_stream.comp (LAYOUT 0: workgroup w reads
// slice w + pass * shift of n_vec / workgroups vectors, its index wrapped at `mask`), UNROLL
// 16-byte loads in flight per invocation, every lane summed into SUMS partial sums, each
// invocation's total stored at dst[invocation]:
//   bytes read per dispatch = passes * n_vec * 16
// The working set (mask + 1 vectors) fits in the L2. The L1 is to be bypassed or defeated:
// the buffer is `coherent` (not restrict), so a load must see other invocations' writes at the
// device's coherence point, the L2 (NVIDIA: LDG.E.128.STRONG.GPU, as CUDA's ld.global.cg; the
// SASS in the evidence shows what the driver made of it), and the host rotates the slices
// (shift = workgroups | 1), so a workgroup's next slice is not one its own L1 just read.
// Defines: UNROLL, SUMS.
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0) in;
layout(push_constant) uniform Push { uint passes; uint n_vec; uint mask; uint shift; } push;
layout(std430, binding = 0) coherent readonly buffer Src { uvec4 src[]; };
layout(std430, binding = 1) restrict writeonly buffer Dst { uvec4 dst[]; };
layout(std430, binding = 2) buffer Launches { uint workgroups_done; };   // workloads/witness.py

void main() {
    uvec4 acc[SUMS];
    [[unroll]] for (uint k = 0; k < SUMS; k++) acc[k] = uvec4(0);
    uint span = push.n_vec / gl_NumWorkGroups.x, lane = gl_WorkGroupSize.x;
    for (uint pass = 0; pass < push.passes; pass++) {
        uint base = (gl_WorkGroupID.x + pass * push.shift) * span + gl_LocalInvocationID.x;
        for (uint i = 0; i < span; i += lane * UNROLL)
            [[unroll]] for (uint u = 0; u < UNROLL; u++)
                acc[u % SUMS] += src[(base + i + u * lane) & push.mask];
    }
    uvec4 sum = acc[0];
    [[unroll]] for (uint k = 1; k < SUMS; k++) sum += acc[k];
    dst[gl_GlobalInvocationID.x] = sum;
    if (gl_LocalInvocationIndex == 0) atomicAdd(workgroups_done, 1u);
}

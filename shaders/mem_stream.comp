#version 450
// Memory bandwidth, kernel family "stream" (peakbench/catalog/memory.py): 16-byte accesses,
// UNROLL in flight per thread, in the layout that measured fastest for each
// (PERFORMANCE_ANALYSIS.md, "The DRAM read reaches 98% of the datasheet; the board sets the rest"):
// - read: LAYOUT 2 (rows): the buffer as UNROLL rows of n_vec / UNROLL vectors; workgroup w
//   reads column w % columns of every row (columns = row / local_size), so the workgroups
//   running at once advance as UNROLL fronts through memory. `passes` is ignored: the host
//   dispatches passes * columns workgroups, short-lived and taken in order, so a fast compute
//   unit takes more of them and none waits for a slow one's share. Each workgroup stores its
//   column's total at dst[column].
//   LAYOUT 0 (chunk) and 1 (stride) are a grid small enough to be resident at once (two
//   workgroups per compute unit), PASSES sweeps in the shader (bytes per dispatch = passes *
//   n_vec * 16): workgroup g reads slice g + pass * shift of n_vec / workgroups vectors, its
//   index wrapped at `mask`, or the whole grid strides through the buffer. The fastest layout
//   differed between boards (the finding above), so all run and the fastest counts.
// - write, copy: one tile of local_size * UNROLL vectors per workgroup, workgroup w on tile w %
//   tiles, retiring in order, so the stores advance through memory as one front; the host
//   dispatches passes * tiles workgroups (n_vec * 16 bytes written a pass; copy counts read +
//   written). A tile comes round again a whole buffer later, long out of the L2.
// MODE 0 read: every lane of every vector is summed (a sum of only .x would let a compiler
//   narrow the 16-byte loads); each thread of the chunk and stride reads stores its sum, which
//   the host checks.
// MODE 1 write: v[i] = pattern(i); MODE 2 copy: dst[i] = src[i]; MODE 3 fill: src[i] =
// hash(i), the random-looking data every test reads (no compressible zeros); MODE 4 update:
// dst[i] += src[i] (two reads and a write), in the write's tiles.
// The stream runs the chunk with shift 0 and mask all ones: each workgroup rereads its own
// slice, a whole buffer of traffic later. The cache sweep (workloads/stream.py) runs it with mask =
// working set - 1 and shift = workgroups | 1: each pass the grid reads the next window of slices,
// so once the ring has as many slices as workgroups a line comes back one working set of traffic
// later (below, several workgroups read a slice in one pass, all inside the caches), and each
// workgroup (an odd step around a power-of-two ring) visits every slice, so its own L1 never
// holds its next one.
// The measured kernel (not the fill or the checks' reads) counts its workgroups as their first act,
// where the add waits behind none of the tile's traffic: workgroup w adds one to slot
// w % WITNESS_SLOTS, WITNESS_STRIDE words apart (workloads/witness.py: a write's 4 KiB tiles run
// about 10^9 a second, too many adds for one word).
// Defines: MODE, UNROLL, LAYOUT, SUMS, WITNESS_SLOTS and WITNESS_STRIDE. n_vec is a multiple of
// threads * UNROLL (the rows read: of local_size * UNROLL).
#extension GL_EXT_control_flow_attributes : require
#if MODE == 0 && LAYOUT == 2
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
// The read adds its UNROLL loads into SUMS partial sums. NVIDIA's Vulkan compiler (580.159.04,
// SM90, 16 loads) issues the loads ahead only with several sums, and spills with 16: 16 sums,
// 128 registers + 7 KiB shared spill, 20.8 TB/s from L1 and 4.68 from DRAM; 8 sums, 73 registers,
// 32.0 and 4.66; 4 sums, 41 registers, 32.0 and 4.54. CUDA's mem.cu keeps one sum per load: 8
// there read DRAM 1.8% slower
// (PERFORMANCE_ANALYSIS.md, "CUDA's stride read: ptxas keeps three loads in flight").
#ifndef SUMS
#define SUMS 8
#endif

layout(local_size_x_id = 0) in;
layout(push_constant) uniform Push { uint passes; uint n_vec; uint mask; uint shift; } push;
layout(std430, binding = 0) restrict readonly buffer Src { uvec4 src[]; };
#if MODE == 4
layout(std430, binding = 1) restrict buffer Dst { uvec4 dst[]; };
#else
layout(std430, binding = 1) restrict writeonly buffer Dst { uvec4 dst[]; };
#endif

#ifdef WITNESS_SLOTS
layout(std430, binding = 2) buffer Launches { uint workgroups_done[]; };   // workloads/witness.py
#endif

#if MODE == 0 && LAYOUT == 2
shared uvec4 part[gl_WorkGroupSize.x];          // a sum per subgroup: as many as invocations at worst
#endif

uint hash(uint x) {            // lowbias32 (Wellons): a bijection with good avalanche
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
    return x;
}

void main() {
    uint tid = gl_GlobalInvocationID.x;
#ifdef WITNESS_SLOTS
    if (gl_LocalInvocationIndex == 0)
        atomicAdd(workgroups_done[(gl_WorkGroupID.x % WITNESS_SLOTS) * WITNESS_STRIDE], 1u);
#endif
#if MODE == 3
    uint threads = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = tid; i < push.n_vec; i += threads)
        dst[i] = uvec4(hash(4 * i), hash(4 * i + 1), hash(4 * i + 2), hash(4 * i + 3));
#elif MODE == 0
    uvec4 acc[SUMS];
    [[unroll]] for (uint u = 0; u < SUMS; u++) acc[u] = uvec4(0);
#if LAYOUT == 0
    uint span = push.n_vec / gl_NumWorkGroups.x, lane = gl_WorkGroupSize.x;
    for (uint pass = 0; pass < push.passes; pass++) {
        uint base = (gl_WorkGroupID.x + pass * push.shift) * span + gl_LocalInvocationID.x;
        for (uint i = 0; i < span; i += lane * UNROLL)
            [[unroll]] for (uint u = 0; u < UNROLL; u++)
                acc[u % SUMS] += src[(base + i + u * lane) & push.mask];
    }
#elif LAYOUT == 1
    uint lane = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint pass = 0; pass < push.passes; pass++)
        for (uint i = 0; i < push.n_vec; i += lane * UNROLL)
            [[unroll]] for (uint u = 0; u < UNROLL; u++)
                acc[u % SUMS] += src[tid + i + u * lane];
#else
    uint row = push.n_vec / UNROLL, column = gl_WorkGroupID.x % (row / gl_WorkGroupSize.x);
    uint at = column * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    [[unroll]] for (uint u = 0; u < UNROLL; u++)
        acc[u % SUMS] += src[u * row + at];
#endif
    uvec4 sum = acc[0];
    [[unroll]] for (uint u = 1; u < SUMS; u++) sum += acc[u];
#if LAYOUT == 2
    sum = subgroupAdd(sum);                       // then one per subgroup, added by invocation 0
    if (subgroupElect()) part[gl_SubgroupID] = sum;
    barrier();
    if (gl_LocalInvocationID.x == 0) {
        uvec4 total = uvec4(0);
        for (uint s = 0; s < gl_NumSubgroups; s++) total += part[s];
        dst[column] = total;
    }
#else
    dst[tid] = sum;
#endif
#else
    uint tile = gl_WorkGroupID.x % (push.n_vec / (gl_WorkGroupSize.x * UNROLL));
    uint base = tile * gl_WorkGroupSize.x * UNROLL + gl_LocalInvocationID.x;
    [[unroll]] for (uint u = 0; u < UNROLL; u++) {
        uint j = base + u * gl_WorkGroupSize.x;
#if MODE == 1
        dst[j] = uvec4(j, j ^ 0x5bd1e995U, ~j, j * 2654435761U);
#elif MODE == 4
        dst[j] += src[j];
#else
        dst[j] = src[j];
#endif
    }
#endif
}

#version 450
// Per-SM maps on NVIDIA's Vulkan driver, the contract of shaders/sm.cu (peakbench/workloads/sm.py
// holds the host side): every workgroup notes its SM (gl_SMIDNV, VK_NV_shader_sm_builtins) and
// the SM's clock (clock2x32ARB, VK_KHR_shader_clock's subgroup clock) after a barrier before and
// after its timed work, in rec[6 w .. 6 w + 5] = SM, 0, start (low word, high word), end (low, high).
// CHASE 0, sm.fp32: each invocation advances ACC float accumulators by UNROLL steps
// x = fma(x, b, c) a loop iteration, from x = t % 1024 + k (t its index in the grid, k the
// accumulator) with b = c = 1 given at dispatch (as their bits), and stores their sum at sink[t]:
//   ops per workgroup = local size * iterations * UNROLL * ACC * 2
// CHASE 1, sm.l2_latency: invocation 0 follows the chain next[] (word indices, a random cycle over
// one word a LINE_WORDS) for iterations * STEPS dependent loads from `coherent` storage (served
// by the L2, as shaders/onchip_l2.comp's), from node (w * 7919) mod nodes, and stores the index it
// ended at in sink[w].
// Defines: CHASE; UNROLL, ACC (fp32); STEPS, LINE_WORDS (chase).
#extension GL_EXT_control_flow_attributes : require
#extension GL_NV_shader_sm_builtins : require
#extension GL_ARB_shader_clock : require
layout(local_size_x_id = 0) in;
layout(std430, binding = 1) restrict writeonly buffer Rec { uint rec[]; };

void note(uvec2 t0, uvec2 t1) {
    uint r = 6u * gl_WorkGroupID.x;
    rec[r] = gl_SMIDNV;
    rec[r + 1u] = 0u;
    rec[r + 2u] = t0.x; rec[r + 3u] = t0.y;
    rec[r + 4u] = t1.x; rec[r + 5u] = t1.y;
}

#if CHASE
layout(push_constant) uniform Push { uint iterations; uint nodes; } push;
layout(std430, binding = 0) restrict writeonly buffer Sink { uint sink[]; };
layout(std430, binding = 2) coherent readonly buffer Next { uint next[]; };

void main() {
    if (gl_LocalInvocationID.x != 0u) return;
    uint i = (gl_WorkGroupID.x * 7919u) % push.nodes * LINE_WORDS;
    uvec2 t0 = clock2x32ARB();
    [[dont_unroll]] for (uint r = 0u; r < push.iterations; r++)
        [[unroll]] for (uint s = 0u; s < STEPS; s++) i = next[i];
    uvec2 t1 = clock2x32ARB();
    sink[gl_WorkGroupID.x] = i;
    note(t0, t1);
}
#else
layout(push_constant) uniform Push { uint b; uint c; uint iterations; } push;
layout(std430, binding = 0) restrict writeonly buffer Sink { float sink[]; };

void main() {
    uint t = gl_GlobalInvocationID.x;
    float b = uintBitsToFloat(push.b), c = uintBitsToFloat(push.c), acc[ACC];
    [[unroll]] for (uint k = 0u; k < ACC; k++) acc[k] = float(t % 1024u + k);
    barrier();
    uvec2 t0 = clock2x32ARB();
    [[dont_unroll]] for (uint i = 0u; i < push.iterations; i++)
        [[unroll]] for (uint u = 0u; u < UNROLL; u++)
            [[unroll]] for (uint k = 0u; k < ACC; k++) acc[k] = fma(acc[k], b, c);
    barrier();
    uvec2 t1 = clock2x32ARB();
    float sum = 0.0;
    [[unroll]] for (uint k = 0u; k < ACC; k++) sum += acc[k];
    sink[t] = sum;
    if (gl_LocalInvocationID.x == 0u) note(t0, t1);
}
#endif

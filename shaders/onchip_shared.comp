#version 450
// Shared memory, kernel family "shared" (peakbench/catalog/onchip.py), the contract of
// shaders/onchip.cu (peakbench/workloads/onchip.py holds the host references and the defines).
// CHASE 0, memory.shared: each workgroup copies WINDOW + SLIDE vectors of 16 bytes from `src`
// into shared memory, then in each of `passes` passes invocation t (lane l = t % 32 of group
// g = t / 32) of workgroup w reads the UNROLL vectors s[o + l + 32u], u < UNROLL, with
// o = (p + g + w) & (SLIDE - 1): 32 consecutive lanes read 32 consecutive 16-byte vectors (no
// bank conflict), and the window moves each pass, so no load can be hoisted out of the pass
// loop. Every lane of every vector is added into SUMS partial sums; invocation t stores their
// total at dst[w * local_size + t]:
//   bytes read from shared memory per dispatch = passes * invocations * UNROLL * 16
// CHASE 1, latency.shared: the workgroup copies a random single cycle of CHASE_WORDS word
// indices from `src` into shared memory, then invocation 0 follows it for rounds * ROUND
// dependent loads (each loaded word is the next index), with CLOCK=1 between two reads of the
// subgroup clock (VK_KHR_shader_clock), stored at words 1-4 of `dst` after the final index.
// (Two nested loops: llvmpipe stops any one loop after 65535 iterations.)
// Defines: CHASE; UNROLL, SLIDE, SUMS (read); CHASE_WORDS, ROUND, CLOCK (chase).
#extension GL_EXT_control_flow_attributes : require
#if CHASE && CLOCK
#extension GL_ARB_shader_clock : require
#endif
layout(local_size_x_id = 0) in;

#if CHASE
layout(push_constant) uniform Push { uint rounds; uint start; } push;
layout(std430, binding = 0) restrict readonly buffer Next { uint next[]; };
layout(std430, binding = 1) restrict writeonly buffer Out { uint last[]; };
shared uint s[CHASE_WORDS];

void main() {
    for (uint i = gl_LocalInvocationID.x; i < CHASE_WORDS; i += gl_WorkGroupSize.x) s[i] = next[i];
    barrier();
    if (gl_LocalInvocationID.x != 0) return;
    uint i = push.start;
#if CLOCK
    uvec2 t0 = clock2x32ARB();
#endif
    for (uint r = 0; r < push.rounds; r++)
        for (uint n = 0; n < ROUND; n++) i = s[i];
#if CLOCK
    uvec2 t1 = clock2x32ARB();
    last[1] = t0.x; last[2] = t0.y; last[3] = t1.x; last[4] = t1.y;
#endif
    last[0] = i;
}
#else
#define WINDOW (32 * UNROLL)
layout(push_constant) uniform Push { uint passes; } push;
layout(std430, binding = 0) restrict readonly buffer Src { uvec4 src[]; };
layout(std430, binding = 1) restrict writeonly buffer Dst { uvec4 dst[]; };
layout(std430, binding = 2) buffer Launches { uint workgroups_done; };   // workloads/witness.py
shared uvec4 s[WINDOW + SLIDE];

void main() {
    for (uint i = gl_LocalInvocationID.x; i < WINDOW + SLIDE; i += gl_WorkGroupSize.x) s[i] = src[i];
    barrier();
    uint lane = gl_LocalInvocationID.x % 32, group = gl_LocalInvocationID.x / 32 + gl_WorkGroupID.x;
    uvec4 acc[SUMS];
    [[unroll]] for (uint k = 0; k < SUMS; k++) acc[k] = uvec4(0);
    for (uint p = 0; p < push.passes; p++) {
        uint at = ((p + group) & (SLIDE - 1)) + lane;
        [[unroll]] for (uint u = 0; u < UNROLL; u++) acc[u % SUMS] += s[at + 32 * u];
    }
    uvec4 sum = acc[0];
    [[unroll]] for (uint k = 1; k < SUMS; k++) sum += acc[k];
    dst[gl_GlobalInvocationID.x] = sum;
    if (gl_LocalInvocationIndex == 0) atomicAdd(workgroups_done, 1u);
}
#endif

#version 450
// Load latency, kernel family "chase" (peakbench/catalog/memory.py): one invocation follows a
// random single-cycle permutation (Sattolo) of nodes one stride apart, so every load depends on
// the one before and lands on a different cache line:
//   latency = GPU time / loads,  loads = rounds * ROUND (workloads/chase.py defines it)
// (Two nested loops: llvmpipe stops any one loop after 65535 iterations.)
// The loads are ordinary storage-buffer loads (the vector-memory path a compute kernel uses);
// the buffer is readonly so drivers may cache it as they cache any read-only data. The final
// index is stored so the chain cannot be removed; the host checks it against the permutation.
// With CLOCK=1 the loop is bracketed by the subgroup clock (VK_KHR_shader_clock: the core's own
// cycle counter), stored after the index, so cycles per load need no outside clock reading.
#if CLOCK
#extension GL_ARB_shader_clock : require
#endif
layout(local_size_x = 1) in;
layout(push_constant) uniform Push { uint rounds; uint start; } push;
layout(std430, binding = 0) restrict readonly buffer Next { uint next[]; };
layout(std430, binding = 1) restrict writeonly buffer Out { uint last[]; };

void main() {
    uint i = push.start;
#if CLOCK
    uvec2 t0 = clock2x32ARB();
#endif
    for (uint r = 0; r < push.rounds; r++)
        for (uint n = 0; n < ROUND; n++) i = next[i];
#if CLOCK
    uvec2 t1 = clock2x32ARB();
    last[1] = t0.x; last[2] = t0.y; last[3] = t1.x; last[4] = t1.y;
#endif
    last[0] = i;
}

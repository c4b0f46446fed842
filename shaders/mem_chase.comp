#version 450
// Load latency, kernel family "chase" (peakbench/catalog/memory.py): one invocation follows a
// random single-cycle permutation (Sattolo) of nodes one stride apart, so every load depends on
// the one before and lands on a different cache line:
//   latency = GPU time / loads,  loads = rounds * ROUND (workloads/chase.py defines it)
// (Two nested loops: llvmpipe stops any one loop after 65535 iterations.)
// POINTER=1, where the device has bufferDeviceAddress: a true pointer chase. Each node's first 8
// bytes hold the next node's address (the host writes them from the buffer's device address,
// pushed as `base`), so a load's value is the next load's address: no index arithmetic or bounds
// check between loads (GL_EXT_buffer_reference). POINTER=0: an index chase through ordinary
// storage-buffer loads (the vector-memory path a compute kernel uses); the buffer is readonly so
// drivers may cache it as they cache any read-only data.
// Either way the final word index is stored so the chain cannot be removed; the host checks it
// against the permutation. With CLOCK=1 the loop is bracketed by the subgroup clock
// (VK_KHR_shader_clock: the core's own cycle counter), stored after the index, so cycles per load
// need no outside clock reading.
#if CLOCK
#extension GL_ARB_shader_clock : require
#endif
#if POINTER
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
layout(buffer_reference) buffer Node;         // declared first: a node holds a reference to the next
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Node { Node next; };
layout(push_constant) uniform Push { uint rounds; uint start; uvec2 base; } push;
#else
layout(push_constant) uniform Push { uint rounds; uint start; } push;
layout(std430, binding = 0) restrict readonly buffer Next { uint next[]; };
#endif
layout(local_size_x = 1) in;
layout(std430, binding = 1) restrict writeonly buffer Out { uint last[]; };

void main() {
#if POINTER
    uint carry;
    uint low = uaddCarry(push.base.x, push.start * 4u, carry);
    Node i = Node(uvec2(low, push.base.y + carry));
#else
    uint i = push.start;
#endif
#if CLOCK
    uvec2 t0 = clock2x32ARB();
#endif
    for (uint r = 0; r < push.rounds; r++)
#if POINTER
        for (uint n = 0; n < ROUND; n++) i = i.next;
#else
        for (uint n = 0; n < ROUND; n++) i = next[i];
#endif
#if CLOCK
    uvec2 t1 = clock2x32ARB();
    last[1] = t0.x; last[2] = t0.y; last[3] = t1.x; last[4] = t1.y;
#endif
#if POINTER
    uint borrow;
    last[0] = usubBorrow(uvec2(i).x, push.base.x, borrow) / 4u;   // the word index (chains < 4 GiB)
#else
    last[0] = i;
#endif
}

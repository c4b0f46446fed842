#version 450
// Atomic-add throughput, kernel family "atomic" (peakbench/catalog/atomic.py): the contract of
// peakbench/workloads/atomic.py, the same as shaders/atomic.cu. Each thread adds v = gid % 5 + 1
// to its address UNROLL times per loop iteration:
//   atomic adds per thread = iterations * UNROLL
// Addresses: the storage buffer's words[base + gid] (each invocation its own) or
// words[base + gid / WARP] (CONTENDED: one per subgroup of WARP invocations); SHARED: a shared word
// per invocation, stored to words[base + gid] at the end. `base` places the words where the
// workload chose (at a 2 MiB boundary). Float adds need VK_EXT_shader_atomic_float (its buffer or shared
// float32 add feature). Defines: IS_FLOAT, SHARED, CONTENDED, WARP, LOCAL (the workgroup size), UNROLL.
#extension GL_EXT_control_flow_attributes : require
#if IS_FLOAT
#extension GL_EXT_shader_atomic_float : require
#define T float
#else
#define T uint
#endif

layout(local_size_x_id = 0) in;
layout(push_constant) uniform Push { uint iterations; uint base; } push;
layout(std430, binding = 0) buffer Out { T words[]; };
layout(std430, binding = 1) buffer Launches { uint workgroups_done; };   // workloads/witness.py
#if SHARED
shared T s[LOCAL];
#endif

void main() {
    uint gid = gl_GlobalInvocationID.x, lid = gl_LocalInvocationID.x;
    T v = T(gid % 5u + 1u);
#if SHARED
    s[lid] = T(0);
    [[dont_unroll]] for (uint i = 0; i < push.iterations; i++) {
        [[unroll]] for (uint u = 0; u < UNROLL; u++) atomicAdd(s[lid], v);
    }
    words[push.base + gid] = s[lid];
#else
    uint at = push.base + (CONTENDED != 0 ? gid / WARP : gid);
    [[dont_unroll]] for (uint i = 0; i < push.iterations; i++) {
        [[unroll]] for (uint u = 0; u < UNROLL; u++) atomicAdd(words[at], v);
    }
#endif
    if (gl_LocalInvocationIndex == 0) atomicAdd(workgroups_done, 1u);
}

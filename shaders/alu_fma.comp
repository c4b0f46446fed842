#version 450
// Vector-ALU peak, kernel family "fma" (peakbench/catalog/compute.py).
// Each thread advances ACC independent chains of type T, UNROLL steps per loop iteration:
//   ops per thread = iterations * UNROLL * ACC * 2 * lanes(T)        (an FMA is 2 ops per lane)
// Floats step x = fma(x, b, c), integers x = x * b + c. b, c and the seeds come from a buffer so
// nothing is a compile-time constant, and every accumulator is stored, so no step can be dropped.
// (A compiler could in principle compose UNROLL integer steps into one multiply-add, since
// wrapping arithmetic is a ring; such a kernel would report more than the ALU's peak. x * x + c
// cannot be composed, but it forgets its seed within a few steps, so a check of the output could
// not tell whether the steps ran, and NVIDIA runs it 19% slower on int16: see
// PERFORMANCE_ANALYSIS.md, "int16 runs on the 32-bit multiply-add".) Defines: T, IS_FLOAT, ACC,
// UNROLL; SEEDS, the seed rows (workloads/alu.py defines it).
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
layout(push_constant) uniform Push { uint iterations; } push;
layout(std430, binding = 0) writeonly buffer Out { T result[]; };
layout(std430, binding = 1) readonly buffer In { T seeds[SEEDS]; T b; T c; };
layout(std430, binding = 2) buffer Launches { uint workgroups_done; };   // workloads/witness.py

void main() {
    uint gid = gl_GlobalInvocationID.x;
    T b_ = b, c_ = c;
    T acc[ACC];
    [[unroll]] for (uint k = 0; k < ACC; k++) acc[k] = seeds[(gid * ACC + k) % SEEDS];
    [[dont_unroll]] for (uint i = 0; i < push.iterations; i++) {
        [[unroll]] for (uint u = 0; u < UNROLL; u++) {
            [[unroll]] for (uint k = 0; k < ACC; k++) {
#if IS_FLOAT
                acc[k] = fma(acc[k], b_, c_);
#else
                acc[k] = acc[k] * b_ + c_;
#endif
            }
        }
    }
    [[unroll]] for (uint k = 0; k < ACC; k++) result[gid * ACC + k] = acc[k];
    if (gl_LocalInvocationIndex == 0) atomicAdd(workgroups_done, 1u);
}

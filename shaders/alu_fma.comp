#version 450
// Vector-ALU peak, kernel family "fma" (peakbench/catalog/compute.py).
// Each thread advances ACC independent chains of type T, UNROLL steps per loop iteration:
//   ops per thread = iterations * UNROLL * ACC * 2 * lanes(T)        (an FMA is 2 ops per lane)
// Floats step x = fma(x, b, c). Integers step x = x * x + c by default: an affine integer step
// could in principle be folded by a compiler into one multiply-add per UNROLL steps (wrapping
// arithmetic is a ring), the square cannot. AFFINE=1 selects x * b + c, which NVIDIA's driver
// runs at the full IMAD rate on 16-bit integers where the square does not (PERFORMANCE_ANALYSIS.md);
// a folded chain would show as a rate above the ALU's peak. b, c and the seeds come from a buffer
// so nothing is a compile-time constant, and every chain feeds the stored sum.
// Defines: T, IS_FLOAT, AFFINE, ACC, UNROLL.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
layout(push_constant) uniform Push { uint iterations; } push;
layout(std430, binding = 0) writeonly buffer Out { T result[]; };
layout(std430, binding = 1) readonly buffer In { T seeds[256]; T b; T c; };

void main() {
    uint gid = gl_GlobalInvocationID.x;
    T b_ = b, c_ = c;
    T acc[ACC];
    [[unroll]] for (uint k = 0; k < ACC; k++) acc[k] = seeds[(gid * ACC + k) % 256];
    for (uint i = 0; i < push.iterations; i++) {
        [[unroll]] for (uint u = 0; u < UNROLL; u++) {
            [[unroll]] for (uint k = 0; k < ACC; k++) {
#if IS_FLOAT
                acc[k] = fma(acc[k], b_, c_);
#elif AFFINE
                acc[k] = acc[k] * b_ + c_;
#else
                acc[k] = acc[k] * acc[k] + c_;
#endif
            }
        }
    }
    T sum = acc[0];
    [[unroll]] for (uint k = 1; k < ACC; k++) sum += acc[k];
    result[gid] = sum;
}

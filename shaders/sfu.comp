#version 450
// Special-function throughput, kernel family "sfu" (peakbench/catalog/sfu.py): the contract of
// peakbench/workloads/sfu.py, the same as shaders/sfu.cu. Each thread advances ACC independent
// chains, UNROLL steps per loop iteration; a step is
//   t = fma(t, m, d)                (once per step for all chains: a target that moves)
//   x[k] = fma(F(x[k]), a[k], t)    (per chain: one function result, counted as 1 op)
//   results per thread = iterations * UNROLL * ACC
// F is GLSL's 1/x, inversesqrt, sqrt, exp2, log2 or sin, at the precision Vulkan allows them
// (whatever the driver emits for it is in the evidence). Defines: one of FN_RCP, FN_RSQRT,
// FN_SQRT, FN_EXP2, FN_LOG2, FN_SIN; ACC, UNROLL; SEEDS, the seed count (workloads/sfu.py).
#extension GL_EXT_control_flow_attributes : require

#if defined(FN_RCP)
#define F(x) (1.0 / (x))
#elif defined(FN_RSQRT)
#define F(x) inversesqrt(x)
#elif defined(FN_SQRT)
#define F(x) sqrt(x)
#elif defined(FN_EXP2)
#define F(x) exp2(x)
#elif defined(FN_LOG2)
#define F(x) log2(x)
#elif defined(FN_SIN)
#define F(x) sin(x)
#else
#error "define one of FN_RCP, FN_RSQRT, FN_SQRT, FN_EXP2, FN_LOG2, FN_SIN"
#endif

layout(local_size_x_id = 0) in;
layout(push_constant) uniform Push { uint iterations; } push;
layout(std430, binding = 0) writeonly buffer Out { float result[]; };
// In: SEEDS seeds, ACC multipliers a[k], then t0, m, d (one unsized array: a sized one would
// share its decorated type with the chains' local arrays, which SPIR-V forbids).
layout(std430, binding = 1) readonly buffer In { float data[]; };
layout(std430, binding = 2) buffer Launches { uint workgroups_done; };   // workloads/witness.py

void main() {
    uint gid = gl_GlobalInvocationID.x;
    float x[ACC], aa[ACC];
    float t = data[SEEDS + ACC], m = data[SEEDS + ACC + 1], d = data[SEEDS + ACC + 2];
    [[unroll]] for (uint k = 0; k < ACC; k++) {
        x[k] = data[(gid * ACC + k) % SEEDS];
        aa[k] = data[SEEDS + k];
    }
    [[dont_unroll]] for (uint i = 0; i < push.iterations; i++) {
        [[unroll]] for (uint u = 0; u < UNROLL; u++) {
            t = fma(t, m, d);
            [[unroll]] for (uint k = 0; k < ACC; k++) x[k] = fma(F(x[k]), aa[k], t);
        }
    }
    [[unroll]] for (uint k = 0; k < ACC; k++) result[gid * ACC + k] = x[k];
    if (gl_LocalInvocationIndex == 0) atomicAdd(workgroups_done, 1u);
}

#version 450
// Matrix-unit peak through VK_KHR_cooperative_matrix, kernel family "mma"
// (peakbench/catalog/matrix.py, contract in peakbench/catalog/matrix_reference.py).
// Each subgroup keeps A (M x K), B1, B2 (K x N) and ACC accumulator tiles (M x N) in registers and
// takes UNROLL steps per loop iteration, alternating C = A*B1 + C and C = A*B2 + C:
//   ops per subgroup = iterations * UNROLL * ACC * 2 * M * N * K
// The operands come from buffers (B2 = -B1 when timed, B1 when verified), and the tiles' sum is
// stored, so no step can be dropped. Defines: A_T, C_T, M, N, K, ACC, UNROLL (even), and
// WORKGROUP_SCOPE: 0 for subgroup-scope tiles (one tile set per subgroup), 1 for the whole
// workgroup sharing one tile set (VK_NV_cooperative_matrix2's workgroup scope).
// BF16 and FP8 variants are this module with the 16-bit float type rewritten (vulkan/coopmat.py).
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
layout(push_constant) uniform Push { uint iterations; } push;
layout(std430, binding = 0) writeonly buffer Out { C_T result[]; };
layout(std430, binding = 1) readonly buffer Operands { A_T ab[]; };
layout(std430, binding = 2) readonly buffer Accumulators { C_T c0[]; };
layout(std430, binding = 3) buffer Launches { uint workgroups_done; };   // workloads/witness.py

#define ROW gl_CooperativeMatrixLayoutRowMajor
#if WORKGROUP_SCOPE
#define TILE(use, T, R, C) coopmat<T, gl_ScopeWorkgroup, R, C, use>
#else
#define TILE(use, T, R, C) coopmat<T, gl_ScopeSubgroup, R, C, use>
#endif

void main() {
#if WORKGROUP_SCOPE
    uint owner = gl_WorkGroupID.x;
#else
    uint owner = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
#endif
    TILE(gl_MatrixUseA, A_T, M, K) a;
    TILE(gl_MatrixUseB, A_T, K, N) b1;   // one declarator per line: glslang 13 loses the
    TILE(gl_MatrixUseB, A_T, K, N) b2;   // matrix use of the second one
    coopMatLoad(a, ab, 0, K, ROW);
    coopMatLoad(b1, ab, M * K, N, ROW);
    coopMatLoad(b2, ab, M * K + K * N, N, ROW);
    TILE(gl_MatrixUseAccumulator, C_T, M, N) acc[ACC];
    [[unroll]] for (uint k = 0; k < ACC; k++) coopMatLoad(acc[k], c0, k * M * N, N, ROW);
    for (uint i = 0; i < push.iterations; i++) {
        [[unroll]] for (uint u = 0; u < UNROLL; u += 2) {
            [[unroll]] for (uint k = 0; k < ACC; k++) acc[k] = coopMatMulAdd(a, b1, acc[k]);
            [[unroll]] for (uint k = 0; k < ACC; k++) acc[k] = coopMatMulAdd(a, b2, acc[k]);
        }
    }
    [[unroll]] for (uint k = 1; k < ACC; k++) acc[0] = acc[0] + acc[k];
    coopMatStore(acc[0], result, owner * M * N, N, ROW);
    if (gl_LocalInvocationIndex == 0) atomicAdd(workgroups_done, 1u);
}

// Tensor-core peaks through warpgroup-level wgmma.mma_async (sm_90a only), under the contract of
// peakbench/catalog/matrix_reference.py. A block of WARPGROUPS warpgroups (128 threads each) copies
// A (64 x K), B1 and B2 (K x N) from the operand buffer into shared memory once; each warpgroup
// then keeps ACC accumulator sets of 64 x N in registers, starting from C0_k, and each loop
// iteration issues UNROLL steps per set, alternating D_k = A*B1 + D_k and D_k = A*B2 + D_k with
// both operands read from shared memory through matrix descriptors. The warpgroup stores
// sum_k D_k as output tile `warpgroup`:
//   ops per warpgroup = iterations * UNROLL * ACC * 2 * 64 * N * K      (catalog/matrix.py)
// One form per instruction below (FORM names its struct); each form's comment gives 2*64*N*K.
// Defines: FORM, ACC, UNROLL (even), WARPGROUPS.
//
// Sparse forms (wgmma.mma_async.sp) take A 2:4 structured-sparse: the buffer holds A compressed,
// 64 x K/2 (KA), then B1, B2 (K x N), then one 32-bit metadata word that every thread passes as
// its sp-meta with sparsity selector 0 (matrix_reference.SparseInputs: the same 2:4 choice in every
// group, so the word is the same whichever threads the selector names). Their K is the logical
// K, so 2*64*N*K counts the dense-equivalent ops, zeros included, as vendor sparse peaks do.
//
// Shared-memory layout: K-major without swizzle, 16-byte core-matrix columns along K: a 64 x KA
// A holds 32 bytes of K a row (two columns) in every form, a B 32 bytes (dense) or 64 (sparse,
// four columns). Core matrix (r / 8, byte / 16) of an operand with C columns (B is stored
// transposed, N x K) is 128 contiguous bytes at ((r / 8) * C + byte / 16) * 128, row r % 8 at
// 16 * (r % 8). So the descriptor's leading-dimension offset (between K columns) is 128 bytes and
// its stride offset (between 8-row groups) 128 * C bytes.
// Accumulator fragment (PTX ISA, "wgmma register fragment for D"): warp w of the warpgroup holds
// rows 16 w .. 16 w + 15; element i of lane l is row 16 w + l / 4 + 8 * ((i / 2) % 2), column
// 8 * (i / 4) + 2 * (l % 4) + i % 2. FP16 accumulators pack elements 2j, 2j + 1 in register j.

typedef unsigned long long u64;

// "%0, ..., %63" and "%64, ..., %127": accumulator operand numbers of the asm statements.
#define OPS_0_63                                                                                    \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                        \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "              \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "              \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define OPS_64_127                                                                                  \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "              \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "              \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "  \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define C8(c, i) c(d[i]), c(d[i + 1]), c(d[i + 2]), c(d[i + 3]), c(d[i + 4]), c(d[i + 5]), c(d[i + 6]), c(d[i + 7])
#define C64(c, i) C8(c, i), C8(c, i + 8), C8(c, i + 16), C8(c, i + 24), C8(c, i + 32), C8(c, i + 40), \
                  C8(c, i + 48), C8(c, i + 56)

// A form: the instruction, its accumulator registers (128 32-bit or 64 packed FP16 pairs for
// N = 256), and the immediates after scale-d (scale-a, scale-b, and for FP16/BF16 the K-major
// transpose flags; none for integers). scale-d is 1: every step accumulates.
#define WGMMA_128(name, k, opbytes, reg, c, acc_kind, instr, imm)                                      \
    struct name {                                                                                       \
        static constexpr int N = 256, K = k, KA = k, OPB = opbytes, NREG = 128;                         \
        static constexpr bool SPARSE = false;                                                           \
        typedef reg R;                                                                                  \
        typedef acc_kind Acc;                                                                           \
        __device__ static void mma(R (&d)[NREG], u64 a, u64 b, unsigned) {                              \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" instr " {" OPS_0_63 ", "        \
                         OPS_64_127 "}, %128, %129, p" imm ";\n}\n"                                     \
                         : C64(c, 0), C64(c, 64) : "l"(a), "l"(b), "r"(1));                             \
        }                                                                                               \
    };
#define WGMMA_64(name, k, opbytes, reg, c, acc_kind, instr, imm)                                       \
    struct name {                                                                                       \
        static constexpr int N = 256, K = k, KA = k, OPB = opbytes, NREG = 64;                          \
        static constexpr bool SPARSE = false;                                                           \
        typedef reg R;                                                                                  \
        typedef acc_kind Acc;                                                                           \
        __device__ static void mma(R (&d)[NREG], u64 a, u64 b, unsigned) {                              \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" instr " {" OPS_0_63              \
                         "}, %64, %65, p" imm ";\n}\n"                                                  \
                         : C64(c, 0) : "l"(a), "l"(b), "r"(1));                                         \
        }                                                                                               \
    };

// A sparse form: the same, with the metadata word e and sparsity selector 0 after the descriptors.
#define WGMMA_SP_128(name, k, opbytes, reg, c, acc_kind, instr, imm)                                   \
    struct name {                                                                                       \
        static constexpr int N = 256, K = k, KA = k / 2, OPB = opbytes, NREG = 128;                     \
        static constexpr bool SPARSE = true;                                                            \
        typedef reg R;                                                                                  \
        typedef acc_kind Acc;                                                                           \
        __device__ static void mma(R (&d)[NREG], u64 a, u64 b, unsigned e) {                            \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %131, 0;\n" instr " {" OPS_0_63 ", "        \
                         OPS_64_127 "}, %128, %129, %130, 0, p" imm ";\n}\n"                            \
                         : C64(c, 0), C64(c, 64) : "l"(a), "l"(b), "r"(e), "r"(1));                     \
        }                                                                                               \
    };
#define WGMMA_SP_64(name, k, opbytes, reg, c, acc_kind, instr, imm)                                    \
    struct name {                                                                                       \
        static constexpr int N = 256, K = k, KA = k / 2, OPB = opbytes, NREG = 64;                      \
        static constexpr bool SPARSE = true;                                                            \
        typedef reg R;                                                                                  \
        typedef acc_kind Acc;                                                                           \
        __device__ static void mma(R (&d)[NREG], u64 a, u64 b, unsigned e) {                            \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %67, 0;\n" instr " {" OPS_0_63              \
                         "}, %64, %65, %66, 0, p" imm ";\n}\n"                                          \
                         : C64(c, 0) : "l"(a), "l"(b), "r"(e), "r"(1));                                 \
        }                                                                                               \
    };

struct AccF32 { static constexpr int PER = 1, BYTES = 4; };
struct AccS32 { static constexpr int PER = 1, BYTES = 4; };
struct AccF16 { static constexpr int PER = 2, BYTES = 2; };

// 2*64*256*16 = 524288 ops
WGMMA_64(F16F16, 16, 2, unsigned, "+r", AccF16, "wgmma.mma_async.sync.aligned.m64n256k16.f16.f16.f16", ", 1, 1, 0, 0")
// 2*64*256*16 = 524288 ops
WGMMA_128(F16F32, 16, 2, float, "+f", AccF32, "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16", ", 1, 1, 0, 0")
// 2*64*256*16 = 524288 ops
WGMMA_128(Bf16F32, 16, 2, float, "+f", AccF32, "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", ", 1, 1, 0, 0")
// 2*64*256*8 = 262144 ops
WGMMA_128(Tf32F32, 8, 4, float, "+f", AccF32, "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32", ", 1, 1")
// 2*64*256*32 = 1048576 ops
WGMMA_128(E4m3F32, 32, 1, float, "+f", AccF32, "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3", ", 1, 1")
// 2*64*256*32 = 1048576 ops
WGMMA_128(E5m2F32, 32, 1, float, "+f", AccF32, "wgmma.mma_async.sync.aligned.m64n256k32.f32.e5m2.e5m2", ", 1, 1")
// 2*64*256*32 = 1048576 ops
WGMMA_128(S8S32, 32, 1, int, "+r", AccS32, "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8", "")

// Sparse (2:4; TF32 1:2), dense-equivalent ops with the logical K:
// 2*64*256*32 = 1048576 ops
WGMMA_SP_64(F16F16Sp, 32, 2, unsigned, "+r", AccF16, "wgmma.mma_async.sp.sync.aligned.m64n256k32.f16.f16.f16", ", 1, 1, 0, 0")
// 2*64*256*32 = 1048576 ops
WGMMA_SP_128(F16F32Sp, 32, 2, float, "+f", AccF32, "wgmma.mma_async.sp.sync.aligned.m64n256k32.f32.f16.f16", ", 1, 1, 0, 0")
// 2*64*256*32 = 1048576 ops
WGMMA_SP_128(Bf16F32Sp, 32, 2, float, "+f", AccF32, "wgmma.mma_async.sp.sync.aligned.m64n256k32.f32.bf16.bf16", ", 1, 1, 0, 0")
// 2*64*256*16 = 524288 ops
WGMMA_SP_128(Tf32F32Sp, 16, 4, float, "+f", AccF32, "wgmma.mma_async.sp.sync.aligned.m64n256k16.f32.tf32.tf32", ", 1, 1")
// 2*64*256*64 = 2097152 ops
WGMMA_SP_128(E4m3F32Sp, 64, 1, float, "+f", AccF32, "wgmma.mma_async.sp.sync.aligned.m64n256k64.f32.e4m3.e4m3", ", 1, 1")
// 2*64*256*64 = 2097152 ops
WGMMA_SP_128(E5m2F32Sp, 64, 1, float, "+f", AccF32, "wgmma.mma_async.sp.sync.aligned.m64n256k64.f32.e5m2.e5m2", ", 1, 1")
// 2*64*256*64 = 2097152 ops
WGMMA_SP_128(S8S32Sp, 64, 1, int, "+r", AccS32, "wgmma.mma_async.sp.sync.aligned.m64n256k64.s32.s8.s8", "")

// Keep the compiler from moving ordinary register accesses across the asynchronous steps.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void fence_operand(unsigned& r) { asm volatile("" : "+r"(r)::"memory"); }
__device__ __forceinline__ void fence_operand(int& r) { asm volatile("" : "+r"(r)::"memory"); }

// Byte `byte` of row `row` of an operand with `columns` 16-byte core-matrix columns along K.
__device__ __forceinline__ int core_offset(int row, int byte, int columns) {
    return ((row / 8) * columns + byte / 16) * 128 + (row % 8) * 16 + byte % 16;
}

__device__ __forceinline__ u64 descriptor(const void* smem, int columns) {
    const unsigned address = (unsigned)__cvta_generic_to_shared(smem);
    return (u64)((address & 0x3FFFF) >> 4) | ((u64)(128 >> 4) << 16) | ((u64)(128 * columns >> 4) << 32);
}

__device__ __forceinline__ float f16_value(unsigned r, int half) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)(r >> (16 * half))));
    return f;
}

template <class Acc, class R>
__device__ __forceinline__ auto value(R r, int part) {
    if constexpr (Acc::PER == 2) return f16_value(r, part);
    else return r;
}

template <class Acc, class V>
__device__ __forceinline__ void put(unsigned char* p, V v) {
    if constexpr (Acc::PER == 2) {
        unsigned short h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
        *(unsigned short*)p = h;
    } else {
        *(V*)p = v;
    }
}

constexpr int M = 64;

extern "C" __global__ void __launch_bounds__(128 * WARPGROUPS, 1)
wgmma_peak(unsigned char* __restrict__ out, const unsigned char* __restrict__ ab,
           const unsigned char* __restrict__ c0, unsigned* __restrict__ workgroups_done, unsigned iterations) {
    typedef FORM F;
    typedef typename F::Acc Acc;
    constexpr int N = F::N, K = F::K, KA = F::KA, E = F::OPB, A_BYTES = M * KA * E, B_BYTES = N * K * E;
    constexpr int A_COLUMNS = KA * E / 16, B_COLUMNS = K * E / 16;
    __shared__ __align__(128) unsigned char smem[A_BYTES + 2 * B_BYTES];

    // A (64 x KA, row-major) as is; B1, B2 (K x N, row-major) transposed to N x K.
    for (int i = threadIdx.x; i < M * KA; i += blockDim.x)
        for (int b = 0; b < E; b++) smem[core_offset(i / KA, (i % KA) * E + b, A_COLUMNS)] = ab[i * E + b];
    for (int i = threadIdx.x; i < 2 * K * N; i += blockDim.x) {
        const int which = i / (K * N), j = i % (K * N), kk = j / N, n = j % N;
        for (int b = 0; b < E; b++)
            smem[A_BYTES + which * B_BYTES + core_offset(n, kk * E + b, B_COLUMNS)] = ab[A_BYTES + i * E + b];
    }
    const unsigned meta = F::SPARSE ? *(const unsigned*)(ab + A_BYTES + 2 * B_BYTES) : 0u;
    // The tensor cores read shared memory through the async proxy.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const u64 desc_a = descriptor(smem, A_COLUMNS), desc_b1 = descriptor(smem + A_BYTES, B_COLUMNS),
              desc_b2 = descriptor(smem + A_BYTES + B_BYTES, B_COLUMNS);

    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const unsigned group = blockIdx.x * WARPGROUPS + threadIdx.x / 128;
    typename F::R d[ACC][F::NREG];
#pragma unroll
    for (int k = 0; k < ACC; k++)
#pragma unroll
        for (int r = 0; r < F::NREG; r++) {
            const int i = r * Acc::PER, row = 16 * warp + lane / 4 + 8 * ((i / 2) % 2),
                      col = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
            d[k][r] = *(const typename F::R*)(c0 + Acc::BYTES * ((k * M + row) * N + col));
        }
#pragma unroll
    for (int k = 0; k < ACC; k++)
#pragma unroll
        for (int r = 0; r < F::NREG; r++) fence_operand(d[k][r]);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");

#pragma unroll 1      // one loop body: the steps per iteration are exactly UNROLL * ACC
    for (unsigned it = 0; it < iterations; it++) {
#pragma unroll
        for (int u = 0; u < UNROLL; u += 2) {
#pragma unroll
            for (int k = 0; k < ACC; k++) F::mma(d[k], desc_a, desc_b1, meta);
#pragma unroll
            for (int k = 0; k < ACC; k++) F::mma(d[k], desc_a, desc_b2, meta);
        }
        // One group per iteration; the next iteration's steps queue behind this one's.
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
    for (int k = 0; k < ACC; k++)
#pragma unroll
        for (int r = 0; r < F::NREG; r++) fence_operand(d[k][r]);

#pragma unroll
    for (int r = 0; r < F::NREG; r++)
#pragma unroll
        for (int part = 0; part < Acc::PER; part++) {
            const int i = r * Acc::PER + part, row = 16 * warp + lane / 4 + 8 * ((i / 2) % 2),
                      col = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
            auto sum = value<Acc>(d[0][r], part);
#pragma unroll
            for (int k = 1; k < ACC; k++) sum += value<Acc>(d[k][r], part);
            put<Acc>(out + Acc::BYTES * (((size_t)group * M + row) * N + col), sum);
        }
    if (threadIdx.x == 0) atomicAdd(workgroups_done, 1u);     // workloads/witness.py
}

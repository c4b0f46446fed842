// Tensor-core peaks through warp-level mma.sync, under the contract of
// peakbench/catalog/matrix_reference.py. FP16, BF16, TF32, INT8 and FP64 m8n8k4 run on sm_80 and
// newer; FP8 natively on sm_89 and sm_120 (ptxas turns it into FP16 steps on sm_90 and sm_100);
// INT4 natively on sm_80-sm_89 only; the larger FP64 shapes need sm_90 (peakbench/cuda/tensor.py).
// Every warp loads A (M x K), B1, B2 (K x N) and ACC start tiles C0_k (M x N) into registers; each
// loop iteration takes UNROLL steps over its ACC independent tiles, alternating
// C_k = A*B1 + C_k and C_k = A*B2 + C_k, and the warp stores sum_k C_k as output tile `warp`:
//   ops per warp = iterations * UNROLL * ACC * 2 * M * N * K          (catalog/matrix.py)
// One form per instruction below (FORM names its struct); each form's comment gives 2*M*N*K.
// Defines: FORM, ACC, UNROLL (even), WARPS (per block), MIN_BLOCKS (per SM, for the register cap).
//
// Fragments (PTX ISA, "Matrix fragments for mma.m16n8k*"): with g = lane / 4 and t = lane % 4, a
// register holds P = 32 / operand bits consecutive K elements (one FP64 in a 64-bit register):
//   A register i, element p: row g + 8 * (i % (M / 8)), column P * t + p + 4 * P * (i / (M / 8))
//   B register i, element p: row P * t + p + 4 * P * i, column g
//   C element e:             row g + 8 * (e / 2),       column 2 * t + e % 2
// (m8n8k4 FP64 is the same rule with M = 8.) Operands travel row-major, 4-bit ones two to a byte,
// low nibble first.
//
// Sparse forms (mma.sp) take A 2:4 structured-sparse (TF32 1:2): the buffer holds A compressed,
// M x K/2 (KA), then B1, B2 (K x N), then one 32-bit metadata word every thread passes with
// sparsity selector 0 (matrix_reference.SparseInputs: the same choice in every group, so the word
// is the same whichever threads the selector names). The compressed A's fragment is a dense
// m16n8k(K/2) A's (PTX ISA, "Matrix fragments for sparse mma"), B's the rule above with the full K.
// Their K is the logical K, so 2*M*N*K counts the dense-equivalent ops, as vendor sparse peaks do.

typedef unsigned long long u64;

// Accumulator kinds: register type, elements per register, element bytes.
struct AccF32 {
    typedef float R;
    static constexpr int PER = 1, BYTES = 4;
    __device__ static R make(const unsigned char* p) { return __uint_as_float(*(const unsigned*)p); }
    __device__ static float value(R r, int) { return r; }
};
struct AccS32 {
    typedef int R;
    static constexpr int PER = 1, BYTES = 4;
    __device__ static R make(const unsigned char* p) { return *(const int*)p; }
    __device__ static int value(R r, int) { return r; }
};
struct AccF64 {
    typedef double R;
    static constexpr int PER = 1, BYTES = 8;
    __device__ static R make(const unsigned char* p) { return __longlong_as_double(*(const long long*)p); }
    __device__ static double value(R r, int) { return r; }
};
struct AccF16 {            // two FP16 per 32-bit register, the lower column in the low half
    typedef unsigned R;
    static constexpr int PER = 2, BYTES = 2;
    __device__ static R make(const unsigned char* p) { return *(const unsigned*)p; }
    __device__ static float value(R r, int half) {
        float f;
        unsigned short h = (unsigned short)(r >> (16 * half));
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
        return f;
    }
};

__device__ __forceinline__ unsigned short to_f16(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// Store one summed element in the accumulator type.
__device__ __forceinline__ void put(unsigned char* p, AccF32, float v) { *(float*)p = v; }
__device__ __forceinline__ void put(unsigned char* p, AccS32, int v) { *(int*)p = v; }
__device__ __forceinline__ void put(unsigned char* p, AccF64, double v) { *(double*)p = v; }
__device__ __forceinline__ void put(unsigned char* p, AccF16, float v) { *(unsigned short*)p = to_f16(v); }

// A 32-bit form: operands in 32-bit registers, NA for A, NB for B, NC accumulator registers.
#define FORM32(name, m, k, bits, acc, instr, a_list, b_list, c_list, ...)                              \
    struct name {                                                                                      \
        static constexpr int M = m, N = 8, K = k, KA = k, BITS = bits, NA = m * k * bits / 1024,       \
                             NB = 8 * k * bits / 1024, NC = m * 8 / 32 / acc::PER;                     \
        static constexpr bool SPARSE = false;                                                          \
        typedef acc Acc;                                                                               \
        typedef unsigned Op;                                                                           \
        __device__ static void mma(typename Acc::R (&d)[NC], const Op (&a)[NA], const Op (&b)[NB],   \
                                   unsigned) {                                                         \
            asm volatile(instr " " c_list ", " a_list ", " b_list ", " c_list ";" : __VA_ARGS__);       \
        }                                                                                              \
    };

// A sparse 32-bit form: A holds M x K/2 compressed elements; e_op names the metadata operand.
#define FORM32_SP(name, m, k, bits, acc, instr, a_list, b_list, c_list, e_op, ...)                     \
    struct name {                                                                                      \
        static constexpr int M = m, N = 8, K = k, KA = k / 2, BITS = bits, NA = m * k / 2 * bits / 1024, \
                             NB = 8 * k * bits / 1024, NC = m * 8 / 32 / acc::PER;                     \
        static constexpr bool SPARSE = true;                                                           \
        typedef acc Acc;                                                                               \
        typedef unsigned Op;                                                                           \
        __device__ static void mma(typename Acc::R (&d)[NC], const Op (&a)[NA], const Op (&b)[NB],   \
                                   unsigned e) {                                                       \
            asm volatile(instr " " c_list ", " a_list ", " b_list ", " c_list ", " e_op ", 0;"          \
                         : __VA_ARGS__, "r"(e));                                                       \
        }                                                                                              \
    };

#define D2(c) c(d[0]), c(d[1])
#define D4(c) c(d[0]), c(d[1]), c(d[2]), c(d[3])
#define R_A4_B2 "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1])
#define R_A4_B4 "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3])

// 2*16*8*16 = 4096 ops
FORM32(F16F16, 16, 16, 16, AccF16, "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16",
       "{%2, %3, %4, %5}", "{%6, %7}", "{%0, %1}", D2("+r") : R_A4_B2)
// 2*16*8*16 = 4096 ops
FORM32(F16F32, 16, 16, 16, AccF32, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
       "{%4, %5, %6, %7}", "{%8, %9}", "{%0, %1, %2, %3}", D4("+f") : R_A4_B2)
// 2*16*8*16 = 4096 ops
FORM32(Bf16F32, 16, 16, 16, AccF32, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
       "{%4, %5, %6, %7}", "{%8, %9}", "{%0, %1, %2, %3}", D4("+f") : R_A4_B2)
// 2*16*8*8 = 2048 ops
FORM32(Tf32F32, 16, 8, 32, AccF32, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
       "{%4, %5, %6, %7}", "{%8, %9}", "{%0, %1, %2, %3}", D4("+f") : R_A4_B2)
// 2*16*8*32 = 8192 ops
FORM32(S8S32, 16, 32, 8, AccS32, "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32",
       "{%4, %5, %6, %7}", "{%8, %9}", "{%0, %1, %2, %3}", D4("+r") : R_A4_B2)
// 2*16*8*64 = 16384 ops
FORM32(S4S32, 16, 64, 4, AccS32, "mma.sync.aligned.m16n8k64.row.col.s32.s4.s4.s32",
       "{%4, %5, %6, %7}", "{%8, %9}", "{%0, %1, %2, %3}", D4("+r") : R_A4_B2)
// 2*16*8*32 = 8192 ops
FORM32(E4m3F32, 16, 32, 8, AccF32, "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32",
       "{%4, %5, %6, %7}", "{%8, %9}", "{%0, %1, %2, %3}", D4("+f") : R_A4_B2)
// 2*16*8*32 = 8192 ops
FORM32(E5m2F32, 16, 32, 8, AccF32, "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32",
       "{%4, %5, %6, %7}", "{%8, %9}", "{%0, %1, %2, %3}", D4("+f") : R_A4_B2)

// Sparse (2:4; TF32 1:2), dense-equivalent ops with the logical K:
// 2*16*8*32 = 8192 ops
FORM32_SP(F16F16Sp, 16, 32, 16, AccF16, "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f16.f16.f16.f16",
          "{%2, %3, %4, %5}", "{%6, %7, %8, %9}", "{%0, %1}", "%10", D2("+r") : R_A4_B4)
// 2*16*8*32 = 8192 ops
FORM32_SP(F16F32Sp, 16, 32, 16, AccF32, "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32",
          "{%4, %5, %6, %7}", "{%8, %9, %10, %11}", "{%0, %1, %2, %3}", "%12", D4("+f") : R_A4_B4)
// 2*16*8*32 = 8192 ops
FORM32_SP(Bf16F32Sp, 16, 32, 16, AccF32, "mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32",
          "{%4, %5, %6, %7}", "{%8, %9, %10, %11}", "{%0, %1, %2, %3}", "%12", D4("+f") : R_A4_B4)
// 2*16*8*16 = 4096 ops
FORM32_SP(Tf32F32Sp, 16, 16, 32, AccF32, "mma.sp::ordered_metadata.sync.aligned.m16n8k16.row.col.f32.tf32.tf32.f32",
          "{%4, %5, %6, %7}", "{%8, %9, %10, %11}", "{%0, %1, %2, %3}", "%12", D4("+f") : R_A4_B4)
// 2*16*8*64 = 16384 ops
FORM32_SP(S8S32Sp, 16, 64, 8, AccS32, "mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.s32.s8.s8.s32",
          "{%4, %5, %6, %7}", "{%8, %9, %10, %11}", "{%0, %1, %2, %3}", "%12", D4("+r") : R_A4_B4)
// 2*16*8*64 = 16384 ops
FORM32_SP(E4m3F32Sp, 16, 64, 8, AccF32, "mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.f32.e4m3.e4m3.f32",
          "{%4, %5, %6, %7}", "{%8, %9, %10, %11}", "{%0, %1, %2, %3}", "%12", D4("+f") : R_A4_B4)
// 2*16*8*64 = 16384 ops
FORM32_SP(E5m2F32Sp, 16, 64, 8, AccF32, "mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.f32.e5m2.e5m2.f32",
          "{%4, %5, %6, %7}", "{%8, %9, %10, %11}", "{%0, %1, %2, %3}", "%12", D4("+f") : R_A4_B4)

// FP64 (DMMA): operands and accumulators in 64-bit registers.
#define FORM64(name, m, k, instr, a_list, b_list, c_list, ...)                                         \
    struct name {                                                                                      \
        static constexpr int M = m, N = 8, K = k, KA = k, BITS = 64, NA = m * k / 32, NB = 8 * k / 32, \
                             NC = m * 8 / 32;                                                          \
        static constexpr bool SPARSE = false;                                                          \
        typedef AccF64 Acc;                                                                            \
        typedef double Op;                                                                             \
        __device__ static void mma(double (&d)[NC], const Op (&a)[NA], const Op (&b)[NB], unsigned) { \
            asm volatile(instr " " c_list ", " a_list ", " b_list ", " c_list ";" : __VA_ARGS__);       \
        }                                                                                              \
    };

// 2*8*8*4 = 512 ops
FORM64(F64M8K4, 8, 4, "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64",
       "{%2}", "{%3}", "{%0, %1}", D2("+d") : "d"(a[0]), "d"(b[0]))
// 2*16*8*4 = 1024 ops
FORM64(F64M16K4, 16, 4, "mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64",
       "{%4, %5}", "{%6}", "{%0, %1, %2, %3}", D4("+d") : "d"(a[0]), "d"(a[1]), "d"(b[0]))
// 2*16*8*8 = 2048 ops
FORM64(F64M16K8, 16, 8, "mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64",
       "{%4, %5, %6, %7}", "{%8, %9}", "{%0, %1, %2, %3}", D4("+d")
       : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]))
// 2*16*8*16 = 4096 ops
FORM64(F64M16K16, 16, 16, "mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64",
       "{%4, %5, %6, %7, %8, %9, %10, %11}", "{%12, %13, %14, %15}", "{%0, %1, %2, %3}", D4("+d")
       : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]),
         "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]))

// Element `index` of a row-major operand of `bits`-bit elements, as the low bits of a word.
__device__ __forceinline__ unsigned element(const unsigned char* base, int index, int bits) {
    if (bits == 4)
        return (base[index / 2] >> (4 * (index % 2))) & 0xF;
    unsigned v = 0;
    for (int b = 0; b < bits / 8; b++) v |= (unsigned)base[index * (bits / 8) + b] << (8 * b);
    return v;
}

// The register holding elements (row, col + p * step) for p < P of a matrix with `cols` columns.
template <class F>
__device__ __forceinline__ typename F::Op fragment(const unsigned char* base, int row, int col, int cols,
                                                   int step) {
    if constexpr (F::BITS == 64) {
        return __longlong_as_double(*(const long long*)(base + 8 * (row * cols + col)));
    } else {
        constexpr int P = 32 / F::BITS;
        unsigned w = 0;
#pragma unroll
        for (int p = 0; p < P; p++) w |= element(base, row * cols + col + p * step, F::BITS) << (F::BITS * p);
        return w;
    }
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
mma_peak(unsigned char* __restrict__ out, const unsigned char* __restrict__ ab,
         const unsigned char* __restrict__ c0, unsigned* __restrict__ workgroups_done, unsigned iterations) {
    typedef FORM F;
    typedef typename F::Acc Acc;
    constexpr int M = F::M, N = F::N, K = F::K, KA = F::KA, RM = M / 8, P = F::BITS == 64 ? 1 : 32 / F::BITS;
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const unsigned warp = blockIdx.x * WARPS + threadIdx.x / 32;
    const unsigned char* a_in = ab;
    const unsigned char* b1_in = ab + M * KA * F::BITS / 8;
    const unsigned char* b2_in = b1_in + K * N * F::BITS / 8;
    const unsigned meta = F::SPARSE ? *(const unsigned*)(b2_in + K * N * F::BITS / 8) : 0u;

    typename F::Op a[F::NA], b1[F::NB], b2[F::NB];
#pragma unroll
    for (int i = 0; i < F::NA; i++) a[i] = fragment<F>(a_in, g + 8 * (i % RM), P * t + 4 * P * (i / RM), KA, 1);
#pragma unroll
    for (int i = 0; i < F::NB; i++) {   // P consecutive rows of column g: a step of N elements
        b1[i] = fragment<F>(b1_in, P * t + 4 * P * i, g, N, N);
        b2[i] = fragment<F>(b2_in, P * t + 4 * P * i, g, N, N);
    }
    // C element e sits in register e / PER, part e % PER; a register's parts are adjacent columns.
    typename Acc::R d[ACC][F::NC];
#pragma unroll
    for (int k = 0; k < ACC; k++)
#pragma unroll
        for (int r = 0; r < F::NC; r++) {
            const int e = r * Acc::PER, row = g + 8 * (e / 2), col = 2 * t + e % 2;
            d[k][r] = Acc::make(c0 + Acc::BYTES * ((k * M + row) * N + col));
        }

#pragma unroll 1      // one loop body: the steps per iteration are exactly UNROLL * ACC
    for (unsigned it = 0; it < iterations; it++) {
#pragma unroll
        for (int u = 0; u < UNROLL; u += 2) {
#pragma unroll
            for (int k = 0; k < ACC; k++) F::mma(d[k], a, b1, meta);
#pragma unroll
            for (int k = 0; k < ACC; k++) F::mma(d[k], a, b2, meta);
        }
    }

#pragma unroll
    for (int r = 0; r < F::NC; r++)
#pragma unroll
        for (int part = 0; part < Acc::PER; part++) {
            const int e = r * Acc::PER + part, row = g + 8 * (e / 2), col = 2 * t + e % 2;
            auto sum = Acc::value(d[0][r], part);
#pragma unroll
            for (int k = 1; k < ACC; k++) sum += Acc::value(d[k][r], part);
            put(out + Acc::BYTES * (((size_t)warp * M + row) * N + col), Acc(), sum);
        }
    if (threadIdx.x == 0) atomicAdd(workgroups_done, 1u);     // workloads/witness.py
}

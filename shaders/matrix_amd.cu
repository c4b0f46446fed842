// Matrix-core peaks on AMD GPUs: MFMA on CDNA (gfx908, gfx90a, gfx942, gfx950; wave64) and WMMA on
// RDNA3 / RDNA4 (gfx11, gfx12; wave32), compiled by hiprtc for the device's exact target, under the
// contract of peakbench/catalog/matrix_reference.py (the A, B1, B2 scheme of matrix_coopmat.comp
// and tensor_mma.cu).
// Every wave loads A (M x K), B1, B2 (K x N) and ACC start tiles C0_k (M x N) into registers; each
// loop iteration takes UNROLL steps over its ACC independent tiles, alternating
// C_k = A*B1 + C_k and C_k = A*B2 + C_k, and the wave stores sum_k C_k as output tile `wave`:
//   ops per wave = iterations * UNROLL * ACC * 2 * M * N * K          (catalog/matrix.py)
// One form per instruction below; the host selects one with -DFORM_<name> (peakbench/rocm/targets.py
// says which target runs which form) and each form's comment gives 2*M*N*K.
// Defines: FORM_<name>, ACC, UNROLL (even), WAVES (per block), WAVE (64 on CDNA, 32 on RDNA),
// FMT (f8f6f4 forms only: the A and B format, 0 E4M3, 1 E5M2, 4 E2M1).
//
// Fragments (ROCm docs "CDNA4 dense MFMA intrinsics" and their CDNA/CDNA2/CDNA3 pages; RDNA3 and
// RDNA4 ISA guides, WMMA). A lane holds KP consecutive K values of one A row and of one B column;
// the lane's K group is (lane / M) % (K / KP). A and B share that K order, and a product summed over
// K does not depend on the order, so only rows, columns and the accumulator layout must be exact.
//   A element p of lane l: row l % M, column KP * ((l / M) % (K / KP)) + p
//   B element p of lane l: row KP * ((l / N) % (K / KP)) + p, column l % N
//   (gfx11 WMMA: K / KP = 1, so lanes 16-31 repeat lanes 0-15, as the instruction requires.)
//   C element e of lane l:
//     C_MFMA32  MFMA 32x32:          row 8 * (e / 4) + 4 * (l / 32) + e % 4,  column l % 32
//     C_MFMA16  MFMA 16x16:          row 4 * (l / 16) + e,                    column l % 16
//     C_F64     MFMA 16x16x4 FP64:   row 4 * e + l / 16,                      column l % 16
//     C_WMMA11  WMMA gfx11:          row 2 * e + l / 16,                      column l % 16
//               (16-bit results sit in the low half of each 32-bit register: vector element 2e)
//     C_WMMA12  WMMA gfx12:          row 8 * (l / 16) + e,                    column l % 16
// Operands travel row-major, 4-bit ones two to a byte, low nibble first (as in tensor_mma.cu).
//
// Sparse forms (SMFMAC, CDNA3 and CDNA4; matrix.*.sparse) take A 2:4 structured-sparse: the buffer
// holds A compressed, M x K/2, then B1, B2 (K x N), then one 32-bit metadata word, passed to every
// lane as the instruction's index register (cbsz 0, abid 0). Every 4-bit field of the word names
// the same two kept positions (catalog/matrix_reference.py SparseInputs), so whichever bits of it
// a lane's A values take, they mean the same. A lane's KP / 2 compressed A values are the kept ones
// of the KP K values its B column holds (the same K group), so here K order matters and is the
// same for A and B. 2*M*N*K counts the logical K: dense-equivalent ops, as vendor sparse peaks are.

#define C_MFMA32 0
#define C_MFMA16 1
#define C_F64 2
#define C_WMMA11 3
#define C_WMMA12 4
#define SCALE_ONE 0x7F7F7F7F   // E8M0 scale 2^0 in every byte: the scaled MFMA multiplies by 1

// Accumulator registers (named apart from HIP's float4, int2, ... structs).
typedef _Float16 v8h __attribute__((ext_vector_type(8)));
typedef _Float16 v16h __attribute__((ext_vector_type(16)));
typedef float v4f __attribute__((ext_vector_type(4)));
typedef float v8f __attribute__((ext_vector_type(8)));
typedef float v16f __attribute__((ext_vector_type(16)));
typedef int v4i __attribute__((ext_vector_type(4)));
typedef int v8i __attribute__((ext_vector_type(8)));
typedef int v16i __attribute__((ext_vector_type(16)));
typedef double v4d __attribute__((ext_vector_type(4)));

// An operand register of W 32-bit words. It converts to whatever type the builtin declares for
// that operand (half4, short4 or bf16x8, int, long, int2, ... differ between targets and between
// compiler releases), checking only that the sizes agree.
template <int W>
struct Bits {
    unsigned w[W];
    template <class T>
    __device__ __forceinline__ operator T() const {
        static_assert(sizeof(T) == sizeof(w), "the builtin's operand is W words");
        T t;
        __builtin_memcpy(&t, w, sizeof t);
        return t;
    }
};

// One instruction: its shape, K values per lane (KP), operand bits, accumulator layout, accumulator
// element type CT with NC elements per lane at vector stride CS, operand words per lane, accumulator
// register CV, and the call.
#define MMA_FORM(m, n, k, kp, bits, layout, ct, nc, cs, words, cv, ...)                              \
    struct Form {                                                                                    \
        static constexpr int M = m, N = n, K = k, KP = kp, BITS = bits, LAYOUT = layout, NC = nc,     \
                             CS = cs;                                                                \
        static constexpr bool SPARSE = false;                                                        \
        typedef ct CT;                                                                               \
        typedef Bits<words> AV;                                                                      \
        typedef AV AA;                                                                               \
        typedef cv CV;                                                                               \
        __device__ static CV mma(const AA& a, const AV& b, CV c, unsigned) { return __VA_ARGS__; }   \
    };
// A sparse form: the same fields for B (KP values, `words` words a lane); A holds half of them,
// compressed (AA), and the call takes the metadata word `idx`.
#define SPARSE_FORM(m, n, k, kp, bits, layout, ct, nc, cs, words, cv, ...)                           \
    struct Form {                                                                                    \
        static constexpr int M = m, N = n, K = k, KP = kp, BITS = bits, LAYOUT = layout, NC = nc,     \
                             CS = cs;                                                                \
        static constexpr bool SPARSE = true;                                                         \
        typedef ct CT;                                                                               \
        typedef Bits<words> AV;                                                                      \
        typedef Bits<words / 2> AA;                                                                  \
        typedef cv CV;                                                                               \
        __device__ static CV mma(const AA& a, const AV& b, CV c, unsigned idx) { return __VA_ARGS__; } \
    };

// MFMA, CDNA, wave64 ------------------------------------------------------------------------------
#if defined(FORM_MfmaF16_32x32x8)            // 2*32*32*8 = 16384 ops (gfx908+)
MMA_FORM(32, 32, 8, 4, 16, C_MFMA32, float, 16, 1, 2, v16f,
         __builtin_amdgcn_mfma_f32_32x32x8f16(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaF16_16x16x16)         // 2*16*16*16 = 8192 ops (gfx908+)
MMA_FORM(16, 16, 16, 4, 16, C_MFMA16, float, 4, 1, 2, v4f,
         __builtin_amdgcn_mfma_f32_16x16x16f16(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaF16_32x32x16)         // 2*32*32*16 = 32768 ops (gfx950)
MMA_FORM(32, 32, 16, 8, 16, C_MFMA32, float, 16, 1, 4, v16f,
         __builtin_amdgcn_mfma_f32_32x32x16_f16(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaF16_16x16x32)         // 2*16*16*32 = 16384 ops (gfx950)
MMA_FORM(16, 16, 32, 8, 16, C_MFMA16, float, 4, 1, 4, v4f,
         __builtin_amdgcn_mfma_f32_16x16x32_f16(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaBf16_32x32x4)         // 2*32*32*4 = 8192 ops (gfx908)
MMA_FORM(32, 32, 4, 2, 16, C_MFMA32, float, 16, 1, 1, v16f,
         __builtin_amdgcn_mfma_f32_32x32x4bf16(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaBf16_16x16x8)         // 2*16*16*8 = 4096 ops (gfx908)
MMA_FORM(16, 16, 8, 2, 16, C_MFMA16, float, 4, 1, 1, v4f,
         __builtin_amdgcn_mfma_f32_16x16x8bf16(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaBf16_32x32x8)         // 2*32*32*8 = 16384 ops (gfx90a+)
MMA_FORM(32, 32, 8, 4, 16, C_MFMA32, float, 16, 1, 2, v16f,
         __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaBf16_16x16x16)        // 2*16*16*16 = 8192 ops (gfx90a+)
MMA_FORM(16, 16, 16, 4, 16, C_MFMA16, float, 4, 1, 2, v4f,
         __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaBf16_32x32x16)        // 2*32*32*16 = 32768 ops (gfx950)
MMA_FORM(32, 32, 16, 8, 16, C_MFMA32, float, 16, 1, 4, v16f,
         __builtin_amdgcn_mfma_f32_32x32x16_bf16(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaBf16_16x16x32)        // 2*16*16*32 = 16384 ops (gfx950)
MMA_FORM(16, 16, 32, 8, 16, C_MFMA16, float, 4, 1, 4, v4f,
         __builtin_amdgcn_mfma_f32_16x16x32_bf16(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaI8_32x32x8)           // 2*32*32*8 = 16384 ops (gfx908, gfx90a)
MMA_FORM(32, 32, 8, 4, 8, C_MFMA32, int, 16, 1, 1, v16i,
         __builtin_amdgcn_mfma_i32_32x32x8i8(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaI8_16x16x16)          // 2*16*16*16 = 8192 ops (gfx908, gfx90a)
MMA_FORM(16, 16, 16, 4, 8, C_MFMA16, int, 4, 1, 1, v4i,
         __builtin_amdgcn_mfma_i32_16x16x16i8(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaI8_32x32x16)          // 2*32*32*16 = 32768 ops (gfx940+)
MMA_FORM(32, 32, 16, 8, 8, C_MFMA32, int, 16, 1, 2, v16i,
         __builtin_amdgcn_mfma_i32_32x32x16_i8(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaI8_16x16x32)          // 2*16*16*32 = 16384 ops (gfx940+)
MMA_FORM(16, 16, 32, 8, 8, C_MFMA16, int, 4, 1, 2, v4i,
         __builtin_amdgcn_mfma_i32_16x16x32_i8(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaI8_32x32x32)          // 2*32*32*32 = 65536 ops (gfx950)
MMA_FORM(32, 32, 32, 16, 8, C_MFMA32, int, 16, 1, 4, v16i,
         __builtin_amdgcn_mfma_i32_32x32x32_i8(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaI8_16x16x64)          // 2*16*16*64 = 32768 ops (gfx950)
MMA_FORM(16, 16, 64, 16, 8, C_MFMA16, int, 4, 1, 4, v4i,
         __builtin_amdgcn_mfma_i32_16x16x64_i8(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaXf32_32x32x4)         // 2*32*32*4 = 8192 ops (gfx940-gfx942)
MMA_FORM(32, 32, 4, 2, 32, C_MFMA32, float, 16, 1, 2, v16f,
         __builtin_amdgcn_mfma_f32_32x32x4_xf32(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaXf32_16x16x8)         // 2*16*16*8 = 4096 ops (gfx940-gfx942)
MMA_FORM(16, 16, 8, 2, 32, C_MFMA16, float, 4, 1, 2, v4f,
         __builtin_amdgcn_mfma_f32_16x16x8_xf32(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaFp8_32x32x16)         // 2*32*32*16 = 32768 ops (gfx940+; FNUZ on gfx942, OCP on gfx950)
MMA_FORM(32, 32, 16, 8, 8, C_MFMA32, float, 16, 1, 2, v16f,
         __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaFp8_16x16x32)         // 2*16*16*32 = 16384 ops (gfx940+)
MMA_FORM(16, 16, 32, 8, 8, C_MFMA16, float, 4, 1, 2, v4f,
         __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaBf8_32x32x16)         // 2*32*32*16 = 32768 ops (gfx940+)
MMA_FORM(32, 32, 16, 8, 8, C_MFMA32, float, 16, 1, 2, v16f,
         __builtin_amdgcn_mfma_f32_32x32x16_bf8_bf8(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaBf8_16x16x32)         // 2*16*16*32 = 16384 ops (gfx940+)
MMA_FORM(16, 16, 32, 8, 8, C_MFMA16, float, 4, 1, 2, v4f,
         __builtin_amdgcn_mfma_f32_16x16x32_bf8_bf8(a, b, c, 0, 0, 0))
#elif defined(FORM_MfmaF8f6f4_32x32x64)      // 2*32*32*64 = 131072 ops (gfx950; FP4 fills half of AV)
MMA_FORM(32, 32, 64, 32, (FMT == 4 ? 4 : 8), C_MFMA32, float, 16, 1, 8, v16f,
         __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(a, b, c, FMT, FMT, 0, SCALE_ONE, 0, SCALE_ONE))
#elif defined(FORM_MfmaF8f6f4_16x16x128)     // 2*16*16*128 = 65536 ops (gfx950)
MMA_FORM(16, 16, 128, 32, (FMT == 4 ? 4 : 8), C_MFMA16, float, 4, 1, 8, v4f,
         __builtin_amdgcn_mfma_scale_f32_16x16x128_f8f6f4(a, b, c, FMT, FMT, 0, SCALE_ONE, 0, SCALE_ONE))
#elif defined(FORM_MfmaF64_16x16x4)          // 2*16*16*4 = 2048 ops (gfx90a+)
MMA_FORM(16, 16, 4, 1, 64, C_F64, double, 4, 1, 2, v4d,
         __builtin_amdgcn_mfma_f64_16x16x4f64(a, b, c, 0, 0, 0))

// SMFMAC (sparse A), CDNA3 and CDNA4, wave64 ------------------------------------------------------
#elif defined(FORM_SmfmacF16_16x16x32)       // 2*16*16*32 = 16384 ops (gfx940+)
SPARSE_FORM(16, 16, 32, 8, 16, C_MFMA16, float, 4, 1, 4, v4f,
            __builtin_amdgcn_smfmac_f32_16x16x32_f16(a, b, c, idx, 0, 0))
#elif defined(FORM_SmfmacF16_32x32x16)       // 2*32*32*16 = 32768 ops (gfx940+)
SPARSE_FORM(32, 32, 16, 8, 16, C_MFMA32, float, 16, 1, 4, v16f,
            __builtin_amdgcn_smfmac_f32_32x32x16_f16(a, b, c, idx, 0, 0))
#elif defined(FORM_SmfmacBf16_16x16x32)      // 2*16*16*32 = 16384 ops (gfx940+)
SPARSE_FORM(16, 16, 32, 8, 16, C_MFMA16, float, 4, 1, 4, v4f,
            __builtin_amdgcn_smfmac_f32_16x16x32_bf16(a, b, c, idx, 0, 0))
#elif defined(FORM_SmfmacBf16_32x32x16)      // 2*32*32*16 = 32768 ops (gfx940+)
SPARSE_FORM(32, 32, 16, 8, 16, C_MFMA32, float, 16, 1, 4, v16f,
            __builtin_amdgcn_smfmac_f32_32x32x16_bf16(a, b, c, idx, 0, 0))
#elif defined(FORM_SmfmacI8_16x16x64)        // 2*16*16*64 = 32768 ops (gfx940+)
SPARSE_FORM(16, 16, 64, 16, 8, C_MFMA16, int, 4, 1, 4, v4i,
            __builtin_amdgcn_smfmac_i32_16x16x64_i8(a, b, c, idx, 0, 0))
#elif defined(FORM_SmfmacI8_32x32x32)        // 2*32*32*32 = 65536 ops (gfx940+)
SPARSE_FORM(32, 32, 32, 16, 8, C_MFMA32, int, 16, 1, 4, v16i,
            __builtin_amdgcn_smfmac_i32_32x32x32_i8(a, b, c, idx, 0, 0))
#elif defined(FORM_SmfmacFp8_16x16x64)       // 2*16*16*64 = 32768 ops (gfx940+)
SPARSE_FORM(16, 16, 64, 16, 8, C_MFMA16, float, 4, 1, 4, v4f,
            __builtin_amdgcn_smfmac_f32_16x16x64_fp8_fp8(a, b, c, idx, 0, 0))
#elif defined(FORM_SmfmacFp8_32x32x32)       // 2*32*32*32 = 65536 ops (gfx940+)
SPARSE_FORM(32, 32, 32, 16, 8, C_MFMA32, float, 16, 1, 4, v16f,
            __builtin_amdgcn_smfmac_f32_32x32x32_fp8_fp8(a, b, c, idx, 0, 0))
#elif defined(FORM_SmfmacBf8_16x16x64)       // 2*16*16*64 = 32768 ops (gfx940+)
SPARSE_FORM(16, 16, 64, 16, 8, C_MFMA16, float, 4, 1, 4, v4f,
            __builtin_amdgcn_smfmac_f32_16x16x64_bf8_bf8(a, b, c, idx, 0, 0))
#elif defined(FORM_SmfmacBf8_32x32x32)       // 2*32*32*32 = 65536 ops (gfx940+)
SPARSE_FORM(32, 32, 32, 16, 8, C_MFMA32, float, 16, 1, 4, v16f,
            __builtin_amdgcn_smfmac_f32_32x32x32_bf8_bf8(a, b, c, idx, 0, 0))

// WMMA, RDNA3 (gfx11), wave32 ---------------------------------------------------------------------
#elif defined(FORM_Wmma11F16F32)             // 2*16*16*16 = 8192 ops
MMA_FORM(16, 16, 16, 16, 16, C_WMMA11, float, 8, 1, 8, v8f,
         __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a, b, c))
#elif defined(FORM_Wmma11F16F16)             // 2*16*16*16 = 8192 ops
MMA_FORM(16, 16, 16, 16, 16, C_WMMA11, _Float16, 8, 2, 8, v16h,
         __builtin_amdgcn_wmma_f16_16x16x16_f16_w32(a, b, c, false))
#elif defined(FORM_Wmma11Bf16F32)            // 2*16*16*16 = 8192 ops
MMA_FORM(16, 16, 16, 16, 16, C_WMMA11, float, 8, 1, 8, v8f,
         __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(a, b, c))
#elif defined(FORM_Wmma11I8)                 // 2*16*16*16 = 8192 ops (signed A and B)
MMA_FORM(16, 16, 16, 16, 8, C_WMMA11, int, 8, 1, 4, v8i,
         __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32(true, a, true, b, c, false))
#elif defined(FORM_Wmma11I4)                 // 2*16*16*16 = 8192 ops (signed A and B)
MMA_FORM(16, 16, 16, 16, 4, C_WMMA11, int, 8, 1, 2, v8i,
         __builtin_amdgcn_wmma_i32_16x16x16_iu4_w32(true, a, true, b, c, false))

// WMMA, RDNA4 (gfx12), wave32 ---------------------------------------------------------------------
#elif defined(FORM_Wmma12F16F32)             // 2*16*16*16 = 8192 ops
MMA_FORM(16, 16, 16, 8, 16, C_WMMA12, float, 8, 1, 4, v8f,
         __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(a, b, c))
#elif defined(FORM_Wmma12F16F16)             // 2*16*16*16 = 8192 ops
MMA_FORM(16, 16, 16, 8, 16, C_WMMA12, _Float16, 8, 1, 4, v8h,
         __builtin_amdgcn_wmma_f16_16x16x16_f16_w32_gfx12(a, b, c))
#elif defined(FORM_Wmma12Bf16F32)            // 2*16*16*16 = 8192 ops
MMA_FORM(16, 16, 16, 8, 16, C_WMMA12, float, 8, 1, 4, v8f,
         __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12(a, b, c))
#elif defined(FORM_Wmma12I8)                 // 2*16*16*16 = 8192 ops (signed A and B)
MMA_FORM(16, 16, 16, 8, 8, C_WMMA12, int, 8, 1, 2, v8i,
         __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32_gfx12(true, a, true, b, c, false))
#elif defined(FORM_Wmma12I4)                 // 2*16*16*16 = 8192 ops (signed A and B)
MMA_FORM(16, 16, 16, 8, 4, C_WMMA12, int, 8, 1, 1, v8i,
         __builtin_amdgcn_wmma_i32_16x16x16_iu4_w32_gfx12(true, a, true, b, c, false))
#elif defined(FORM_Wmma12I4K32)              // 2*16*16*32 = 16384 ops (signed A and B)
MMA_FORM(16, 16, 32, 16, 4, C_WMMA12, int, 8, 1, 2, v8i,
         __builtin_amdgcn_wmma_i32_16x16x32_iu4_w32_gfx12(true, a, true, b, c, false))
#elif defined(FORM_Wmma12Fp8)                // 2*16*16*16 = 8192 ops (OCP E4M3)
MMA_FORM(16, 16, 16, 8, 8, C_WMMA12, float, 8, 1, 2, v8f,
         __builtin_amdgcn_wmma_f32_16x16x16_fp8_fp8_w32_gfx12(a, b, c))
#elif defined(FORM_Wmma12Bf8)                // 2*16*16*16 = 8192 ops (OCP E5M2)
MMA_FORM(16, 16, 16, 8, 8, C_WMMA12, float, 8, 1, 2, v8f,
         __builtin_amdgcn_wmma_f32_16x16x16_bf8_bf8_w32_gfx12(a, b, c))
#else
#error "define FORM_<name>, one of the forms in this file (peakbench/rocm/targets.py picks it)"
#endif

static_assert(Form::KP * Form::BITS <= 8 * sizeof(Form::AV), "a lane's K values fit its operand register");
static_assert(Form::NC * Form::CS * sizeof(Form::CT) == sizeof(Form::CV), "accumulator register size");
static_assert(Form::M * Form::N == WAVE * Form::NC, "the wave holds the whole tile, once");
static_assert(UNROLL % 2 == 0, "steps alternate B1 and B2");

// Element `index` of a row-major operand of `bits`-bit elements (up to 32), as the low bits of a word.
__device__ __forceinline__ unsigned element(const unsigned char* base, unsigned index, int bits) {
    if (bits == 4)
        return (base[index / 2] >> (4 * (index % 2))) & 0xF;
    unsigned v = 0;
    for (int b = 0; b < bits / 8; b++) v |= (unsigned)base[index * (bits / 8) + b] << (8 * b);
    return v;
}

// The operand register V holding elements (row, col + p * step), p < P, of a matrix with `cols`
// columns; 64-bit elements take two words, narrower ones are packed low first.
template <class V, int P>
__device__ __forceinline__ V fragment(const unsigned char* base, int row, int col, int cols, int step) {
    V v = {};
#pragma unroll
    for (int p = 0; p < P; p++) {
        const unsigned index = row * cols + col + p * step;
        if (Form::BITS == 64) {
            v.w[2 * p] = element(base, 2 * index, 32);
            v.w[2 * p + 1] = element(base, 2 * index + 1, 32);
        } else {
            v.w[p * Form::BITS / 32] |= element(base, index, Form::BITS) << ((p * Form::BITS) % 32);
        }
    }
    return v;
}

// Row of accumulator element e in lane `lane` (the column is lane % N for every layout).
__device__ __forceinline__ int c_row(int e, int lane) {
    if (Form::LAYOUT == C_MFMA32) return 8 * (e / 4) + 4 * (lane / 32) + e % 4;
    if (Form::LAYOUT == C_MFMA16) return 4 * (lane / 16) + e;
    if (Form::LAYOUT == C_F64) return 4 * e + lane / 16;
    if (Form::LAYOUT == C_WMMA11) return 2 * e + lane / 16;
    return 8 * (lane / 16) + e;                              // C_WMMA12
}

extern "C" __global__ void __launch_bounds__(WAVE * WAVES)
mma_peak(unsigned char* __restrict__ out, const unsigned char* __restrict__ ab,
         const unsigned char* __restrict__ c0, unsigned* __restrict__ workgroups_done, unsigned iterations) {
    typedef Form F;
    typedef F::CT CT;
    constexpr int M = F::M, N = F::N, K = F::K, KP = F::KP;
    constexpr int KA = F::SPARSE ? K / 2 : K, KPA = F::SPARSE ? KP / 2 : KP;   // A's columns, a lane's A values
    const int lane = threadIdx.x % WAVE, group = (lane / M) % (K / KP), col = lane % N;
    const unsigned wave = blockIdx.x * WAVES + threadIdx.x / WAVE;
    const unsigned char* a_in = ab;
    const unsigned char* b1_in = ab + M * KA * F::BITS / 8;
    const unsigned char* b2_in = b1_in + K * N * F::BITS / 8;
    const unsigned meta = F::SPARSE ? *(const unsigned*)(b2_in + K * N * F::BITS / 8) : 0u;

    const F::AA a = fragment<F::AA, KPA>(a_in, lane % M, KPA * group, KA, 1);
    const F::AV b1 = fragment<F::AV, KP>(b1_in, KP * group, col, N, N);    // KP consecutive rows of column `col`
    const F::AV b2 = fragment<F::AV, KP>(b2_in, KP * group, col, N, N);
    F::CV c[ACC];
#pragma unroll
    for (int k = 0; k < ACC; k++) {
        c[k] = F::CV{};
#pragma unroll
        for (int e = 0; e < F::NC; e++) {
            CT v;
            __builtin_memcpy(&v, c0 + sizeof(CT) * ((k * M + c_row(e, lane)) * N + col), sizeof v);
            c[k][e * F::CS] = v;
        }
    }

    for (unsigned it = 0; it < iterations; it++) {
#pragma unroll
        for (int u = 0; u < UNROLL; u += 2) {
#pragma unroll
            for (int k = 0; k < ACC; k++) c[k] = F::mma(a, b1, c[k], meta);
#pragma unroll
            for (int k = 0; k < ACC; k++) c[k] = F::mma(a, b2, c[k], meta);
        }
    }

#pragma unroll
    for (int e = 0; e < F::NC; e++) {
        CT sum = c[0][e * F::CS];
#pragma unroll
        for (int k = 1; k < ACC; k++) sum += c[k][e * F::CS];
        __builtin_memcpy(out + sizeof(CT) * (((size_t)wave * M + c_row(e, lane)) * N + col), &sum, sizeof sum);
    }
    if (threadIdx.x == 0) atomicAdd(workgroups_done, 1u);     // workloads/witness.py
}

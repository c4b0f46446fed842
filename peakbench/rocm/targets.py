"""What each AMD GPU target runs natively, test by test, and why not where it does not.

One entry per ISA family (the gfx targets that share an instruction set). For every catalog test
an entry holds either the native path (the instruction, and for matrix tests every MFMA/WMMA form
that takes those operand and accumulator types) or the unsupported reason with its [category].
The matrix forms name the FORM struct of shaders/matrix_amd.cu and the clang builtin it calls;
tests/test_shaders_matrix_amd.py keeps the two in step.

Sources:
  [TP]   LLVM llvm/lib/TargetParser/TargetParser.cpp, fillAMDGCNFeatureMap: the features of each
         processor (mai-insts, fp8-insts, xf32-insts, gfx950-insts, dot1..dot13-insts,
         wmma-256b-insts on gfx11, wmma-128b-insts on gfx12).
  [BI]   clang/include/clang/Basic/BuiltinsAMDGPU.def: the feature each builtin needs
         (sdot4/sdot8: dot1-insts; sudot4/sudot8: dot8-insts; fdot2_bf16_bf16: dot9-insts;
         fdot2_f32_bf16: dot12-insts; dot4_f32_fp8_fp8: dot11-insts; mfma_*_fp8/bf8: fp8-insts;
         mfma_*_xf32: xf32-insts; mfma_f32_16x16x32_f16 and mfma_scale_*_f8f6f4: gfx950-insts;
         wmma_*_w32: gfx11-insts; wmma_*_gfx12: gfx12-insts).
  [MI]   ROCm docs, "CDNA4 dense MFMA intrinsics" (and the CDNA/CDNA2/CDNA3 pages it links): shapes,
         fragment and accumulator layouts, ops and cycles per instruction; CDNA4 drops XF32.
  [ISA]  AMD Instinct MI100 (CDNA1), MI200 (CDNA2), MI300 (CDNA3), MI350 (CDNA4) and RDNA3 / RDNA4
         instruction set reference guides: MFMA and WMMA opcode lists; CDNA3 FP8 is the FNUZ
         encoding (E4M3 bias 8, E5M2 bias 16), CDNA4 and RDNA4 use the OCP encoding.
  [LLVM22] Compiler-checked: clang-22 (LLVM 22.1.8, Debian 12) compiles shaders/alu.cu, mem.cu and
         matrix_amd.cu for every target below with the backend's defines, and tests/test_rocm_isa.py
         checks each cell against the loop body of the assembly. Where it and the documents
         disagreed, the compiler's answer is the table's (the cell says so). gfx940 and gfx941 are not
         in LLVM 22 (removed in LLVM 21): gfx942 stands for CDNA3 there.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from peakbench.catalog import TestSpec


@dataclass(frozen=True)
class Mma:
    """One matrix instruction: the FORM of shaders/matrix_amd.cu that issues it through
    __builtin_amdgcn_<builtin>, its M x N x K, and (f8f6f4 forms) the operand format code."""
    form: str
    builtin: str
    m: int
    n: int
    k: int
    fmt: int | None = None         # cbsz/blgp of mfma_scale_*_f8f6f4: 0 E4M3, 1 E5M2, 4 E2M1

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.m, self.n, self.k)

    @property
    def mnemonic(self) -> str:
        """The instruction as the builtin names it. The disassembler may spell it differently on
        newer targets (an underscore before the type, a block count such as _2b_), so evidence
        matches opcodes by kind and shape (`issued_by`)."""
        return "v_" + self.builtin.removesuffix("_gfx12").removesuffix("_w32")

    def issued_by(self, opcode: str) -> bool:
        """Whether a disassembled opcode is this instruction (any spelling of its type suffix)."""
        kind = self.builtin.split("_")[0]                       # mfma or wmma
        return opcode.startswith(f"v_{kind}") and f"_{self.m}x{self.n}x{self.k}" in opcode


@dataclass(frozen=True)
class Family:
    name: str
    targets: tuple[str, ...]
    wave: int                                  # HIP's wavefront size on the family
    fp8: str | None                            # "fnuz" or "ocp": how its matrix units read FP8
    alu: dict[str, str]                        # compute test -> native instruction
    matrix: dict[str, tuple[Mma, ...]]         # matrix test -> native forms
    unsupported: dict[str, str] = field(default_factory=dict)   # test -> [category] reason

    def describe(self) -> str:
        return f"{self.name} ({', '.join(self.targets)})"


# -- the instructions ----------------------------------------------------------------------------
# MFMA, wave64 (CDNA). The builtin's name encodes M x N x K and the operand type [MI].
F16_32 = Mma("MfmaF16_32x32x8", "mfma_f32_32x32x8f16", 32, 32, 8)
F16_16 = Mma("MfmaF16_16x16x16", "mfma_f32_16x16x16f16", 16, 16, 16)
F16_32_K16 = Mma("MfmaF16_32x32x16", "mfma_f32_32x32x16_f16", 32, 32, 16)          # gfx950
F16_16_K32 = Mma("MfmaF16_16x16x32", "mfma_f32_16x16x32_f16", 16, 16, 32)          # gfx950
BF16_32_K4 = Mma("MfmaBf16_32x32x4", "mfma_f32_32x32x4bf16", 32, 32, 4)            # gfx908
BF16_16_K8 = Mma("MfmaBf16_16x16x8", "mfma_f32_16x16x8bf16", 16, 16, 8)            # gfx908
BF16_32_1K = Mma("MfmaBf16_32x32x8", "mfma_f32_32x32x8bf16_1k", 32, 32, 8)         # gfx90a+
BF16_16_1K = Mma("MfmaBf16_16x16x16", "mfma_f32_16x16x16bf16_1k", 16, 16, 16)      # gfx90a+
BF16_32_K16 = Mma("MfmaBf16_32x32x16", "mfma_f32_32x32x16_bf16", 32, 32, 16)       # gfx950
BF16_16_K32 = Mma("MfmaBf16_16x16x32", "mfma_f32_16x16x32_bf16", 16, 16, 32)       # gfx950
I8_32_K8 = Mma("MfmaI8_32x32x8", "mfma_i32_32x32x8i8", 32, 32, 8)                  # gfx908, gfx90a
I8_16_K16 = Mma("MfmaI8_16x16x16", "mfma_i32_16x16x16i8", 16, 16, 16)              # gfx908, gfx90a
I8_32_K16 = Mma("MfmaI8_32x32x16", "mfma_i32_32x32x16_i8", 32, 32, 16)             # gfx940+
I8_16_K32 = Mma("MfmaI8_16x16x32", "mfma_i32_16x16x32_i8", 16, 16, 32)             # gfx940+
I8_32_K32 = Mma("MfmaI8_32x32x32", "mfma_i32_32x32x32_i8", 32, 32, 32)             # gfx950
I8_16_K64 = Mma("MfmaI8_16x16x64", "mfma_i32_16x16x64_i8", 16, 16, 64)             # gfx950
XF32_32 = Mma("MfmaXf32_32x32x4", "mfma_f32_32x32x4_xf32", 32, 32, 4)              # gfx940-942 only
XF32_16 = Mma("MfmaXf32_16x16x8", "mfma_f32_16x16x8_xf32", 16, 16, 8)              # gfx940-942 only
FP8_32 = Mma("MfmaFp8_32x32x16", "mfma_f32_32x32x16_fp8_fp8", 32, 32, 16)          # gfx940+
FP8_16 = Mma("MfmaFp8_16x16x32", "mfma_f32_16x16x32_fp8_fp8", 16, 16, 32)
BF8_32 = Mma("MfmaBf8_32x32x16", "mfma_f32_32x32x16_bf8_bf8", 32, 32, 16)
BF8_16 = Mma("MfmaBf8_16x16x32", "mfma_f32_16x16x32_bf8_bf8", 16, 16, 32)
F64_16 = Mma("MfmaF64_16x16x4", "mfma_f64_16x16x4f64", 16, 16, 4)                  # gfx90a+


def f8f6f4(fmt: int) -> tuple[Mma, Mma]:
    """gfx950's scaled MFMA (scales fixed at 1.0) with operand format `fmt` for A and B."""
    return (Mma("MfmaF8f6f4_32x32x64", "mfma_scale_f32_32x32x64_f8f6f4", 32, 32, 64, fmt),
            Mma("MfmaF8f6f4_16x16x128", "mfma_scale_f32_16x16x128_f8f6f4", 16, 16, 128, fmt))


# WMMA, wave32 (RDNA). gfx11 replicates A and B in both half-waves; gfx12 splits K between them.
W11_F16F32 = Mma("Wmma11F16F32", "wmma_f32_16x16x16_f16_w32", 16, 16, 16)
W11_F16F16 = Mma("Wmma11F16F16", "wmma_f16_16x16x16_f16_w32", 16, 16, 16)
W11_BF16F32 = Mma("Wmma11Bf16F32", "wmma_f32_16x16x16_bf16_w32", 16, 16, 16)
W11_I8 = Mma("Wmma11I8", "wmma_i32_16x16x16_iu8_w32", 16, 16, 16)
W11_I4 = Mma("Wmma11I4", "wmma_i32_16x16x16_iu4_w32", 16, 16, 16)
W12_F16F32 = Mma("Wmma12F16F32", "wmma_f32_16x16x16_f16_w32_gfx12", 16, 16, 16)
W12_F16F16 = Mma("Wmma12F16F16", "wmma_f16_16x16x16_f16_w32_gfx12", 16, 16, 16)
W12_BF16F32 = Mma("Wmma12Bf16F32", "wmma_f32_16x16x16_bf16_w32_gfx12", 16, 16, 16)
W12_I8 = Mma("Wmma12I8", "wmma_i32_16x16x16_iu8_w32_gfx12", 16, 16, 16)
W12_I4 = Mma("Wmma12I4", "wmma_i32_16x16x16_iu4_w32_gfx12", 16, 16, 16)
W12_I4_K32 = Mma("Wmma12I4K32", "wmma_i32_16x16x32_iu4_w32_gfx12", 16, 16, 32)
W12_FP8 = Mma("Wmma12Fp8", "wmma_f32_16x16x16_fp8_fp8_w32_gfx12", 16, 16, 16)
W12_BF8 = Mma("Wmma12Bf8", "wmma_f32_16x16x16_bf8_bf8_w32_gfx12", 16, 16, 16)

E4M3, E5M2, E2M1 = 0, 1, 4     # f8f6f4 format codes [MI]

# -- vector ALU: the instruction of each step of shaders/alu.cu ----------------------------------
_ALU_COMMON = {
    "compute.fp64": "v_fma_f64",
    "compute.fp32": "v_fma_f32",
    "compute.fp16": "v_pk_fma_f16",
    "compute.int32": "v_mul_lo_u32 + v_add_u32 (no 32-bit integer multiply-add instruction)",
    "compute.int16": "v_mad_u16 / v_pk_mad_u16",
    # No 64-bit multiplier: the low halves' 32x32->64 multiply-add, the two cross products and
    # their sum into the high half [LLVM22].
    "compute.int64": "v_mad_u64_u32 + v_add3_u32 (and two v_mul_lo_u32 for the cross products: "
                     "no 64-bit integer multiply instruction)",
}
ALU_GCN = {**_ALU_COMMON, "compute.int8": "v_dot4_i32_i8 (__builtin_amdgcn_sdot4, dot1-insts)"}
# RDNA has no v_mul_lo_u32 + v_add_u32 pair in the loop: LLVM 22 folds each step into one 64-bit
# multiply-add whose low half is the 32-bit result [LLVM22] (the documents suggested the pair).
_RDNA_INT32 = "v_mad_u64_u32 / v_mad_co_u64_u32 (one 64-bit multiply-add a step, gfx12 spells it _co_ [LLVM22])"
ALU_RDNA2 = {**ALU_GCN, "compute.int32": _RDNA_INT32}
ALU_RDNA3 = {**_ALU_COMMON, "compute.int32": _RDNA_INT32,
             "compute.int8": "v_dot4_i32_iu8 (__builtin_amdgcn_sudot4, dot8-insts)"}
ALU_RDNA4 = {**ALU_RDNA3, "compute.int64": "v_mad_co_u64_u32 + v_add3_u32 (and two v_mul_lo_u32 for the "
                                           "cross products: no 64-bit integer multiply instruction)"}
# CDNA2+ also pairs FP32 lanes into v_pk_fma_f32 where the compiler vectorizes.
ALU_CDNA2 = {**ALU_GCN, "compute.fp32": "v_fma_f32 / v_pk_fma_f32"}

_FP16_ACC_MFMA = ("[hardware] MFMA has no FP16-accumulator form: {fam} accumulates FP16 products in "
                  "FP32 (matrix.fp16.fp32)")
_NO_INT4_MFMA = "[hardware] MFMA has no 4-bit integer operands on any CDNA target"
_NO_FP8_VALU = ("[hardware] {target} has FP8 only as an MFMA operand and in conversions "
                "(v_cvt_pk_fp8_f32, v_cvt_f32_fp8): no FP8 vector arithmetic")


def _gcn_vector_gaps(target: str, int4_dot: str = "v_dot8_i32_i4") -> dict[str, str]:
    """Vector tests with no kernel on a target whose only BF16/FP8/FP4 support (if any) is elsewhere."""
    return {
        "compute.bf16": f"[hardware] no BF16 arithmetic in the vector ALU of {target}: BF16 is an MFMA "
                        f"operand and a conversion type only",
        "compute.fp8_e4m3": f"[hardware] no FP8 type in the vector ALU of {target}",
        "compute.fp8_e5m2": f"[hardware] no FP8 type in the vector ALU of {target}",
        "compute.int4": f"[toolchain] no INT4 vector kernel in peakbench: {target}'s only 4-bit integer "
                        f"vector instruction is the dot product {int4_dot}",
        "compute.fp4": f"[hardware] no FP4 type on {target}",
    }


def _no_matrix(why: str) -> dict[str, str]:
    from peakbench.catalog import matrix
    return {t.name: f"[hardware] {why}" for t in matrix.TESTS}


CDNA1 = Family(
    "CDNA1", ("gfx908",), 64, None, ALU_GCN,
    matrix={"matrix.fp16.fp32": (F16_32, F16_16), "matrix.bf16.fp32": (BF16_32_K4, BF16_16_K8),
            "matrix.int8.int32": (I8_32_K8, I8_16_K16)},
    unsupported={
        "matrix.fp16.fp16": _FP16_ACC_MFMA.format(fam="CDNA1"),
        "matrix.tf32.fp32": "[hardware] no XF32 (TF32) MFMA on gfx908: XF32 exists on gfx940-gfx942 only",
        "matrix.fp8_e4m3.fp32": "[hardware] no FP8 MFMA on gfx908 (FP8 MFMA arrives with gfx940)",
        "matrix.fp8_e5m2.fp32": "[hardware] no FP8 MFMA on gfx908 (FP8 MFMA arrives with gfx940)",
        "matrix.int4.int32": _NO_INT4_MFMA,
        "matrix.fp4.fp32": "[hardware] no FP4 MFMA on gfx908 (FP4 arrives with gfx950's scaled MFMA)",
        "matrix.fp64.fp64": "[hardware] no FP64 MFMA on gfx908 (FP64 MFMA arrives with gfx90a)",
        **_gcn_vector_gaps("gfx908"),
    })

CDNA2 = Family(
    "CDNA2", ("gfx90a",), 64, None, ALU_CDNA2,
    matrix={"matrix.fp16.fp32": (F16_32, F16_16), "matrix.bf16.fp32": (BF16_32_1K, BF16_16_1K),
            "matrix.int8.int32": (I8_32_K8, I8_16_K16), "matrix.fp64.fp64": (F64_16,)},
    unsupported={
        "matrix.fp16.fp16": _FP16_ACC_MFMA.format(fam="CDNA2"),
        "matrix.tf32.fp32": "[hardware] no XF32 (TF32) MFMA on gfx90a: XF32 exists on gfx940-gfx942 only",
        "matrix.fp8_e4m3.fp32": "[hardware] no FP8 MFMA on gfx90a (FP8 MFMA arrives with gfx940)",
        "matrix.fp8_e5m2.fp32": "[hardware] no FP8 MFMA on gfx90a (FP8 MFMA arrives with gfx940)",
        "matrix.int4.int32": _NO_INT4_MFMA,
        "matrix.fp4.fp32": "[hardware] no FP4 MFMA on gfx90a (FP4 arrives with gfx950's scaled MFMA)",
        **_gcn_vector_gaps("gfx90a"),
    })

CDNA3 = Family(
    "CDNA3", ("gfx940", "gfx941", "gfx942"), 64, "fnuz", ALU_CDNA2,
    matrix={"matrix.fp16.fp32": (F16_32, F16_16), "matrix.bf16.fp32": (BF16_32_1K, BF16_16_1K),
            "matrix.tf32.fp32": (XF32_32, XF32_16), "matrix.fp8_e4m3.fp32": (FP8_32, FP8_16),
            "matrix.fp8_e5m2.fp32": (BF8_32, BF8_16), "matrix.int8.int32": (I8_32_K16, I8_16_K32),
            "matrix.fp64.fp64": (F64_16,)},
    unsupported={
        "matrix.fp16.fp16": _FP16_ACC_MFMA.format(fam="CDNA3"),
        "matrix.int4.int32": _NO_INT4_MFMA,
        "matrix.fp4.fp32": "[hardware] no FP4 MFMA on gfx942 (FP4 arrives with gfx950's scaled MFMA)",
        **_gcn_vector_gaps("gfx942"),
        "compute.fp8_e4m3": _NO_FP8_VALU.format(target="gfx942"),
        "compute.fp8_e5m2": _NO_FP8_VALU.format(target="gfx942"),
    })

CDNA4 = Family(
    "CDNA4", ("gfx950",), 64, "ocp", ALU_CDNA2,
    matrix={"matrix.fp16.fp32": (F16_32_K16, F16_16_K32, F16_32, F16_16),
            "matrix.bf16.fp32": (BF16_32_K16, BF16_16_K32, BF16_32_1K, BF16_16_1K),
            "matrix.fp8_e4m3.fp32": (*f8f6f4(E4M3), FP8_32, FP8_16),
            "matrix.fp8_e5m2.fp32": (*f8f6f4(E5M2), BF8_32, BF8_16),
            "matrix.int8.int32": (I8_32_K32, I8_16_K64, I8_32_K16, I8_16_K32),
            "matrix.fp4.fp32": f8f6f4(E2M1), "matrix.fp64.fp64": (F64_16,)},
    unsupported={
        "matrix.fp16.fp16": _FP16_ACC_MFMA.format(fam="CDNA4"),
        "matrix.tf32.fp32": "[hardware] gfx950 dropped the XF32 (TF32) MFMA of gfx940-gfx942 "
                            "(CDNA4 ISA; LLVM gives gfx950 no xf32-insts)",
        "matrix.int4.int32": _NO_INT4_MFMA,
        **_gcn_vector_gaps("gfx950"),
        "compute.bf16": "[toolchain] gfx950 has no packed BF16 FMA; its BF16 vector instructions are the "
                        "dot products v_dot2_f32_bf16 / v_dot2c_f32_bf16 (dot12/dot13-insts), which "
                        "__hfma2 on __hip_bfloat162 does not reach: the compiler emulates it in FP32",
        "compute.fp8_e4m3": _NO_FP8_VALU.format(target="gfx950"),
        "compute.fp8_e5m2": _NO_FP8_VALU.format(target="gfx950"),
        "compute.fp4": "[hardware] gfx950 has FP4 only as a scaled-MFMA operand and in conversions "
                       "(v_cvt_scalef32_pk_f32_fp4): no FP4 vector arithmetic",
    })

RDNA2 = Family(
    "RDNA2", ("gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"), 32, None,
    ALU_RDNA2, matrix={},
    unsupported={**_no_matrix("RDNA2 (gfx103x) has no matrix instructions (WMMA arrives with RDNA3, gfx11)"),
                 **_gcn_vector_gaps("gfx1030")})

_RDNA_BF16 = ("[toolchain] {target} has no packed BF16 FMA (v_pk_fma_bf16 arrives with gfx1250); its "
              "BF16 vector instructions are the dot products v_dot2_bf16_bf16 / v_dot2_f32_bf16 "
              "(dot9/dot12-insts), which __hfma2 on __hip_bfloat162 does not reach: the compiler "
              "emulates it in FP32")

RDNA3 = Family(
    "RDNA3", ("gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"),
    32, None, ALU_RDNA3,
    matrix={"matrix.fp16.fp32": (W11_F16F32,), "matrix.fp16.fp16": (W11_F16F16,),
            "matrix.bf16.fp32": (W11_BF16F32,), "matrix.int8.int32": (W11_I8,),
            "matrix.int4.int32": (W11_I4,)},
    unsupported={
        "matrix.tf32.fp32": "[hardware] RDNA3 WMMA has no TF32 or FP32 operands",
        "matrix.fp8_e4m3.fp32": "[hardware] no FP8 WMMA on RDNA3 (FP8 WMMA arrives with RDNA4, gfx12)",
        "matrix.fp8_e5m2.fp32": "[hardware] no FP8 WMMA on RDNA3 (FP8 WMMA arrives with RDNA4, gfx12)",
        "matrix.fp4.fp32": "[hardware] no FP4 WMMA on RDNA3",
        "matrix.fp64.fp64": "[hardware] RDNA WMMA has no FP64 form",
        **_gcn_vector_gaps("gfx1100", "v_dot8_i32_iu4"),
        "compute.bf16": _RDNA_BF16.format(target="gfx1100"),
    })

RDNA4 = Family(
    "RDNA4", ("gfx1200", "gfx1201"), 32, "ocp", ALU_RDNA4,
    matrix={"matrix.fp16.fp32": (W12_F16F32,), "matrix.fp16.fp16": (W12_F16F16,),
            "matrix.bf16.fp32": (W12_BF16F32,), "matrix.int8.int32": (W12_I8,),
            "matrix.int4.int32": (W12_I4_K32, W12_I4), "matrix.fp8_e4m3.fp32": (W12_FP8,),
            "matrix.fp8_e5m2.fp32": (W12_BF8,)},
    unsupported={
        "matrix.tf32.fp32": "[hardware] RDNA4 WMMA has no TF32 or FP32 operands",
        "matrix.fp4.fp32": "[hardware] no FP4 WMMA on RDNA4 (gfx12)",
        "matrix.fp64.fp64": "[hardware] RDNA WMMA has no FP64 form",
        **_gcn_vector_gaps("gfx1201", "v_dot8_i32_iu4"),
        "compute.bf16": _RDNA_BF16.format(target="gfx1201"),
        "compute.fp8_e4m3": "[toolchain] no FP8 vector kernel in peakbench: gfx1201's FP8 vector "
                            "instructions are the dot products v_dot4_f32_fp8_fp8 / _bf8_bf8 "
                            "(dot11-insts); FP8 is measured on WMMA (matrix.fp8_*)",
        "compute.fp8_e5m2": "[toolchain] no FP8 vector kernel in peakbench: gfx1201's FP8 vector "
                            "instructions are the dot products v_dot4_f32_fp8_fp8 / _bf8_bf8 "
                            "(dot11-insts); FP8 is measured on WMMA (matrix.fp8_*)",
    })

FAMILIES = (CDNA1, CDNA2, CDNA3, CDNA4, RDNA2, RDNA3, RDNA4)
_BY_TARGET = {t: f for f in FAMILIES for t in f.targets}


def base_target(gcn_arch_name: str) -> str:
    """gfx90a from gfx90a:sramecc+:xnack- (the features after the colons are a build setting)."""
    return gcn_arch_name.split(":", 1)[0].strip()


def family(arch: str) -> Family | None:
    return _BY_TARGET.get(base_target(arch))


def _unknown(arch: str) -> str:
    known = ", ".join(t for f in FAMILIES for t in f.targets)
    return (f"[toolchain] peakbench has no capability entry for {base_target(arch)} "
            f"(known targets: {known})")


def matrix_forms(arch: str, test_name: str) -> tuple[Mma, ...]:
    fam = family(arch)
    return fam.matrix.get(test_name, ()) if fam else ()


def matrix_support(arch: str, test_name: str) -> str | None:
    fam = family(arch)
    if fam is None:
        return _unknown(arch)
    if fam.matrix.get(test_name):
        return None
    return fam.unsupported.get(test_name, f"[hardware] {base_target(arch)} has no matrix instruction "
                                          f"for {test_name}")


def alu_instruction(arch: str, test_name: str) -> str | None:
    fam = family(arch)
    return fam.alu.get(test_name) if fam else None


def alu_reason(arch: str, test_name: str) -> str | None:
    """None when the vector test has a native instruction on `arch`, else the reason."""
    fam = family(arch)
    if fam is None:
        return None if test_name in _ALU_COMMON else _unknown(arch)
    if test_name in fam.alu:
        return None
    return fam.unsupported.get(test_name, f"[hardware] no vector instruction for {test_name} on "
                                          f"{base_target(arch)}")


def alu_support(test: TestSpec, rt) -> str | None:
    """The rule for compute.* tests (rt.arch is the gfx target)."""
    return alu_reason(rt.arch, test.name)


def table(arch: str) -> dict[str, dict]:
    """Every catalog test on `arch`: native (with its instructions) or the reason; for reports."""
    from peakbench.catalog import default_catalog
    out = {}
    for t in default_catalog().tests:
        if t.family == "compute":
            reason = alu_reason(arch, t.name)
            out[t.name] = {"native": reason is None, "instruction": alu_instruction(arch, t.name), "reason": reason}
        elif t.family == "matrix":
            reason = matrix_support(arch, t.name)
            out[t.name] = {"native": reason is None, "reason": reason,
                           "instructions": [f.mnemonic for f in matrix_forms(arch, t.name)]}
    return out

"""Matrix tests on AMD matrix cores: MFMA on CDNA, WMMA on RDNA3/RDNA4. Each instruction the
capability table (targets.py) lists for the target and the test's types is one variant (named by
its M x N x K), run by shaders/matrix_amd.cu under the contract of catalog/matrix_reference.py and
verified exactly against the host reference, as the Vulkan and CUDA matrix tests are.

Sparse tests (matrix.*.sparse) run CDNA3's and CDNA4's 2:4 sparse MFMA (v_smfmac_*: FP16, BF16,
INT8, FP8 with FP32/INT32 accumulators; clang's __builtin_amdgcn_smfmac_*) through the SPARSE forms
below, A compressed with its metadata word (workloads/matrix_sparse.py), ops counted
dense-equivalent. RDNA4's sparse WMMA (v_swmmac_*) is not issued (matrix_amd.cu has no such form):
those say [api]; no AMD target has a sparse TF32 instruction, and older targets no sparse one."""
from __future__ import annotations

import numpy as np

from peakbench.backend import Unsupported, release_on_failure
from peakbench.catalog import TestSpec, Variant
from peakbench.catalog import matrix as catalog
from peakbench.catalog import matrix_reference as ref
from peakbench.rocm import targets
from peakbench.rocm.targets import Mma
from peakbench.evidence.listing import instruction_mix, opcodes
from peakbench.workloads import matrix as shared
from peakbench.workloads import matrix_sparse as sparse

SOURCE = "matrix_amd.cu"
WAVES = 4                  # waves per block
BLOCKS_PER_UNIT = 4        # blocks per CU: 16 waves, four per SIMD, to cover the MFMA/WMMA latency

E2M1_BIAS = 1              # FP4 E2M1: 1 sign, 2 exponent, 1 mantissa bit
FNUZ = {"fp8_e4m3": 8, "fp8_e5m2": 16}    # CDNA3's FP8 exponent biases (OCP's + 1; no -0, no inf)



# 2:4 sparse MFMA (SMFMAC), CDNA3 (gfx940-gfx942) and CDNA4 (gfx950), wave64, by the test's dtype:
# the FORM of shaders/matrix_amd.cu and the builtin (K is the logical K).
_SMFMAC = {
    "fp16.fp32": (Mma("SmfmacF16_16x16x32", "smfmac_f32_16x16x32_f16", 16, 16, 32),
                  Mma("SmfmacF16_32x32x16", "smfmac_f32_32x32x16_f16", 32, 32, 16)),
    "bf16.fp32": (Mma("SmfmacBf16_16x16x32", "smfmac_f32_16x16x32_bf16", 16, 16, 32),
                  Mma("SmfmacBf16_32x32x16", "smfmac_f32_32x32x16_bf16", 32, 32, 16)),
    "int8.int32": (Mma("SmfmacI8_16x16x64", "smfmac_i32_16x16x64_i8", 16, 16, 64),
                   Mma("SmfmacI8_32x32x32", "smfmac_i32_32x32x32_i8", 32, 32, 32)),
    "fp8_e4m3.fp32": (Mma("SmfmacFp8_16x16x64", "smfmac_f32_16x16x64_fp8_fp8", 16, 16, 64),
                      Mma("SmfmacFp8_32x32x32", "smfmac_f32_32x32x32_fp8_fp8", 32, 32, 32)),
    "fp8_e5m2.fp32": (Mma("SmfmacBf8_16x16x64", "smfmac_f32_16x16x64_bf8_bf8", 16, 16, 64),
                      Mma("SmfmacBf8_32x32x32", "smfmac_f32_32x32x32_bf8_bf8", 32, 32, 32)),
}
SPARSE_FORMS = {"CDNA3": _SMFMAC, "CDNA4": _SMFMAC}
# Sparse instructions no form here issues (clang 22: __builtin_amdgcn_swmmac_* for gfx12).
SWMMAC = ("fp16.fp32", "fp16.fp16", "bf16.fp32", "int8.int32", "fp8_e4m3.fp32", "fp8_e5m2.fp32")
BITS = {"fp16": 16, "bf16": 16, "int8": 8, "fp8_e4m3": 8, "fp8_e5m2": 8}


def forms(test: TestSpec, arch: str) -> tuple[Mma, ...]:
    """The instructions that run `test` on `arch`: the table's, or for a sparse test SPARSE_FORMS'."""
    if not catalog.is_sparse(test):
        return targets.matrix_forms(arch, test.name)
    fam = targets.family(arch)
    return SPARSE_FORMS.get(fam.name, {}).get(test.dtype, ()) if fam else ()


def sparse_support(test: TestSpec, arch: str) -> str | None:
    fam, target = targets.family(arch), targets.base_target(arch)
    if fam is None:
        return targets.matrix_support(arch, test.name)
    if forms(test, arch):
        return None
    a, c = test.types
    if fam.name == "RDNA4" and test.dtype in SWMMAC:
        return (f"[api] {target} has 2:4 sparse WMMA (v_swmmac_*) for {test.dtype}; shaders/matrix_amd.cu "
                f"does not issue it")
    if fam.name in SPARSE_FORMS or fam.name == "RDNA4":
        return f"[hardware] {target} has no sparse {a.upper()} x {a.upper()} + {c.upper()} matrix instruction"
    return (f"[hardware] {target} ({fam.name}) has no sparse matrix instruction (2:4 sparse MFMA, "
            f"v_smfmac, arrives with CDNA3 gfx940; sparse WMMA, v_swmmac, with RDNA4 gfx12)")


def support(test: TestSpec, rt) -> str | None:
    if catalog.is_sparse(test):
        return sparse_support(test, rt.arch)
    return targets.matrix_support(rt.arch, test.name)


def variants(test: TestSpec, rt) -> tuple[Variant, ...]:
    """One subgroup-scope shape per instruction the target has for these types."""
    return tuple(dict.fromkeys(catalog.shape(f.m, f.n, f.k) for f in forms(test, rt.arch)))


def form_for(test: TestSpec, variant: Variant, arch: str) -> targets.Mma:
    for f in forms(test, arch):
        if f.shape == tuple(variant.shape):
            return f
    raise Unsupported(f"[hardware] {targets.base_target(arch)} has no {test.dtype} matrix instruction of "
                      f"shape {variant.name}")


def _powers_of_two(values: np.ndarray, mant: int, bias: int, exp_bits: int, sign_bit: int) -> np.ndarray:
    """Zero and signed powers of two (all these inputs hold) as minifloat codes."""
    codes = np.zeros(values.shape, dtype=np.uint8)
    nz = values != 0
    exp = np.log2(np.abs(values[nz])).astype(np.int64)
    assert np.all(2.0 ** exp == np.abs(values[nz])), "minifloat inputs are powers of two"
    field = exp + bias
    assert np.all((field > 0) & (field < (1 << exp_bits))), "normal numbers of the format"
    codes[nz] = ((field << mant) | np.where(values[nz] < 0, 1 << sign_bit, 0)).astype(np.uint8)
    return codes


def _nibbles(codes: np.ndarray) -> bytes:
    """4-bit codes two to a byte, low nibble first (the element with the lower index)."""
    flat = (codes.reshape(-1).astype(np.uint8) & 0xF)
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8).tobytes()


def encode(values: np.ndarray, kind: str, fp8: str = "ocp") -> bytes:
    """A matrix row-major in operand type `kind`, as shaders/matrix_amd.cu reads it. FP8 in the
    target's encoding: "fnuz" on gfx940-gfx942 (biases 8 and 16), "ocp" elsewhere."""
    if kind in ref.FP8:
        mant, bias = ref.FP8[kind]
        bias = FNUZ[kind] if fp8 == "fnuz" else bias
        return _powers_of_two(values, mant, bias, 7 - mant, 7).tobytes()
    if kind == "fp4":
        return _nibbles(_powers_of_two(values, 1, E2M1_BIAS, 2, 3))
    if kind == "int4":
        assert np.all((values >= -8) & (values <= 7)), "INT4 range"
        return _nibbles(values.astype(np.int64) & 0xF)
    if kind == "tf32":
        return ref._encode(values, "fp32")
    return ref._encode(values, kind)


def operand_bytes(inputs: ref.MatrixInputs, verify: bool, fp8: str = "ocp") -> bytes:
    """A, B1, B2 packed in the operand type; B2 = B1 to verify, -B1 to time."""
    b2 = inputs.b if verify else -inputs.b
    return b"".join(encode(x, inputs.operand, fp8) for x in (inputs.a, inputs.b, b2))


class MatrixWorkload(shared.MatrixWorkload):
    """One instruction: a kernel keeping A, B1, B2 and ACC accumulator tiles in registers per wave."""

    @release_on_failure
    def __init__(self, test: TestSpec, variant: Variant, rt):
        self.form = form_for(test, variant, rt.arch)
        a, c = test.types
        fam = targets.family(rt.arch)
        self.wave = rt.limits.warp
        if self.wave != fam.wave:
            raise Unsupported(f"[toolchain] {self.form.mnemonic} needs wave{fam.wave} and the runtime "
                              f"reports wave{self.wave}")
        m, n, k = self.form.shape
        self.accumulators = variant.accumulators or test.accumulators
        self.fp8 = fam.fp8 or "ocp"
        defines = {f"FORM_{self.form.form}": 1, "ACC": self.accumulators, "UNROLL": variant.unroll,
                   "WAVES": WAVES, "WAVE": self.wave}
        if self.form.fmt is not None:
            defines["FMT"] = self.form.fmt
        self.kernel = rt.compile(SOURCE, defines, "mma_peak", block=WAVES * self.wave, args="bbbbu")
        self.grid = max(1, rt.limits.units * BLOCKS_PER_UNIT)
        self.owners = self.grid * WAVES                        # one tile set per wave
        if catalog.is_sparse(test):
            inputs = sparse.inputs(self.form.shape, a, c, self.accumulators, BITS[a])
        else:
            inputs = ref.make_inputs(m, n, k, a, c, self.accumulators)
        self.setup(test, variant, rt, inputs, c)
        self.params = {"variant": variant.name, "kernel": f"{SOURCE} ({self.form.form})", "m": m, "n": n, "k": k,
                       "operands": a, "accumulator": c, "workgroup_size": WAVES * self.wave, "workgroups": self.grid,
                       "tile_owners": self.owners, "wave": self.wave, "accumulators": self.accumulators,
                       "unroll": variant.unroll, "ops_per_step": variant.ops_per_step, "arch": rt.arch}
        self.evidence = {"instruction": self.form.mnemonic, "builtin": f"__builtin_amdgcn_{self.form.builtin}",
                         "isa_family": fam.name}
        if a in ref.FP8:
            self.evidence["fp8_encoding"] = ("FNUZ (E4M3 bias 8, E5M2 bias 16)" if self.fp8 == "fnuz"
                                             else "OCP (E4M3 bias 7, E5M2 bias 15)")
        if self.form.fmt is not None:
            self.evidence["scale"] = "E8M0 1.0 for A and B (unscaled)"
        if catalog.is_sparse(test):
            self.params.update(ops_counted=catalog.OPS_COUNTED, sparsity="2:4", metadata=f"{inputs.metadata:#010x}")
        listing = rt.disassemble(self.kernel)
        if listing:
            ops = opcodes(listing)
            self.evidence["instruction_mix"] = instruction_mix(listing)
            self.evidence["matrix_instructions"] = sum(1 for op in ops if self.form.issued_by(op))

    def operands(self, verify: bool) -> bytes:
        data = operand_bytes(self.inputs, verify, self.fp8)
        return data + self.inputs.metadata_bytes() if isinstance(self.inputs, ref.SparseInputs) else data


class SparseMfmaWorkload(sparse.SparseMatrixWorkload, MatrixWorkload):
    """An SMFMAC form: MatrixWorkload's kernel and launch, verified with each metadata word."""


def workload(test: TestSpec, variant: Variant, rt) -> MatrixWorkload:
    if catalog.is_sparse(test):
        return SparseMfmaWorkload(test, variant, rt)
    return MatrixWorkload(test, variant, rt)

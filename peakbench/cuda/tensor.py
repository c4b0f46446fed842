"""Matrix tests on NVIDIA tensor cores: which paths an architecture runs natively, the variants
(one per path and shape), and the workload that times one of them.

Two kernel families, both under the contract of catalog/matrix_reference.py:
- shaders/tensor_mma.cu: warp-level mma.sync (sm_80 and newer), operands and ACC tiles per warp in
  registers;
- shaders/tensor_wgmma.cu: warpgroup-level wgmma.mma_async (sm_90a), operands in shared memory read
  through descriptors, a 64 x 256 accumulator per warpgroup.
- the sparse tests (matrix.*.sparse) through the same two kernels' sparse forms, mma.sp (sm_80 and
  newer; the ::ordered_metadata spelling ptxas asks for) and wgmma.mma_async.sp (sm_90a), A 2:4
  sparse with its metadata word (workloads/matrix_sparse.py); K is the logical K, so the ops
  counted are the dense-equivalent 2*M*N*K.
A variant is named `<path>:m<M>n<N>k<K>`; the best one is the test's value, every one lands in
params["variants"].

What is native where was read off ptxas (CUDA 13.0) output: sm_90 and sm_100 lower mma.sync FP8
to FP16 conversions and HMMA, and mma.sync .s4 on sm_90 and newer to INT8 steps, so those paths
are not offered there (a proxy type under another label); the same holds for mma.sp FP8 on sm_90
(HMMA.SP.16832.F32 steps). verify() also refuses a variant whose
SASS, where a disassembler is installed, lacks the tensor opcode its form must issue.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from peakbench.backend import release_on_failure
from peakbench.catalog import TestSpec, Variant
from peakbench.catalog import matrix as catalog
from peakbench.catalog import matrix_reference as ref
from peakbench.evidence import sass
from peakbench.workloads import matrix as shared
from peakbench.workloads import matrix_sparse as sparse

MMA_SOURCE, WGMMA_SOURCE = "tensor_mma.cu", "tensor_wgmma.cu"

# Launch geometry. mma.sync: blocks of MMA_WARPS warps, MMA_MIN_BLOCKS of them resident per SM
# (the register cap that __launch_bounds__ sets), each warp with the test's accumulator tiles.
# wgmma: one block per SM of WGMMA_GROUPS warpgroups sharing the operands in shared memory, each
# with one 64 x 256 accumulator (128 registers a thread in FP32: two would not fit).
MMA_WARPS, MMA_MIN_BLOCKS = 4, 4
WGMMA_GROUPS, WGMMA_ACC = 2, 1

# Operand encoding in matrix_reference terms (TF32 travels as FP32; INT4 is packed here).
ENCODING = {"tf32": "fp32", "int4": "int8"}
BITS = {"fp16": 16, "bf16": 16, "tf32": 32, "fp8_e4m3": 8, "fp8_e5m2": 8, "int8": 8, "int4": 4, "fp64": 64}
# The SASS opcodes (first word) a tensor-core step becomes.
TENSOR_OPCODES = ("HMMA", "IMMA", "QMMA", "DMMA", "HGMMA", "IGMMA", "QGMMA")


@dataclass(frozen=True)
class Form:
    """One tensor-core instruction: the test it measures, its path and shape, the struct that
    issues it in the kernel source (FORM), and the SASS opcode it must become."""
    test: str                  # "<operands>.<accumulator>", the test's dtype
    path: str                  # "mma.sync", "wgmma", or sparse "mma.sp", "wgmma.sp"
    kernel: str                # FORM: struct name in the source
    shape: tuple[int, int, int]
    instruction: str           # the PTX instruction (without operands)
    opcode: str                # SASS opcode prefix, e.g. HGMMA.64x256x16.F32.BF16
    archs: str                 # which compute capabilities run it natively (see native())
    also: tuple[str, ...] = () # the same opcode as older disassemblers spell it (DMMA.884)
    sparse: bool = False       # A 2:4 sparse (mma.sp, wgmma.mma_async.sp): a matrix.*.sparse test's

    @property
    def name(self) -> str:
        m, n, k = self.shape
        return f"{self.path}:m{m}n{n}k{k}"

    def issued(self, opcodes) -> bool:
        """Whether a listing's tensor opcodes include this form's (so ptxas did not emulate it)."""
        return any(op.startswith(want) for op in opcodes for want in (self.opcode, *self.also))

    @property
    def warpgroup(self) -> bool:
        return self.path.startswith("wgmma")

    @property
    def source(self) -> str:
        return WGMMA_SOURCE if self.warpgroup else MMA_SOURCE

    @property
    def operand(self) -> str:
        return self.test.split(".")[0]

    @property
    def accumulator(self) -> str:
        return self.test.split(".")[1]


def _mma(test, kernel, shape, types, opcode, archs="sm80+", also=()):
    m, n, k = shape
    return Form(test, "mma.sync", kernel, shape, f"mma.sync.aligned.m{m}n{n}k{k}.row.col.{types}", opcode, archs,
                also)


def _wgmma(test, kernel, k, types, opcode):
    return Form(test, "wgmma", kernel, (64, 256, k), f"wgmma.mma_async.sync.aligned.m64n256k{k}.{types}",
                opcode, "sm90a")


def _mma_sp(test, kernel, shape, types, opcode, archs="sm80+"):
    m, n, k = shape
    return Form(test, "mma.sp", kernel, shape, f"mma.sp::ordered_metadata.sync.aligned.m{m}n{n}k{k}.row.col.{types}",
                opcode, archs, sparse=True)


def _wgmma_sp(test, kernel, k, types, opcode):
    return Form(test, "wgmma.sp", kernel, (64, 256, k),
                f"wgmma.mma_async.sp.sync.aligned.m64n256k{k}.{types}", opcode, "sm90a", sparse=True)


FORMS = (
    _mma("fp16.fp16", "F16F16", (16, 8, 16), "f16.f16.f16.f16", "HMMA.16816.F16"),
    _wgmma("fp16.fp16", "F16F16", 16, "f16.f16.f16", "HGMMA.64x256x16.F16"),
    _mma("fp16.fp32", "F16F32", (16, 8, 16), "f32.f16.f16.f32", "HMMA.16816.F32"),
    _wgmma("fp16.fp32", "F16F32", 16, "f32.f16.f16", "HGMMA.64x256x16.F32"),
    _mma("bf16.fp32", "Bf16F32", (16, 8, 16), "f32.bf16.bf16.f32", "HMMA.16816.F32.BF16"),
    _wgmma("bf16.fp32", "Bf16F32", 16, "f32.bf16.bf16", "HGMMA.64x256x16.F32.BF16"),
    _mma("tf32.fp32", "Tf32F32", (16, 8, 8), "f32.tf32.tf32.f32", "HMMA.1688.F32.TF32"),
    _wgmma("tf32.fp32", "Tf32F32", 8, "f32.tf32.tf32", "HGMMA.64x256x8.F32.TF32"),
    _mma("fp8_e4m3.fp32", "E4m3F32", (16, 8, 32), "f32.e4m3.e4m3.f32", "QMMA.16832.F32.E4M3.E4M3", "fp8"),
    _wgmma("fp8_e4m3.fp32", "E4m3F32", 32, "f32.e4m3.e4m3", "QGMMA.64x256x32.F32.E4M3.E4M3"),
    _mma("fp8_e5m2.fp32", "E5m2F32", (16, 8, 32), "f32.e5m2.e5m2.f32", "QMMA.16832.F32.E5M2.E5M2", "fp8"),
    _wgmma("fp8_e5m2.fp32", "E5m2F32", 32, "f32.e5m2.e5m2", "QGMMA.64x256x32.F32.E5M2.E5M2"),
    _mma("int8.int32", "S8S32", (16, 8, 32), "s32.s8.s8.s32", "IMMA.16832.S8.S8"),
    _wgmma("int8.int32", "S8S32", 32, "s32.s8.s8", "IGMMA.64x256x32.S8.S8"),
    _mma("int4.int32", "S4S32", (16, 8, 64), "s32.s4.s4.s32", "IMMA.16864.S4.S4", "int4"),
    _mma("fp64.fp64", "F64M8K4", (8, 8, 4), "f64.f64.f64.f64", "DMMA.8x8x4", also=("DMMA.884",)),
    _mma("fp64.fp64", "F64M16K4", (16, 8, 4), "f64.f64.f64.f64", "DMMA.16x8x4", "sm90"),
    _mma("fp64.fp64", "F64M16K8", (16, 8, 8), "f64.f64.f64.f64", "DMMA.16x8x8", "sm90"),
    _mma("fp64.fp64", "F64M16K16", (16, 8, 16), "f64.f64.f64.f64", "DMMA.16x8x16", "sm90"),
    # Sparse: K is the logical K (the compressed A holds K/2), opcodes as ptxas 13.0 emits them.
    _mma_sp("fp16.fp16", "F16F16Sp", (16, 8, 32), "f16.f16.f16.f16", "HMMA.SP.16832.F16"),
    _wgmma_sp("fp16.fp16", "F16F16Sp", 32, "f16.f16.f16", "HGMMA.SP.64x256x32.F16"),
    _mma_sp("fp16.fp32", "F16F32Sp", (16, 8, 32), "f32.f16.f16.f32", "HMMA.SP.16832.F32"),
    _wgmma_sp("fp16.fp32", "F16F32Sp", 32, "f32.f16.f16", "HGMMA.SP.64x256x32.F32"),
    _mma_sp("bf16.fp32", "Bf16F32Sp", (16, 8, 32), "f32.bf16.bf16.f32", "HMMA.SP.16832.F32.BF16"),
    _wgmma_sp("bf16.fp32", "Bf16F32Sp", 32, "f32.bf16.bf16", "HGMMA.SP.64x256x32.F32.BF16"),
    _mma_sp("tf32.fp32", "Tf32F32Sp", (16, 8, 16), "f32.tf32.tf32.f32", "HMMA.SP.16816.F32.TF32"),
    _wgmma_sp("tf32.fp32", "Tf32F32Sp", 16, "f32.tf32.tf32", "HGMMA.SP.64x256x16.F32.TF32"),
    _mma_sp("fp8_e4m3.fp32", "E4m3F32Sp", (16, 8, 64), "f32.e4m3.e4m3.f32", "QMMA.SP.16864.F32.E4M3.E4M3", "fp8"),
    _wgmma_sp("fp8_e4m3.fp32", "E4m3F32Sp", 64, "f32.e4m3.e4m3", "QGMMA.SP.64x256x64.F32.E4M3.E4M3"),
    _mma_sp("fp8_e5m2.fp32", "E5m2F32Sp", (16, 8, 64), "f32.e5m2.e5m2.f32", "QMMA.SP.16864.F32.E5M2.E5M2", "fp8"),
    _wgmma_sp("fp8_e5m2.fp32", "E5m2F32Sp", 64, "f32.e5m2.e5m2", "QGMMA.SP.64x256x64.F32.E5M2.E5M2"),
    _mma_sp("int8.int32", "S8S32Sp", (16, 8, 64), "s32.s8.s8.s32", "IMMA.SP.16864.S8.S8"),
    _wgmma_sp("int8.int32", "S8S32Sp", 64, "s32.s8.s8", "IGMMA.SP.64x256x64.S8.S8"),
)


def native(form: Form, cc: tuple[int, int]) -> bool:
    """Whether compute capability `cc` runs the form's instruction on its tensor cores."""
    if cc < (8, 0):
        return False
    return {"sm80+": True,
            "sm90a": cc == (9, 0),                  # wgmma: sm_90a only (Blackwell has tcgen05)
            "sm90": cc == (9, 0),                   # newer chips split these FP64 shapes into m8n8k4
            "fp8": cc == (8, 9) or cc >= (12, 0),   # Ada and consumer Blackwell: QMMA
            "int4": cc < (9, 0)}[form.archs]        # Ampere and Ada: IMMA .S4


def _arch(rt) -> str:
    return getattr(rt, "arch", None) or "sm_%d%d" % tuple(rt.cc)


def measures(form: Form, test: TestSpec) -> bool:
    """Whether `form` is an instruction of `test` (its types, and sparse for a sparse test)."""
    return form.test == test.dtype and form.sparse == catalog.is_sparse(test)


def support(test: TestSpec, rt) -> str | None:
    """None when at least one path runs the test natively here, else the reason."""
    a, c = test.types
    cc, arch = tuple(rt.cc), _arch(rt)
    if any(native(f, cc) for f in FORMS if measures(f, test)):
        return None
    if catalog.is_sparse(test) and cc < (8, 0):
        return f"[hardware] {arch} has no sparse tensor cores (2:4 sparsity arrives with Ampere, sm_80)"
    if cc < (8, 0):
        return (f"[api] the CUDA tensor-core kernels issue mma.sync shapes of sm_80 and newer "
                f"(m16n8k16 and wider); {arch} is older")
    if a == "fp4":
        if cc == (9, 0):
            return "[hardware] Hopper (sm_90) has no FP4 tensor-core path (FP4 arrives with Blackwell)"
        if cc < (10, 0):
            return f"[hardware] {arch} has no FP4 tensor-core path (FP4 arrives with Blackwell)"
        return (f"[api] FP4 on {arch} runs through block-scaled tcgen05 or mma.sync kind::f8f6f4, "
                f"which the CUDA backend does not issue")
    if a == "int4":
        if cc == (9, 0):
            return ("[hardware] Hopper (sm_90) has no INT4 tensor-core path: ptxas lowers mma.sync "
                    ".s4 to unpacking and INT8 steps, and wgmma has no 4-bit integer type")
        return f"[hardware] {arch} has no INT4 tensor-core path: ptxas lowers mma.sync .s4 to INT8 steps"
    if a.startswith("fp8"):
        if cc < (8, 9):
            return f"[hardware] {arch} has no FP8 tensor-core path (FP8 arrives with Ada, sm_89, and Hopper, sm_90)"
        return (f"[api] FP8 on {arch} runs natively only through tcgen05, which the CUDA backend does "
                f"not issue (ptxas lowers mma.sync FP8 to FP16 steps there)")
    return f"[hardware] {arch} has no native {a.upper()} x {a.upper()} + {c.upper()} tensor-core path"


def forms(test: TestSpec, rt) -> list[Form]:
    """The forms that run `test` natively on this device, mma.sync first."""
    cc = tuple(rt.cc)
    return [f for f in FORMS if measures(f, test) and native(f, cc)]


def variant_of(form: Form) -> Variant:
    m, n, k = form.shape
    if form.warpgroup:
        return Variant(form.name, width=1, ops_per_step=2 * m * n * k, unroll=catalog.UNROLL, shape=form.shape,
                       accumulators=WGMMA_ACC, scope="warpgroup", invocations=128)
    return Variant(form.name, width=1, ops_per_step=2 * m * n * k, unroll=catalog.UNROLL, shape=form.shape,
                   scope="subgroup", invocations=32)


def variants(test: TestSpec, rt) -> tuple[Variant, ...]:
    return tuple(variant_of(f) for f in forms(test, rt))


def find_form(test: TestSpec, name: str) -> Form:
    for f in FORMS:
        if measures(f, test) and f.name == name:
            return f
    raise KeyError(f"{test.name} has no tensor-core variant {name}")


def defines(form: Form, variant: Variant, accumulators: int) -> dict:
    """The -D settings of one variant's kernel."""
    settings = {"FORM": form.kernel, "ACC": accumulators, "UNROLL": variant.unroll}
    if form.warpgroup:
        settings["WARPGROUPS"] = WGMMA_GROUPS
    else:
        settings.update(WARPS=MMA_WARPS, MIN_BLOCKS=MMA_MIN_BLOCKS)
    return settings


def kernel_name(form: Form) -> str:
    return "wgmma_peak" if form.warpgroup else "mma_peak"


def encode_int4(values: np.ndarray) -> bytes:
    """Signed 4-bit integers, two to a byte, the lower element in the low nibble."""
    nibbles = (values.astype(np.int64).ravel() & 0xF).astype(np.uint8)
    if nibbles.size % 2:
        nibbles = np.append(nibbles, np.uint8(0))
    return (nibbles[0::2] | (nibbles[1::2] << 4)).tobytes()


def operand_bytes(form: Form, inputs: ref.MatrixInputs, verify: bool) -> bytes:
    if form.operand != "int4":
        return inputs.operands(verify)
    b2 = inputs.b if verify else -inputs.b
    return b"".join(encode_int4(x) for x in (inputs.a, inputs.b, b2))


def tensor_opcodes(listing: str) -> dict[str, int]:
    """Tensor-core opcodes of a SASS listing with all their modifiers (HGMMA.64x256x16.F32), counted."""
    return dict(Counter(op for op in sass.opcodes(listing) if op.split(".")[0] in TENSOR_OPCODES).most_common())


class TensorWorkload(shared.MatrixWorkload):
    """One form on one device: the compiled kernel, its geometry and operand encoding."""

    @release_on_failure
    def __init__(self, test: TestSpec, variant: Variant, rt):
        self.form = form = find_form(test, variant.name)
        m, n, k = form.shape
        wgmma = form.warpgroup
        self.accumulators = variant.accumulators or test.accumulators
        settings = defines(form, variant, self.accumulators)
        self.block = 128 * WGMMA_GROUPS if wgmma else 32 * MMA_WARPS
        self.kernel = rt.compile(form.source, settings, kernel_name(form), block=self.block, args="bbbbu")
        if wgmma:
            per_unit, self.owners_per_block = 1, WGMMA_GROUPS
        else:
            self.owners_per_block = MMA_WARPS
            per_unit = self._resident_blocks(MMA_MIN_BLOCKS)
        self.grid = rt.limits.units * per_unit
        self.owners = self.grid * self.owners_per_block
        encoding = ENCODING.get(form.operand, form.operand)
        if form.sparse:
            inputs = sparse.inputs(form.shape, encoding, form.accumulator, self.accumulators, BITS[form.operand])
        else:
            inputs = ref.make_inputs(m, n, k, encoding, form.accumulator, self.accumulators)
        self.setup(test, variant, rt, inputs, form.accumulator)
        self.params = {
            "variant": variant.name, "path": form.path, "shape": f"m{m}n{n}k{k}", "instruction": form.instruction,
            "source": f"shaders/{form.source}", "form": form.kernel, "operands": form.operand,
            "accumulator": form.accumulator, "workgroups": self.grid, "workgroup_size": self.block,
            ("warpgroups_per_block" if wgmma else "warps_per_block"): self.owners_per_block,
            "blocks_per_sm": per_unit, "tile_owners": self.owners, "accumulators": self.accumulators,
            "unroll": variant.unroll, "ops_per_step": variant.ops_per_step,
            "shared_bytes": (m * k // (2 if form.sparse else 1) + 2 * k * n) * BITS[form.operand] // 8 if wgmma else 0,
            "arch": _arch(rt)}
        if form.sparse:
            self.params.update(ops_counted=sparse.OPS_COUNTED, sparsity="2:4" if BITS[form.operand] < 32 else
                               "1:2 (TF32)", metadata=f"{inputs.metadata:#010x}", sparsity_selector=0)
        registers = self._attribute(4)        # CU_FUNC_ATTRIBUTE_NUM_REGS
        if registers:
            self.params["registers"] = registers
        self.listing = rt.disassemble(self.kernel)
        # the work and types guards: the loop's tensor-core steps, each the size its opcode names
        self.census, self.loop_items = sass.tensor_census(self.listing), variant.unroll * self.accumulators
        self.evidence = {"ptx_instruction": form.instruction, "expected_opcode": form.opcode}
        if self.listing:
            found = tensor_opcodes(self.listing)
            self.evidence.update(sass_mix=sass.instruction_mix(self.listing), tensor_opcodes=found,
                                 tensor_opcode=next(iter(found), None))
        else:
            self.evidence["sass"] = "no disassembler (cuobjdump or nvdisasm) installed"

    def _attribute(self, attribute: int) -> int | None:
        try:
            import cupy as cp
            return int(cp.cuda.driver.funcGetAttribute(attribute, self.kernel.handle.ptr))
        except Exception:
            return None

    def _resident_blocks(self, fallback: int) -> int:
        """Blocks of this kernel that fit on one SM at once (one full wave), from the driver."""
        try:
            import cupy as cp
            n = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(self.kernel.handle.ptr, self.block, 0)
            return max(1, int(n))
        except Exception:
            return fallback

    def operands(self, verify: bool) -> bytes:
        return operand_bytes(self.form, self.inputs, verify)

    def precheck(self) -> str | None:
        """The SASS issues the form's tensor opcode (where it can be read), or ptxas emulated it."""
        if self.listing and not self.form.issued(tensor_opcodes(self.listing)):
            return (f"the SASS has no {self.form.opcode} for {self.form.instruction} (tensor opcodes: "
                    f"{tensor_opcodes(self.listing) or 'none'}): ptxas emulated the step")
        return None


class SparseTensorWorkload(sparse.SparseMatrixWorkload, TensorWorkload):
    """A sparse form: TensorWorkload's kernel and geometry, verified with each metadata word."""


def workload(test: TestSpec, variant: Variant, rt) -> TensorWorkload:
    if find_form(test, variant.name).sparse:
        return SparseTensorWorkload(test, variant, rt)
    return TensorWorkload(test, variant, rt)

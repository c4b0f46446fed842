"""peakbench.cuda.tensor: support() and variants() decide per compute capability from a fake
runtime; the op count, the items, the INT4 packing and the tensor opcodes of a SASS listing. With
--gpu on an NVIDIA GPU: every variant offered there matches the host reference, and its SASS
(where cuobjdump or nvdisasm is installed) shows the tensor opcode. (The kernels themselves, in
PTX: tests/test_shaders_tensor.py.)"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from peakbench.catalog import default_catalog
from peakbench.catalog import matrix as catalog
from peakbench.cuda import tensor
from peakbench.workloads import matrix as shared

CATALOG = default_catalog()
MATRIX = [t for t in CATALOG.tests if t.family == "matrix"]
CATALOG_TESTS = {t.name: t for t in default_catalog().tests}


def fake_rt(cc):
    return SimpleNamespace(cc=cc, arch="sm_%d%d" % cc + ("a" if cc[0] >= 9 else ""))


def test_every_matrix_test_has_a_decision_on_each_architecture():
    for cc in ((8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)):
        rt = fake_rt(cc)
        for test in MATRIX:
            reason = tensor.support(test, rt)
            offered = tensor.variants(test, rt)
            assert (reason is None) == bool(offered), (cc, test.name)
            if reason:
                assert reason.startswith(("[hardware]", "[driver]", "[toolchain]", "[api]")), reason


def names(test, cc):
    return [v.name for v in tensor.variants(CATALOG.get(test), fake_rt(cc))]


def test_hopper_offers_both_paths_where_both_are_native():
    for test in ("matrix.fp16.fp16", "matrix.fp16.fp32", "matrix.bf16.fp32"):
        assert names(test, (9, 0)) == ["mma.sync:m16n8k16", "wgmma:m64n256k16"]
    assert names("matrix.tf32.fp32", (9, 0)) == ["mma.sync:m16n8k8", "wgmma:m64n256k8"]
    assert names("matrix.int8.int32", (9, 0)) == ["mma.sync:m16n8k32", "wgmma:m64n256k32"]
    # ptxas lowers mma.sync FP8 to FP16 steps on sm_90: only wgmma measures FP8 there.
    assert names("matrix.fp8_e4m3.fp32", (9, 0)) == ["wgmma:m64n256k32"]
    assert names("matrix.fp8_e5m2.fp32", (9, 0)) == ["wgmma:m64n256k32"]
    assert names("matrix.fp64.fp64", (9, 0)) == ["mma.sync:m8n8k4", "mma.sync:m16n8k4", "mma.sync:m16n8k8",
                                                  "mma.sync:m16n8k16"]


def test_other_architectures_offer_mma_sync_only():
    assert names("matrix.bf16.fp32", (8, 0)) == ["mma.sync:m16n8k16"]
    assert names("matrix.fp8_e4m3.fp32", (8, 9)) == ["mma.sync:m16n8k32"]
    assert names("matrix.int4.int32", (8, 6)) == ["mma.sync:m16n8k64"]
    assert names("matrix.fp64.fp64", (8, 0)) == ["mma.sync:m8n8k4"]
    assert names("matrix.bf16.fp32", (10, 0)) == ["mma.sync:m16n8k16"]      # no wgmma after sm_90a


@pytest.mark.parametrize("test, cc, start", [
    ("matrix.int4.int32", (9, 0), "[hardware] Hopper (sm_90) has no INT4 tensor-core path"),
    ("matrix.fp4.fp32", (9, 0), "[hardware] Hopper (sm_90) has no FP4 tensor-core path"),
    ("matrix.fp4.fp32", (8, 9), "[hardware] sm_89 has no FP4"),
    ("matrix.fp8_e4m3.fp32", (8, 0), "[hardware] sm_80 has no FP8 tensor-core path"),
    ("matrix.fp8_e5m2.fp32", (8, 6), "[hardware] sm_86 has no FP8 tensor-core path"),
    ("matrix.fp8_e4m3.fp32", (10, 0), "[api] FP8 on sm_100a runs natively only through tcgen05"),
    ("matrix.int4.int32", (12, 0), "[hardware] sm_120a has no INT4"),
    ("matrix.bf16.fp32", (7, 5), "[api] the CUDA tensor-core kernels issue mma.sync shapes of sm_80"),
])
def test_unsupported_reasons(test, cc, start):
    assert tensor.support(CATALOG.get(test), fake_rt(cc)).startswith(start)


@pytest.mark.parametrize("test, cc", [("matrix.fp8_e4m3.fp32", (8, 9)), ("matrix.fp8_e5m2.fp32", (9, 0)),
                                      ("matrix.int4.int32", (8, 0)), ("matrix.fp64.fp64", (8, 0)),
                                      ("matrix.tf32.fp32", (9, 0))])
def test_supported(test, cc):
    assert tensor.support(CATALOG.get(test), fake_rt(cc)) is None


# 2 * m * n * k ops a step (a multiply and an add per product term), by shape.
SHAPE_OPS = {"m8n8k4": 512, "m16n8k4": 1024, "m16n8k8": 2048, "m16n8k16": 4096, "m16n8k32": 8192,
             "m16n8k64": 16_384, "m64n256k8": 262_144, "m64n256k16": 524_288, "m64n256k32": 1_048_576,
             "m64n256k64": 2_097_152}


def test_variants_carry_the_op_count_of_their_shape():
    for form in tensor.FORMS:
        v = tensor.variant_of(form)
        m, n, k = form.shape
        assert v.ops_per_step == SHAPE_OPS[f"m{m}n{n}k{k}"] and v.shape == form.shape and v.unroll == catalog.UNROLL
        assert v.name == f"{form.path}:m{m}n{n}k{k}"


def test_items_count_every_step_of_every_owner():
    w = shared.MatrixWorkload()
    w.variant = tensor.variant_of(next(f for f in tensor.FORMS if f.path == "wgmma" and f.test == "bf16.fp32"))
    w.owners, w.accumulators = 264, 1          # 132 SMs x 2 warpgroups, one 64 x 256 accumulator
    assert w.items(1000) == 1_056_000          # 1000 iterations of 4 steps
    assert CATALOG_TESTS["matrix.bf16.fp32"].per_item(w.variant) == 524_288    # 2 * 64 * 256 * 16 ops a step


def test_int4_packing_puts_the_lower_element_in_the_low_nibble():
    assert tensor.encode_int4(np.array([1, -1, 0, -1])) == bytes([0xF1, 0xF0])
    assert tensor.encode_int4(np.array([-1])) == bytes([0x0F])


def test_tensor_opcodes_keep_the_shape_modifiers():
    listing = ("        /*0a10*/                   HGMMA.64x256x16.F32.BF16 R24, gdesc[UR4], R24 ;\n"
               "        /*0a20*/                   HGMMA.64x256x16.F32.BF16 R24, gdesc[UR8], R24, gsb0 ;\n"
               "        /*0a30*/              @!P0 DMMA.16x8x16 R48, R16, R8, R48 ;\n"
               "        /*0a40*/                   FFMA R1, R2, R3, R4 ;\n")
    assert tensor.tensor_opcodes(listing) == {"HGMMA.64x256x16.F32.BF16": 2, "DMMA.16x8x16": 1}


def test_an_emulated_step_is_not_taken_for_the_native_one():
    forms = {(f.test, f.name): f for f in tensor.FORMS}
    fp8 = forms[("fp8_e4m3.fp32", "mma.sync:m16n8k32")]
    assert fp8.issued(["QMMA.16832.F32.E4M3.E4M3"])
    assert not fp8.issued(["HMMA.16816.F32"])                       # FP8 unpacked to FP16 steps
    assert not forms[("int4.int32", "mma.sync:m16n8k64")].issued(["IMMA.16832.S8.S8"])
    dmma = forms[("fp64.fp64", "mma.sync:m8n8k4")]
    assert dmma.issued(["DMMA.884"]) and dmma.issued(["DMMA.8x8x4"]) and not dmma.issued(["DMMA.16x8x4"])


@pytest.fixture(scope="module")
def cuda_rt():
    cp = pytest.importorskip("cupy")
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception:
        pytest.skip("no CUDA device")
    from peakbench.backend import DeviceInfo
    from peakbench.cuda.runtime import CudaRuntime
    props = cp.cuda.runtime.getDeviceProperties(0)
    info = DeviceInfo(0, str(props["name"]), 0x10DE, 0, "", "", "")
    rt = CudaRuntime(0, info, props)
    yield rt
    rt.close()


def gpu_cases():
    """Dense tests and their forms (the sparse ones: tests/test_gpu_sparse.py)."""
    return [(t, f) for t in MATRIX if not catalog.is_sparse(t) for f in tensor.FORMS if tensor.measures(f, t)]


@pytest.mark.gpu
@pytest.mark.parametrize("test, form", gpu_cases(), ids=[f"{t.dtype}-{f.name}" for t, f in gpu_cases()])
def test_variant_matches_the_host_reference(cuda_rt, test, form):
    if not tensor.native(form, tuple(cuda_rt.cc)):
        pytest.skip(f"{form.name} is not native on {cuda_rt.arch}")
    w = tensor.workload(test, tensor.variant_of(form), cuda_rt)
    try:
        assert w.verify() is None
        if "tensor_opcodes" in w.evidence:
            assert form.issued([w.evidence["tensor_opcode"]]), w.evidence["tensor_opcodes"]
        # A longer timed launch (B2 = -B1) still leaves every tile at its start: the sum of C0.
        w.run(64)
        got = np.frombuffer(cuda_rt.download(w.out), dtype=w.out_dtype).reshape(w.owners, *w.tile)
        assert np.array_equal(got.astype(np.float64), np.broadcast_to(w.inputs.c0.sum(axis=0), got.shape))
    finally:
        w.close()


# -- sparse tests (matrix.*.sparse) --------------------------------------------------------------

SPARSE = [t for t in MATRIX if catalog.is_sparse(t)]


def test_sparse_tests_run_only_sparse_forms():
    assert [t.name for t in SPARSE] == [f"{t}.sparse" for t in (
        "matrix.fp16.fp16", "matrix.fp16.fp32", "matrix.bf16.fp32", "matrix.tf32.fp32", "matrix.fp8_e4m3.fp32",
        "matrix.fp8_e5m2.fp32", "matrix.int8.int32")]
    for cc in ((8, 0), (8, 9), (9, 0), (12, 0)):
        for test in MATRIX:
            for v in tensor.variants(test, fake_rt(cc)):
                assert tensor.find_form(test, v.name).sparse == catalog.is_sparse(test), (cc, test.name, v.name)


def test_hopper_offers_mma_sp_and_wgmma_sp():
    for test in ("fp16.fp16", "fp16.fp32", "bf16.fp32"):
        assert names(f"matrix.{test}.sparse", (9, 0)) == ["mma.sp:m16n8k32", "wgmma.sp:m64n256k32"]
    assert names("matrix.tf32.fp32.sparse", (9, 0)) == ["mma.sp:m16n8k16", "wgmma.sp:m64n256k16"]
    assert names("matrix.int8.int32.sparse", (9, 0)) == ["mma.sp:m16n8k64", "wgmma.sp:m64n256k64"]
    # ptxas lowers mma.sp FP8 to HMMA.SP FP16 steps on sm_90: only wgmma.sp measures it there.
    assert names("matrix.fp8_e4m3.fp32.sparse", (9, 0)) == ["wgmma.sp:m64n256k64"]
    assert names("matrix.fp8_e5m2.fp32.sparse", (8, 9)) == ["mma.sp:m16n8k64"]
    assert names("matrix.bf16.fp32.sparse", (8, 0)) == ["mma.sp:m16n8k32"]


def test_sparse_unsupported_reasons():
    assert tensor.support(CATALOG.get("matrix.bf16.fp32.sparse"), fake_rt((7, 5))).startswith(
        "[hardware] sm_75 has no sparse tensor cores")
    assert tensor.support(CATALOG.get("matrix.fp8_e4m3.fp32.sparse"), fake_rt((8, 0))).startswith(
        "[hardware] sm_80 has no FP8 tensor-core path")


def test_sparse_ops_are_dense_equivalent():
    """wgmma.sp m64n256k32 does the work of a dense 64 x 256 x 32 step: twice the dense k16 form's."""
    forms = {(f.test, f.name): f for f in tensor.FORMS}
    sp = tensor.variant_of(forms[("bf16.fp32", "wgmma.sp:m64n256k32")])
    dense = tensor.variant_of(forms[("bf16.fp32", "wgmma:m64n256k16")])
    test = CATALOG.get("matrix.bf16.fp32.sparse")
    assert test.per_item(sp) == 2 * 64 * 256 * 32 == 2 * test.per_item(dense)
    assert forms[("int8.int32", "mma.sp:m16n8k64")].instruction == \
        "mma.sp::ordered_metadata.sync.aligned.m16n8k64.row.col.s32.s8.s8.s32"


class EmulatedGPU:
    """A fake runtime whose launch computes what shaders/tensor_wgmma.cu stores for an FP16 x FP16 +
    FP32 sparse form, from the operand buffer: `reads_metadata` False plays a kernel that ignores
    the word (keeps positions 0 and 1), `short` one that stops after its first iteration."""
    cc, arch, dialect = (9, 0), "sm_90a", "cuda"
    limits = SimpleNamespace(units=2)

    def __init__(self, reads_metadata=True, short=False):
        self.reads_metadata, self.short, self.buffers = reads_metadata, short, {}

    def compile(self, source, defines, entry, block, args):
        return SimpleNamespace(defines=defines)

    def alloc(self, nbytes):
        key = len(self.buffers)
        self.buffers[key] = bytearray(nbytes)
        return key

    def upload(self, buf, data):
        self.buffers[buf][: len(data)] = data

    def fill(self, buf, byte):
        self.buffers[buf][:] = bytes([byte]) * len(self.buffers[buf])

    def download(self, buf, nbytes=None):
        return bytes(self.buffers[buf][:nbytes])

    def free(self, buf):
        del self.buffers[buf]

    def discard(self, kernel):
        pass

    def disassemble(self, kernel):
        return None

    def launch(self, kernel, grid, args, repeat=1):
        from test_catalog_matrix_reference import hardware_a
        out, ab, c0, done, iterations = args
        count = int.from_bytes(self.buffers[done][:4], "little") + grid * repeat     # the launch witness
        self.buffers[done][:4] = (count % (1 << 32)).to_bytes(4, "little")
        raw = self.download(ab)
        a = np.frombuffer(raw[: 64 * 16 * 2], np.float16).reshape(64, 16).astype(np.float64)
        b = np.frombuffer(raw[2048: 2048 + 2 * 32 * 256 * 2], np.float16).reshape(2, 32, 256).astype(np.float64)
        word = int.from_bytes(raw[-4:], "little") if self.reads_metadata else 0x44444444
        full = hardware_a(a, word, 16)
        steps = (min(int(iterations), 1) if self.short else int(iterations)) * kernel.defines["UNROLL"] // 2
        tile = np.frombuffer(self.download(c0), np.float32).reshape(64, 256) + steps * (full @ b[0] + full @ b[1])
        owners = grid * kernel.defines["WARPGROUPS"]
        self.upload(out, np.broadcast_to(tile, (owners, 64, 256)).astype(np.float32).tobytes())
        return 1e-3


def sparse_wgmma(rt):
    test = CATALOG.get("matrix.fp16.fp32.sparse")
    return tensor.workload(test, next(v for v in tensor.variants(test, rt) if v.name.startswith("wgmma.sp")), rt)


def test_sparse_workload_verifies_each_metadata_word():
    w = sparse_wgmma(EmulatedGPU())
    assert isinstance(w, tensor.SparseTensorWorkload)
    assert w.verify() is None
    assert w.evidence["metadata_verified"] == ["0xdddddddd", "0x88888888"]
    assert w.evidence["guards"]["iterations"]["why"] == "iterations checked at 1 and 2"
    assert w.params["ops_counted"].startswith("dense-equivalent 2*M*N*K")
    assert w.params["shared_bytes"] == (64 * 16 + 2 * 32 * 256) * 2
    # Verification leaves the timed operands (B2 = -B1) and the timed metadata word in place.
    assert w.rt.download(w.ab) == w.inputs.operands(verify=False) and w.inputs.metadata == 0xDDDDDDDD


def test_a_kernel_that_ignores_the_metadata_fails_verification():
    problem = sparse_wgmma(EmulatedGPU(reads_metadata=False)).verify()
    assert problem.startswith("metadata 0xdddddddd (kept (1, 3) of each group): ") and "differ" in problem


def test_a_sparse_kernel_short_of_iterations_fails_the_iterations_guard():
    problem = sparse_wgmma(EmulatedGPU(short=True)).verify()
    assert "guard iterations: output after 2 iterations differs from the host's (it matched after 1)" in problem

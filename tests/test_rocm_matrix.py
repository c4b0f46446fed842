"""peakbench.rocm.matrix end to end on the fake HIP runtime, played by a decoder of the hardware's
formats: every matrix test verifies against the host reference on five targets, a wrong element
is caught, FP8 is FNUZ on gfx942, and the launch and evidence are the form's."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import fake_hip
from fake_hip import defines, scalar
from peakbench.catalog import default_catalog
from peakbench.catalog import matrix as catalog_matrix
from peakbench.catalog.matrix_reference import FP8
from peakbench.rocm import matrix
from test_rocm import create, device, fakes, no_amdsmi  # noqa: F401  (fixtures)

CATALOG = default_catalog()


def _minifloat(codes: np.ndarray, exp_bits: int, mant_bits: int, bias: int) -> np.ndarray:
    codes = codes.astype(np.int64)
    sign = np.where(codes >> (exp_bits + mant_bits) & 1, -1.0, 1.0)
    exp = (codes >> mant_bits) & ((1 << exp_bits) - 1)
    mant = codes & ((1 << mant_bits) - 1)
    value = np.where(exp > 0, 2.0 ** (exp - bias) * (1 + mant / 2 ** mant_bits), 2.0 ** (1 - bias) * mant / 2 ** mant_bits)
    return sign * value


def _nibbles(raw: bytes, count: int) -> np.ndarray:
    b = np.frombuffer(raw, np.uint8)
    return np.stack([b & 0xF, b >> 4], axis=1).reshape(-1)[:count]


BYTES = {"fp16": 2, "bf16": 2, "tf32": 4, "fp64": 8, "int8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int4": 0.5,
         "fp4": 0.5, "fp32": 4, "int32": 4}


def decode(raw: bytes, kind: str, count: int, fnuz: bool) -> np.ndarray:
    """Elements as the matrix units read them (AMD ISA guides): FNUZ FP8 on CDNA3 takes the OCP
    exponent bias plus one."""
    if kind == "fp16":
        return np.frombuffer(raw, np.float16, count).astype(np.float64)
    if kind == "bf16":
        return (np.frombuffer(raw, np.uint16, count).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if kind in ("tf32", "fp32"):
        return np.frombuffer(raw, np.float32, count).astype(np.float64)
    if kind == "fp64":
        return np.frombuffer(raw, np.float64, count)
    if kind == "int8":
        return np.frombuffer(raw, np.int8, count).astype(np.int64)
    if kind == "int32":
        return np.frombuffer(raw, np.int32, count).astype(np.int64)
    if kind == "int4":
        n = _nibbles(raw, count).astype(np.int64)
        return np.where(n >= 8, n - 16, n)
    if kind == "fp4":
        return _minifloat(_nibbles(raw, count), 2, 1, 1)
    mant, bias = FP8[kind]
    return _minifloat(np.frombuffer(raw, np.uint8, count), 7 - mant, mant, bias + (1 if fnuz else 0))


def form_types(form: str, fmt: str | None) -> tuple[str, str, tuple[int, int, int]]:
    """Operand type, accumulator type and M x N x K from a FORM name alone."""
    kinds = [("F8f6f4", {"0": "fp8_e4m3", "1": "fp8_e5m2", "4": "fp4"}.get(fmt)), ("Bf16", "bf16"),
             ("Bf8", "fp8_e5m2"), ("Fp8", "fp8_e4m3"), ("Xf32", "tf32"), ("F64", "fp64"), ("F16", "fp16"),
             ("I8", "int8"), ("I4", "int4")]
    operand = next(kind for key, kind in kinds if key in form)
    acc = ("fp16" if form.endswith("F16F16") else "int32" if operand.startswith("int") else
           "fp64" if operand == "fp64" else "fp32")
    if "_" in form:
        shape = tuple(int(x) for x in form.split("_")[1].split("x"))
    else:
        shape = (16, 16, 32) if form.endswith("K32") else (16, 16, 16)
    return operand, acc, shape


def mma_player(fnuz: bool, corrupt: bool = False):
    """The kernel mma_peak in numpy: decode A, B1, B2 and C0 from device memory, run `iterations`
    steps per accumulator, store the summed tile for every wave."""
    def play(fake, launch):
        d = defines(launch["options"])
        form = next(k[len("FORM_"):] for k in d if k.startswith("FORM_"))
        operand, acc, (m, n, k) = form_types(form, d.get("FMT"))
        out, ab, c0, _, iterations = launch["extra"]      # _: the launch witness (fake_hip counts it)
        unroll, accs, waves, wave = (int(d[x]) for x in ("UNROLL", "ACC", "WAVES", "WAVE"))
        assert launch["block"] == (waves * wave, 1, 1)
        owners = launch["grid"][0] * waves
        raw = bytes(fake.buffer(ab))
        sa, sb = int(m * k * BYTES[operand]), int(k * n * BYTES[operand])
        assert len(raw) == sa + 2 * sb, "the operand buffer holds A, B1, B2"
        a = decode(raw[:sa], operand, m * k, fnuz).reshape(m, k)
        b1 = decode(raw[sa:sa + sb], operand, k * n, fnuz).reshape(k, n)
        b2 = decode(raw[sa + sb:], operand, k * n, fnuz).reshape(k, n)
        c = decode(bytes(fake.buffer(c0)), acc, accs * m * n, fnuz).reshape(accs, m, n)
        tile = c.sum(axis=0) + scalar(iterations) * (unroll // 2) * accs * (a @ b1 + a @ b2)
        store = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64, "int32": np.int32}[acc]
        tiles = np.repeat(tile.astype(store)[None], owners, axis=0)
        if corrupt:
            tiles[owners // 2, m - 1, 0] += 1
        target = fake.buffer(out)
        assert len(target) == tiles.nbytes, "one tile per wave"
        target[:] = tiles.tobytes()
    return play


CASES = [
    (fake_hip.mi250x, ["matrix.fp16.fp32", "matrix.bf16.fp32", "matrix.int8.int32", "matrix.fp64.fp64"]),
    (fake_hip.mi300x, ["matrix.fp16.fp32", "matrix.bf16.fp32", "matrix.tf32.fp32", "matrix.fp8_e4m3.fp32",
                       "matrix.fp8_e5m2.fp32", "matrix.int8.int32", "matrix.fp64.fp64"]),
    (fake_hip.mi355x, ["matrix.fp16.fp32", "matrix.bf16.fp32", "matrix.fp8_e4m3.fp32", "matrix.fp8_e5m2.fp32",
                       "matrix.int8.int32", "matrix.fp4.fp32"]),
    (fake_hip.rx7900xtx, ["matrix.fp16.fp16", "matrix.fp16.fp32", "matrix.bf16.fp32", "matrix.int8.int32",
                          "matrix.int4.int32"]),
    (fake_hip.r9700, ["matrix.fp16.fp16", "matrix.fp16.fp32", "matrix.bf16.fp32", "matrix.fp8_e4m3.fp32",
                      "matrix.fp8_e5m2.fp32", "matrix.int8.int32", "matrix.int4.int32"]),
]


def open_fake(monkeypatch, make, player=None):
    hip, rtc = fake_hip.pair([make()])
    fake_hip.install(monkeypatch, hip, rtc)
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    arch = make()["gcnArchName"].decode()
    hip.kernels["mma_peak"] = player or mma_player(fnuz=arch.startswith("gfx94"))
    return hip, create().open(0)


@pytest.mark.parametrize("make, test_name", [pytest.param(make, t, id=f"{make.__name__}-{t}")
                                             for make, tests in CASES for t in tests])
def test_matrix_workload_verifies_against_the_host_reference(monkeypatch, make, test_name):
    hip, dev = open_fake(monkeypatch, make)
    test = CATALOG.get(test_name)
    variants = dev.variants(test)
    assert variants, test_name
    for v in variants:
        w = dev.prepare(test, v)
        try:
            assert w.verify() is None, (test_name, v.name)
            launch = hip.launches[-1]
            d = defines(launch["options"])
            assert int(d["WAVE"]) == dev.rt.limits.warp and int(d["UNROLL"]) == v.unroll
            assert w.params["operands"] == test.dtype.split(".")[0]
            assert w.items(20) == 2 * w.items(10) > 0
        finally:
            w.close()
    dev.close()


def test_verification_leaves_the_timed_operands_in_place(monkeypatch):
    """After verify (B2 = B1), the buffer holds B2 = -B1 again, so timed runs stay bounded."""
    hip, dev = open_fake(monkeypatch, fake_hip.mi300x)
    test = CATALOG.get("matrix.fp16.fp32")
    w = dev.prepare(test, dev.variants(test)[0])
    assert w.verify() is None
    m, n, k = w.form.shape
    raw = bytes(hip.memory[w.ab.address])
    b1 = decode(raw[2 * m * k: 2 * (m * k + k * n)], "fp16", k * n, False)
    b2 = decode(raw[2 * (m * k + k * n):], "fp16", k * n, False)
    assert np.array_equal(b2, -b1) and np.any(b1 != 0)
    w.close()


def test_fp8_on_gfx942_is_encoded_fnuz(monkeypatch):
    """The same workload fails when the matrix units are assumed to read OCP FP8 on gfx942: the
    encoding is the target's, and verification would catch the wrong one."""
    _, dev = open_fake(monkeypatch, fake_hip.mi300x, mma_player(fnuz=False))
    test = CATALOG.get("matrix.fp8_e4m3.fp32")
    w = dev.prepare(test, dev.variants(test)[0])
    assert w.evidence["fp8_encoding"].startswith("FNUZ")
    problem = w.verify()
    assert problem and "differ from the host reference" in problem
    w.close()


def test_a_wrong_element_fails_verification(monkeypatch):
    _, dev = open_fake(monkeypatch, fake_hip.r9700, mma_player(fnuz=False, corrupt=True))
    test = CATALOG.get("matrix.int8.int32")
    w = dev.prepare(test, dev.variants(test)[0])
    problem = w.verify()
    assert problem and problem.startswith("1 of ") and "subgroup" in problem
    w.close()


def test_matrix_workload_launch_and_evidence(monkeypatch):
    hip, dev = open_fake(monkeypatch, fake_hip.mi355x)
    hip.elapsed_ms = 4.0
    test = CATALOG.get("matrix.fp4.fp32")
    v = dev.variants(test)[0]
    w = dev.prepare(test, v)
    assert w.run(100) == pytest.approx(0.004)
    launch = hip.launches[-1]
    d = defines(launch["options"])
    assert d["FORM_MfmaF8f6f4_32x32x64"] == "1" and d["FMT"] == "4" and launch["options"][0].startswith("--offload-arch=gfx950")
    assert launch["grid"] == (1024, 1, 1) and launch["block"] == (256, 1, 1)   # 256 CUs x 4 blocks of 4 waves of 64
    assert scalar(launch["extra"][4]) == 100
    assert w.items(100) == 13_107_200       # 4096 waves x 100 iterations x 4 steps (unroll) x 8 accumulators
    assert w.evidence["builtin"] == "__builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4"
    assert w.params["kernel"] == "matrix_amd.cu (MfmaF8f6f4_32x32x64)"
    w.close()


def test_evidence_counts_the_matrix_instructions_in_the_disassembly(monkeypatch):
    from peakbench.rocm import runtime
    hip, dev = open_fake(monkeypatch, fake_hip.mi300x)
    listing = ("\tv_mfma_f32_32x32x16_fp8_fp8 a[0:15], v[2:3], v[4:5], a[0:15]\n"
               "\tv_mfma_f32_32x32x16_fp8_fp8 a[16:31], v[2:3], v[4:5], a[16:31]\n"
               "\ts_waitcnt vmcnt(0)\n\tv_mfma_f32_16x16x32_fp8_fp8 v[0:3], v[2:3], v[4:5], v[0:3]\n")
    monkeypatch.setattr(runtime, "disassemble", lambda binary, arch: listing)
    test = CATALOG.get("matrix.fp8_e4m3.fp32")
    w = dev.prepare(test, dev.variants(test)[0])
    assert w.evidence["matrix_instructions"] == 2
    assert w.evidence["instruction_mix"]["v_mfma_f32_32x32x16_fp8_fp8"] == 2
    w.close()


def test_a_shape_the_target_lacks_is_unsupported(device):
    from peakbench.backend import Unsupported
    test = CATALOG.get("matrix.fp16.fp32")
    with pytest.raises(Unsupported, match=r"^\[hardware\]"):
        device.prepare(test, catalog_matrix.shape(8, 8, 4))


def test_encodings_of_the_narrow_types():
    vals = np.array([[1.0, -1.0, 0.0, 1.0]])
    assert matrix.encode(vals, "fp4") == bytes([0xA2, 0x20])           # +1 = 0b0010, -1 = 0b1010
    assert matrix.encode(np.array([[1, -1, 0, 7]]), "int4") == bytes([0xF1, 0x70])
    eighth = np.array([[0.125, -0.125]])
    assert matrix.encode(eighth, "fp8_e4m3", "ocp") == bytes([0x20, 0xA0])   # exponent 4 = -3 + 7
    assert matrix.encode(eighth, "fp8_e4m3", "fnuz") == bytes([0x28, 0xA8])  # exponent 5 = -3 + 8
    assert matrix.encode(eighth, "fp8_e5m2", "fnuz") == bytes([0x34, 0xB4])  # exponent 13 = -3 + 16



# -- sparse tests (SMFMAC) -----------------------------------------------------------------------

def sparse_player(fnuz: bool, reads_metadata: bool = True):
    """mma_peak of an SMFMAC form in numpy: A compressed (M x K/2), B1, B2, then the metadata word,
    which places A's values (matrix_reference's rule, written out in hardware_a); with
    `reads_metadata` False it plays a kernel that keeps positions 0 and 1 whatever the word."""
    from test_catalog_matrix_reference import hardware_a

    def play(fake, launch):
        d = defines(launch["options"])
        form = next(k[len("FORM_"):] for k in d if k.startswith("FORM_"))
        assert form.startswith("Smfmac"), form
        operand, acc, (m, n, k) = form_types(form, None)
        out, ab, c0, _, iterations = launch["extra"]      # _: the launch witness (fake_hip counts it)
        unroll, accs, waves = (int(d[x]) for x in ("UNROLL", "ACC", "WAVES"))
        owners = launch["grid"][0] * waves
        raw = bytes(fake.buffer(ab))
        sa, sb = int(m * k // 2 * BYTES[operand]), int(k * n * BYTES[operand])
        assert len(raw) == sa + 2 * sb + 4, "the operand buffer holds compressed A, B1, B2, the metadata word"
        word = int.from_bytes(raw[-4:], "little") if reads_metadata else 0x44444444
        a = hardware_a(decode(raw[:sa], operand, m * k // 2, fnuz).reshape(m, k // 2), word, 8 * BYTES[operand])
        b1 = decode(raw[sa:sa + sb], operand, k * n, fnuz).reshape(k, n)
        b2 = decode(raw[sa + sb:sa + 2 * sb], operand, k * n, fnuz).reshape(k, n)
        c = decode(bytes(fake.buffer(c0)), acc, accs * m * n, fnuz).reshape(accs, m, n)
        tile = c.sum(axis=0) + scalar(iterations) * (unroll // 2) * accs * (a @ b1 + a @ b2)
        store = {"fp32": np.float32, "int32": np.int32}[acc]
        fake.buffer(out)[:] = np.repeat(tile.astype(store)[None], owners, axis=0).tobytes()
    return play


SPARSE_ON_CDNA3 = ["matrix.fp16.fp32.sparse", "matrix.bf16.fp32.sparse", "matrix.int8.int32.sparse",
                   "matrix.fp8_e4m3.fp32.sparse", "matrix.fp8_e5m2.fp32.sparse"]


@pytest.mark.parametrize("make", [fake_hip.mi300x, fake_hip.mi355x])
@pytest.mark.parametrize("test_name", SPARSE_ON_CDNA3)
def test_smfmac_verifies_against_the_sparse_reference(monkeypatch, make, test_name):
    arch = make()["gcnArchName"].decode()
    hip, dev = open_fake(monkeypatch, make, sparse_player(fnuz=arch.startswith("gfx94")))
    test = CATALOG.get(test_name)
    offered = dev.variants(test)
    assert [v.name for v in offered] == (["16x16x32", "32x32x16"] if ".int" not in test_name and "fp8" not in test_name
                                         else ["16x16x64", "32x32x32"])
    for variant in offered:
        w = dev.prepare(test, variant)
        try:
            assert w.verify() is None
            assert w.evidence["metadata_verified"] == ["0xdddddddd", "0x88888888"]
            assert w.params["ops_counted"].startswith("dense-equivalent")
            assert w.variant.ops_per_step == 2 * w.form.m * w.form.n * w.form.k       # the logical K
            assert w.evidence["builtin"].startswith("__builtin_amdgcn_smfmac_")
        finally:
            w.close()
    dev.close()


def test_an_smfmac_kernel_that_ignores_the_metadata_fails(monkeypatch):
    hip, dev = open_fake(monkeypatch, fake_hip.mi300x, sparse_player(fnuz=True, reads_metadata=False))
    test = CATALOG.get("matrix.bf16.fp32.sparse")
    w = dev.prepare(test, dev.variants(test)[0])
    try:
        problem = w.verify()
        assert problem.startswith("metadata 0xdddddddd (kept (1, 3) of each group): ") and "differ" in problem
    finally:
        w.close()
        dev.close()


def test_sparse_tests_without_an_smfmac_form_never_run_the_dense_kernel(device):
    from peakbench.backend import Unsupported
    for name in ("matrix.fp16.fp16.sparse", "matrix.tf32.fp32.sparse"):
        test = CATALOG.get(name)
        assert device.support(test).startswith("[hardware] gfx942 has no sparse"), device.support(test)
        assert device.variants(test) == ()
        with pytest.raises(Unsupported):
            device.prepare(test, catalog_matrix.shape(16, 16, 32))


@pytest.mark.parametrize("arch, test, start", [
    ("gfx90a", "bf16.fp32", "[hardware] gfx90a (CDNA2) has no sparse matrix instruction"),
    ("gfx1100", "bf16.fp32", "[hardware] gfx1100 (RDNA3) has no sparse matrix instruction"),
    ("gfx1201", "fp16.fp16", "[api] gfx1201 has 2:4 sparse WMMA (v_swmmac_*) for fp16.fp16"),
    ("gfx1201", "tf32.fp32", "[hardware] gfx1201 has no sparse TF32"),
    ("gfx950:sramecc+:xnack-", "tf32.fp32", "[hardware] gfx950 has no sparse TF32"),
])
def test_sparse_reasons_per_target(arch, test, start):
    from types import SimpleNamespace
    reason = matrix.support(CATALOG.get(f"matrix.{test}.sparse"), SimpleNamespace(arch=arch))
    assert reason.startswith(start), reason
    assert matrix.support(CATALOG.get("matrix.bf16.fp32.sparse"), SimpleNamespace(arch="gfx942")) is None

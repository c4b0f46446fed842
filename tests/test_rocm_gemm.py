"""peakbench.rocm.gemm at its API boundaries: the fake HIP runtime (tests/fake_hip.py) and a fake
hipBLASLt (tests/fake_blaslt.py, with hipBLASLt's numbers). Which gemm test runs on which target
and why not, a missing hipBLASLt is unsupported [toolchain], FP8 goes to gfx942 as FNUZ and to
gfx950 as OCP, and a GEMM verifies end to end on the fake runtime's memory."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import fake_hip
from fake_blaslt import FakeLt, fill_words, gemm_fill_player
from peakbench.backend import Unsupported
from peakbench.catalog.gemm import TESTS, shape
from peakbench.rocm import gemm
from peakbench.workloads.gemm import E4M3, GemmWorkload, Operand
from test_rocm import device, fakes, no_amdsmi  # noqa: F401  (fixtures)

BY_NAME = {t.name: t for t in TESTS}
HIP_KINDS = {2: "fp16", 14: "bf16", 0: "fp32", 3: "int8", 10: "int32", 28: "fp8_e4m3",
             1000: "fp8_e4m3_fnuz"}


@pytest.fixture
def found(monkeypatch):
    monkeypatch.setattr(gemm, "library", lambda: object())


def decisions(arch):
    rt = SimpleNamespace(arch=arch)
    return {t.name: gemm.support(t, rt) for t in TESTS}


def test_which_gemm_test_runs_on_which_target(found):
    mi300 = decisions("gfx942")
    assert [n for n, r in mi300.items() if r is None] == ["gemm.fp16.fp32", "gemm.bf16.fp32", "gemm.tf32.fp32",
                                                          "gemm.fp8_e4m3.fp32", "gemm.int8.int32"]
    assert mi300["gemm.fp64.fp64"].startswith("[api] hipBLASLt has no FP64 GEMM")
    mi355 = decisions("gfx950")
    assert mi355["gemm.tf32.fp32"] == ("[hardware] gfx950 has no XF32 (TF32) matrix instructions: they exist"
                                       " on gfx940-gfx942 only")
    assert mi355["gemm.fp8_e4m3.fp32"] is None
    assert decisions("gfx90a")["gemm.fp8_e4m3.fp32"].startswith("[hardware]")
    assert decisions("gfx1100")["gemm.bf16.fp32"] is None


def test_without_hipblaslt_every_test_is_unsupported_toolchain(monkeypatch):
    monkeypatch.setattr(gemm, "_LIBRARY", {})
    monkeypatch.setattr(gemm, "API", gemm.dataclasses.replace(gemm.API, sonames=("libhipblaslt.so.99",)))
    reason = gemm.support(BY_NAME["gemm.bf16.fp32"], SimpleNamespace(arch="gfx942"))
    assert reason == ("[toolchain] hipBLASLt is not installed or not on the library path"
                      " (tried libhipblaslt.so.99)")


def test_fp8_is_fnuz_on_gfx942_and_ocp_on_gfx950():
    assert gemm.api_for("gfx942").data["fp8_e4m3"] == 1000
    assert gemm.api_for("gfx950").data["fp8_e4m3"] == 28


def form_on(arch: str, op: Operand):
    return gemm.HipGemm.form(SimpleNamespace(api=gemm.api_for(arch)), op)


def test_fnuz_operands_are_the_ocp_values_one_exponent_up():
    """On gfx942 the fill adds 8 to each FP8 byte: FNUZ (bias 8) bytes of the OCP values the host
    checks against; on gfx950 the bytes are OCP as they are."""
    op = Operand("fp8_e4m3", 16, 64, 0)
    fnuz = form_on("gfx942", op)
    assert fnuz.add == (0x08080808, 0x08080808)
    ocp = op.host_rows(np.arange(16))
    raw = fill_words(op.words, 0, fnuz.keep, fnuz.set, fnuz.add).reshape(16, 64 // 4).view(np.uint8)
    exponent = raw >> 3 & 0xF
    assert np.array_equal(E4M3[ocp], E4M3[raw - np.uint8(8)]) and np.all((exponent >= 5) & (exponent <= 8))
    assert form_on("gfx950", op) == op.form() and form_on("gfx942", Operand("fp16", 4, 8, 0)).add == (0, 0)


@pytest.mark.parametrize("name", ["gemm.bf16.fp32", "gemm.fp8_e4m3.fp32", "gemm.int8.int32"])
def test_a_gemm_verifies_end_to_end_on_the_fake_runtime(device, fakes, name):
    hip, _ = fakes
    hip.kernels["gemm_fill"] = gemm_fill_player
    rt = device.rt
    rt.stream = fake_hip.FakePointer(0x7000)        # hip-python's stream converts to its address
    lib = FakeLt(gemm.api_for(rt.arch), HIP_KINDS, memory=hip.memory)
    lib.hipblasLtGetVersion = lambda handle, out: setattr(out._obj, "value", 1201) or 0   # 0.12.1
    gemm_object = gemm.HipGemm(rt, lib)
    w = GemmWorkload(BY_NAME[name], shape(64, 32, 48), gemm_object, "hipBLASLt")
    assert w.verify() is None, w.evidence
    assert w.evidence["library"] == "hipBLASLt 0.12.1"
    desc = next(o for o in lib.objects.values() if o["kind"] == "desc")
    assert desc["attrs"][0] == 112 and desc["attrs"][1] == 111          # HIPBLAS_OP_T, HIPBLAS_OP_N
    layout = next(o for o in lib.objects.values() if o["kind"] == "layout")
    if name.startswith("gemm.fp8"):
        assert layout["type"] == 1000                                    # HIP_R_8F_E4M3_FNUZ on gfx942
    assert hip.elapsed_ms is not None and w.run(3) > 0
    w.close()
    assert not lib.objects and "hipEventDestroy" in hip.names()


def test_a_wrong_entry_is_caught_on_rocm_too(device, fakes):
    hip, _ = fakes
    hip.kernels["gemm_fill"] = gemm_fill_player
    device.rt.stream = fake_hip.FakePointer(0x7000)
    lib = FakeLt(gemm.api_for("gfx942"), HIP_KINDS, memory=hip.memory)
    w = GemmWorkload(BY_NAME["gemm.fp16.fp32"], shape(64, 32, 48), gemm.HipGemm(device.rt, lib), "hipBLASLt")
    rng = np.random.default_rng(18)              # the workload's sample: SEED + 1
    lib.corrupt = (int(rng.integers(0, 64, 64)[0]), int(rng.integers(0, 32, 64)[0]))
    assert "sampled entries off" in w.verify()
    w.close()


def test_hipblaslt_missing_on_a_real_rocm_backend_is_a_result(device, monkeypatch):
    monkeypatch.setattr(gemm, "_LIBRARY", {"lib": Unsupported("[toolchain] hipBLASLt is not installed")})
    assert device.support(BY_NAME["gemm.bf16.fp32"]) == "[toolchain] hipBLASLt is not installed"

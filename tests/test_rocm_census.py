"""The ROCm census (HipRuntime.census, evidence/amdgpu.py census) through the fake HIP runtime, with real
code objects: clang-22 compiles shaders/alu.cu with the options the runtime hands hiprtc
(tests/test_rocm_isa.py's toolchain) and llvm-mc assembles it, so llvm-objdump-22 reads what an
MI300X (gfx942) would load. A plain `peakbench --backend rocm --quick` run is `ok` with the census
in each result's evidence; planted faults in the code object (half the steps, FP32 under the FP16
label) come back `failed` with the guard's reason."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import fake_hip
import test_rocm_isa as rocm_isa
from peakbench.evidence import amdgpu
from peakbench.rocm import runtime
from test_workloads_alu import alu_player

TESTS = "compute.fp32,compute.fp16,compute.int8"
MIB = 1 << 20


@pytest.fixture(scope="module")
def toolchain(tmp_path_factory):
    why = rocm_isa.missing() or (None if runtime.objdump() and "22" in runtime.objdump() else "no llvm-objdump-22")
    if why or not Path("/usr/bin/llvm-mc-22").exists():
        pytest.skip(why or "no llvm-mc-22")
    return rocm_isa.Toolchain(tmp_path_factory.mktemp("clang"))


SOURCES = {"alu": "alu.cu", "atomic": "atomic.cu"}


def code_objects(tools, edit=lambda defines: defines, built=None):
    """fn(name, options) for FakeHiprtc.code_objects: alu.cu or atomic.cu built for the options'
    target with their defines, passed through `edit` (a planted fault); None for any other kernel."""
    def build(name, options):
        if name not in SOURCES:
            return None
        target = next(o.split("=", 1)[1] for o in options if o.startswith("--offload-arch=")).split(":")[0]
        defines = edit(fake_hip.defines(options))
        done = tools.compile(target, rocm_isa.Build(SOURCES[name], name, tuple(defines.items())))
        assert done.ok, done.error
        obj = subprocess.run(["llvm-mc-22", "-triple=amdgcn-amd-amdhsa", f"-mcpu={target}", "-filetype=obj", "-o", "-"],
                             input=done.asm.encode(), capture_output=True, check=True).stdout
        if built is not None:
            built.append(defines)
        return obj
    return build


def only_short(player):
    """The alu player for the verification launches (1 and 2 iterations); the timed ones leave the
    output alone (the timing is the fake's)."""
    def play(fake, launch):
        if fake_hip.scalar(launch["extra"][3]) <= 2:
            player(fake, launch)
    return play


def run(monkeypatch, tmp_path, tools, edit=lambda d: d) -> tuple[int, dict]:
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    gpu = fake_hip.mi300x(multiProcessorCount=2, maxThreadsPerMultiProcessor=256, totalGlobalMem=(1 << 30) + 64 * MIB)
    hip, rtc = fake_hip.pair([gpu])
    rtc.code_objects = code_objects(tools, edit)
    hip.kernels["alu"] = only_short(alu_player())
    hip.elapsed_ms = lambda launch: 1e-3 * fake_hip.scalar(launch["extra"][3])     # 1 us per iteration
    fake_hip.install(monkeypatch, hip, rtc)
    from peakbench import cli
    out = tmp_path / "r.json"
    code = cli.main(["--backend", "rocm", "--quick", "--tests", TESTS, "--json", str(out)])
    return code, {r["test"]: r for r in json.loads(out.read_text())["runs"][0]["results"]}


def test_a_plain_run_carries_the_census_in_its_evidence(monkeypatch, tmp_path, toolchain):
    code, results = run(monkeypatch, tmp_path, toolchain)
    assert code == 0, results
    for name, instruction in (("compute.fp32", "v_pk_fma_f32 f32x2"), ("compute.fp16", "v_pk_fma_f16 f16x2"),
                              ("compute.int8", "v_dot4c_i32_i8 i8x4")):
        r = results[name]
        assert r["status"] == "ok", r
        work = r["evidence"]["guards"]["work"]["evidence"]
        assert r["evidence"]["guards"]["work"]["verdict"] == "passed"
        assert work["source"] == "AMDGPU" and instruction in work["loop_body"], work
        assert work["ops_counted"] == work["ops_claimed"], work
        assert r["evidence"]["guards"]["types"]["why"].endswith("(AMDGPU)")


def test_half_the_steps_in_the_code_object_fails_the_work_guard(monkeypatch, tmp_path, toolchain):
    half = lambda d: {**d, "UNROLL": str(int(d["UNROLL"]) // 2)} if d["E"] == "float" else d
    code, results = run(monkeypatch, tmp_path, toolchain, half)
    assert code == 1
    r = results["compute.fp32"]
    assert r["status"] == "failed" and r["reason"].startswith("guard work: variant x1u64: "), r["reason"]
    assert "the catalog claims 1024" in r["reason"] and "= 512 ops" in r["reason"], r["reason"]
    assert results["compute.fp16"]["status"] == "ok"


def test_fp32_arithmetic_under_the_fp16_label_fails_the_types_guard(monkeypatch, tmp_path, toolchain):
    as_fp32 = lambda d: {**d, "E": "float"} if d["E"] == "__half2" else d
    code, results = run(monkeypatch, tmp_path, toolchain, as_fp32)
    assert code == 1
    r = results["compute.fp16"]
    assert r["status"] == "failed", r
    assert r["reason"].startswith("guard types: variant x2u64: module does f32x2 arithmetic; test compute.fp16 is fp16"), r["reason"]


def test_without_llvm_objdump_the_guards_say_why(monkeypatch, tmp_path, toolchain):
    monkeypatch.setattr(runtime, "objdump", lambda: None)
    code, results = run(monkeypatch, tmp_path, toolchain)
    assert code == 0
    work = results["compute.fp32"]["evidence"]["guards"]["work"]
    assert work == {"verdict": "not_checked", "why": runtime.NO_OBJDUMP}


def test_the_census_counts_the_accumulate_forms_and_skips_the_loop_counter():
    listing = """
0000000000000000 <alu>:
	s_mov_b32 s0, 0                                            // 000000000000: BE800080
	v_pk_fma_f16 v1, v1, v2, v3                                // 000000000004: D38E0001 040E0501
	v_fmac_f32_e32 v4, v5, v6                                  // 00000000000C: 56080D05
	v_dot4c_i32_i8_e32 v7, v8, v9                              // 000000000010: 1A0E1308
	s_add_i32 s0, s0, 1                                        // 000000000014: 81008100
	s_cmp_lg_u32 s0, s1                                        // 000000000018: BF070100
	s_cbranch_scc1 65529                                       // 00000000001C: BF85FFF9 <alu+0x4>
	s_endpgm                                                   // 000000000020: BF810000
"""
    found = amdgpu.census(amdgpu.parse(listing)["alu"])
    assert found.ops == {"v_dot4c_i32_i8 i8x4": 1, "v_fmac_f32 f32": 1, "v_pk_fma_f16 f16x2": 1}
    assert found.work == 8 + 2 + 4 and found.types == {"i8x4", "f32", "f16x2"}
    assert amdgpu.census(None).note == "no such kernel in the code object"


def test_the_atomic_and_special_function_loops_hold_the_catalogs_count(toolchain):
    """atomic.cu and sfu.cu as hiprtc would build them for an MI300X: one ds_add or
    global_atomic_add a step, one v_sin_f32 (...) a function result, counted by the census the
    work guard reads; a compare-and-swap is its form."""
    from peakbench.catalog import default_catalog
    from peakbench.harness import guards
    from peakbench.workloads import atomic, sfu
    catalog = default_catalog()
    for name in ("atomic.global_add", "atomic.shared_add"):
        test = catalog.get(name)
        for variant in test.variants:
            defines = atomic.defines(test, variant, 64, 256)
            done = toolchain.compile("gfx942", rocm_isa.Build("atomic.cu", "atomic", tuple(defines.items())))
            assert done.ok, done.error
            census = amdgpu.operation_census(amdgpu.parse(done.asm)["atomic"], "atomic")
            assert guards.work(test, variant, census, variant.unroll)[0] is None, census
            assert guards.types(test, variant, census)[0] is None, census
            assert not census.forms
    test = catalog.get("sfu.sin")
    variant = test.variants[0]
    acc = variant.accumulators or test.accumulators
    defines = {**sfu.defines("sin"), "ACC": acc, "UNROLL": variant.unroll, "SEEDS": sfu.SEEDS}
    done = toolchain.compile("gfx942", rocm_isa.Build("sfu.cu", "sfu", tuple(defines.items())))
    assert done.ok, done.error
    census = amdgpu.operation_census(amdgpu.parse(done.asm)["sfu"], "special")
    assert list(census.ops) == ["v_sin_f32"] and census.work == variant.unroll * acc
    assert guards.types(test, variant, census) == (None, "f32 (AMDGPU)")


def test_atomic_opcodes_are_told_apart():
    assert amdgpu.atomic_kind("ds_add_u32") == amdgpu.atomic_kind("global_atomic_add_f32") == "add"
    assert amdgpu.atomic_kind("buffer_atomic_add_u32") == amdgpu.atomic_kind("ds_add_rtn_f32") == "add"
    assert amdgpu.atomic_kind("global_atomic_cmpswap") == amdgpu.atomic_kind("ds_cmpst_b32") == "cas"
    assert amdgpu.atomic_kind("ds_read_b32") is None and amdgpu.atomic_kind("global_load_dwordx4") is None


def test_atomic_and_special_function_types_are_read_from_the_opcode():
    types = {op: amdgpu.operation_type(op) for op in (
        "ds_add_u32", "ds_add_rtn_f32", "global_atomic_add_f32", "global_atomic_add", "buffer_atomic_add_x2",
        "global_atomic_pk_add_f16", "global_atomic_add_f64", "v_rcp_f32_e32", "v_rsq_f64_e32", "v_exp_f16_e32",
        "v_exp_legacy_f32_e32")}
    assert types == {"ds_add_u32": "u32", "ds_add_rtn_f32": "f32", "global_atomic_add_f32": "f32",
                     "global_atomic_add": "u32", "buffer_atomic_add_x2": "u64", "global_atomic_pk_add_f16": "f16x2",
                     "global_atomic_add_f64": "f64", "v_rcp_f32_e32": "f32", "v_rsq_f64_e32": "f64",
                     "v_exp_f16_e32": "f16", "v_exp_legacy_f32_e32": "f32"}


def run_atomics(monkeypatch, tmp_path, tools, player=None) -> tuple[int, dict]:
    """`peakbench --backend rocm --quick --tests atomic.*` through the fake HIP runtime, atomic.cu
    compiled for gfx942 and played in numpy."""
    from test_workloads_atomic import atomic_player
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    gpu = fake_hip.mi300x(multiProcessorCount=2, maxThreadsPerMultiProcessor=256, totalGlobalMem=(1 << 30) + 64 * MIB)
    hip, rtc = fake_hip.pair([gpu])
    rtc.code_objects = code_objects(tools)
    hip.kernels["atomic"] = player or atomic_player()
    hip.elapsed_ms = lambda launch: 1e-3 * fake_hip.scalar(launch["extra"][2])     # 1 us per iteration
    fake_hip.install(monkeypatch, hip, rtc)
    from peakbench import cli
    out = tmp_path / "r.json"
    code = cli.main(["--backend", "rocm", "--quick", "--tests", "atomic.*", "--json", str(out)])
    return code, {r["test"]: r for r in json.loads(out.read_text())["runs"][0]["results"]}


def test_atomics_through_the_fake_hip_are_counted_and_their_timed_launches_checked(monkeypatch, tmp_path, toolchain):
    code, results = run_atomics(monkeypatch, tmp_path, toolchain)
    assert code == 0, results
    for name, r in results.items():
        assert r["status"] == "ok", (name, r.get("reason"))
        work = r["evidence"]["guards"]["work"]
        assert work["verdict"] == "passed" and work["evidence"]["source"] == "AMDGPU", work
        assert r["evidence"]["guards"]["measured"]["verdict"] == "passed", r["evidence"]["guards"]["measured"]


def test_through_the_fake_hip_a_doubled_count_of_adds_and_lost_launches_fail(monkeypatch, tmp_path, toolchain):
    from peakbench.catalog.atomic import AtomicTest
    from test_workloads_atomic import atomic_player
    per_item = AtomicTest.per_item
    with monkeypatch.context() as m:
        m.setattr(AtomicTest, "per_item", lambda self, v: 2 * per_item(self, v))
        code, results = run_atomics(m, tmp_path, toolchain)
    assert code == 1
    for r in results.values():
        assert r["reason"].startswith("guard work: variant "), r["reason"]
        assert "the catalog claims 32" in r["reason"], r["reason"]
    # a launch of more than two iterations is not run (after the checks at 1 and 2)
    play = atomic_player()
    code, results = run_atomics(monkeypatch, tmp_path, toolchain,
                                lambda fake, launch: fake_hip.scalar(launch["extra"][2]) <= 2 and play(fake, launch))
    assert code == 1
    for name in ("atomic.global_add", "atomic.global_add_contended"):
        assert results[name]["reason"].startswith("guard measured: variant "), results[name]["reason"]

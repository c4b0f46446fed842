"""The CUDA census (evidence/sass.py loop_census, CudaRuntime.census) on cubins nvcc builds
here for sm_90a from shaders/alu.cu with the defines the CUDA backend passes: every vector-ALU
variant's loop holds the catalog's work in the catalog's types (the work and types guards pass),
and planted faults (half the steps per iteration, scalar FP16 under the packed label, FP32 under
the FP16 label) fail the guard that reads them. On an NVIDIA GPU with CuPy (marker gpu), the same
through NVRTC and the runtime."""
from __future__ import annotations

import shutil
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from peakbench import kernels
from peakbench.kernels import atomic as kernels_atomic
from peakbench.kernels import sfu as kernels_sfu
from peakbench.evidence import listing
from peakbench.catalog import default_catalog
from peakbench.evidence import sass
from peakbench.harness import guards
from peakbench.runtime import Kernel
from peakbench.workloads import alu

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
SOURCE = Path(__file__).resolve().parents[1] / "shaders" / "alu.cu"
CATALOG = default_catalog()
CASES = [(t.name, v.name) for t in CATALOG.tests if t.family == "compute" and t.kernel
         for v in kernels.variants(t)]
needs_tools = pytest.mark.skipif(not NVCC or not sass.installed(), reason="needs nvcc and cuobjdump or nvdisasm")
CUDA_RT = SimpleNamespace(dialect="cuda")


def variant_of(test, name):
    return next(v for v in kernels.variants(test) if v.name == name)


def cubin(tmp_path, defines: dict, source: Path = SOURCE) -> bytes:
    out = tmp_path / "alu.cubin"
    flags = [f"-D{k}={v}" for k, v in {**defines, **alu.DEFINES}.items()]
    subprocess.run([NVCC, "-cubin", "-arch=sm_90a", *flags, str(source), "-o", str(out)], check=True,
                   capture_output=True, text=True)
    return out.read_bytes()


def census_of(binary: bytes, pieces: bool = False):
    """The census the CUDA runtime takes of an ALU kernel: a 64-bit one by its pieces."""
    found = listing.function(sass.disassemble(binary), "alu")
    return sass.pieces_census(found) if pieces else sass.loop_census(found)


def guarded(test, variant, census) -> tuple:
    """The types and work guards' problems on a census, as the session applies them."""
    return (guards.types(test, variant, census)[0],
            guards.work(test, variant, census, variant.unroll * test.accumulators)[0])


@needs_tools
@pytest.mark.parametrize("name, variant_name", CASES, ids=[f"{a}-{b}" for a, b in CASES])
def test_each_variant_holds_the_catalogs_work_in_its_types(tmp_path, name, variant_name):
    test = CATALOG.get(name)
    variant = variant_of(test, variant_name)
    k = kernels.alu_kernel(test, variant, CUDA_RT)
    found = census_of(cubin(tmp_path, k.defines), test.pieces)
    assert found.ops and found.source == "SASS", found
    assert guarded(test, variant, found) == (None, None), found
    assert found.work == variant.unroll * test.accumulators * test.per_item(variant), found
    if test.pieces:                             # int64: one IMAD.WIDE.U32 a multiply-add
        assert found.forms == {"pieces"} and not guards.uncounted(test, found)
        assert guards.uncounted(test, sass.loop_census(listing.function(sass.disassemble(
            cubin(tmp_path, k.defines)), "alu"))).endswith("32-bit pieces, no instruction is one step")


@needs_tools
def test_the_fp32_census_counts_ffma(tmp_path):
    test = CATALOG.get("compute.fp32")
    k = kernels.alu_kernel(test, variant_of(test, "x1u64"), CUDA_RT)
    found = census_of(cubin(tmp_path, k.defines))
    assert found.ops == {"FFMA f32": 512} and found.work == 1024 and found.types == {"f32"}


@needs_tools
def test_half_the_steps_per_iteration_fails_the_work_guard(tmp_path):
    test = CATALOG.get("compute.fp32")
    variant = variant_of(test, "x1u64")
    k = kernels.alu_kernel(test, variant, CUDA_RT)
    found = census_of(cubin(tmp_path, {**k.defines, "UNROLL": variant.unroll // 2}))
    problem = guarded(test, variant, found)[1]
    assert problem and "256 FFMA f32 = 512 ops" in problem and "the catalog claims 1024" in problem


@needs_tools
def test_scalar_fp16_under_the_packed_label_fails_the_types_guard(tmp_path):
    # One chain per thread of scalar halves: ptxas cannot pair lanes, each HFMA2 works on .H0_H0.
    edited = tmp_path / "alu.cu"
    edited.write_text(SOURCE.read_text().replace(
        "__device__ __forceinline__ short step",
        "__device__ __forceinline__ __half step(__half x, __half b, __half c) { return __hfma(x, b, c); }\n"
        "__device__ __forceinline__ short step", 1))
    test = CATALOG.get("compute.fp16")
    variant = variant_of(test, "x2u64")
    k = kernels.alu_kernel(test, variant, CUDA_RT)
    found = census_of(cubin(tmp_path, {**k.defines, "E": "__half", "VEC": 1, "ACC": 1}, edited))
    assert found.types == {"f16"}, found
    problem = guarded(test, variant, found)[0]
    assert problem == "module does f16 arithmetic; test compute.fp16 is packed f16x2"


@needs_tools
def test_an_fp32_kernel_under_the_fp16_label_fails_the_types_guard(tmp_path):
    test = CATALOG.get("compute.fp16")
    variant = variant_of(test, "x2u64")
    k = kernels.alu_kernel(test, variant, CUDA_RT)
    found = census_of(cubin(tmp_path, {**k.defines, "E": "float", "VEC": 2}))
    assert guarded(test, variant, found)[0] == "module does f32 arithmetic; test compute.fp16 is fp16 (f16)"


def test_moves_addresses_and_constant_loads_are_not_arithmetic():
    assert sass.arithmetic("IMAD.MOV.U32", "R1, RZ, RZ, 0x3") is None
    assert sass.arithmetic("IMAD.WIDE.U32", "R2, R3, 0x4, R4") is None
    assert sass.arithmetic("HFMA2.MMA", "R5, -RZ, RZ, 1.875, 0") is None
    assert sass.arithmetic("HFMA2.MMA", "R8, R16, R0.reuse, R3.reuse") == ("f16x2", 4)
    assert sass.arithmetic("HFMA2.BF16_V2", "R8, R16, R0, R3") == ("bf16x2", 4)
    assert sass.arithmetic("HFMA2", "R9, R9.H0_H0, R3.H0_H0, R2.H0_H0") == ("f16", 2)
    assert sass.arithmetic("IDP.4A.S8.S8", "R4, R4, R5, R4") == ("i8x4", 8)
    assert sass.arithmetic("FFMA.FTZ", "R1, R2, R3, R4") == ("f32", 2)


def test_labels_become_addresses_so_nvdisasm_loops_are_found():
    text = ("        /*0380*/                   UMOV UR4, URZ ;\n.L_x_1:\n"
            "        /*0390*/                   FFMA R10, R10, UR5, R3 ;\n"
            "        /*03a0*/                   FFMA R11, R11, UR5, R3 ;\n"
            "        /*03b0*/              @!P0 BRA `(.L_x_1) ;\n")
    assert "BRA 0x390" in listing.with_addresses(text)
    found = sass.loop_census(text)
    assert found.ops == {"FFMA f32": 2} and found.work == 4


def test_without_a_disassembler_the_census_says_why(monkeypatch):
    monkeypatch.setattr(sass, "tool", lambda name: None)
    found = sass.loop_census(None)
    assert found.ops == {} and "no SASS disassembler" in found.note
    test = CATALOG.get("compute.fp32")
    variant = test.variants[0]
    problem, text = guards.work(test, variant, found, 512)
    assert problem is None and text.startswith("not checked: no SASS disassembler")
    assert guards.types(test, variant, found) == (None, text)


@pytest.fixture
def runtime_module(monkeypatch):
    """peakbench.cuda.runtime importable without CuPy: a stand-in cupy that it never calls here."""
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.ModuleType("cupy.cuda")
    cupy.cuda.nvrtc = types.ModuleType("cupy.cuda.nvrtc")
    for name, mod in (("cupy", cupy), ("cupy.cuda", cupy.cuda), ("cupy.cuda.nvrtc", cupy.cuda.nvrtc)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.delitem(sys.modules, "peakbench.cuda.runtime", raising=False)
    import peakbench.cuda
    before = getattr(peakbench.cuda, "runtime", None)
    import peakbench.cuda.runtime as runtime
    yield runtime
    sys.modules.pop("peakbench.cuda.runtime", None)        # monkeypatch puts back a real one, if any
    if before is None:
        del peakbench.cuda.runtime
    else:
        peakbench.cuda.runtime = before


@needs_tools
def test_the_runtime_census_reads_the_kernels_cubin_once(tmp_path, runtime_module, monkeypatch):
    test = CATALOG.get("compute.int8")
    variant = variant_of(test, "x1u64")
    k = kernels.alu_kernel(test, variant, CUDA_RT)
    kernel = Kernel("alu", None, 256, cubin(tmp_path, k.defines))
    calls = []
    real = sass.disassemble
    monkeypatch.setattr(sass, "disassemble", lambda b: calls.append(1) or real(b))
    rt = runtime_module.CudaRuntime.__new__(runtime_module.CudaRuntime)
    rt.arch = "sm_90a"
    found = rt.census(kernel)
    assert found.ops == {"IDP.4A.S8.S8 i8x4": 512} and found.work == 4096
    assert rt.evidence(kernel)["instruction_mix"]["IDP.4A.S8.S8"] >= 512
    assert calls == [1]


@pytest.mark.gpu
def test_on_the_gpu_every_alu_census_matches_the_catalog():
    """Through NVRTC and CuPy: each vector-ALU variant's census passes the types and work guards."""
    pytest.importorskip("cupy")
    from peakbench.backend import load
    backend = load("cuda")
    try:
        device = backend.open(0)
        try:
            for name, variant_name in CASES:
                test = CATALOG.get(name)
                variant = variant_of(test, variant_name)
                if device.support(test):
                    continue
                w = device.prepare(test, variant)
                try:
                    assert w.census.source == "SASS" and w.census.ops, (name, w.census)
                    assert guarded(test, variant, w.census) == (None, None), (name, variant_name, w.census)
                finally:
                    w.close()
        finally:
            device.close()
    finally:
        backend.close()


def test_a_cuobjdump_listing_with_addresses_and_encodings_is_read_too():
    text = ("\t\tFunction : alu\n"
            "        /*0380*/                   UMOV UR4, URZ ;                 /* 0x0000003f00047882 */\n"
            "                                                                   /* 0x000fe20008000000 */\n"
            "        /*0390*/                   IDP.4A.S8.S8 R4, R4, R5, R4 ;   /* 0x0000000504047226 */\n"
            "                                                                   /* 0x000fe20000000604 */\n"
            "        /*03a0*/                   IMAD.MOV.U32 R6, RZ, RZ, R7 ;   /* 0x000000ffff067224 */\n"
            "                                                                   /* 0x000fe200078e0007 */\n"
            "        /*03b0*/              @!P0 BRA 0x390 ;                     /* 0xfffffffc00f48947 */\n"
            "                                                                   /* 0x000fea000383ffff */\n")
    found = sass.loop_census(listing.function(text, "alu"))
    assert found.ops == {"IDP.4A.S8.S8 i8x4": 1} and found.work == 8


# -- the streams' global loads and stores in SASS --------------------------------------------------
STREAMS = [(t.name, v.name) for t in CATALOG.tests if t.kernel == "stream" for v in t.variants]


@needs_tools
@pytest.mark.parametrize("name, layout", STREAMS, ids=[f"{a}-{b}" for a, b in STREAMS])
def test_each_stream_moves_the_bytes_the_catalog_counts(tmp_path, name, layout):
    from peakbench.workloads.stream import measured_defines
    test = CATALOG.get(name)
    variant = next(v for v in test.variants if v.name == layout)
    census = sass.memory_census(listing_of(tmp_path, "mem.cu", measured_defines(test, variant), "stream"))
    problem, evidence = guards.moved(test, variant, census, variant.unroll)
    assert problem is None, problem
    assert evidence["bytes_loaded"] == 16 * variant.unroll * test.reads
    # a host that counts each vector twice: the rate doubles, the SASS does not
    doubled = SimpleNamespace(**{f: getattr(test, f) for f in ("access_bytes", "reads", "writes", "name")},
                              per_item=lambda v: 2 * test.per_item(v))
    problem, _ = guards.moved(doubled, variant, census, variant.unroll)
    assert problem and f"the catalog claims {2 * test.per_item(variant) * variant.unroll:g} bytes" in problem


L2_READS = [v.name for v in CATALOG.get("memory.l2").variants]


@needs_tools
@pytest.mark.parametrize("variant_name", L2_READS)
def test_the_l2_read_loads_the_bytes_the_catalog_counts(tmp_path, variant_name):
    """memory.l2's loop: its unroll 16-byte loads that skip the L1 a pass, as the work guard reads them."""
    test = CATALOG.get("memory.l2")
    variant = next(v for v in test.variants if v.name == variant_name)
    from peakbench.workloads import onchip
    census = sass.memory_census(listing_of(tmp_path, "onchip.cu", onchip.l2_defines(test, variant), "l2_read"))
    problem, evidence = guards.moved(test, variant, census, variant.unroll)
    assert problem is None, problem
    assert evidence["bytes_loaded"] == 16 * variant.unroll and evidence["bytes_stored"] == 0, evidence
    problem, _ = guards.moved(test, variant, census, 2 * variant.unroll)       # twice the loads claimed
    assert problem and "move" in problem


@needs_tools
def test_the_shared_read_loads_the_bytes_the_catalog_counts(tmp_path):
    """memory.shared's pass loop: its unroll LDS.128 a pass (the copy into shared memory before it,
    LDG and STS, is not the test's traffic)."""
    from peakbench.workloads import onchip
    test = CATALOG.get("memory.shared")
    variant = test.variants[0]
    census = sass.memory_census(listing_of(tmp_path, "onchip.cu", onchip.shared_defines(test, variant), "shared_read"),
                                space="shared")
    problem, evidence = guards.moved(test, variant, census, variant.unroll)
    assert problem is None, problem
    assert census.ops == {"LDS.128 (load, 16 B)": variant.unroll}, census.ops

def test_a_shared_read_whose_loop_lost_its_loads_is_counted_whole_and_fails():
    # the copy into shared memory (LDG, STS) and a pass loop with no LDS left: the census falls back
    # to the whole kernel, whose one 16-byte store reads nothing the catalog counts
    text = ("        /*0040*/                   LDG.E.128 R4, desc[UR4][R2.64] ;\n"
            "        /*0050*/                   STS.128 [R9], R4 ;\n"
            "        /*0060*/                   IADD3 R0, R0, 0x1, RZ ;\n"
            "        /*0070*/                   BRA.U !UP0, 0x0060 ;\n")
    test = CATALOG.get("memory.shared")
    found = sass.memory_census(text, space="shared")
    assert found.ops == {"STS.128 (store, 16 B)": 1} and found.note.startswith("counted in the whole kernel")
    problem, _ = guards.moved(test, test.variants[0], found, test.variants[0].unroll)
    assert problem and "move 0 bytes read" in problem, problem


# -- the atomics and special functions in SASS --------------------------------------------------
# the variants the CUDA backend offers (a shared-memory f32 add is a CAS loop on NVIDIA: left out)
ATOMICS = [(t.name, v.name) for t in CATALOG.tests if t.family == "atomic"
           for v in kernels_atomic.variants(t, CUDA_RT)]
SPECIALS = [(t.name, v.name) for t in CATALOG.tests if t.family == "sfu" for v in t.variants]


def listing_of(tmp_path, source: str, defines: dict, entry: str) -> str:
    """The SASS of one kernel of a shaders/ source, built by nvcc for sm_90a with `defines`."""
    return listing.function(sass.disassemble(cubin(tmp_path, defines, SOURCE.with_name(source))), entry)


@needs_tools
@pytest.mark.parametrize("name, variant_name", ATOMICS, ids=[f"{a}-{b}" for a, b in ATOMICS])
def test_each_atomic_loop_holds_the_adds_the_catalog_counts(tmp_path, name, variant_name):
    from peakbench.workloads import atomic
    test = CATALOG.get(name)
    variant = next(v for v in test.variants if v.name == variant_name)
    census = sass.operation_census(listing_of(tmp_path, "atomic.cu", atomic.defines(test, variant, 32, 256), "atomic"),
                                   "atomic")
    problem, evidence = guards.work(test, variant, census, variant.unroll)
    assert problem is None, problem
    assert all(op.startswith(("RED", "ATOMS.ADD")) for op in census.ops), census.ops
    assert census.types == {variant.name} and guards.types(test, variant, census)[0] is None, census
    assert not census.forms, census.forms             # nvcc neither aggregates nor loops on a CAS here
    # a host that counts each add twice
    doubled = SimpleNamespace(per_item=lambda v: 2 * test.per_item(v))
    problem, _ = guards.work(doubled, variant, census, variant.unroll)
    assert problem and f"the catalog claims {2 * variant.unroll}" in problem


@needs_tools
def test_a_shared_float_add_is_found_to_be_a_compare_and_swap_loop(tmp_path):
    from peakbench.workloads import atomic
    test = CATALOG.get("atomic.shared_add")
    variant = next(v for v in test.variants if v.name == "f32")
    census = sass.operation_census(listing_of(tmp_path, "atomic.cu", atomic.defines(test, variant, 32, 256), "atomic"),
                                   "atomic")
    assert "compare-and-swap" in census.forms
    assert atomic.emulated(test, "f32", census).startswith("[hardware] the compiler makes the f32 atomic add in"
                                                           " shared memory a compare-and-swap loop")


@needs_tools
@pytest.mark.parametrize("name, variant_name", SPECIALS, ids=[f"{a}-{b}" for a, b in SPECIALS])
def test_each_special_function_loop_holds_one_mufu_a_result(tmp_path, name, variant_name):
    from peakbench.workloads import sfu
    test = CATALOG.get(name)
    variant = next(v for v in test.variants if v.name == variant_name)
    acc = variant.accumulators or test.accumulators
    defines = {**sfu.defines(test.function), "ACC": acc, "UNROLL": variant.unroll, "SEEDS": sfu.SEEDS}
    census = sass.operation_census(listing_of(tmp_path, "sfu.cu", defines, "sfu"), "special")
    problem, _ = guards.work(test, variant, census, variant.unroll * acc)
    assert problem is None, problem
    assert list(census.ops) == [kernels_sfu.INSTRUCTION["cuda"][test.function]], census.ops
    assert guards.types(test, variant, census) == (None, "f32 (SASS)")


def test_atomic_and_mufu_types_are_read_from_the_modifiers():
    types = {op: sass.operation_type(op) for op in (
        "REDG.E.ADD.STRONG.GPU", "RED.E.ADD.F32.FTZ.RN.STRONG.GPU", "ATOMS.ADD", "ATOMG.E.ADD.F64.RN.STRONG.GPU",
        "RED.E.ADD.64.STRONG.GPU", "ATOMS.ADD.S32", "RED.E.ADD.F16x2.RN.STRONG.GPU", "MUFU.RSQ", "MUFU.RCP64H",
        "MUFU.EX2.F16")}
    assert types == {"REDG.E.ADD.STRONG.GPU": "u32", "RED.E.ADD.F32.FTZ.RN.STRONG.GPU": "f32", "ATOMS.ADD": "u32",
                     "ATOMG.E.ADD.F64.RN.STRONG.GPU": "f64", "RED.E.ADD.64.STRONG.GPU": "u64", "ATOMS.ADD.S32": "u32",
                     "RED.E.ADD.F16x2.RN.STRONG.GPU": "f16x2", "MUFU.RSQ": "f32", "MUFU.RCP64H": "f64",
                     "MUFU.EX2.F16": "f16"}


def test_the_vulkan_drivers_warp_aggregation_and_cas_loop_are_named():
    """The shapes of NVIDIA's Vulkan SASS for atomic.comp (driver 580, PERFORMANCE_ANALYSIS.md):
    MATCH + REDUX before one REDG a warp, and ATOMS.CAST.SPIN in its retry loop."""
    def line(address: int, text: str) -> str:
        return f"        /*{address:04x}*/                   {text} ;\n"
    # a step: the lanes of one address found, their values summed, one lane's REDG on the
    # uniform path or each lane's on the other; two steps a trip
    step = ["MATCH.ALL.U64 R4, R2", "REDUX.SUM UR5, R3", "VOTEU.ANY UP0, PT", "@!P0 BRA {other}",
            "REDG.E.ADD.STRONG.GPU [R2.64], UR5", "BRA {next}", "REDG.E.ADD.STRONG.GPU [R2.64], R3"]
    text, at = [], 0x100
    for s in range(2):
        base = at
        for i, insn in enumerate(step):
            text.append(line(at, insn.format(other=hex(base + 0x60), next=hex(base + 0x70))))
            at += 0x10
    text.append(line(at, "@P1 BRA 0x100"))
    found = sass.operation_census("".join(text), "atomic")
    assert found.forms == {"aggregated"} and found.work == 2, found
    assert found.ops == {"REDG.E.ADD.STRONG.GPU": 4, "MATCH.ALL.U64 (one a step: the atomics sit on two paths)": 2}
    spin = "".join([line(0x100, "LDS R4, [R2]"), line(0x110, "FADD R5, R4, R3"),
                    line(0x120, "ATOMS.CAST.SPIN P0, [R2], R4, R5"), line(0x130, "@!P0 BRA 0x100"),
                    line(0x140, "@P1 BRA 0x100")])
    assert sass.operation_census(spin, "atomic").forms == {"compare-and-swap"}
    assert sass.operation_census("", "atomic").note


# -- the tensor-core steps in SASS ---------------------------------------------------------------
def hopper_forms():
    from peakbench.cuda import tensor
    return [(f.test, f) for f in tensor.FORMS if tensor.native(f, (9, 0))]


@needs_tools
@pytest.mark.parametrize("dtype, form", hopper_forms(), ids=[f.name + ("-sp" if f.sparse else "") + f"-{d}"
                                                           for d, f in hopper_forms()])
def test_each_tensor_loop_holds_the_catalogs_steps_in_its_types(tmp_path, dtype, form):
    from peakbench.catalog import matrix as matrix_catalog
    from peakbench.cuda import tensor
    test = next(t for t in CATALOG.tests if t.family == "matrix" and t.dtype == dtype
                and matrix_catalog.is_sparse(t) == form.sparse)
    variant = tensor.variant_of(form)
    acc = variant.accumulators or test.accumulators
    census = sass.tensor_census(listing_of(tmp_path, form.source, tensor.defines(form, variant, acc),
                                           tensor.kernel_name(form)))
    assert guards.types(test, variant, census)[0] is None, census
    problem, evidence = guards.work(test, variant, census, variant.unroll * acc)
    assert problem is None, problem
    assert all(form.issued([op]) for op in census.ops), census.ops
    doubled = SimpleNamespace(per_item=lambda v: 2 * test.per_item(v))      # a host count twice the steps'
    assert guards.work(doubled, variant, census, variant.unroll * acc)[0].startswith("loop body has ")


@needs_tools
def test_a_multiply_with_no_add_counts_half_a_multiply_add(tmp_path):
    # x * b where the catalog counts x * b + c: ptxas writes IMAD x, b, RZ, one op a lane
    test = CATALOG.get("compute.int32")
    variant = variant_of(test, "x1u64")
    k = kernels.alu_kernel(test, variant, CUDA_RT)
    source = tmp_path / "alu.cu"
    source.write_text(SOURCE.read_text().replace("int step(int x, int b, int c) { return x * b + c; }",
                                                 "int step(int x, int b, int c) { return x * b; }"))
    found = census_of(cubin(tmp_path, k.defines, source))
    problem = guarded(test, variant, found)[1]
    assert problem and problem.startswith("loop body has 512 IMAD i32 = 512 ops, the catalog claims 1024"), problem

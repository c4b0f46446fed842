"""peakbench.vulkan.shaders: every catalog kernel compiles and validates, the cache works, the
SPIR-V template language expands as documented, errors name the tool, and the modules hold the
instructions the test names claim (packed f16 FMA, OpSDot 4x8, OpDot on bfloat16)."""
from __future__ import annotations

import re
import shutil

import pytest

from helpers import alu_params, record_tool_runs
from peakbench.catalog import default_catalog
from peakbench.workloads import alu

ALU = alu_params()
SPIRV_MAGIC = bytes.fromhex("03022307")      # 0x07230203, little-endian


@pytest.fixture(scope="module")
def sh(shaders):
    return shaders[0]


@pytest.fixture(scope="module")
def wl(shaders):
    return shaders[1]


def kernel_source(wl, test, variant) -> tuple[str, dict]:
    """The shader and settings the Vulkan backend compiles for a variant (AluWorkload adds SEEDS)."""
    name, settings = wl.kernel_source(test, variant)
    return name, {**settings, **alu.DEFINES}


def compile_variant(sh, wl, test, variant) -> bytes:
    return sh.compile_shader(*kernel_source(wl, test, variant))


# -- every kernel of the catalog -------------------------------------------------------------

@pytest.mark.parametrize("test, variant", ALU)
def test_catalog_kernels_compile_and_validate(sh, wl, test, variant):
    code = compile_variant(sh, wl, test, variant)
    assert code[:4] == SPIRV_MAGIC and len(code) % 4 == 0
    sh.validate(code, f"{test.name} {variant.name}")            # raises ShaderError when invalid
    assert compile_variant(sh, wl, test, variant) == code


# -- the cache -------------------------------------------------------------------------------

@pytest.fixture
def counted_tools(sh, monkeypatch, tmp_path):
    """A fresh cache folder and a count of the compiler processes started."""
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path / "cache"))
    return record_tool_runs(sh, monkeypatch)


def test_second_compile_hits_the_cache(sh, counted_tools, monkeypatch):
    settings = {"T": "vec2", "IS_FLOAT": 1, "AFFINE": 0, "ACC": 4, "UNROLL": 2, "SEEDS": 256}
    first = sh.compile_shader("alu_fma.comp", settings)
    assert counted_tools, "the first compile ran the tools"
    assert [p.name for p in sh.cache_dir().iterdir()] == [p.name for p in sh.cache_dir().glob("alu_fma-*.spv")]

    def no_tools(args, what=""):
        raise AssertionError(f"a cached module started {args[0]}")

    monkeypatch.setattr(sh, "run_tool", no_tools)
    assert sh.compile_shader("alu_fma.comp", dict(settings)) == first


def test_cache_key_covers_settings_and_source(sh, counted_tools, monkeypatch, tmp_path):
    folder = tmp_path / "shaders"
    shutil.copytree(sh.SHADERS, folder)
    monkeypatch.setattr(sh, "SHADERS", folder)
    settings = {"ACC": 2, "WIDTH": 1, "UNROLL": 2, "SEEDS": 256, "PARAMS_OFFSET": 256, "CONSTANTS": 2}
    sh.compile_shader("alu_dot4x8.spvasm", settings)
    sh.compile_shader("alu_dot4x8.spvasm", {**settings, "UNROLL": 3})
    assert len(list(sh.cache_dir().glob("*.spv"))) == 2
    before = len(counted_tools)
    path = folder / "alu_dot4x8.spvasm"
    path.write_text(path.read_text() + "; an edit\n")
    sh.compile_shader("alu_dot4x8.spvasm", settings)
    assert len(counted_tools) > before, "an edited source is compiled again"
    assert len(list(sh.cache_dir().glob("*.spv"))) == 3
    assert not list(sh.cache_dir().glob("*.tmp")), "no temporary files left in the cache"


# -- the template language -------------------------------------------------------------------

@pytest.mark.parametrize("template, settings, want", [
    ("%a = ${X}\n", {"X": 5}, ["%a = 5"]),
    ("; repeat i 3\nx${i}\n; end\ntail\n", {}, ["x0", "x1", "x2", "tail"]),
    ("; repeat i ${N}\n  %v_${i} = ${T}\n; end\n", {"N": 2, "T": "OpUndef"}, ["  %v_0 = OpUndef", "  %v_1 = OpUndef"]),
    ("; repeat i 2\n; repeat j 3\n%${i}_${j}\n; end\n--\n; end\n", {},
     ["%0_0", "%0_1", "%0_2", "--", "%1_0", "%1_1", "%1_2", "--"]),
    ("; repeat i 3\n; repeat j ${i}\n%${i}_${j}\n; end\n; end\n", {},          # inner count from the outer
     ["%1_0", "%2_0", "%2_1"]),
    ("head\n; repeat i 0\nnever ${i}\n; end\nafter\n", {}, ["head", "after"]),
    ("   ;  repeat   k 2\n%k${k}\n   ; end  \n", {}, ["%k0", "%k1"]),          # spacing as in shaders/
    ("; repeat i 1\n; repeat j 0\nno\n; end\nyes${i}\n; end\n", {}, ["yes0"]),
])
def test_expand(sh, template, settings, want):
    assert sh.expand(template, settings) == "\n".join(want) + "\n"


def test_expand_keeps_plain_comments(sh):
    text = "; a comment about repeat\n; endless\nOpReturn\n"
    assert sh.expand(text, {}) == text


# The dot instructions of one loop iteration, unroll x accumulators x width: int8 x1u64 64*8*1,
# x4u16 16*8*4; bf16 dot2u32 32*8*2, dot4u16 16*8*4.
DOTS = {("compute.int8", "x1u64"): 512, ("compute.int8", "x4u16"): 512,
        ("compute.bf16", "dot2u32"): 512, ("compute.bf16", "dot4u16"): 512}


@pytest.mark.parametrize("test, variant", alu_params(lambda t, v: t.kernel != "fma"))
def test_templates_unroll_the_catalog_counts(sh, wl, test, variant):
    """The assembly's dot instructions per loop iteration are the catalog's unroll x accumulators x
    width: the op count and the kernel come from the same numbers."""
    name, settings = kernel_source(wl, test, variant)
    text = sh.source_text(name, settings)
    op = {"dot4x8": "OpSDot", "bf16dot": "OpDot"}[test.kernel]
    assert len(re.findall(rf"= {op} ", text)) == DOTS[test.name, variant.name]
    assert "${" not in text


# -- errors name the tool --------------------------------------------------------------------

GLCOMPUTE_WITHOUT_SIZE = """OpCapability Shader
OpMemoryModel Logical GLSL450
OpEntryPoint GLCompute %main "main"
%void = OpTypeVoid
%fn = OpTypeFunction %void
%main = OpFunction %void None %fn
%entry = OpLabel
OpReturn
OpFunctionEnd
"""


@pytest.mark.parametrize("name, text, tool", [
    ("broken.comp", "#version 450\nvoid main() { undeclared = 1; }\n", "glslangValidator"),
    ("broken.spvasm", "OpCapability Shader\n%x = OpNoSuchInstruction\n", "spirv-as"),
    # Assembles, but Vulkan requires a workgroup size for GLCompute: only spirv-val catches it.
    ("nosize.spvasm", GLCOMPUTE_WITHOUT_SIZE, "spirv-val"),
])
def test_bad_source_raises_shader_error_naming_the_tool(sh, monkeypatch, tmp_path, name, text, tool):
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sh, "SHADERS", tmp_path)
    (tmp_path / name).write_text(text)
    with pytest.raises(sh.ShaderError) as e:
        sh.compile_shader(name, {})
    assert str(e.value).startswith(tool) and name in str(e.value)
    assert not list((tmp_path / "cache").rglob("*.spv")), "a failed compile caches nothing"


def test_validate_rejects_garbage(sh):
    with pytest.raises(sh.ShaderError, match="^spirv-val"):
        sh.validate(SPIRV_MAGIC + b"\0" * 16)


# -- the instructions behind each test name --------------------------------------------------

def parse(disassembly: str) -> tuple[dict, list]:
    """Type names ("f16x2", "i32", "bf16x4") by id, and (result type, opcode, operands) per
    instruction, from `spirv-dis --raw-id` output."""
    types, insts = {}, []
    for line in disassembly.splitlines():
        m = re.match(r"\s*(%\w+) = (Op\w+)\s*(.*)$", line)
        if not m:
            continue
        rid, op, args = m.group(1), m.group(2), m.group(3).split()
        if op == "OpTypeFloat":
            types[rid] = ("bf" if "BFloat16KHR" in args else "f") + args[0]
        elif op == "OpTypeInt":
            types[rid] = ("i" if args[1] == "1" else "u") + args[0]
        elif op == "OpTypeVector":
            types[rid] = f"{types.get(args[0], '?')}x{args[1]}"
        elif args:
            insts.append((rid, types.get(args[0]), op, args[1:]))
    return types, insts


def type_name(prefix: str, bits: int, width: int) -> str:
    return f"{prefix}{bits}" + (f"x{width}" if width > 1 else "")


@pytest.fixture(scope="module")
def disassembled(sh, wl):
    cache = {}

    def get(test, variant):
        key = (test.name, variant.name)
        if key not in cache:
            cache[key] = parse(sh.disassemble(compile_variant(sh, wl, test, variant)))
        return cache[key]
    return get


FMA_FLOATS = alu_params(lambda t, v: t.kernel == "fma" and t.dtype.startswith("fp"))
FMA_INTS = alu_params(lambda t, v: t.kernel == "fma" and not t.dtype.startswith("fp"))


@pytest.mark.parametrize("test, variant", FMA_FLOATS)
def test_float_kernels_use_fused_fma_on_the_variant_type(disassembled, test, variant):
    _, insts = disassembled(test, variant)
    fma_types = {rtype for _, rtype, op, args in insts if op == "OpExtInst" and args[1:2] == ["Fma"]}
    # fp16 is packed: the FMA works on f16 vectors (f16x2, f16x4), never on a scalar half.
    assert fma_types == {type_name("f", int(test.dtype[2:]), variant.width)}


def origin(defs: dict, rid: str):
    """What a value was loaded from, with loads and access chains followed: two loads of acc[k]
    have the same origin even though glslang emits separate loads."""
    op, args = defs.get(rid, (None, []))
    if op == "OpLoad":
        return ("load", origin(defs, args[0]))
    if op == "OpAccessChain":
        return ("chain",) + tuple(origin(defs, a) for a in args)
    return rid


@pytest.mark.parametrize("test, variant", FMA_INTS)
def test_integer_kernels_multiply_by_b_not_by_themselves(disassembled, test, variant):
    _, insts = disassembled(test, variant)
    defs = {rid: (op, args) for rid, _, op, args in insts}
    sign, bits = ("u", test.dtype[4:]) if test.dtype.startswith("u") else ("i", test.dtype[3:])    # uint16: u16
    t = type_name(sign, int(bits), variant.width)
    muls = [args for _, rtype, op, args in insts if op == "OpIMul" and rtype == t]
    assert muls, f"no OpIMul on {t}"
    squares = [a for a in muls if origin(defs, a[0]) == origin(defs, a[1])]
    assert not squares, "x*b + c: a square x*x + c forgets its seed within a few steps"


def test_int8_uses_the_packed_4x8_dot(disassembled):
    test = default_catalog().get("compute.int8")
    for variant in test.variants:
        _, insts = disassembled(test, variant)
        dots = [(rtype, args) for _, rtype, op, args in insts if op == "OpSDot"]
        assert len(dots) == DOTS[test.name, variant.name]
        assert all(rtype == "i32" and args[-1] == "PackedVectorFormat4x8Bit" for rtype, args in dots)


def test_bf16_uses_opdot_on_bfloat16_vectors(disassembled):
    test = default_catalog().get("compute.bf16")
    for variant in test.variants:
        _, insts = disassembled(test, variant)
        result_type = {rid: rtype for rid, rtype, _, _ in insts}
        dots = [(rtype, args) for _, rtype, op, args in insts if op == "OpDot"]
        assert len(dots) == DOTS[test.name, variant.name]
        for rtype, (a, b) in dots:
            assert rtype == "bf16"
            assert result_type[a] == result_type[b] == f"bf16x{variant.width}"


@pytest.mark.parametrize("kernel", ["fma", "dot4x8", "bf16dot"])
def test_the_seed_count_has_no_default_in_the_shaders(sh, wl, monkeypatch, tmp_path, kernel):
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path))
    test, variant = next(p.values for p in ALU if p.values[0].kernel == kernel)
    name, settings = wl.kernel_source(test, variant)            # as the table gives it, without SEEDS
    with pytest.raises(sh.ShaderError, match="SEEDS"):
        sh.compile_shader(name, settings)

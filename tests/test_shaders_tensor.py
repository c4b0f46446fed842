"""shaders/tensor_mma.cu and tensor_wgmma.cu, the CUDA tensor-core kernels: every form of
peakbench/cuda/tensor.py compiles to PTX with nvcc for its architecture and issues its instruction
once per step, spelled with its types (CI, no GPU)."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from peakbench.catalog import default_catalog
from peakbench.cuda import tensor
from peakbench.sources import SHADERS

CATALOG = default_catalog()
NVCC = shutil.which("nvcc")


def compile_arch(form) -> str:
    """The oldest architecture the form runs on natively (sm_90a for wgmma and the wide FP64 shapes)."""
    return {"sm80+": "sm_80", "fp8": "sm_89", "int4": "sm_80", "sm90": "sm_90", "sm90a": "sm_90a"}[form.archs]


def ptx(tmp_path, form, **overrides) -> str:
    test = CATALOG.get(f"matrix.{form.test}")
    variant = tensor.variant_of(form)
    settings = {**tensor.defines(form, variant, variant.accumulators or test.accumulators), **overrides}
    arch = compile_arch(form)
    out = tmp_path / f"{form.kernel}.ptx"
    target = f"-gencode=arch=compute_{arch[3:]},code=sm_{arch[3:]}"     # no plain sm_90 pass for sm_90a
    done = subprocess.run([NVCC, "-ptx", target, "--std=c++17", *(f"-D{k}={v}" for k, v in settings.items()),
                           str(SHADERS / form.source), "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out.read_text()


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
@pytest.mark.parametrize("form", tensor.FORMS, ids=[f"{f.test}-{f.name}" for f in tensor.FORMS])
def test_ptx_issues_the_instruction_once_per_step(tmp_path, form):
    text = ptx(tmp_path, form)
    test = CATALOG.get(f"matrix.{form.test}")
    variant = tensor.variant_of(form)
    steps = variant.unroll * (variant.accumulators or test.accumulators)
    # The loop body issues every step; nothing else in the kernel issues the instruction.
    found = re.findall(re.escape(form.instruction) + r"\s", text)
    assert len(found) == steps, f"{form.name}: {len(found)} {form.instruction} for {steps} steps"
    if form.path == "wgmma":
        for needed in ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned",
                       "wgmma.wait_group.sync.aligned", "fence.proxy.async.shared::cta"):
            assert needed in text, f"{form.name}: no {needed}"
        assert ".shared" in text and "st.shared" in text


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_ptx_instruction_forms_name_their_types(tmp_path):
    """Spot checks of the exact instruction spelling (operand and accumulator types in order)."""
    by = {(f.test, f.name): f for f in tensor.FORMS}
    want = {("fp16.fp16", "mma.sync:m16n8k16"): "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16",
            ("bf16.fp32", "wgmma:m64n256k16"): "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",
            ("int8.int32", "mma.sync:m16n8k32"): "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32",
            ("int8.int32", "wgmma:m64n256k32"): "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8",
            ("fp64.fp64", "mma.sync:m8n8k4"): "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64",
            ("fp64.fp64", "mma.sync:m16n8k16"): "mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64",
            ("fp8_e4m3.fp32", "wgmma:m64n256k32"): "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3",
            ("tf32.fp32", "wgmma:m64n256k8"): "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32"}
    for key, instruction in want.items():
        assert instruction + " " in ptx(tmp_path, by[key]), key


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_wgmma_accumulates_all_128_registers(tmp_path):
    form = next(f for f in tensor.FORMS if f.path == "wgmma" and f.test == "bf16.fp32")
    line = next(l for l in ptx(tmp_path, form).splitlines() if form.instruction in l)
    registers = re.search(r"\{([^}]*)\}", line).group(1).split(",")
    assert len(registers) == 128 and len(set(r.strip() for r in registers)) == 128


# -- sparse forms: the SASS ptxas makes of them --------------------------------------------------

SPARSE_FORMS = [f for f in tensor.FORMS if f.sparse]


def sass_listing(tmp_path, form) -> str:
    from peakbench.evidence import sass
    test = CATALOG.get(f"matrix.{form.test}.sparse")
    variant = tensor.variant_of(form)
    arch = compile_arch(form)[3:]
    out = tmp_path / f"{form.kernel}.cubin"
    settings = tensor.defines(form, variant, variant.accumulators or test.accumulators)
    done = subprocess.run([NVCC, "-cubin", f"-gencode=arch=compute_{arch},code=sm_{arch}", "--std=c++17",
                           *(f"-D{k}={v}" for k, v in settings.items()), str(SHADERS / form.source), "-o", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Advisory" not in done.stderr, done.stderr        # ptxas's advice on the mma.sp spelling
    listing = sass.disassemble(out.read_bytes())
    if listing is None:
        pytest.skip("no SASS disassembler (nvdisasm or cuobjdump)")
    return listing


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
@pytest.mark.parametrize("form", SPARSE_FORMS, ids=[f"{f.test}-{f.name}" for f in SPARSE_FORMS])
def test_sparse_forms_become_sparse_tensor_opcodes(tmp_path, form):
    """Each step is one sparse tensor instruction (HGMMA.SP, HMMA.SP, ...), and nothing dense."""
    found = tensor.tensor_opcodes(sass_listing(tmp_path, form))
    test = CATALOG.get(f"matrix.{form.test}.sparse")
    variant = tensor.variant_of(form)
    steps = variant.unroll * (variant.accumulators or test.accumulators)
    assert found == {form.opcode: steps}, found


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_sparse_wgmma_passes_the_metadata_register_and_selector(tmp_path):
    form = next(f for f in SPARSE_FORMS if f.path == "wgmma.sp" and f.test == "bf16.fp32")
    lines = [l for l in sass_listing(tmp_path, form).splitlines() if "HGMMA.SP" in l]
    # HGMMA.SP.64x256x32.F32.BF16 R24, gdesc[UR4], R24, R152, 0x0 : D, descriptors, C, metadata, selector
    assert all(re.search(r"gdesc\[UR\d+\], R\d+, R\d+, 0x0\b", l) for l in lines), lines
    assert len({re.search(r"R\d+, (R\d+), 0x0", l).group(1) for l in lines}) == 1, "one metadata register"


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_ptxas_lowers_mma_sp_fp8_on_hopper(tmp_path):
    """Why support() offers no mma.sp FP8 form on sm_90: ptxas turns it into FP16 HMMA.SP steps."""
    from peakbench.evidence import sass
    form = next(f for f in SPARSE_FORMS if f.path == "mma.sp" and f.test == "fp8_e4m3.fp32")
    out = tmp_path / "fp8.cubin"
    settings = tensor.defines(form, tensor.variant_of(form), 8)
    done = subprocess.run([NVCC, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "--std=c++17",
                           *(f"-D{k}={v}" for k, v in settings.items()), str(SHADERS / form.source), "-o", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    listing = sass.disassemble(out.read_bytes())
    if listing is None:
        pytest.skip("no SASS disassembler (nvdisasm or cuobjdump)")
    found = tensor.tensor_opcodes(listing)
    assert not form.issued(found) and any(op.startswith("HMMA.SP") for op in found), found
    assert not tensor.native(form, (9, 0))

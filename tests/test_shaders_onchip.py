"""shaders/onchip.cu, onchip_shared.comp and onchip_l2.comp without a GPU: the CUDA kernels compiled by
nvcc to an sm_90a cubin and read as SASS (the shared read is 16-byte LDS.128 loads, the shared
chase a chain of loads each addressed by the one before, the L2 read LDG.E.128.STRONG.GPU, which
the L1 does not serve); the HIP dialect through clang-22 for AMD targets, where installed (the
L2 loads carry the nontemporal bit, the shared loads are 128-bit LDS reads); the GLSL modules
built and validated, the L2 buffer decorated Coherent."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from helpers import fixture, fixture_absent

from peakbench.catalog import default_catalog
from peakbench.evidence import sass
from peakbench.workloads import onchip
from peakbench.workloads.chase import ROUND

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "shaders" / "onchip.cu"
CATALOG = default_catalog()
SHARED = CATALOG.get("memory.shared")
L2 = CATALOG.get("memory.l2")
UNROLLS = [v.unroll for v in L2.variants]

SHARED_DEFINES = {"UNROLL": SHARED.variants[0].unroll, "SLIDE": onchip.SLIDE, "SUMS": SHARED.accumulators}
CHASE_DEFINES = {"CHASE_WORDS": onchip.CHASE_WORDS, "ROUND": ROUND, "CLOCK": 1}

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                                reason="nvcc is not installed")


def nvcc() -> str:
    return shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"


def sass_of(tmp_path, **defines) -> str:
    out = tmp_path / "onchip.cubin"
    subprocess.run([nvcc(), "-cubin", "-arch=sm_90a", *[f"-D{k}={v}" for k, v in defines.items()], str(SOURCE),
                    "-o", str(out)], check=True, capture_output=True, text=True)
    listing = sass.disassemble(out.read_bytes())
    if listing is None:
        pytest.skip("no SASS disassembler (pip install nvidia-cuda-nvdisasm)")
    return listing


def instructions(listing: str) -> list[str]:
    """The instruction text of each SASS line ("LDS.128 R4, [R2+0x200]")."""
    return [m.group(1).strip() for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+([^;]+);", listing)]


@needs_nvcc
def test_the_shared_read_is_16_byte_shared_loads_with_immediate_offsets(tmp_path):
    code = instructions(sass_of(tmp_path, **SHARED_DEFINES))
    loads = [c for c in code if c.startswith("LDS")]
    assert len(loads) == SHARED_DEFINES["UNROLL"] and all(c.startswith("LDS.128 ") for c in loads), loads
    # one address register a pass, the 32-vector steps as immediates: no arithmetic per load
    assert len({re.search(r"\[(R\d+)", c).group(1) for c in loads}) == 1, loads
    assert not any(c.startswith("LDG") and "CONSTANT" not in c for c in code)   # only the copy reads global memory


@needs_nvcc
def test_the_shared_chase_is_a_chain_of_loads_with_no_arithmetic_between(tmp_path):
    code = instructions(sass_of(tmp_path, **CHASE_DEFINES))
    loads = [i for i, c in enumerate(code) if c.startswith("LDS")]
    assert len(loads) == 16, [code[i] for i in loads]                    # the unrolled inner loop
    chain = [re.match(r"LDS R(\d+), \[R(\d+)\]$", code[i]) for i in loads]
    assert all(chain), [code[i] for i in loads]                           # the address is a register alone
    for before, after in zip(chain, chain[1:]):
        assert after.group(2) == before.group(1), "a load not addressed by the one before"
    between = [c.split()[0] for c in code[loads[0]:loads[-1]] if not c.startswith("LDS")]
    assert not any(op.split(".")[0] in ("IMAD", "LEA", "SHF", "IADD3") for op in between), between
    assert sum(1 for c in code if c.startswith("CS2R") and "SR_CLOCKLO" in c) == 2


@needs_nvcc
@pytest.mark.parametrize("unroll", UNROLLS)
def test_the_l2_read_loads_16_bytes_past_the_l1(tmp_path, unroll):
    code = instructions(sass_of(tmp_path, L2_UNROLL=unroll, SUMS=min(L2.accumulators, unroll)))
    loads = [c.split()[0] for c in code if c.startswith("LDG")]
    assert loads == ["LDG.E.128.STRONG.GPU"] * unroll, loads


@needs_nvcc
def test_the_sass_check_has_teeth(tmp_path):
    """The same read with ordinary loads (L1-cached) is told apart."""
    text = SOURCE.read_text().replace("return __ldcg(p);", "return *p;")
    (tmp_path / "onchip.cu").write_text(text)
    out = tmp_path / "plain.cubin"
    subprocess.run([nvcc(), "-cubin", "-arch=sm_90a", "-DL2_UNROLL=8", "-DSUMS=8", str(tmp_path / "onchip.cu"),
                    "-o", str(out)], check=True, capture_output=True)
    listing = sass.disassemble(out.read_bytes()) or pytest.skip("no SASS disassembler")
    loads = {c.split()[0] for c in instructions(listing) if c.startswith("LDG")}
    assert "LDG.E.128.STRONG.GPU" not in loads and loads


# -- HIP, through clang-22 ------------------------------------------------------------------------
HEADERS = fixture("hip-headers-rocm-6.3.tgz")
BITCODE = Path(os.environ.get("PEAKBENCH_AMD_BITCODE")
               or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "peakbench-test" / "amd-bitcode")
needs_clang = pytest.mark.skipif(shutil.which("clang-22") is None or not HEADERS.exists()
                                 or not (BITCODE / "ocml.bc").exists(),
                                 reason=fixture_absent(HEADERS.name)
                                 or "clang-22 or the device library is missing (scripts/rocm-isa-deps.sh)")


@pytest.fixture(scope="module")
def amd(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hip")
    with tarfile.open(HEADERS) as tar:
        tar.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    rocm = next(p.parents[2] for p in tmp.glob("*/include/hip/hip_runtime.h"))
    abi = tmp / "abi.ll"
    abi.write_text('target triple = "amdgcn-amd-amdhsa"\n'
                   "@__oclc_ABI_version = hidden local_unnamed_addr addrspace(4) constant i32 600, align 4\n")
    subprocess.run(["clang-22", "--target=amdgcn-amd-amdhsa", "-nogpulib", "-c", "-emit-llvm", str(abi), "-o",
                    str(tmp / "abi.bc")], check=True, capture_output=True)
    libs = [BITCODE / "ocml.bc", BITCODE / "ockl.bc", tmp / "abi.bc"]

    def compile_(target: str, wave: int, **defines) -> str:
        cmd = ["clang-22", "-x", "hip", "--cuda-device-only", "-nogpulib", f"--rocm-path={rocm}", "--hip-version=6.3",
               f"--offload-arch={target}", "-O3", "-std=c++17", f"-D__AMDGCN_WAVEFRONT_SIZE={wave}",
               "-D__HIP_PLATFORM_AMD__", *[f for lib in libs for f in ("-Xclang", "-mlink-builtin-bitcode", "-Xclang", str(lib))],
               *[f"-D{k}={v}" for k, v in defines.items()], "-S", "-o", "-", str(SOURCE)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout
    return compile_


TARGETS = [("gfx942", 64, "nt"), ("gfx90a", 64, "slc"), ("gfx1100", 32, "slc")]


@needs_clang
@pytest.mark.parametrize("target, wave, bit", TARGETS, ids=[t[0] for t in TARGETS])
def test_hip_kernels_take_the_paths_the_evidence_names(amd, target, wave, bit):
    l2 = amd(target, wave, L2_UNROLL=8, SUMS=8)
    loads = re.findall(r"^\s+(global_load_\w+)([^\n]*)", l2, re.M)
    assert len(loads) == 8 and all(op in ("global_load_dwordx4", "global_load_b128") for op, _ in loads), loads
    assert all(re.search(rf"\b{bit}\b", rest) for _, rest in loads), loads       # the nontemporal bit
    shared = amd(target, wave, **SHARED_DEFINES)
    reads = re.findall(r"^\s+(ds_(?:read|load)_\w+)", shared, re.M)
    assert reads == [reads[0]] * SHARED_DEFINES["UNROLL"] and reads[0] in ("ds_read_b128", "ds_load_b128"), reads
    chase = amd(target, wave, **CHASE_DEFINES)
    steps = re.findall(r"^\s+ds_(?:read|load)_b32 (v\d+), (v\d+)", chase, re.M)
    assert len(steps) == 16 and all(dst == addr for dst, addr in steps), steps     # each load's value, the next address


# -- GLSL ---------------------------------------------------------------------------------------

def decorations(code: bytes) -> set[int]:
    """The decorations of a SPIR-V module (OpDecorate and OpMemberDecorate)."""
    import numpy as np
    words, found, i = np.frombuffer(code, np.uint32), set(), 5
    while i < len(words):
        op, count = int(words[i]) & 0xFFFF, int(words[i]) >> 16
        if op == 71:
            found.add(int(words[i + 2]))
        elif op == 72:
            found.add(int(words[i + 3]))
        i += max(count, 1)
    return found


COHERENT = 23


@pytest.mark.parametrize("source, defines", [
    ("onchip_shared.comp", {"CHASE": 0, **SHARED_DEFINES}),
    ("onchip_shared.comp", {"CHASE": 1, **CHASE_DEFINES}),
    ("onchip_shared.comp", {"CHASE": 1, **CHASE_DEFINES, "CLOCK": 0}),
    *[("onchip_l2.comp", {"UNROLL": u, "SUMS": min(L2.accumulators, u)}) for u in UNROLLS]])
def test_glsl_kernels_build_and_validate(shaders, source, defines):
    module, _ = shaders
    code = module.compile_shader(source, defines)
    assert (COHERENT in decorations(code)) == (source == "onchip_l2.comp")

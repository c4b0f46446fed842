"""shaders/sm.cu and sm.comp build, and do what their contract counts: nvcc's SASS for sm_90a
reads the SM id and runs the 16 x 8 FFMAs of a trip (the chase: 64 L1-bypassing loads), and both
GLSL variants pass spirv-val."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from peakbench.evidence import sass
from peakbench.evidence.listing import opcodes
from peakbench.sources import SHADERS

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
needs_nvcc = pytest.mark.skipif(not NVCC or not sass.installed(), reason="needs nvcc and cuobjdump or nvdisasm")


def listing(tmp_path, defines: dict) -> str:
    cubin = tmp_path / "sm.cubin"
    subprocess.run([NVCC, "-arch=sm_90a", "-cubin", "-o", str(cubin), *(f"-D{k}={v}" for k, v in defines.items()),
                    str(SHADERS / "sm.cu")], check=True, capture_output=True)
    return sass.disassemble(cubin.read_bytes())


@needs_nvcc
def test_the_rate_kernel_reads_the_sm_id_and_runs_every_fma(tmp_path):
    text = listing(tmp_path, {"CHASE": 0, "UNROLL": 16, "ACC": 8})
    ops = opcodes(text)
    assert "SR_VIRTUALSMID" in text and ops.count("CS2R") >= 2    # the SM id (%smid), the counter twice
    loop = opcodes(sass.loop_body(sass.with_addresses(text)))
    assert loop.count("FFMA") == 16 * 8


@needs_nvcc
def test_the_chase_skips_the_l1_on_every_load(tmp_path):
    text = listing(tmp_path, {"CHASE": 1, "STEPS": 64, "LINE_WORDS": 32})
    loop = opcodes(sass.loop_body(sass.with_addresses(text)))
    assert loop.count("LDG.E.STRONG.GPU") == 64 and "LDG.E" not in loop


@pytest.mark.parametrize("defines", [{"CHASE": 0, "UNROLL": 16, "ACC": 8}, {"CHASE": 1, "STEPS": 64, "LINE_WORDS": 32}])
def test_the_glsl_builds_and_validates(shaders, defines):
    compile_shader = shaders[0].compile_shader          # validated with spirv-val, or it raises
    code = compile_shader("sm.comp", defines)
    assert code[:4] == b"\x03\x02\x23\x07"

"""shaders/gemm_fill.cu, the GEMM operands' fill for CUDA and HIP, without a GPU: compiled to PTX
with nvcc (one 32-bit store a word, the two lowbias32 multiplies, the parity pick, a grid-stride
loop) and type-checked through clang's HIP front end for AMD targets, as the ROCm backend compiles
it. What it writes is checked against the host's rows on the H200 (tests/test_gpu_gemm.py) and by
every gemm test's own verification."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import clang_tidy
from test_shaders_mem import front_end

SOURCE = Path(__file__).resolve().parents[1] / "shaders" / "gemm_fill.cu"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_fill_stores_one_hashed_word_a_thread_step(tmp_path):
    out = tmp_path / "fill.ptx"
    subprocess.run(["nvcc", "-ptx", "-arch=sm_90", str(SOURCE), "-o", str(out)], check=True,
                   capture_output=True, text=True)
    ptx = out.read_text()
    body = ptx[ptx.index(".entry gemm_fill"):]
    assert len(re.findall(r"\.param \.u32 gemm_fill_param_\d+", body)) == 8      # words, offset, 2 x (keep, set, add)
    assert len(re.findall(r"st\.global\.u32", body)) == 1 and not re.search(r"ld\.global", body)
    assert re.search(r"mul\.lo\.s32\s+%r\d+, %r\d+, 2146121005", body)           # 0x7feb352d
    assert re.search(r"mul\.lo\.s32\s+%r\d+, %r\d+, -2073254261", body)          # 0x846ca68b
    assert re.search(r"and\.b32\s+%r\d+, %r\d+, 1;", body) and re.search(r"bra", body)


@pytest.mark.skipif(clang_tidy() is None, reason="clang-tidy is not installed (pip install clang-tidy)")
@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
def test_the_fill_passes_clang_for_amd(tmp_path, target):
    done = front_end(tmp_path, {}, target, SOURCE)
    errors = [line for line in (done.stdout + done.stderr).splitlines() if "error:" in line]
    assert done.returncode == 0 and not errors, "\n".join(errors or [done.stderr[-2000:]])

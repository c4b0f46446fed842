"""peakbench.evidence.sass: a cubin that CuPy cut short by one byte is restored to the length its ELF
header states."""
from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from peakbench.evidence import sass

def elf(body: int, phoff: int, phnum: int, shoff: int, shnum: int) -> bytes:
    head = bytearray(64)
    head[:5] = b"\x7fELF\x02"
    struct.pack_into("<QQ", head, 0x20, phoff, shoff)
    struct.pack_into("<HHHH", head, 0x36, 56, phnum, 64, shnum)
    return bytes(head) + b"\x01" * (body - 64)


def test_a_cubin_cut_short_by_one_byte_is_restored_to_its_stated_length():
    whole = elf(9024, phoff=8744, phnum=5, shoff=7400, shnum=21)       # the H200's stream.cubin
    assert len(sass.whole_elf(whole[:-1])) == 9024
    assert sass.whole_elf(whole[:-1])[-1] == 0
    assert sass.whole_elf(whole) == whole                                # nothing to restore
    assert sass.whole_elf(b"//ptx text") == b"//ptx text"               # not an ELF: untouched


NVCC = Path("/usr/local/cuda/bin/nvcc")


@pytest.mark.skipif(not (NVCC.exists() or shutil.which("nvcc")) or not sass.installed(),
                    reason="needs nvcc and a SASS disassembler")
def test_a_real_cubins_listing_is_cached_and_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "k.cu"
    src.write_text('extern "C" __global__ void k(float* x, float a) { x[threadIdx.x] = a * x[threadIdx.x] + 3.0f; }\n')
    subprocess.run([str(NVCC) if NVCC.exists() else "nvcc", "-arch=sm_90a", "-cubin", "-o", str(tmp_path / "k.cubin"),
                    str(src)], check=True, capture_output=True)
    cubin = (tmp_path / "k.cubin").read_bytes()
    runs = []
    real = sass.run_on_file
    monkeypatch.setattr(sass, "run_on_file", lambda *a: runs.append(a[0][0]) or real(*a))
    listing = sass.disassemble(cubin)
    assert "FFMA" in listing and len(runs) == 1
    assert sass.disassemble(cubin) == listing and len(runs) == 1, "read back, not disassembled again"
    assert list((tmp_path / "cache" / "sass").glob("*.bin")), "kept under the sass folder"

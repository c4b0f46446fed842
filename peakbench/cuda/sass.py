"""SASS evidence: disassemble a cubin with the CUDA toolkit's cuobjdump or nvdisasm, where
installed, and count the opcodes, so a report can show that compute.fp16 ran HFMA2 and
matrix.fp16.fp32 ran HGMMA."""
from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

from peakbench.listing import count, instruction_mix, opcodes, run_on_file  # noqa: F401  (the SASS vocabulary)


def whole_elf(binary: bytes) -> bytes:
    """The cubin as NVRTC made it. CuPy's getCUBIN drops the last byte (as if it were a string's
    terminator), which cuts off the end of the ELF program headers: the driver loads it anyway,
    but cuobjdump and nvdisasm reject it. Restore the length the ELF header states, zero-filled
    (the cut byte is the high byte of the last header's alignment)."""
    if binary[:4] != b"\x7fELF" or binary[4] != 2:
        return binary
    phoff, shoff = struct.unpack_from("<QQ", binary, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", binary, 0x36)
    end = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
    return binary + b"\0" * max(0, end - len(binary))


def tool(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for root in (os.environ.get("CUDA_PATH"), "/usr/local/cuda", *sorted(Path("/usr/local").glob("cuda-*"))):
        if root and (Path(root) / "bin" / name).exists():
            return str(Path(root) / "bin" / name)
    return None


def disassemble(cubin: bytes) -> str | None:
    """The SASS listing of a cubin, or None when no disassembler is installed or it fails."""
    if not cubin:
        return None
    for name, args in (("cuobjdump", ["-sass"]), ("nvdisasm", [])):
        exe = tool(name)
        out = run_on_file([exe, *args], cubin, "kernel.cubin") if exe else None
        if out and opcodes(out):
            return out
    return None

"""peakbench.cuda.sass: a cubin that CuPy cut short by one byte is restored to the length its ELF
header states."""
from __future__ import annotations

import struct

from peakbench.cuda import sass

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

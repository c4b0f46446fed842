"""Opcode counts of a machine-code listing: NVIDIA SASS (cuobjdump/nvdisasm) or AMDGCN
(llvm-objdump / roc-obj), so evidence can show that compute.fp16 ran HFMA2 or v_pk_fma_f16."""
from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

# "/*0150*/   @!P0 HFMA2.MMA R4, R4, R2, R5 ;" -> HFMA2.MMA (the predicate is not part of it)
_SASS = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")
# "  v_pk_fma_f16 v1, v2, v3, v4   // 000000001234: ..." -> v_pk_fma_f16
_GCN = re.compile(r"^\s*([sv]_[a-z0-9_]+)\b", re.M)


def function(listing: str, name: str) -> str:
    """The part of a listing that is one kernel (cuobjdump prints every function of a module,
    each after a "Function : <name>" line); the whole listing when it names no functions."""
    parts = re.split(r"^\s*Function : (\S+)\s*$", listing, flags=re.M)
    if len(parts) == 1:
        return listing
    bodies = dict(zip(parts[1::2], parts[2::2]))
    return bodies.get(name, "")


def opcodes(listing: str) -> list[str]:
    found = [m.group(1) for m in _SASS.finditer(listing)]
    return found or [m.group(1) for m in _GCN.finditer(listing)]


def instruction_mix(listing: str, top: int = 12) -> dict[str, int]:
    """Opcode counts (with modifiers), the most frequent first."""
    return dict(Counter(opcodes(listing)).most_common(top))


def count(listing: str, opcode: str) -> int:
    """How many instructions are `opcode` or a form of it (HFMA2 counts HFMA2 and HFMA2.MMA)."""
    return sum(1 for op in opcodes(listing) if op == opcode or op.startswith(opcode + "."))


def evidence(listing: str | None, isa: str) -> dict:
    """A kernel's instruction mix for the JSON, where the platform's disassembler gave a listing."""
    return {"instruction_mix": instruction_mix(listing), "isa": isa} if listing else {}


def run_on_file(command: list[str], data: bytes, name: str, timeout: float = 60) -> str | None:
    """The standard output of `command` given a temporary file `name` holding `data` (appended
    as its last argument), or None when the tool cannot run or fails."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        try:
            done = subprocess.run([*command, str(path)], capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            return None
    return done.stdout if done.returncode == 0 else None


# nvdisasm names branch targets by label ("BRA `(.L_x_1)"), cuobjdump by address ("BRA 0x390"):
# a listing with labels gets each label's address in its place, so one loop finder reads both.
_LABEL = re.compile(r"^(\.L\w+):\s*$", re.M)
_ADDRESS = re.compile(r"/\*([0-9a-f]{4,})\*/")
_LABEL_REF = re.compile(r"`\((\.L\w+)\)")


def with_addresses(listing: str) -> str:
    """The listing with each branch's label target replaced by the address it labels."""
    where = {}
    for m in _LABEL.finditer(listing):
        after = _ADDRESS.search(listing, m.end())
        if after:
            where[m.group(1)] = int(after.group(1), 16)
    return _LABEL_REF.sub(lambda m: f"0x{where[m.group(1)]:x}" if m.group(1) in where else m.group(0), listing)

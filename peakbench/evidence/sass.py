"""SASS evidence: disassemble a cubin with the CUDA toolkit's cuobjdump or nvdisasm, where
installed, and count the opcodes, so a report can show that compute.fp16 ran HFMA2 and
matrix.fp16.fp32 ran HGMMA. A listing is cached (peakbench/cache.py): a disassembler's start costs
more than half a second."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import struct
import sys
from collections import Counter
from pathlib import Path

from peakbench import cache
from peakbench.evidence.listing import count, instruction_mix, opcodes, run_on_file, with_addresses  # noqa: F401  (the SASS vocabulary)
from peakbench.runtime import LoopCensus

NO_DISASSEMBLER = ("no SASS disassembler (cuobjdump, or nvdisasm: pip install nvidia-cuda-nvdisasm): "
                   "the loop's instructions are not counted")


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
    """A CUDA toolkit binary: on PATH, in a CUDA install, or from NVIDIA's wheel
    (site-packages/nvidia/<cu13 or cuda_nvdisasm>/bin)."""
    found = shutil.which(name)
    if found:
        return found
    wheels = [c for p in sys.path if p for c in sorted(Path(p).glob(f"nvidia/*/bin/{name}"))]
    if wheels:
        return str(wheels[0])
    for root in (os.environ.get("CUDA_PATH"), "/usr/local/cuda", *sorted(Path("/usr/local").glob("cuda-*"))):
        if root and (Path(root) / "bin" / name).exists():
            return str(Path(root) / "bin" / name)
    return None


DISASSEMBLERS = (("cuobjdump", ["-sass"]), ("nvdisasm", []))      # the first that gives a listing


def disassemble(cubin: bytes) -> str | None:
    """The SASS listing of a cubin, or None when no disassembler is installed or it fails. It is
    cached (folder sass, keyed by the cubin and the disassemblers that would read it)."""
    if not cubin:
        return None
    found = [(exe, args) for name, args in DISASSEMBLERS if (exe := tool(name))]
    if not found:
        return None
    key = cache.key(hashlib.sha256(cubin).digest(), *(f"{cache.tool_identity(exe)} {args}" for exe, args in found))
    text = cache.load_text("sass", key)
    if text is not None:
        return text
    for exe, args in found:
        out = run_on_file([exe, *args], cubin, "kernel.cubin")
        if out and opcodes(out):
            cache.store_text("sass", key, out)
            return out
    return None


# The vector-ALU arithmetic of a SASS loop body, counted the catalog's way (DESIGN.md: an FMA is 2
# ops per lane, a 4x8-bit dot-accumulate 8): opcode family -> (operand type, ops per instruction).
# HFMA2.MMA is HFMA2 issued to the tensor pipe's FMA path (the same packed FMA); .BF16_V2 makes an
# HFMA2 a bfloat16 one.
ARITHMETIC = {"FFMA": ("f32", 2), "FMUL": ("f32", 1), "FADD": ("f32", 1),
              "DFMA": ("f64", 2), "DMUL": ("f64", 1), "DADD": ("f64", 1),
              "HFMA2": ("f16x2", 4), "HMUL2": ("f16x2", 2), "HADD2": ("f16x2", 2),
              "IMAD": ("i32", 2), "IDP": ("i8x4", 8)}
BF16 = {"f16x2": "bf16x2"}
# IMAD.MOV is a move, IMAD.SHL a shift, IMAD.WIDE an address, IMAD.IADD an add: none is the
# multiply-add a kernel asks for.
NOT_ARITHMETIC = {"MOV", "SHL", "IADD", "WIDE", "HI", "X"}
_HALF = re.compile(r"\.H[01]_H[01]\b")
FUSED = {"FFMA", "DFMA", "IMAD"}        # a multiply-add whose addend may be RZ: then only a multiply
_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)\s*([^;]*)")


def arithmetic(opcode: str, operands: str = "") -> tuple[str, int] | None:
    """(type, ops) of one instruction, or None when it does no vector-ALU arithmetic: a modifier
    that makes it a move or an address, or an HFMA2 of RZ x RZ (how ptxas loads a constant)."""
    family, *mods = opcode.split(".")
    if family not in ARITHMETIC or NOT_ARITHMETIC & set(mods):
        return None
    if family == "IDP" and "4A" not in mods:
        return None
    t, ops = ARITHMETIC[family]
    t = BF16.get(t, t) if "BF16_V2" in mods else t
    sources = [s.strip() for s in operands.split(",")[1:]]
    if family in FUSED and len(sources) == 3 and sources[2] == "RZ":
        return t, ops // 2                              # IMAD a, b, RZ: a multiply, no add
    if t.endswith("x2") and sources:
        if all(s.lstrip("-|").startswith("RZ") for s in sources[:2]):
            return None
        if all(_HALF.search(s) for s in sources):      # every operand one half: a scalar FMA
            return t[:-2], ops // 2
    return t, ops


_LINE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/(.*)$", re.M)
# sm_100 and later may give the predicate as an operand: `BRA.U !UP0, 0x0080`
_BRANCH = re.compile(r"\s*(?:@!?U?P[T0-9]+\s+)?BRA(?:\.[A-Z]+)*\s+(?:!?U?P[T0-9]+,\s*)?0x([0-9a-f]+)")


def loops(listing: str) -> list[tuple[int, int]]:
    """(target, branch) addresses of each backward branch: a loop from target to branch. A branch
    to itself (the trap after EXIT) is no loop."""
    found = []
    for m in _LINE.finditer(listing):
        branch = _BRANCH.match(m.group(2))
        if branch and int(branch.group(1), 16) < int(m.group(1), 16):
            found.append((int(branch.group(1), 16), int(m.group(1), 16)))
    return found


def innermost(listing: str) -> list[str]:
    """The lines of each loop that holds no other, the largest first."""
    spans = loops(listing)
    inner = sorted((s for s in spans if not any(o != s and s[0] <= o[0] and o[1] <= s[1] for o in spans)),
                   key=lambda s: s[0] - s[1])
    return ["\n".join(m.group(0) for m in _LINE.finditer(listing) if low <= int(m.group(1), 16) <= high)
            for low, high in inner]


def loop_body(listing: str) -> str:
    """The lines of the largest innermost loop (one that holds no other), or "" when none."""
    return next(iter(innermost(listing)), "")


def installed() -> bool:
    return any(tool(name) for name in ("cuobjdump", "nvdisasm"))


def unlisted(source: str) -> LoopCensus:
    """The census of a kernel with no listing, and why there is none."""
    why = "the disassembler gave no listing of this kernel" if installed() else NO_DISASSEMBLER
    return LoopCensus({}, 0, frozenset(), source, why)


def loop_census(listing: str | None, source: str = "SASS") -> LoopCensus:
    """The census of a SASS listing's main loop (its largest innermost loop), or a note saying why
    there is none."""
    if not listing:
        return unlisted(source)
    body = loop_body(with_addresses(listing))
    if not body:
        return LoopCensus({}, 0, frozenset(), source, "no loop in the SASS")
    return census_of([(m.group(1), m.group(2)) for m in _INSTRUCTION.finditer(body)], source)


def mix_census(mix: dict[str, int], source: str) -> LoopCensus:
    """The census of a loop's opcode counts (no operands: an RZ x RZ HFMA2 counts as arithmetic)."""
    return census_of([(op, "") for op, n in mix.items() for _ in range(n)], source)


def census_of(instructions, source: str) -> LoopCensus:
    ops, work, types = {}, 0, set()
    for opcode, operands in instructions:
        found = arithmetic(opcode, operands)
        if found:
            t, n = found
            ops[f"{opcode} {t}"] = ops.get(f"{opcode} {t}", 0) + 1
            work += n
            types.add(t)
    note = "" if ops else "no vector arithmetic in the loop"
    return LoopCensus(dict(sorted(ops.items())), work, frozenset(types), source, note)


_GLOBAL = re.compile(r"^(LDG|STG)((?:\.[A-Z0-9_]+)*)$")
_SHARED = re.compile(r"^(LDS|STS)((?:\.[A-Z0-9_]+)*)$")     # not LDSM (a matrix load)
# bytes of a global access by its width modifier (none: 32 bits)
WIDTHS = {"128": 16, "64": 8, "U16": 2, "S16": 2, "U8": 1, "S8": 1}


def memory_census(listing: str | None, source: str = "SASS", space: str = "memory") -> LoopCensus:
    """The global loads (LDG) and stores (STG) of a kernel's innermost loop that has any, or of
    the whole kernel where none does (the stream's tiles and rows), keyed as the SPIR-V memory
    census is ("LDG.E.128 (load, 16 B)"), work their bytes: for the memory streams' work guard.
    `space` "shared": shared memory's loads (LDS) and stores (STS) of the innermost loop that
    loads any, else of the whole kernel (memory.shared; the copy into shared memory before that
    loop only stores, and a kernel whose loop lost its loads is counted whole, and fails)."""
    from peakbench.evidence.spirv import access, accessed
    if not listing:
        return unlisted(source)
    addressed = with_addresses(listing)
    pattern, load = (_SHARED, "LDS") if space == "shared" else (_GLOBAL, "LDG")

    def moved(text: str) -> dict[str, int]:
        ops: dict[str, int] = {}
        for m in _INSTRUCTION.finditer(text):
            g = pattern.match(m.group(1))
            if g:
                mods = g.group(2).split(".")
                width = next((WIDTHS[w] for w in mods if w in WIDTHS), 4)
                key = access(m.group(1), "load" if g.group(1) == load else "store", width)
                ops[key] = ops.get(key, 0) + 1
        return ops

    def counts(ops: dict[str, int]) -> bool:
        return bool(ops) and (space != "shared" or any(accessed(k)[1] for k in ops))
    found = next((ops for ops in map(moved, innermost(addressed)) if counts(ops)), None)
    ops, where = (found, "the innermost loop") if found else (moved(addressed), "the whole kernel (no loop moves memory)")
    work = sum(n * sum(accessed(k)[1:]) for k, n in ops.items())
    return LoopCensus(dict(sorted(ops.items())), work, frozenset(), source, f"counted in {where}")


# Atomic instructions (one add a lane), and what shows a warp's adds combined before them (MATCH
# finds the lanes of one address, REDUX sums their values: NVIDIA's Vulkan compiler does this).
ATOMIC = {"RED", "REDG", "REDAS", "ATOM", "ATOMG", "ATOMS"}
AGGREGATION = {"REDUX", "MATCH"}
SPECIAL = {"MUFU"}              # one special-function result a lane
# The type of an atomic or MUFU by its modifiers; none names a 32-bit integer add (a signed one,
# .S32, adds the same bits) or an FP32 function. RCP64H and RSQ64H are the FP64 seeds.
OPERATION_TYPES = {"F32": "f32", "F64": "f64", "F16x2": "f16x2", "BF16x2": "bf16x2", "F16": "f16",
                   "64": "u64", "U64": "u64", "S64": "u64", "RCP64H": "f64", "RSQ64H": "f64"}


def operation_type(opcode: str) -> str:
    """"u32" for REDG.E.ADD.STRONG.GPU, "f32" for RED.E.ADD.F32.FTZ.RN or MUFU.RCP, "f64" for
    MUFU.RCP64H."""
    family, *mods = opcode.split(".")
    found = next((OPERATION_TYPES[m] for m in mods if m in OPERATION_TYPES), None)
    return found or ("f32" if family in SPECIAL else "u32")


def operation_census(listing: str | None, kind: str, source: str = "SASS") -> LoopCensus:
    """The atomics (kind "atomic") or special-function instructions ("special") of the innermost
    loop that holds any, one op a lane each; its forms (runtime.FORMS): a compare-and-swap
    anywhere in the kernel, a warp's adds aggregated in the loop. An aggregated step is one MATCH
    (the lanes of one address found), one REDUX.SUM and its atomic on each of two paths, of
    which one runs (NVIDIA's Vulkan driver 580: 16 MATCH.ALL.U64 and 32 REDG a 16-step loop): its
    steps are its MATCH instructions."""
    if not listing:
        return unlisted(source)
    families = ATOMIC if kind == "atomic" else SPECIAL
    addressed = with_addresses(listing)

    def found(text: str) -> dict[str, int]:
        return dict(Counter(op for op in opcodes(text) if op.split(".")[0] in families))
    loop = next((body for body in innermost(addressed) if found(body)), "")
    ops = found(loop)
    forms = set()
    if kind == "atomic":
        if any({"CAS", "CAST"} & set(op.split(".")[1:]) for op in found(addressed)):
            forms.add("compare-and-swap")
        steps = sum(1 for op in opcodes(loop) if op.split(".")[0] == "MATCH")
        if ops and (steps or any(op.split(".")[0] in AGGREGATION for op in opcodes(loop))):
            forms.add("aggregated")
            matches = dict(Counter(op for op in opcodes(loop) if op.split(".")[0] == "MATCH"))
            ops.update({f"{op} (one a step: the atomics sit on two paths)": n for op, n in matches.items()})
            if not steps:
                return LoopCensus({}, 0, frozenset(), source, f"aggregated atomics ({', '.join(ops)}) with no MATCH"
                                  " a step: the steps are not told apart", frozenset(forms))
            return LoopCensus(dict(sorted(ops.items())), steps, typed(found(loop)), source, "", frozenset(forms))
    note = "" if ops else f"no {kind} instruction in a loop"
    return LoopCensus(dict(sorted(ops.items())), sum(ops.values()), typed(ops), source, note, frozenset(forms))


def typed(ops: dict[str, int]) -> frozenset:
    """The types of a census's atomics or special functions (operation_type)."""
    return frozenset(operation_type(op) for op in ops)


# An MMA opcode's operand types by its modifiers: HMMA.16816.F32.BF16 is bf16 into f32,
# IMMA.16832.S8.S8 int8 into i32, QMMA/QGMMA ... .E4M3.E4M3 fp8; HMMA without one is fp16.
_OPERAND = {"BF16": "bf16", "TF32": "tf32", "E4M3": "e4m3", "E5M2": "e5m2", "S8": "i8", "U8": "i8", "S4": "i4",
            "U4": "i4", "F64": "f64"}


def mma_types(op: str) -> str:
    """"HMMA.16816.F32.BF16" -> "bf16.f32": operands.accumulator, as the guards name them."""
    family, *mods = op.split(".")
    mods = [m for m in mods if m != "SP"]         # HMMA.SP.16832.F16: the sparse form's types alike
    operand = next((_OPERAND[m] for m in mods[1:] if m in _OPERAND), None)
    if family.startswith("D"):
        return "f64.f64"
    if family.startswith("I"):
        return f"{operand or 'i8'}.i32"
    accumulate = "f16" if "F16" in mods[1:2] else "f32"
    return f"{operand or 'f16'}.{accumulate}"


# A tensor-core instruction and its shape: HMMA.16816.F32 (m16 n8 k16, a warp's), HGMMA.64x256x16.F32
# (a warpgroup's), the sparse HMMA.SP.16832 and HGMMA.SP.64x256x32 (dense-equivalent K).
_TENSOR = re.compile(r"^[HIDQ](G?)MMA(?:\.SP)?\.(?:(\d+)x(\d+)x(\d+)|(16|8)(8)(\d+))(?:\.|$)")


def tensor_census(listing: str | None, source: str = "SASS") -> LoopCensus:
    """The tensor-core instructions of the innermost loop that holds any, each 2*M*N*K ops of the
    tile owner that issues it (a warp; with GMMA, a warpgroup: each of its warps lists the
    instruction once), in the operand types its modifiers name: for the matrix tests' work and
    types guards."""
    if not listing:
        return unlisted(source)

    def found(text: str) -> dict[str, int]:
        return dict(Counter(op for op in opcodes(text) if _TENSOR.match(op)))
    ops = next((ops for ops in map(found, innermost(with_addresses(listing))) if ops), {})
    work = 0
    for op, n in ops.items():
        shape = [int(g) for g in _TENSOR.match(op).groups()[1:] if g]
        work += n * 2 * shape[0] * shape[1] * shape[2]
    return LoopCensus(dict(sorted(ops.items())), work, frozenset(mma_types(op) for op in ops), source,
                      "" if ops else "no tensor-core instruction in a loop")


def pieces_census(listing: str | None, source: str = "SASS") -> LoopCensus:
    """A 64-bit integer multiply-add loop counted by its pieces: each multiply-add is one
    IMAD.WIDE.U32 (the low words' product plus the 64-bit addend) beside 2 IMAD and an IADD3 for
    the high word, so the innermost loop's IMAD.WIDE.U32 are its steps, 2 ops a lane each."""
    if not listing:
        return unlisted(source)
    anchor = "IMAD.WIDE.U32"
    loop = next((body for body in innermost(with_addresses(listing)) if anchor in opcodes(body)), "")
    n = opcodes(loop).count(anchor)
    key = f"{anchor} i64 (one a 64-bit multiply-add)"
    return LoopCensus({key: n} if n else {}, 2 * n, frozenset({"i64"} if n else ()), source,
                      "" if n else f"no {anchor} in a loop", frozenset({"pieces"}))

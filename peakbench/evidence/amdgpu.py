"""What the AMD compiler emitted, read from AMDGPU assembly: clang's `-S` output, or the listing of
a code object (`llvm-objdump -d`, with `llvm-readelf --notes` appended for the register metadata).

`parse(text)` splits the text into kernels. Each kernel has its instructions, its loop body (the
block between a label and the backward branch to it; of the innermost loops, the largest), opcode
counts for both, its memory instructions by unit and width, and the resources the compiler
recorded (registers, spills, scratch, LDS, wave size), from which `occupancy` gives the waves a
SIMD holds. The `check_*` functions say in one line what a kernel lacks, or None.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from peakbench.runtime import LoopCensus

# "  v_pk_fma_f16 v0, v0, s2, v3   ; comment" (clang -S) or "... // 0000000000CC: D38E4000 <alu+0xc8>"
# (llvm-objdump). Unlike the GCN pattern of peakbench's listing module, this one also sees global_,
# buffer_, flat_, scratch_ and ds_ opcodes: the memory checks need them.
_INSN = re.compile(r"^\s+([a-z][a-z0-9_]*)(?:[ \t]+([^;/\n]*?))?[ \t]*(?:(?://|;)(.*))?$")
_S_FUNCTION = re.compile(r"^\s*\.type\s+([\w.$]+),\s*@function", re.M)
_S_LABEL = re.compile(r"^([\w.$]+):")
_S_END = re.compile(r"^\.Lfunc_end\d+:")
_DUMP_FUNCTION = re.compile(r"^([0-9a-fA-F]+) <([^>]+)>:\s*$")
_DUMP_ADDRESS = re.compile(r"^\s*([0-9A-Fa-f]+):")
_DUMP_TARGET = re.compile(r"<([^>+]+)(?:\+0x([0-9a-fA-F]+))?>")
_ENCODING = re.compile(r"_(?:e32|e64|sdwa|dpp8?|e64_dpp)$")
_WIDTH = {"byte": 8, "ubyte": 8, "sbyte": 8, "u8": 8, "i8": 8, "short": 16, "ushort": 16, "sshort": 16,
          "u16": 16, "i16": 16, "d16": 16, "dword": 32}


@dataclass(frozen=True)
class Instruction:
    opcode: str                    # as printed, encoding suffix included: v_fmac_f32_e32
    operands: str = ""
    address: int | None = None     # objdump listings only
    target: str | int | None = None   # branches: the label (clang -S) or the address (objdump)

    @property
    def base(self) -> str:
        return base(self.opcode)


@dataclass(frozen=True)
class MemoryOp:
    opcode: str
    unit: str        # "vector" (global, buffer, flat), "scalar" (s_load, s_buffer_load), "lds", "scratch"
    kind: str        # "load", "store" or "atomic"
    bits: int | None  # bits per lane (scalar: per instruction); None where the opcode names no width


@dataclass(frozen=True)
class Resources:
    """What the compiler recorded for a kernel (the .amdhsa.kernels metadata of the code object)."""
    vgprs: int                     # .vgpr_count: the VGPRs a wave allocates, AGPRs folded in as the hardware does
    sgprs: int = 0
    agprs: int = 0
    vgpr_spills: int = 0
    sgpr_spills: int = 0
    scratch_bytes: int = 0         # .private_segment_fixed_size, per lane
    lds_bytes: int = 0             # .group_segment_fixed_size, per workgroup
    wave: int = 64
    max_threads: int = 1024        # .max_flat_workgroup_size


@dataclass
class Kernel:
    name: str
    instructions: tuple[Instruction, ...]
    loops: tuple[tuple[int, int], ...] = ()     # (first, last) instruction index of each loop
    resources: Resources | None = None
    compiler_occupancy: int | None = None       # clang -S's own "; Occupancy:" where present
    counts: Counter = field(init=False)
    loop_counts: Counter = field(init=False)

    def __post_init__(self):
        self.counts = Counter(i.base for i in self.instructions)
        self.loop_counts = Counter(i.base for i in self.loop)

    @property
    def loop(self) -> tuple[Instruction, ...]:
        """The body of the innermost loop (the largest, where there are several); () without a loop."""
        inner = [(a, b) for a, b in self.loops
                 if not any((c, d) != (a, b) and a <= c and d <= b for c, d in self.loops)]
        if not inner:
            return ()
        a, b = max(inner, key=lambda ab: ab[1] - ab[0])
        return self.instructions[a:b + 1]

    def memory(self, in_loop: bool = False) -> list[MemoryOp]:
        return [m for i in (self.loop if in_loop else self.instructions) if (m := memory_op(i.opcode))]

    def mix(self, in_loop: bool = False, top: int = 12) -> dict[str, int]:
        """Opcode counts, most frequent first (the instruction_mix of a result's evidence)."""
        return dict((self.loop_counts if in_loop else self.counts).most_common(top))


def base(opcode: str) -> str:
    """The opcode without its encoding suffix: v_add_u32_e32 -> v_add_u32."""
    return _ENCODING.sub("", opcode)


def accumulate_form(opcode: str) -> str:
    """The VOP2 twin that accumulates into its destination: v_fma_f32 -> v_fmac_f32,
    v_dot4_i32_i8 -> v_dot4c_i32_i8, v_pk_fma_f16 -> v_pk_fmac_f16. Same operation, other encoding."""
    parts = opcode.split("_")
    at = 2 if parts[1:2] == ["pk"] else 1
    parts[at] += "c"
    return "_".join(parts)


def lanes(opcode: str) -> int:
    """Lanes one instruction computes: a packed (v_pk_*) instruction two, any other one."""
    return 2 if opcode.startswith("v_pk_") else 1


def memory_op(opcode: str) -> MemoryOp | None:
    op = base(opcode)
    prefix = op.split("_")[0]
    if op.startswith(("s_load_", "s_buffer_load_", "s_store_", "s_buffer_store_")):
        unit = "scalar"
    elif prefix in ("global", "buffer", "flat"):
        unit = "vector"
    elif prefix in ("scratch", "ds"):
        unit = {"scratch": "scratch", "ds": "lds"}[prefix]
    else:
        return None
    words = op.split("_")
    if "atomic" in words:
        kind = "atomic"
    elif any(w.startswith(("load", "read")) for w in words[1:]):
        kind = "load"
    elif any(w.startswith(("store", "write")) for w in words[1:]):
        kind = "store"
    else:
        return None
    return MemoryOp(opcode, unit, kind, _bits(words))


def _bits(words: list[str]) -> int | None:
    for w in words:
        if w in _WIDTH:
            return _WIDTH[w]
        if m := re.fullmatch(r"dwordx(\d+)", w):
            return 32 * int(m.group(1))
        if m := re.fullmatch(r"b(\d+)", w):
            return int(m.group(1))
    return None


# -- parsing --------------------------------------------------------------------------------------
def parse(text: str) -> dict[str, Kernel]:
    """Every function of a clang -S file or an llvm-objdump -d listing, by name, with the metadata
    of any amdhsa.kernels block in the text (clang -S carries it; llvm-readelf --notes prints it)."""
    meta = metadata(text)
    funcs = _asm_functions(text) if _S_FUNCTION.search(text) else _dump_functions(text)
    out = {}
    for name, (insns, labels, occupancy) in funcs.items():
        out[name] = Kernel(name, tuple(insns), _loops(insns, labels), meta.get(name), occupancy)
    return out


def _asm_functions(text: str) -> dict:
    names = set(_S_FUNCTION.findall(text))
    funcs, current = {}, None
    for line in text.splitlines():
        label = _S_LABEL.match(line)
        if current is None:
            if label and label.group(1) in names:
                current = label.group(1)
                funcs[current] = ([], {}, None)
            continue
        insns, labels, _ = funcs[current]
        if _S_END.match(line):
            current = None
        elif label:
            labels[label.group(1)] = len(insns)
        elif (m := _INSN.match(line)) and not line.lstrip().startswith(";"):
            op, operands = m.group(1), (m.group(2) or "").strip()
            target = operands.split(",")[0].strip() if _branch(op) else None
            insns.append(Instruction(op, operands, target=target))
    # clang reports its occupancy in each kernel's "; Kernel info:" block, after the function.
    for name, chunk in _after_each(text, funcs):
        if m := re.search(r"^; Occupancy: (\d+)", chunk, re.M):
            insns, labels, _ = funcs[name]
            funcs[name] = (insns, labels, int(m.group(1)))
    return funcs


def _after_each(text: str, funcs: dict):
    starts = sorted((m.start(), m.group(1)) for m in re.finditer(r"^([\w.$]+):", text, re.M) if m.group(1) in funcs)
    for (at, name), (end, _) in zip(starts, starts[1:] + [(len(text), None)]):
        yield name, text[at:end]


def _dump_functions(text: str) -> dict:
    funcs, current, start = {}, None, 0
    for line in text.splitlines():
        if m := _DUMP_FUNCTION.match(line):
            current, start = m.group(2), int(m.group(1), 16)
            funcs[current] = ([], {}, None)
            continue
        if current is None or not (m := _INSN.match(line)):
            continue
        comment = m.group(3) or ""
        address = _DUMP_ADDRESS.match(comment)
        if not address:
            continue
        op, operands = m.group(1), (m.group(2) or "").strip()
        insns, labels, _ = funcs[current]
        addr = int(address.group(1), 16)
        labels[addr] = len(insns)
        target = None
        if _branch(op):
            t = _DUMP_TARGET.search(comment)
            if t and t.group(1) == current:
                target = start + int(t.group(2) or "0", 16)
            elif re.fullmatch(r"-?\d+", operands.split(",")[0].strip() or "x"):
                simm = int(operands.split(",")[0]) & 0xFFFF                  # SOPP: signed words after the branch
                target = addr + 4 + 4 * (simm - 0x10000 if simm & 0x8000 else simm)
        insns.append(Instruction(op, operands, addr, target))
    for insns, _, _ in funcs.values():          # the code-end padding after the last kernel
        while insns and insns[-1].opcode in ("s_nop", "s_code_end"):
            insns.pop()
    return funcs


def _branch(op: str) -> bool:
    return op.startswith("s_cbranch_") or op == "s_branch"


def _loops(insns: list[Instruction], labels: dict) -> tuple[tuple[int, int], ...]:
    """(first, last) of every loop: from a label that branches jump back to, through the last of
    them (a loop whose latch block is laid out before its header has two back edges)."""
    last = {}
    for i, insn in enumerate(insns):
        if insn.target is not None and insn.target in labels and labels[insn.target] <= i:
            last[labels[insn.target]] = i
    # A cold block laid out after the end of the program may jump back into it: no loop holds s_endpgm.
    return tuple((a, b) for a, b in sorted(last.items())
                 if not any(insns[j].opcode == "s_endpgm" for j in range(a, b)))


def metadata(text: str) -> dict[str, Resources]:
    """Resources per kernel from each `amdhsa.kernels:` YAML block (the code object's metadata)."""
    out = {}
    for block in re.finditer(r"^([ \t]*)amdhsa\.kernels:[ \t]*\n((?:\1[ \t]+.*\n?|[ \t]*\n)*)", text, re.M):
        entries, entry_col = [], None
        for line in block.group(2).splitlines():
            body = line.lstrip()
            col = len(line) - len(body)
            if body.startswith("- ") and (entry_col is None or col == entry_col):
                entry_col = col
                entries.append({})
                body, col = body[2:], col + 2
            if entries and col == entry_col + 2 and (kv := re.match(r"(\.[\w]+):\s*(\S.*)?$", body)):
                entries[-1][kv.group(1)] = (kv.group(2) or "").strip()
        for e in entries:
            if ".name" in e and ".vgpr_count" in e:
                out[e[".name"]] = Resources(
                    vgprs=_int(e, ".vgpr_count"), sgprs=_int(e, ".sgpr_count"), agprs=_int(e, ".agpr_count"),
                    vgpr_spills=_int(e, ".vgpr_spill_count"), sgpr_spills=_int(e, ".sgpr_spill_count"),
                    scratch_bytes=_int(e, ".private_segment_fixed_size"),
                    lds_bytes=_int(e, ".group_segment_fixed_size"), wave=_int(e, ".wavefront_size", 64),
                    max_threads=_int(e, ".max_flat_workgroup_size", 1024))
    return out


def _int(entry: dict, key: str, default: int = 0) -> int:
    try:
        return int(entry.get(key, default))
    except ValueError:
        return default


# -- occupancy ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RegisterFile:
    vgprs: int          # VGPRs per lane of one SIMD at this wave size
    granule: int        # a wave's VGPRs are allocated in blocks of this many
    max_waves: int      # waves per SIMD with no register limit

# Targets with 1.5x the VGPRs of their generation (LLVM AMDGPU.td, Feature1_5xVGPRs).
ONE_AND_HALF_VGPRS = ("gfx1100", "gfx1101", "gfx1151", "gfx1200", "gfx1201")


def register_file(target: str, wave: int) -> RegisterFile:
    """The VGPR file of a SIMD as LLVM models it (llvm/lib/Target/AMDGPU/Utils/AMDGPUBaseInfo.cpp:
    getTotalNumVGPRs, getVGPRAllocGranule, getMaxWavesPerEU), the model behind clang's own
    "; Occupancy:" report, which tests/test_rocm_isa.py holds it to for every kernel and target:
      gfx90a, gfx94x, gfx950 (CDNA2-4): 512 per lane shared by VGPRs and AGPRs (the unified file
        of the CDNA3 ISA guide), granule 8, at most 8 waves;
      gfx908 (CDNA1): 256 VGPRs (and 256 AGPRs apart), granule 4, at most 10 waves;
      gfx10.3, gfx11, gfx12 (RDNA2-4): 1024 (wave32) or 512 (wave64), granule 16 or 8, at most 16
        waves; 1536 or 768, granule 24 or 12, on the targets with 1.5x the VGPRs."""
    t = target.split(":")[0]
    if t in ("gfx90a", "gfx940", "gfx941", "gfx942", "gfx950"):
        return RegisterFile(512, 8, 8)
    if t.startswith("gfx9"):
        return RegisterFile(256, 4, 10)
    wave32 = wave == 32
    if t in ONE_AND_HALF_VGPRS:
        return RegisterFile(1536 if wave32 else 768, 24 if wave32 else 12, 16)
    return RegisterFile(1024 if wave32 else 512, 16 if wave32 else 8, 16)


def occupancy(target: str, res: Resources) -> int:
    """Waves per SIMD the VGPRs allow (LLVM getNumWavesPerEUWithNumVGPRs):
        min(max waves, file // (VGPRs rounded up to the granule))
    with the VGPRs of the code object's .vgpr_count, in which LLVM already counts the AGPRs the
    way the target allocates them. SGPRs, LDS and the workgroup size are not counted."""
    f = register_file(target, res.wave)
    if res.vgprs < f.granule:
        return f.max_waves
    rounded = -(-res.vgprs // f.granule) * f.granule
    return min(f.max_waves, max(1, f.vgprs // rounded))


# -- checks: one line saying what is missing, or None ---------------------------------------------
def loop_lanes(kernel: Kernel, opcodes: tuple[str, ...]) -> int:
    """Lanes the loop body computes with any of `opcodes` or their accumulate twins (v_pk_* count two)."""
    wanted = set(opcodes) | {accumulate_form(o) for o in opcodes}
    return sum(n * lanes(op) for op, n in kernel.loop_counts.items() if op in wanted)


def check_instruction(kernel: Kernel, opcodes: tuple[str, ...], lanes_expected: int) -> str | None:
    """The loop computes exactly `lanes_expected` lanes with `opcodes` (alternatives)."""
    if not kernel.loop:
        return f"{kernel.name}: no loop found"
    got = loop_lanes(kernel, opcodes)
    if got == lanes_expected:
        return None
    return (f"{kernel.name}: loop computes {got} lanes with {' / '.join(opcodes)}, expected {lanes_expected}; "
            f"loop holds {kernel.mix(in_loop=True, top=6)}")


def check_count(kernel: Kernel, issued_by, expected: int, what: str) -> str | None:
    """The loop holds exactly `expected` instructions for which issued_by(opcode) is true."""
    if not kernel.loop:
        return f"{kernel.name}: no loop found"
    got = sum(n for op, n in kernel.loop_counts.items() if issued_by(op))
    if got == expected:
        return None
    return f"{kernel.name}: loop holds {got} {what}, expected {expected}; loop holds {kernel.mix(in_loop=True, top=6)}"


def check_wide_memory(kernel: Kernel, bits: int = 128) -> str | None:
    """Every global, buffer or flat load and store of the kernel moves `bits` per lane (no split or
    narrowed access)."""
    ops = [m for m in kernel.memory() if m.unit == "vector" and m.kind in ("load", "store")]
    if not ops:
        return f"{kernel.name}: no vector memory instruction"
    narrow = sorted({m.opcode for m in ops if m.bits != bits})
    return f"{kernel.name}: {', '.join(narrow)} (not {bits}-bit)" if narrow else None


def check_vector_chase(kernel: Kernel) -> str | None:
    """The loop loads through vector memory (global_load, buffer, flat) and never through s_load."""
    if not kernel.loop:
        return f"{kernel.name}: no loop found"
    loads = [m for m in kernel.memory(in_loop=True) if m.kind == "load"]
    scalar = sorted({m.opcode for m in loads if m.unit == "scalar"})
    if scalar:
        return f"{kernel.name}: the loop loads through the scalar unit ({', '.join(scalar)})"
    if not any(m.unit == "vector" for m in loads):
        return f"{kernel.name}: the loop has no vector-memory load"
    return None


# -- the census: the loop's vector-ALU arithmetic, for the work and types guards -------------------
# Base opcode -> (operand type, ops per instruction), counted the catalog's way (an FMA is 2 ops a
# lane, a 4x8-bit dot-accumulate 8). v_mad_u64_u32 is how RDNA does a 32-bit multiply-add (the low
# half of a 64-bit one, rocm/targets.py); GCN and CDNA pair v_mul_lo_u32 and v_add_u32.
_CENSUS = {"v_fma_f64": ("f64", 2), "v_fma_f32": ("f32", 2), "v_pk_fma_f32": ("f32x2", 4),
           "v_mul_f32": ("f32", 1), "v_add_f32": ("f32", 1),
           "v_fma_f16": ("f16", 2), "v_pk_fma_f16": ("f16x2", 4), "v_pk_fma_bf16": ("bf16x2", 4),
           "v_mul_lo_u32": ("i32", 1), "v_add_u32": ("i32", 1), "v_add_nc_u32": ("i32", 1),
           "v_mad_u64_u32": ("i32", 2), "v_mad_co_u64_u32": ("i32", 2),
           "v_mad_u16": ("i16", 2), "v_mad_i16": ("i16", 2), "v_mad_u32_u16": ("i16", 2),
           "v_pk_mad_u16": ("i16x2", 4), "v_pk_mad_i16": ("i16x2", 4),
           "v_dot4_i32_i8": ("i8x4", 8), "v_dot4_i32_iu8": ("i8x4", 8), "v_dot4_u32_u8": ("i8x4", 8)}
CENSUS = {**_CENSUS, **{accumulate_form(op): v for op, v in _CENSUS.items() if "_fma_" in op or "_dot" in op}}


def census(kernel: Kernel | None, source: str = "AMDGPU") -> LoopCensus:
    """The census of a kernel's loop body (its largest innermost loop), or a note saying why none."""
    if kernel is None or not kernel.loop:
        why = "no such kernel in the code object" if kernel is None else f"{kernel.name}: no loop found"
        return LoopCensus({}, 0, frozenset(), source, why)
    ops, work, types = {}, 0, set()
    for op, n in sorted(kernel.loop_counts.items()):
        if op in CENSUS:
            t, per = CENSUS[op]
            ops[f"{op} {t}"], work = n, work + n * per
            types.add(t)
    return LoopCensus(ops, work, frozenset(types), source, "" if ops else "no vector arithmetic in the loop")


# -- atomics and special functions, for the work guard of those families --------------------------
SPECIAL = ("v_rcp_", "v_rsq_", "v_sqrt_", "v_exp_", "v_log_", "v_sin_", "v_cos_")


def atomic_kind(opcode: str) -> str | None:
    """"add" for an atomic add (ds_add_u32, global_atomic_add_f32, buffer_atomic_add), "cas" for
    a compare-and-swap (ds_cmpst_b32, global_atomic_cmpswap), else None."""
    words = base(opcode).split("_")
    atomic = words[0] == "ds" or (words[0] in ("global", "buffer", "flat") and "atomic" in words)
    if not atomic:
        return None
    rest = words[2:] if words[0] != "ds" else words[1:]
    if rest and rest[0] in ("cmpst", "cmpswap", "cmpstore"):
        return "cas"
    if rest and rest[0] in ("add", "pk"):
        return "add"
    return None


def operation_type(opcode: str) -> str:
    """The type an atomic add or special function works in, from its name: ds_add_u32 "u32",
    global_atomic_add_f32 "f32", global_atomic_pk_add_f16 "f16x2", global_atomic_add_x2 "u64",
    v_rcp_f32 "f32"; an atomic that names none (gfx9's global_atomic_add) adds 32-bit integers."""
    words = base(opcode).split("_")
    found = next((w for w in reversed(words) if re.fullmatch(r"[fuib](16|32|64)", w)), None)
    if "x2" in words:
        return "u64" if found in (None, "u32", "i32", "b32") else found
    if found and "pk" in words:
        return f"{found}x2"
    if found in ("i32", "b32"):        # a 32-bit integer add is the same bits signed or not
        return "u32"
    return found or ("u32" if atomic_kind(opcode) else "f32")


def operation_census(kernel: Kernel | None, kind: str, source: str = "AMDGPU") -> LoopCensus:
    """The atomic adds (kind "atomic") or special-function instructions ("special") of a kernel's
    loop body, one op a lane each; a compare-and-swap anywhere in the kernel is its form."""
    if kernel is None or not kernel.loop:
        why = "no such kernel in the code object" if kernel is None else f"{kernel.name}: no loop found"
        return LoopCensus({}, 0, frozenset(), source, why)
    if kind == "atomic":
        ops = {op: n for op, n in sorted(kernel.loop_counts.items()) if atomic_kind(op) == "add"}
        cas = any(atomic_kind(op) == "cas" for op in kernel.counts)
    else:
        ops = {op: n for op, n in sorted(kernel.loop_counts.items()) if op.startswith(SPECIAL)}
        cas = False
    return LoopCensus(ops, sum(ops.values()), frozenset(map(operation_type, ops)), source,
                      "" if ops else f"no {kind} instruction in the loop", frozenset({"compare-and-swap"} if cas else ()))


def memory_census(kernel: Kernel | None, source: str = "AMDGPU", space: str = "memory") -> LoopCensus:
    """The vector (global, buffer, flat) loads and stores of a kernel's loop where it has them,
    else of the whole kernel (the streams' rows and tiles), keyed as the SPIR-V memory census is
    ("global_load_dwordx4 (load, 16 B)"), work their bytes a lane: for the streams' work guard.
    `space` "shared": the LDS's (ds_read, ds_write) in the loop where it loads any, else in the
    whole kernel (memory.shared)."""
    from peakbench.evidence.spirv import access, accessed
    if kernel is None:
        return LoopCensus({}, 0, frozenset(), source, "no such kernel in the code object")
    unit = "lds" if space == "shared" else "vector"

    def moved(in_loop: bool) -> dict[str, int]:
        ops: dict[str, int] = {}
        for m in kernel.memory(in_loop=in_loop):
            if m.unit == unit and m.kind in ("load", "store"):
                key = access(base(m.opcode), m.kind, (m.bits or 32) // 8)
                ops[key] = ops.get(key, 0) + 1
        return ops
    looped = moved(True)
    if space == "shared" and not any(accessed(k)[1] for k in looped):
        looped = {}                     # the copy into the LDS only stores: not the loop that reads it
    ops, where = (looped, "the innermost loop") if looped else (moved(False), "the whole kernel (no loop moves memory)")
    work = sum(n * sum(accessed(k)[1:]) for k, n in ops.items())
    return LoopCensus(dict(sorted(ops.items())), work, frozenset(), source, f"counted in {where}")

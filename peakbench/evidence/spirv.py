"""The census of a SPIR-V module's main loop: its arithmetic instructions, the ops they do and the
types they work on (peakbench/runtime.py LoopCensus), for the work and types guards; the
device loads and stores of a stream kernel (memory_census), for the memory tests' work guard;
and its atomics or special functions (operation_census).

The module is first run through spirv-opt's store elimination and loop unrolling, so the
`[[unroll]]` loops of GLSL kernels become straight code, as every driver compiles them, and its
branches on constants folded, so work behind a condition the unrolling made constant
(`if (u == 0)`) counts once, as a driver runs it; the loop left is the kernel's iterations loop.
Its body is the blocks from its header up to its merge block, less its continue target (the
counter's increment). A module whose loop still holds another loop is not counted: the census
says so instead of guessing trip counts.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from peakbench import cache
from peakbench.runtime import LoopCensus

PASSES = ["--eliminate-local-single-store", "--eliminate-local-multi-store", "--loop-unroll", "--ccp",
          "--eliminate-dead-branches", "--eliminate-dead-code-aggressive"]
# ops per lane of the result: an FMA is a multiply and an add
PER_LANE = {"OpFMul": 1, "OpFAdd": 1, "OpFSub": 1, "OpIMul": 1, "OpIAdd": 1, "OpISub": 1, "Fma": 2}
DOTS = ("OpSDot", "OpUDot", "OpSUDot", "OpDot")
# A cooperative-matrix multiply-add of M x N x K is 2*M*N*K ops for its owner (a subgroup, or with
# VK_NV_cooperative_matrix2 a workgroup); the NV form is VK_NV_cooperative_matrix's.
MMA = ("OpCooperativeMatrixMulAddKHR", "OpCooperativeMatrixMulAddNV")
FLOAT8 = {"Float8E4M3EXT": "e4m3", "Float8E5M2EXT": "e5m2"}
_INSN = re.compile(r"^\s*(?:(%\w+)\s*=\s*)?(Op\w+)\s*(.*)$")


def _optimized(code: bytes) -> tuple[bytes, str]:
    """The module with its unroll-hinted loops unrolled, and a note where spirv-opt could not."""
    from peakbench.spirv_tools import tool, tool_env
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "in.spv", Path(tmp) / "out.spv"
        src.write_bytes(code)
        opt = tool("spirv-opt")
        p = subprocess.run([opt, *PASSES, str(src), "-o", str(out)], capture_output=True, text=True, env=tool_env(opt))
        if p.returncode != 0:
            return code, f"spirv-opt failed ({(p.stderr or p.stdout).strip()[:120]}); counted as compiled"
        return out.read_bytes(), ""


def _types(lines) -> dict[str, str]:
    """Type id -> "f32", "bf16", "e4m3", "i16", "i64", "f16x2", ..."""
    names: dict[str, str] = {}
    for rid, op, rest in lines:
        args = rest.split()
        if op == "OpTypeFloat":
            encoding = args[1] if len(args) > 1 else ""
            names[rid] = FLOAT8.get(encoding) or ("bf" if encoding == "BFloat16KHR" else "f") + args[0]
        elif op == "OpTypeInt":
            names[rid] = "i" + args[0]      # signedness is a hint in SPIR-V, not the operation
        elif op == "OpTypeVector" and args[0] in names:
            names[rid] = f"{names[args[0]]}x{args[1]}"
    return names


def _matrices(lines, types: dict[str, str]) -> dict[str, tuple[str, int, int]]:
    """Cooperative-matrix type id -> (component type, rows, columns)."""
    constants = {rid: int(rest.split()[1]) for rid, op, rest in lines
                 if op == "OpConstant" and len(rest.split()) == 2 and rest.split()[1].isdigit()}
    out = {}
    for rid, op, rest in lines:
        if op in ("OpTypeCooperativeMatrixKHR", "OpTypeCooperativeMatrixNV"):
            component, _scope, rows, cols, *_ = rest.split()
            out[rid] = (types.get(component, "?"), constants.get(rows, 0), constants.get(cols, 0))
    return out


def _mma_work(key: str) -> int:
    """2*M*N*K of "OpCooperativeMatrixMulAddKHR MxNxK a.c"."""
    m, n, k = map(int, key.split()[1].split("x"))
    return 2 * m * n * k


def lanes(type_name: str) -> int:
    return int(type_name.rsplit("x", 1)[1]) if "x" in type_name else 1


def census(code: bytes) -> LoopCensus:
    """The census of a module's arithmetic (count), cached (_cached)."""
    return _cached(b"arithmetic", code, count)


def _cached(kind: bytes, code: bytes, counter) -> LoopCensus:
    """counter(code), cached in the folder spirv-census by the module's words, the kind of count
    and this file, so a second run reads it instead of running spirv-opt and spirv-dis again."""
    key = cache.key(kind, code, Path(__file__).read_bytes())
    d = cache.load_json("spirv-census", key)
    if isinstance(d, dict):
        try:
            return LoopCensus(d["ops"], d["work"], frozenset(d["types"]), d["source"], d["note"],
                              frozenset(d.get("forms", ())))
        except (KeyError, TypeError):
            pass               # written by another layout: count again and replace it
    found = counter(code)
    cache.store_json("spirv-census", key, {"ops": found.ops, "work": found.work, "types": sorted(found.types),
                                           "source": found.source, "note": found.note,
                                           "forms": sorted(found.forms)})
    return found


def _module(code: bytes) -> tuple[list, str, list]:
    """The optimized module's instructions (result id, opcode, operands), spirv-opt's note, and
    its blocks (label, instructions)."""
    from peakbench.spirv_tools import disassemble
    module, note = _optimized(code)
    lines = [(m.group(1), m.group(2), m.group(3)) for m in map(_INSN.match, disassemble(module).splitlines()) if m]
    blocks: list[tuple[str, list]] = []
    for rid, op, rest in lines:
        if op == "OpLabel":
            blocks.append((rid, []))
        elif blocks:
            blocks[-1][1].append((rid, op, rest))
    return lines, note, blocks


def _innermost_loops(blocks: list[tuple[str, list]]):
    """The instructions of each loop that holds no other: the blocks from its header up to its
    merge block, less its continue target (the counter's increment)."""
    labels = [b[0] for b in blocks]
    for start, (_, body) in enumerate(blocks):
        merge = next((rest.split() for _, op, rest in body if op == "OpLoopMerge"), None)
        if merge is None:
            continue
        end = labels.index(merge[0]) if merge[0] in labels else len(blocks)
        inner = [b for b in blocks[start:end] if b[0] != merge[1]]
        if any(op == "OpLoopMerge" for _, b in inner[1:] for _, op, _ in b):
            continue                        # an outer loop: its inner loop is counted on its own
        yield [x for _, b in inner for x in b]


STORAGE = ("StorageBuffer", "Uniform", "PhysicalStorageBuffer")
CHAINS = ("OpAccessChain", "OpInBoundsAccessChain", "OpPtrAccessChain", "OpCopyObject")


_ACCESS = re.compile(r"\((load|store), (\d+) B\)$")


def access(instruction: str, kind: str, nbytes: int) -> str:
    """A memory census's key: the instruction and what it moves, "OpLoad i32x4 (load, 16 B)"."""
    return f"{instruction} ({kind}, {nbytes} B)"


def accessed(key: str) -> tuple[str, int, int]:
    """(kind, bytes loaded, bytes stored) of one access of a memory census's key."""
    m = _ACCESS.search(key)
    if not m:
        return "", 0, 0
    n = int(m.group(2))
    return m.group(1), (n if m.group(1) == "load" else 0), (n if m.group(1) == "store" else 0)


def type_bytes(name: str) -> int:
    """Bytes of a census type name: "i32x4" 16, "f16" 2, "e4m3" 1."""
    base = name.split("x")[0]
    bits = 8 if base in ("e4m3", "e5m2") else int(base.lstrip("bfi") or 0)
    return bits * lanes(name) // 8


def memory_census(code: bytes, space: str = "memory") -> LoopCensus:
    """The loads from and stores to device buffers of a module's innermost loop that moves any or,
    where none does after unrolling, of its whole body (the stream kernels' tiles and rows), keyed
    with what each moves ("OpLoad i32x4 (load, 16 B)"), work their bytes: for the memory tests'
    work guard. `space` "shared": Workgroup memory's, in the innermost loop that loads any
    (memory.shared; the copy into it before that loop only stores). Cached as census() is."""
    if space == "shared":
        return _cached(b"shared", code, lambda module: count_memory(module, SHARED))
    return _cached(b"memory", code, count_memory)


SHARED = ("Workgroup",)


def count_memory(code: bytes, storage: tuple[str, ...] = STORAGE) -> LoopCensus:
    lines, note, blocks = _module(code)
    types = _types(lines)
    value_type = {rid: rest.split()[0] for rid, op, rest in lines if rid and rest and not op.startswith("OpType")}
    device = {rid for rid, op, rest in lines if op == "OpVariable" and rest.split()[1] in storage}
    for rid, op, rest in lines:                     # pointers derived from a device buffer
        if op in CHAINS and rest.split()[1] in device:
            device.add(rid)

    def moved(body) -> dict[str, int]:
        ops: dict[str, int] = {}
        for rid, op, rest in body:
            args = rest.split()
            if op == "OpLoad" and len(args) >= 2 and args[1] in device:
                t, kind = types.get(args[0], "?"), "load"
            elif op == "OpStore" and len(args) >= 2 and args[0] in device:
                t, kind = types.get(value_type.get(args[1], ""), "?"), "store"
            else:
                continue
            key = access(f"{op} {t}", kind, type_bytes(t) if t != "?" else 0)
            ops[key] = ops.get(key, 0) + 1
        return ops

    def nbytes(ops: dict[str, int]) -> int:
        return sum(n * sum(accessed(k)[1:]) for k, n in ops.items())
    # The innermost loop that moves device memory (a reduction's loop over shared memory is not
    # the stream); none: the whole kernel, whose unrolled tiles and rows are straight code. Shared
    # memory: the innermost loop that loads it (the copy into it before only stores), else the whole.
    shared = storage == SHARED

    def counts(ops: dict[str, int]) -> bool:
        return bool(nbytes(ops)) and (not shared or any(accessed(k)[1] for k in ops))
    found = next((ops for ops in map(moved, _innermost_loops(blocks)) if counts(ops)), None)
    ops, where = ((found, "the innermost loop") if found else
                  (moved([x for _, b in blocks for x in b]), "the whole kernel (no loop moves memory)"))
    return LoopCensus(dict(sorted(ops.items())), nbytes(ops), frozenset(), "SPIR-V",
                      "; ".join(filter(None, [note, f"counted in {where}"])))


ATOMIC = ("OpAtomicIAdd", "OpAtomicISub", "OpAtomicFAddEXT", "OpAtomicIIncrement", "OpAtomicCompareExchange")
# GLSL.std.450 instructions a special-function unit computes, and a division (GLSL's 1.0 / x)
SPECIAL = ("InverseSqrt", "Sqrt", "Exp2", "Log2", "Exp", "Log", "Sin", "Cos", "Tan")


def operation_census(code: bytes, kind: str) -> LoopCensus:
    """The atomics (kind "atomic") or special functions ("special") of the module's innermost
    loop that holds any, one op a lane (cached as census() is)."""
    return _cached(kind.encode(), code, lambda module: count_operations(module, kind))


def count_operations(code: bytes, kind: str) -> LoopCensus:
    lines, note, blocks = _module(code)
    types = _types(lines)
    glsl = {rid for rid, op, rest in lines if op == "OpExtInstImport" and "GLSL.std.450" in rest}

    def found(body) -> dict[str, int]:
        ops: dict[str, int] = {}
        for rid, op, rest in body:
            args = rest.split()
            if kind == "atomic" and op in ATOMIC:
                name = op
            elif kind == "special" and op == "OpExtInst" and len(args) >= 3 and args[1] in glsl and args[2] in SPECIAL:
                name = args[2]
            elif kind == "special" and op == "OpFDiv":
                name = op
            else:
                continue
            key = f"{name} {types.get(args[0], '?')}" if args else name
            ops[key] = ops.get(key, 0) + lanes(types.get(args[0], "?"))
        return ops
    ops = next((ops for ops in map(found, _innermost_loops(blocks)) if ops), {})
    forms = frozenset({"compare-and-swap"} if any(op == "OpAtomicCompareExchange" for _, op, _ in lines) else ())
    why = "" if ops else f"no {kind} instruction in a loop"
    kinds = frozenset(key.split()[1] for key in ops if " " in key)      # "OpAtomicIAdd u32": u32
    return LoopCensus(dict(sorted(ops.items())), sum(ops.values()), kinds, "SPIR-V",
                      "; ".join(filter(None, [note, why])), forms)


def count(code: bytes) -> LoopCensus:
    lines, note, blocks = _module(code)
    types = _types(lines)
    matrices = _matrices(lines, types)
    value_type = {rid: rest.split()[0] for rid, op, rest in lines if rid and rest and not op.startswith("OpType")}
    glsl = {rid for rid, op, rest in lines if op == "OpExtInstImport" and "GLSL.std.450" in rest}
    loops = any(op == "OpLoopMerge" for _, op, _ in lines)
    best = None
    for body in _innermost_loops(blocks):
        ops, work, used = {}, 0, set()
        for rid, op, rest in body:
            args = rest.split()
            if op == "OpExtInst" and len(args) >= 3 and args[1] in glsl and args[2] == "Fma":
                op = "Fma"
            if op in PER_LANE:
                t = types.get(args[0], "?")
                n = PER_LANE[op] * lanes(t)
            elif op.startswith(DOTS):
                operand = types.get(value_type.get(args[1], ""), "?")
                if "PackedVectorFormat4x8Bit" in rest:
                    t, n = "i8x4", 7
                else:
                    t, n = operand, 2 * lanes(operand) - 1
                n += 1 if "AccSat" in op else 0
            elif op in MMA:
                (a, m, k), (c, _, n_) = (matrices.get(value_type.get(args[1], ""), ("?", 0, 0)),
                                         matrices.get(args[0], ("?", 0, 0)))
                t, n = f"{a}.{c}", 2 * m * n_ * k
                op = f"{op} {m}x{n_}x{k}"
            else:
                continue
            key = f"{op} {t}"
            ops[key] = ops.get(key, 0) + 1
            work += n
            used.add(t)
        if any(op.startswith(MMA) for op in ops):      # beside matrix steps, integer ops are indexing
            mma = {op: n for op, n in ops.items() if op.startswith(MMA)}
            work = sum(n * _mma_work(op) for op, n in mma.items())
            ops, used = mma, {op.rsplit(" ", 1)[1] for op in mma}
        if ops and (best is None or work > best.work):
            best = LoopCensus(dict(sorted(ops.items())), work, frozenset(used), "SPIR-V", note)
    if best is None:
        nested = "a loop that holds another loop" if loops else "no loop"
        return LoopCensus({}, 0, frozenset(), "SPIR-V", f"no arithmetic loop to count ({nested} after unrolling)")
    return best

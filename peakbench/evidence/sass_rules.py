"""The catalog's work per loop trip held against the SASS loop body the driver's cache showed: a
vector-ALU result must hold unroll x accumulators x width lanes of its type's instruction, a
matrix result unroll x accumulators x M*N*K multiply-adds per tile owner in its MMA instructions.
`check` says whether a result's evidence does (None where no rule applies); `census` gives the loop
as a LoopCensus, in the operand types its instructions name, for the sass guard
(harness/guards.py)."""
from __future__ import annotations

import re

from peakbench.evidence.sass import mma_types  # noqa: F401  (the census's type names)
from peakbench.runtime import LoopCensus

# compute test dtype -> (opcode family, lanes per instruction)
VECTOR = {"fp64": ("DFMA", 1), "fp32": ("FFMA", 1), "fp16": ("HFMA2", 2), "int32": ("IMAD", 1),
          "int8": ("IDP", 1)}
WARP = 32
_MMA = re.compile(r"^[HIDQ]MMA\.(16|8)(8)(\d+)\b")                # HMMA.16816.F32: m16 n8 k16
_GMMA = re.compile(r"^[HIQ]GMMA\.(\d+)x(\d+)x(\d+)\b")            # HGMMA.64x256x16.F32, a warpgroup's


NOT_ARITHMETIC = {"MOV", "SHL", "IADD", "WIDE"}     # IMAD.MOV.U32 is a move, IMAD.WIDE an address


def family_count(mix: dict[str, int], family: str) -> int:
    """Instructions of one family that do its arithmetic (FFMA, FFMA.FTZ; HFMA2, HFMA2.MMA; IMAD)."""
    return sum(n for op, n in mix.items()
               if op.split(".")[0] == family and not NOT_ARITHMETIC & set(op.split(".")[1:]))


def macs_per_warp(op: str) -> int | None:
    """Multiply-adds one warp's share of an MMA instruction does, or None if not one."""
    m = _MMA.match(op)
    if m:
        return int(m.group(1)) * int(m.group(2)) * int(m.group(3))
    m = _GMMA.match(op)
    if m:
        return int(m.group(1)) * int(m.group(2)) * int(m.group(3)) // 4
    return None


def check(test: str, params: dict, sass: dict) -> tuple[bool | None, str]:
    """(True, how) when the loop holds the catalog's work, (False, what differs), or (None, why
    there is no rule)."""
    loop = sass.get("loop_mix") or {}
    if not loop:
        return None, "no loop body in the SASS"
    family, _, dtype = test.partition(".")
    if family == "compute":
        dtype = dtype.split(".")[0]
        if dtype not in VECTOR:
            return None, f"no instruction rule for {dtype}"
        op, lanes = VECTOR[dtype]
        want = params["unroll"] * params["accumulators"] * params["width"]
        got = family_count(loop, op) * lanes
        how = (f"{got // lanes} {op} x {lanes} lanes in the loop; the catalog: {params['unroll']} unroll x "
               f"{params['accumulators']} accumulators x {params['width']} lanes = {want}")
        return got == want, how
    if family == "matrix":
        per_op = {op: macs_per_warp(op) for op in loop}
        mma = {op: n for op, n in loop.items() if per_op[op]}
        if not mma:
            return False, f"no MMA instruction in the loop: {loop}"
        warps = max(1, params["workgroup_size"] // WARP) if params.get("scope") == "workgroup" else 1
        want = params["unroll"] * params["accumulators"] * params["m"] * params["n"] * params["k"] // warps
        got = sum(n * per_op[op] for op, n in mma.items())
        forms = ", ".join(f"{n} {op}" for op, n in mma.items())
        how = (f"{forms} in the loop = {got} multiply-adds a warp; the catalog: {params['unroll']} unroll x "
               f"{params['accumulators']} accumulators x {params['m']}x{params['n']}x{params['k']}"
               + (f" / {warps} warps" if warps > 1 else "") + f" = {want}")
        return got == want, how
    return None, f"no instruction rule for {family}"


SOURCE = "SASS (NVIDIA Vulkan driver)"
# The vector types whose SASS loops have been read and matched to the catalog's work
# (PERFORMANCE_ANALYSIS.md, "What NVIDIA's Vulkan compiler emits"); another type's loop is evidence only.
RULED = {"fp64", "fp32", "fp16", "int32", "int16", "int8"}
def census(test: str, params: dict, sass: dict) -> LoopCensus | None:
    """The loop body of a result's `sass` evidence as a census, its work in ops per tile owner (a
    warp's MMA multiply-adds x 2 x the warps sharing a workgroup-scope tile), or None where no
    rule applies."""
    from peakbench.evidence.sass import mix_census
    loop = sass.get("loop_mix") or {}
    family, _, dtype = test.partition(".")
    if family == "compute" and dtype.split(".")[0] in RULED:
        return mix_census(loop, SOURCE)
    if family != "matrix":
        return None
    mma = {op: n for op, n in loop.items() if macs_per_warp(op)}
    warps = max(1, params["workgroup_size"] // WARP) if params.get("scope") == "workgroup" else 1
    ops = {f"{op} {mma_types(op)}": n for op, n in mma.items()}
    work = sum(n * macs_per_warp(op) for op, n in mma.items()) * 2 * warps
    return LoopCensus(ops, work, frozenset(mma_types(op) for op in mma), SOURCE,
                      "" if mma else f"no MMA instruction in the loop: {loop}")


# The 32-bit integer multiply-add pipe (the spec's compute.int32 rate, which compute.int32's IMAD
# loop reaches): an IMAD of any form takes one issue slot of it, a move or a shift the compiler
# made an IMAD too; IMAD.WIDE writes a 64-bit result, two of the 32-bit results the pipe delivers
# a clock, and takes two. The integer tests whose multiply-adds run on it have no vendor peak:
# their loop's slots bound them (an H100's int64 loop, 2 IMAD + IMAD.WIDE.U32 + IADD3 a
# multiply-add, reads 99.6% of a quarter of compute.int32's peak; PERFORMANCE_ANALYSIS.md,
# "Ahead of the peers").
MULTIPLY_ADD_PIPE = "compute.int32"
ON_THE_MULTIPLY_ADD_PIPE = ("int64", "int16")


def imad_slots(loop_mix: dict[str, int]) -> tuple[int, int]:
    """(the IMAD pipe's issue slots one trip of the loop takes, of which IMAD.WIDE's)."""
    slots = wide = 0
    for op, n in loop_mix.items():
        parts = str(op).split(".")
        if parts[0] == "IMAD":
            slots += 2 * n if "WIDE" in parts[1:] else n
            wide += n if "WIDE" in parts[1:] else 0
    return slots, wide


def multiply_add_bound(test: str, params: dict, loop_mix: dict[str, int]) -> tuple[str, float, str] | None:
    """(MULTIPLY_ADD_PIPE, the share of its peak the loop can reach, why) for an integer vector
    test whose multiply-adds run on the IMAD pipe: its multiply-adds a trip (unroll x accumulators
    x width) over the slots they take; None for any other test or a loop with no IMAD."""
    family, _, dtype = test.partition(".")
    if family != "compute" or dtype not in ON_THE_MULTIPLY_ADD_PIPE:
        return None
    slots, wide = imad_slots(loop_mix or {})
    macs = int(params.get("unroll") or 0) * int(params.get("accumulators") or 0) * int(params.get("width") or 0)
    # one IMAD.WIDE a 64-bit multiply-add, one arithmetic IMAD a 16-bit one: a loop the compiler
    # unrolled further holds more than a trip's, and its slots are no trip's
    seen = wide if dtype == "int64" else family_count(loop_mix or {}, "IMAD")
    if not slots or not macs or seen != macs:
        return None
    why = (f"its loop takes {slots} IMAD issue slots for {macs} multiply-adds"
           + (f" (each of its {wide} IMAD.WIDE writes a 64-bit result: two slots)" if wide else ""))
    return MULTIPLY_ADD_PIPE, macs / slots, why

"""Inputs and host reference for the matrix kernels ("mma" family): the contract each backend keeps.

Inputs: A (M x K), B1 and B2 (K x N), row-major in the operand type, and `accumulators` start
tiles C0_k (M x N) in the accumulator type. Each subgroup loads them, then every loop iteration
takes `unroll` (even) steps alternating C_k = A*B1 + C_k and C_k = A*B2 + C_k, and stores the
sum over k of its tiles as tile number `subgroup` of the output.

Timed runs upload B2 = -B1, so the tiles return to C0 every two steps and stay bounded however
long the loop; the verification run uploads B2 = B1, so after one iteration each tile is
C0_k + unroll*A*B1 and the stored sum counts every step of every accumulator. Entries are -1, 0, 1
times 1/8 (small integers for integer types), so every product and partial sum is exact even
with FP16 accumulators: with unroll 4, 8 tiles and K <= 32 the sum stays under 2048/64.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peakbench.catalog.alu_reference import round_bf16

# Host storage per element type. bfloat16 travels as its upper 16 bits in uint16.
STORAGE = {"fp16": np.float16, "bf16": np.uint16, "fp32": np.float32, "fp64": np.float64,
           "int8": np.int8, "uint8": np.uint8, "int32": np.int32, "uint32": np.uint32}
FLOATS = ("fp16", "bf16", "fp32", "fp64", "fp8_e4m3", "fp8_e5m2")


@dataclass(frozen=True)
class MatrixInputs:
    a: np.ndarray          # (M, K) float64 or int64 values
    b: np.ndarray          # (K, N)
    c0: np.ndarray         # (accumulators, M, N)
    operand: str
    accumulator: str

    def operands(self, verify: bool) -> bytes:
        """A, B1, B2 packed in the operand type; B2 = B1 to verify, -B1 to time."""
        b2 = self.b if verify else -self.b
        return b"".join(_encode(x, self.operand) for x in (self.a, self.b, b2))

    def accumulators(self) -> bytes:
        return _encode(self.c0, self.accumulator)


def _pattern(shape, salt: int) -> np.ndarray:
    i = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    return ((i * 7 + salt * 5 + (i // 3)) % 3) - 1          # -1, 0, 1, not periodic in rows


FP8 = {"fp8_e4m3": (3, 7), "fp8_e5m2": (2, 15)}    # mantissa bits, exponent bias


def _encode_fp8(values: np.ndarray, kind: str) -> bytes:
    """Zero and signed powers of two (all these inputs hold) as FP8 bytes."""
    mant, bias = FP8[kind]
    out = np.zeros(values.shape, dtype=np.uint8)
    nz = values != 0
    exp = np.log2(np.abs(values[nz])).astype(np.int64)
    assert np.all(2.0 ** exp == np.abs(values[nz])), "FP8 inputs are powers of two"
    out[nz] = ((exp + bias) << mant).astype(np.uint8) | np.where(values[nz] < 0, 0x80, 0).astype(np.uint8)
    return out.tobytes()


def _encode(values: np.ndarray, kind: str) -> bytes:
    if kind in FP8:
        return _encode_fp8(values, kind)
    if kind == "bf16":
        bits = round_bf16(values.astype(np.float32)).view(np.uint32) >> 16
        return bits.astype(np.uint16).tobytes()
    return values.astype(STORAGE[kind]).tobytes()


def make_inputs(m: int, n: int, k: int, operand: str, accumulator: str, accumulators: int) -> MatrixInputs:
    a, b = _pattern((m, k), 1), _pattern((k, n), 2)
    c0 = _pattern((accumulators, m, n), 3)
    if operand.startswith("uint"):                       # unsigned operands: 0, 1, 2
        a, b = a + 1, b + 1
    if operand in FLOATS:
        a, b, c0 = a / 8.0, b / 8.0, c0 / 8.0
    return MatrixInputs(a, b, c0, operand, accumulator)


def reference(inputs: MatrixInputs, unroll: int) -> np.ndarray:
    """The tile every subgroup stores after one verification iteration, in float64 or int64."""
    steps = unroll * inputs.c0.shape[0]
    return inputs.c0.sum(axis=0) + steps * (inputs.a @ inputs.b)


def compare(got: np.ndarray, want: np.ndarray) -> str | None:
    """Every subgroup's tile (got: subgroups x M x N) must equal the reference exactly."""
    bad = ~np.isclose(got.astype(np.float64), want[None].astype(np.float64), rtol=0, atol=0)
    if not bad.any():
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {bad.size} values differ from the host reference (first at "
            f"subgroup {first[0]}, element {first[1:]}: got {got[first]!r}, want {want[first[1:]]!r})")

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

Sparse tests (matrix.*.sparse) take A 2:4 structured-sparse (SparseInputs): A is stored compressed,
M x K/2, and one 32-bit metadata word follows B2. Each 4-bit field of the word names the two
positions kept in a group of four consecutive K elements (i0 | i1 << 2, i0 < i1, PTX ISA "Sparse
matrix storage"); 32-bit (TF32) operands are sparse 1:2, one element of each pair, spelled as
the pair of 16-bit halves it covers (0b0100 the first, 0b1110 the second). Every field holds the
same choice, so the word means the same whichever threads of a group supply it. The reference
multiplies the A that the word expands the compressed values to: a wrong word is a wrong tile.
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

    def full_a(self) -> np.ndarray:
        """A as an M x K matrix (what the reference multiplies)."""
        return self.a


# Metadata fields: the kept pair (i0, i1) of a 2:4 group as i0 | i1 << 2. 0b0000, 0b0101, 0b1010
# and 0b1111 name one position twice (PTX ISA: undefined behaviour).
PAIRS = {(i0, i1): i0 | i1 << 2 for i0 in range(4) for i1 in range(i0 + 1, 4)}
# Metadata the kernels are verified with (two choices, so a kernel ignoring the word fails one) and
# timed with; a 32-bit operand keeps one of each pair: the second, then the first.
VERIFY_KEEP = {16: ((1, 3), (0, 2)), 8: ((1, 3), (0, 2)), 32: ((2, 3), (0, 1))}


def metadata_word(keep: tuple[int, int]) -> int:
    """The 32-bit metadata word with the kept pair `keep` in all eight fields."""
    return PAIRS[keep] * 0x11111111


def kept(word: int, bits: int) -> tuple[int, ...]:
    """The positions a uniform metadata word keeps in each group of 4 (2:4) or, for 32-bit
    operands, in each pair (1:2); a word whose fields differ or name a position twice is refused."""
    fields = {(word >> (4 * i)) & 0xF for i in range(8)}
    if len(fields) != 1:
        raise ValueError(f"metadata word {word:#010x}: its fields differ (the kernels pass one word to every thread)")
    field = fields.pop()
    pair = (field & 3, field >> 2)
    if pair not in PAIRS:
        raise ValueError(f"metadata field {field:#06b} names position {pair[0]} twice (undefined in PTX)")
    if bits == 32:
        if pair not in ((0, 1), (2, 3)):
            raise ValueError(f"metadata field {field:#06b}: a 32-bit operand keeps both halves of one element")
        return (pair[0] // 2,)
    return pair


@dataclass(frozen=True)
class SparseInputs(MatrixInputs):
    """A 2:4 sparse A: `a` holds the compressed M x K/2 values, `metadata` the word placing them."""
    metadata: int = 0
    bits: int = 16           # operand element bits (32: the 1:2 sparsity of TF32)

    def full_a(self) -> np.ndarray:
        keep = kept(self.metadata, self.bits)
        group = 2 * len(keep)
        m, ka = self.a.shape
        full = np.zeros((m, 2 * ka), dtype=self.a.dtype)
        for j, position in enumerate(keep):
            full[:, position::group] = self.a[:, j::len(keep)]
        return full

    def metadata_bytes(self) -> bytes:
        """The word as it follows B2 in the operand buffer (little-endian)."""
        return np.uint32(self.metadata).tobytes()

    def operands(self, verify: bool) -> bytes:
        return super().operands(verify) + self.metadata_bytes()


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


def make_sparse_inputs(m: int, n: int, k: int, operand: str, accumulator: str, accumulators: int, bits: int,
                       keep: tuple[int, int]) -> SparseInputs:
    """make_inputs' values with A compressed to M x K/2, placed by the metadata word of `keep`."""
    dense = make_inputs(m, n, k, operand, accumulator, accumulators)
    return SparseInputs(dense.a[:, : k // 2], dense.b, dense.c0, operand, accumulator, metadata_word(keep),
                        bits)


def reference(inputs: MatrixInputs, unroll: int) -> np.ndarray:
    """The tile every subgroup stores after one verification iteration of `unroll` steps, in float64
    or int64."""
    steps = unroll * inputs.c0.shape[0]
    return inputs.c0.sum(axis=0) + steps * (inputs.full_a() @ inputs.b)


def compare(got: np.ndarray, want: np.ndarray) -> str | None:
    """Every subgroup's tile (got: subgroups x M x N) must equal the reference exactly.

    The outputs run to tens of millions of entries (4224 workgroups x 128 x 128 is 69 million), so
    the reference is put in got's type once and compared bit for bit, which cut a matrix verify
    about fourfold (PERFORMANCE_ANALYSIS.md, "Where the time goes"); only where bits differ are
    floats compared as numbers (+0 equals -0, NaN equals nothing). A reference the type cannot
    hold exactly, or not finite, is compared in float64 throughout."""
    flat = got.reshape(got.shape[0], -1)
    if got.dtype.kind in "fiu" and np.isfinite(want).all():
        stored = want.reshape(1, -1).astype(got.dtype)
        if np.array_equal(stored.astype(np.float64), want.reshape(1, -1).astype(np.float64)):
            word = np.dtype(f"u{got.dtype.itemsize}")
            differ = flat.view(word) != stored.view(word)
            if differ.any() and got.dtype.kind == "f":
                differ = flat != stored
            return _mismatch(got, want, differ)
    return _mismatch(got, want, ~np.isclose(flat.astype(np.float64), want.reshape(1, -1).astype(np.float64),
                                             rtol=0, atol=0))


def _mismatch(got: np.ndarray, want: np.ndarray, differ: np.ndarray) -> str | None:
    """The words for the entries `differ` marks (a mask over got), or None when it marks none."""
    if not differ.any():
        return None
    first = tuple(int(i) for i in np.unravel_index(int(np.argmax(differ)), got.shape))
    return (f"{int(np.count_nonzero(differ))} of {got.size} values differ from the host reference (first at "
            f"subgroup {first[0]}, element {first[1:]}: got {got[first]!r}, want {want[first[1:]]!r})")

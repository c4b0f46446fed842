"""The vendor GEMM, written once: random operands made on the device (shaders/gemm_fill.cu), a
backend's GEMM library (cuda/gemm.py: cuBLASLt, rocm/gemm.py: hipBLASLt) to run D = A x B, and a
sample of D checked against float64 products of the same operands, whose sampled rows the host
makes as the device did (Operand).

A backend's GEMM object, the API boundary the tests fake:

    prepare(types, m, n, k, a, b) -> evidence    make the operands (a, b: Operand), choose the algorithm
    run(count, accumulate=False) -> GPU seconds  `count` GEMMs back to back; accumulate: D += A x B
    clear()                                      D = 0
    output(rows, cols) -> D[rows[i], cols[i]]    in D's storage type
    close()

Layout, the one every type takes ("TN", which cuBLASLt requires for FP8 and INT8): A is M x K
row-major (column-major K x M with op(A) = transpose), B is N x K row-major (column-major K x N,
op(B) = none), D is M x N column-major, so D[i, j] = sum_k A[i, k] * B[j, k] at i + j * M.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peakbench.harness import guards
from peakbench.workload import Workload
from peakbench.workloads.stream import hash32

# Each type's storage, as numpy holds its raw elements (bf16 and fp8 as their bit patterns).
STORAGE = {"fp16": np.float16, "bf16": np.uint16, "tf32": np.float32, "fp32": np.float32,
           "fp64": np.float64, "fp8_e4m3": np.uint8, "int8": np.int8, "int32": np.int32}
# Random floats as bit patterns: random sign and mantissa, exponent one of the four below 2, so
# every value is exact in its type and in [1/8, 2): (element bytes, keep mask, set bits) of the raw
# element; int8 keeps every bit. Two random exponent bits, because that is the form whose GEMMs run
# as torch.randn's do: on an H200, with one (|x| in [0.5, 2)) torch's products ran 1.6-4.8% faster
# than on normal data, under the power cap 1.3-3.2%; with two within 0.6-1.4%
# (PERFORMANCE_ANALYSIS.md, "The GEMM operands' data").
FLOAT_BITS = {"fp16": (2, 0x8FFF, 0x3000), "bf16": (2, 0x81FF, 0x3E00), "tf32": (4, 0x81FFFFFF, 0x3E000000),
              "fp64": (8, 0x803FFFFFFFFFFFFF, 0x3FC0000000000000), "fp8_e4m3": (1, 0x9F, 0x20)}
# The check: |D - reference| <= count * (SUM_TOLERANCE * sum_k |a b| + 2 * ROUNDING * |A x B|).
# SUM_TOLERANCE covers the accumulation (FP32 for 16-bit operands), TF32's rounding of FP32
# operands to a 10-bit mantissa and FP8's accumulation on Hopper; ROUNDING is D's unit roundoff.
SUM_TOLERANCE = {"fp16": 2 ** -12, "bf16": 2 ** -12, "tf32": 2 ** -9, "fp8_e4m3": 2 ** -10,
                 "int8": 0.0, "fp64": 2 ** -40}
ROUNDING = {"fp16": 2 ** -11, "bf16": 2 ** -8, "fp32": 2 ** -24, "fp64": 2 ** -53, "int32": 0.0}
SAMPLES = 64          # entries of D checked
COUNTS = (1, 2)       # accumulated GEMMs before each check (guards.at_counts)
SEED = 17             # the sampled entries' generator
OFFSETS = {"a": 0, "b": 1 << 31}       # each operand's words hash their own indices (disjoint below 2**31)
FILL = ("gemm_fill.cu", "gemm_fill")
FILL_BLOCK = 256
FILL_GROUPS = 1 << 16                  # a grid-stride fill: enough blocks to fill every SM


@dataclass(frozen=True)
class GemmTypes:
    operand: str        # A and B
    accumulator: str    # the compute type
    output: str         # D (and C)


@dataclass(frozen=True)
class WordForm:
    """How gemm_fill.cu turns a hash into an operand word: ((hash & keep) | set) + add, each a
    pair for even and odd words."""
    keep: tuple[int, int]
    set: tuple[int, int]
    add: tuple[int, int] = (0, 0)

    def args(self) -> list:
        return [np.uint32(v) for pair in zip(self.keep, self.set, self.add) for v in pair]

    def apply(self, words: np.ndarray, index: np.ndarray) -> np.ndarray:
        odd = (index & 1).astype(bool)
        for i, pick in ((0, ~odd), (1, odd)):
            words[pick] = ((words[pick] & np.uint32(self.keep[i])) | np.uint32(self.set[i])) + np.uint32(self.add[i])
        return words


def _pair(pattern: int, nbytes: int) -> tuple[int, int]:
    """An element-wide bit pattern repeated over 8 bytes, as (even word, odd word)."""
    raw = int(pattern).to_bytes(nbytes, "little") * (8 // nbytes)
    return int.from_bytes(raw[:4], "little"), int.from_bytes(raw[4:], "little")


@dataclass(frozen=True)
class Operand:
    """A rows x cols row-major operand of `kind`: its raw bytes are 32-bit words, word w the
    hash of `offset` + w in the WordForm of the kind (random sign and mantissa, |x| in [1/8, 2);
    int8 every bit pattern). The device makes all of it (gemm_fill.cu), the host the rows it checks."""
    kind: str
    rows: int
    cols: int
    offset: int

    def __post_init__(self):
        if self.cols * self.itemsize % 8:
            raise ValueError(f"an operand row of {self.cols} {self.kind} elements is not whole 8-byte pairs of words")
        if self.words >= 1 << 31:
            raise ValueError(f"an operand of {self.words} words is beyond the fill kernel's 2**31")

    @property
    def itemsize(self) -> int:
        return np.dtype(STORAGE[self.kind]).itemsize

    @property
    def nbytes(self) -> int:
        return self.rows * self.cols * self.itemsize

    @property
    def words(self) -> int:
        return self.nbytes // 4

    def form(self) -> WordForm:
        if self.kind not in FLOAT_BITS:
            return WordForm((0xFFFFFFFF, 0xFFFFFFFF), (0, 0))
        size, keep, fixed = FLOAT_BITS[self.kind]
        return WordForm(_pair(keep, size), _pair(fixed, size))

    def host_rows(self, rows) -> np.ndarray:
        """Rows `rows` of the operand, (len(rows), cols), in the kind's storage type: the words the
        fill kernel makes at those rows' word indices."""
        per_row = self.cols * self.itemsize // 4
        index = np.asarray(rows, np.uint32)[:, None] * np.uint32(per_row) + np.arange(per_row, dtype=np.uint32)
        words = self.form().apply(hash32(index + np.uint32(self.offset)), index)
        return words.view(STORAGE[self.kind]).reshape(len(index), self.cols)


class OperandFill:
    """gemm_fill.cu on a runtime: fill(buf, operand, form) makes the operand in a device buffer."""

    def __init__(self, rt):
        self.rt, self.kernel = rt, None

    def __call__(self, buf, operand: Operand, form: WordForm) -> None:
        if self.kernel is None:
            source, entry = FILL
            self.kernel = self.rt.compile(source, {}, entry, block=FILL_BLOCK, args="buuuuuuuu", label="gemm fill")
        groups = max(1, min(FILL_GROUPS, -(-operand.words // FILL_BLOCK), self.rt.max_groups(FILL_BLOCK)))
        self.rt.launch(self.kernel, groups, [buf, np.uint32(operand.words), np.uint32(operand.offset), *form.args()])

    def close(self) -> None:
        if self.kernel is not None:
            self.rt.discard(self.kernel)
            self.kernel = None


def _e4m3() -> np.ndarray:
    """The value of every FP8 E4M3 byte (OCP: bias 7, subnormals, NaN at S.1111.111)."""
    b = np.arange(256)
    exponent, mantissa = (b >> 3) & 0xF, b & 7
    value = np.where(exponent == 0, mantissa / 8 * 2.0 ** -6, (1 + mantissa / 8) * 2.0 ** (exponent - 7))
    value = np.where((b & 0x7F) == 0x7F, np.nan, value)
    return np.where(b & 0x80, -value, value)


E4M3 = _e4m3()


def decode(kind: str, raw: np.ndarray) -> np.ndarray:
    """Raw elements of `kind` (its STORAGE) as float64."""
    raw = np.asarray(raw, dtype=STORAGE[kind])
    if kind == "bf16":
        return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if kind == "fp8_e4m3":
        return E4M3[raw]
    return raw.astype(np.float64)


def compare(types: GemmTypes, got: np.ndarray, want: np.ndarray, magnitude: np.ndarray, count: int,
            where) -> str | None:
    """The first sampled entry off by more than the types' tolerance, in words, or None."""
    allowed = count * (SUM_TOLERANCE[types.operand] * magnitude + 2 * ROUNDING[types.output] * np.abs(want / count))
    bad = np.flatnonzero(~(np.abs(got - want) <= allowed))      # NaN is bad
    if not bad.size:
        return None
    i = bad[0]
    return (f"D[{where[0][i]}, {where[1][i]}] = {got[i]:.6g}, the host's float64 product is {want[i]:.6g}"
            f" (allowed error {allowed[i]:.3g}; {bad.size} of {got.size} sampled entries off)")


class GemmWorkload(Workload):
    """One shape of one test through a backend's GEMM object (`gemm`, named `library`). An
    item is one GEMM."""

    def __init__(self, test, variant, gemm, library: str):
        self.test, self.variant, self.gemm, self.name = test, variant, gemm, variant.name
        operand, accumulator = test.types
        self.types = GemmTypes(operand, accumulator, test.output)
        m, n, k = self.shape = variant.shape
        self.a = Operand(operand, m, k, OFFSETS["a"])
        self.b = Operand(operand, n, k, OFFSETS["b"])
        self.params = {"m": m, "n": n, "k": k, "library": library, "operands": operand,
                       "accumulate": accumulator, "output": test.output, "layout": "TN (A row-major M x K, "
                       "B column-major K x N, D column-major)", "data": "random, |x| in [1/8, 2)"
                       if operand != "int8" else "random int8",
                       "made": "on the device (gemm_fill.cu: word w is lowbias32 of the operand's offset + w,"
                               " masked to the type in the library's encoding)"}
        self.evidence = dict(gemm.prepare(self.types, m, n, k, self.a, self.b))

    def run(self, size: int) -> float:
        return self.gemm.run(size)

    def items(self, size: int) -> int:
        return size

    def verify(self) -> str | None:
        m, n, _ = self.shape
        rng = np.random.default_rng(SEED + 1)
        rows, cols = rng.integers(0, m, SAMPLES), rng.integers(0, n, SAMPLES)
        a, b = decode(self.types.operand, self.a.host_rows(rows)), decode(self.types.operand, self.b.host_rows(cols))
        product, magnitude = (a * b).sum(axis=1), (np.abs(a) * np.abs(b)).sum(axis=1)

        def check(count: int) -> str | None:
            self.gemm.clear()
            self.gemm.run(count, accumulate=True)
            got = decode(self.types.output, self.gemm.output(rows, cols))
            return compare(self.types, got, count * product, magnitude, count, (rows, cols))

        problem = guards.at_counts(COUNTS, check, "accumulated GEMMs", self.evidence)
        if not problem:
            self.evidence["verified"] = f"{SAMPLES} random entries of D against float64 products of the same operands"
        return problem

    def close(self) -> None:
        self.gemm.close()


def workload_of(test, variant, gemm, library: str) -> GemmWorkload:
    """The workload over a backend's new GEMM object (`library` names it); the object is closed
    where making the workload fails."""
    try:
        return GemmWorkload(test, variant, gemm, library)
    except BaseException:
        gemm.close()
        raise

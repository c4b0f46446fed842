"""The vendor GEMM, written once: random operands made on the host, a backend's GEMM library
(cuda/gemm.py: cuBLASLt, rocm/gemm.py: hipBLASLt) to run D = A x B, and a sample of D checked
against float64 products of the same operands.

A backend's GEMM object, the API boundary the tests fake:

    prepare(types, m, n, k, a, b) -> evidence    upload the operands, choose the algorithm
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

# Each type's storage, as numpy holds its raw elements (bf16 and fp8 as their bit patterns).
STORAGE = {"fp16": np.float16, "bf16": np.uint16, "tf32": np.float32, "fp32": np.float32,
           "fp64": np.float64, "fp8_e4m3": np.uint8, "int8": np.int8, "int32": np.int32}
# Random floats as bit patterns: random sign and mantissa, exponent one of the two around 1, so
# every value is exact in its type and in [0.5, 2): (keep mask, set bits) of the raw word.
FLOAT_BITS = {"fp16": (np.uint16, 0x87FF, 0x3800), "bf16": (np.uint16, 0x80FF, 0x3F00),
              "tf32": (np.uint32, 0x80FFFFFF, 0x3F000000),
              "fp64": (np.uint64, 0x801FFFFFFFFFFFFF, 0x3FE0000000000000),
              "fp8_e4m3": (np.uint8, 0x8F, 0x30)}
# The check: |D - reference| <= count * (SUM_TOLERANCE * sum_k |a b| + 2 * ROUNDING * |A x B|).
# SUM_TOLERANCE covers the accumulation (FP32 for 16-bit operands), TF32's rounding of FP32
# operands to a 10-bit mantissa and FP8's accumulation on Hopper; ROUNDING is D's unit roundoff.
SUM_TOLERANCE = {"fp16": 2 ** -12, "bf16": 2 ** -12, "tf32": 2 ** -9, "fp8_e4m3": 2 ** -10,
                 "int8": 0.0, "fp64": 2 ** -40}
ROUNDING = {"fp16": 2 ** -11, "bf16": 2 ** -8, "fp32": 2 ** -24, "fp64": 2 ** -53, "int32": 0.0}
SAMPLES = 64          # entries of D checked
COUNTS = (1, 2)       # accumulated GEMMs before each check (guards.at_counts)
SEED = 17


@dataclass(frozen=True)
class GemmTypes:
    operand: str        # A and B
    accumulator: str    # the compute type
    output: str         # D (and C)


def random_operand(kind: str, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` random elements of `kind` in its storage type: floats in +-[0.5, 2) with random
    mantissas (random bits draw the power a real GEMM draws, unlike zeros), int8 over its range."""
    word = FLOAT_BITS[kind][0] if kind in FLOAT_BITS else STORAGE[kind]
    bits = rng.bit_generator.random_raw(-(-count * np.dtype(word).itemsize // 8)).view(word)[:count]
    if kind not in FLOAT_BITS:          # int8: every bit pattern
        return bits
    _, keep, fixed = FLOAT_BITS[kind]
    bits &= word(keep)
    bits |= word(fixed)
    return bits.view(STORAGE[kind])


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


class GemmWorkload:
    """One shape of one test through a backend's GEMM object (`gemm`, named `library`). An
    item is one GEMM."""

    def __init__(self, test, variant, gemm, library: str):
        self.test, self.variant, self.gemm, self.name = test, variant, gemm, variant.name
        operand, accumulator = test.types
        self.types = GemmTypes(operand, accumulator, test.output)
        m, n, k = self.shape = variant.shape
        rng = np.random.default_rng(SEED)
        self.a = random_operand(operand, m * k, rng).reshape(m, k)
        self.b = random_operand(operand, n * k, rng).reshape(n, k)
        self.params = {"m": m, "n": n, "k": k, "library": library, "operands": operand,
                       "accumulate": accumulator, "output": test.output, "layout": "TN (A row-major M x K, "
                       "B column-major K x N, D column-major)", "data": "random, |x| in [0.5, 2)"
                       if operand != "int8" else "random int8"}
        self.evidence = dict(gemm.prepare(self.types, m, n, k, self.a, self.b))

    def run(self, size: int) -> float:
        return self.gemm.run(size)

    def items(self, size: int) -> int:
        return size

    def verify(self) -> str | None:
        m, n, _ = self.shape
        rng = np.random.default_rng(SEED + 1)
        rows, cols = rng.integers(0, m, SAMPLES), rng.integers(0, n, SAMPLES)
        a, b = decode(self.types.operand, self.a[rows]), decode(self.types.operand, self.b[cols])
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
        self.a = self.b = None
        self.gemm.close()


def workload_of(test, variant, gemm, library: str) -> GemmWorkload:
    """The workload over a backend's new GEMM object (`library` names it); the object is closed
    where making the workload fails."""
    try:
        return GemmWorkload(test, variant, gemm, library)
    except BaseException:
        gemm.close()
        raise

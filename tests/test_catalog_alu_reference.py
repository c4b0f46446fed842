"""peakbench.catalog.alu_reference: the host reference every backend's ALU kernel is checked
against. Each function is compared with an independent computation: exact rationals for the
float formats, Python integers for the wrapping ones, a byte loop for the 4x8 dot product."""
from __future__ import annotations

import struct
from fractions import Fraction

import numpy as np
import pytest

from helpers import alu_params
from peakbench.catalog import alu_reference as ref

ALU = alu_params()
THREADS = np.array([0, 1, 5, 31, 32, 100, 511])


# -- bfloat16 rounding -----------------------------------------------------------------------

def f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def bits_of(x) -> int:
    return int(np.asarray(x, dtype=np.float32).view(np.uint32))


@pytest.mark.parametrize("x, want", [
    (1.0, 1.0),
    (-3.5, -3.5),
    (0.0, 0.0),
    (1 + 2**-8, 1.0),                       # halfway between 1 and 1+2^-7: ties to even (down)
    (1 + 3 * 2**-8, 1 + 2**-6),             # halfway between 1+2^-7 and 1+2^-6: ties to even (up)
    (1 + 2**-8 + 2**-20, 1 + 2**-7),        # just above halfway: up
    (1 + 2**-8 - 2**-20, 1.0),              # just below halfway: down
    (-(1 + 2**-8), -1.0),
    (255.5, 256.0),                          # 0x437F8000: halfway, 0x437F is odd: up to 256
    (3.140625, 3.140625),                    # 0x40490000 is already a bfloat16
    (f32(0x7F7FFFFF), float("inf")),         # above the largest bfloat16's rounding boundary
])
def test_round_bf16_hand_values(x, want):
    got = ref.round_bf16(np.array([x], dtype=np.float32))
    assert got.dtype == np.float32 and got.shape == (1,)
    assert float(got[0]) == want


def exact_bf16(bits: int) -> int:
    """Nearest bfloat16 of a finite float32 by exact rational arithmetic, ties to even."""
    lo = bits & 0xFFFF0000
    hi = lo + 0x10000
    x, a, b = Fraction(f32(bits)), Fraction(f32(lo)), f32(hi)
    # Past the largest bfloat16 the next step up is infinity, which IEEE rounding treats as 2^128.
    b = Fraction(2**128) * (-1 if bits >> 31 else 1) if np.isinf(b) else Fraction(b)
    da, db = abs(x - a), abs(x - b)
    if da < db or (da == db and not lo & 0x10000):
        return lo
    return hi


def test_round_bf16_matches_exact_rounding_on_random_floats():
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32)
    bits = bits[(bits & 0x7F800000) != 0x7F800000]           # finite only
    bits = np.concatenate([bits, (bits & 0xFFFF0000) | 0x8000])   # and every one of them as a tie
    got = ref.round_bf16(bits.view(np.float32)).view(np.uint32)
    want = np.array([exact_bf16(int(b)) for b in bits], dtype=np.uint64).astype(np.uint32)
    assert np.array_equal(got, want)


def test_round_bf16_keeps_nan():
    assert np.isnan(ref.round_bf16(np.array([np.nan], dtype=np.float32))).all()


# -- the 4x8-bit dot product -----------------------------------------------------------------

def sdot_loop(a: int, b: int) -> int:
    return sum(x * y for x, y in zip(struct.unpack("<4b", struct.pack("<I", a & 0xFFFFFFFF)),
                                     struct.unpack("<4b", struct.pack("<I", b & 0xFFFFFFFF))))


@pytest.mark.parametrize("a, b, want", [
    (0x01020304, 0x01010101, 10),
    (0x80808080, 0x80808080, 4 * 128 * 128),
    (0x7F7F7F7F, 0x80808080, -4 * 127 * 128),
    (0xFFFFFFFF, 0x01010101, -4),             # every byte is -1
    (0x000000FF, 0x00000002, -2),             # only the low byte is component 0
])
def test_sdot4x8_hand_values(a, b, want):
    assert sdot_loop(a, b) == want
    got = ref._sdot4x8(np.array([a], dtype=np.uint32).view(np.int32), np.array([b], dtype=np.uint32).view(np.int32))
    assert int(got[0]) == want


def test_sdot4x8_matches_a_byte_loop():
    rng = np.random.default_rng(2)
    a = rng.integers(0, 2**32, (50, 3), dtype=np.uint64).astype(np.uint32).view(np.int32)
    b = rng.integers(0, 2**32, 3, dtype=np.uint64).astype(np.uint32).view(np.int32)
    got = ref._sdot4x8(a, b)                      # b broadcasts over the rows, as in the reference
    want = [[sdot_loop(int(x), int(y)) for x, y in zip(row, b)] for row in a]
    assert got.tolist() == want


# -- the reference against independent loops -------------------------------------------------

def seed_rows(inputs, thread: int, accumulators: int):
    return [inputs.seeds[(thread * accumulators + k) % ref.SEEDS] for k in range(accumulators)]


def signed(x: int, bits: int) -> int:
    x %= 1 << bits
    return x - (1 << bits) if x >> (bits - 1) else x


@pytest.mark.parametrize("dtype, bits", [("int64", 64), ("int32", 32), ("int16", 16)])
@pytest.mark.parametrize("width", [1, 2])
def test_integer_fma_wraps_like_python_ints(dtype, bits, width):
    inputs, acc, steps = ref.make_inputs("fma", dtype, width), 8, 5
    b, c = ([int(v) for v in row] for row in inputs.params)
    assert all(v % 2 for v in b), "odd multipliers: each step is a bijection"
    got = ref.reference("fma", dtype, inputs, acc, steps, THREADS)
    assert got.dtype == ref.DTYPES[dtype] and got.shape == (len(THREADS), acc, width)
    for t, row in zip(THREADS, got):
        for k, seeds in enumerate(seed_rows(inputs, int(t), acc)):
            for lane in range(width):
                x = int(seeds[lane])
                for _ in range(steps):
                    x = (x * b[lane] + c[lane]) % (1 << bits)
                assert int(row[k, lane]) == signed(x, bits)


@pytest.mark.parametrize("width", [1, 4])
def test_dot4x8_matches_python_ints(width):
    inputs, acc, steps = ref.make_inputs("dot4x8", "int8", width), 8, 6
    b = [int(v) for v in inputs.params[0]]
    got = ref.reference("dot4x8", "int8", inputs, acc, steps, THREADS)
    assert got.dtype == np.int32 and got.shape == (len(THREADS), acc, width)
    for t, row in zip(THREADS, got):
        for k, seeds in enumerate(seed_rows(inputs, int(t), acc)):
            for lane in range(width):
                x = int(seeds[lane])
                for _ in range(steps):
                    x = (x + sdot_loop(x, b[lane])) % 2**32
                assert int(row[k, lane]) == signed(x, 32)


FLOATS = {"fp64": np.float64, "fp32": np.float32, "fp16": np.float16}


def exact_fma_chain(x: Fraction, b: Fraction, c: Fraction, steps: int, t) -> Fraction:
    """x = fma(x, b, c) with one rounding per step (float(Fraction) rounds correctly to float64;
    for fp32/fp16 the exact value fits a float64, checked, so the narrowing is the one rounding)."""
    for _ in range(steps):
        exact = x * b + c
        if t is not np.float64:
            assert Fraction(float(exact)) == exact, "the reference's premise: fma results are exact in float64"
        x = Fraction(float(t(float(exact))))
    return x


@pytest.mark.parametrize("dtype", ["fp64", "fp32", "fp16"])
def test_float_fma_matches_exact_fused_arithmetic(dtype):
    t, width, acc, steps = FLOATS[dtype], 2, 8, 40
    inputs = ref.make_inputs("fma", dtype, width)
    b, c = (Fraction(float(v)) for v in inputs.params[:, 0])
    got = ref.reference("fma", dtype, inputs, acc, steps, THREADS)
    assert got.dtype == t and got.shape == (len(THREADS), acc, width)
    for th, row in zip(THREADS, got):
        for k, seeds in enumerate(seed_rows(inputs, int(th), acc)):
            for lane in range(width):
                want = float(exact_fma_chain(Fraction(float(seeds[lane])), b, c, steps, t))
                if dtype == "fp64":
                    # float64 products round before the add in the reference: within its tolerance
                    assert float(row[k, lane]) == pytest.approx(want, rel=ref.TOLERANCE["fma", "fp64"])
                else:
                    assert float(row[k, lane]) == want


@pytest.mark.parametrize("width", [2, 4])
def test_bf16dot_matches_exact_dots_rounded_to_bf16(width):
    inputs, acc, steps = ref.make_inputs("bf16dot", "bf16", width), 8, 5
    m = [[Fraction(float(v)) for v in row] for row in inputs.params]
    assert np.array_equal(ref.round_bf16(inputs.seeds), inputs.seeds), "seeds are exact bfloat16 values"

    def bf16(x: Fraction) -> Fraction:
        assert Fraction(float(np.float32(float(x)))) == x, "dots of these inputs are exact in float32"
        return Fraction(f32(exact_bf16(bits_of(float(x)))))

    got = ref.reference("bf16dot", "bf16", inputs, acc, steps, THREADS)
    assert got.shape == (len(THREADS), acc, width) and got.dtype == np.float32
    for th, row in zip(THREADS, got):
        for k, seeds in enumerate(seed_rows(inputs, int(th), acc)):
            v = [Fraction(float(s)) for s in seeds]
            for _ in range(steps):
                v = [bf16(sum(a * w for a, w in zip(v, m_row))) for m_row in m]
            assert [float(x) for x in row[k]] == [float(x) for x in v]


# -- shapes, layouts and how sharp the check is, for every kernel of the catalog -------------

@pytest.mark.parametrize("test, variant", ALU)
def test_inputs_and_reference_shapes(test, variant):
    inputs = ref.make_inputs(test.kernel, test.dtype, variant.width)
    assert inputs.seeds.shape == (ref.SEEDS, variant.width)
    # The input buffer is the seeds then the params, packed: the kernels read params right after.
    assert inputs.buffer()[:inputs.seeds.nbytes] == inputs.seeds.tobytes()
    assert len(inputs.buffer()) == inputs.seeds.nbytes + inputs.params.nbytes
    out = ref.reference(test.kernel, test.dtype, inputs, test.accumulators, variant.unroll, THREADS)
    assert out.shape == (len(THREADS), test.accumulators, variant.width)
    assert out.dtype == ref.DTYPES[test.dtype]
    assert np.all(np.isfinite(out.astype(np.float64)))
    # Threads SEEDS / accumulators apart read the same seed rows, so they store the same value.
    period = ref.SEEDS // test.accumulators
    pair = ref.reference(test.kernel, test.dtype, inputs, test.accumulators, 3, np.array([1, 1 + period]))
    assert np.array_equal(pair[0], pair[1])


def test_no_reference_for_unknown_kernels():
    with pytest.raises(ValueError):
        ref.make_inputs("wmma", "fp16", 1)


@pytest.mark.parametrize("test, variant", ALU)
def test_verification_detects_missing_work(test, variant):
    """A kernel that ran one step fewer, or none, or on other seeds must fail verify()."""
    inputs, threads = ref.make_inputs(test.kernel, test.dtype, variant.width), np.arange(512)

    def stored(steps, thread_ids=threads):
        return ref.reference(test.kernel, test.dtype, inputs, test.accumulators, steps, thread_ids)

    assert ref.compare(test.kernel, test.dtype, stored(variant.unroll - 1), stored(variant.unroll)) is not None
    assert ref.compare(test.kernel, test.dtype, stored(variant.unroll, threads + 1), stored(variant.unroll)) is not None
    full = stored(variant.unroll)
    assert ref.compare(test.kernel, test.dtype, stored(variant.unroll // 2), full) is not None
    assert ref.compare(test.kernel, test.dtype, stored(0), full) is not None


# -- compare ---------------------------------------------------------------------------------

def test_compare_reports_a_planted_mismatch():
    inputs = ref.make_inputs("fma", "fp32", 2)
    want = ref.reference("fma", "fp32", inputs, 8, 3, np.arange(64))
    got = want.copy()
    got[17, 5, 1] *= 1.001
    message = ref.compare("fma", "fp32", got, want)
    assert message.startswith("1 of 1024 values differ from the host reference")
    assert "(17, 5, 1)" in message
    assert ref.compare("fma", "fp32", want.copy(), want) is None


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_compare_is_exact_where_the_reference_is(dtype):
    want = np.array([[1.5], [-3.25], [100.0]], dtype=ref.DTYPES[dtype])
    one_ulp = np.nextafter(want, np.inf).astype(ref.DTYPES[dtype])
    assert ref.compare("fma", dtype, want.copy(), want) is None
    assert ref.compare("fma", dtype, one_ulp, want) is not None


@pytest.mark.parametrize("kernel, dtype", [("fma", "fp64"), ("bf16dot", "bf16")])
def test_compare_tolerance(kernel, dtype):
    tol = ref.TOLERANCE[kernel, dtype]
    want = np.array([[1.5], [-3.25], [100.0]], dtype=ref.DTYPES[dtype])
    within = (want.astype(np.float64) * (1 + tol / 4)).astype(ref.DTYPES[dtype])
    beyond = (want.astype(np.float64) * (1 + tol * 4)).astype(ref.DTYPES[dtype])
    assert ref.compare(kernel, dtype, within, want) is None
    assert ref.compare(kernel, dtype, beyond, want) is not None


def test_a_bfloat16_fma_chain_is_compared_exactly():
    """One step short of 64 moves a bfloat16 chain by less than 1%: only an exact compare sees it."""
    inputs = ref.make_inputs("fma", "bf16", 2)
    ids = np.arange(256)
    full = ref.reference("fma", "bf16", inputs, 8, 64, ids)
    short = ref.reference("fma", "bf16", inputs, 8, 63, ids)
    assert ref.compare("fma", "bf16", full.copy(), full) is None
    assert ref.compare("fma", "bf16", short, full) is not None


def test_compare_rejects_nan_and_accepts_a_flat_buffer():
    want = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    assert ref.compare("fma", "fp32", want.ravel(), want) is None
    got = want.copy()
    got[1, 0] = np.nan
    assert "first at (1, 0)" in ref.compare("fma", "fp32", got, want)


def test_compare_integers_are_exact():
    want = ref.reference("dot4x8", "int8", ref.make_inputs("dot4x8", "int8", 4), 8, 2, np.arange(10))
    got = want.copy()
    got[3, 2, 1] += 1
    assert "1 of 320 values" in ref.compare("dot4x8", "int8", got, want)
    assert "(3, 2, 1)" in ref.compare("dot4x8", "int8", got, want)


def test_int64_operands_use_both_halves():
    """Every multiplier, increment and (but one) seed has nonzero upper and lower 32 bits, so no
    compiler can drop a 32-bit piece of the 64-bit multiply-add."""
    inputs = ref.make_inputs("fma", "int64", 2)
    values = np.concatenate([inputs.seeds.ravel()[1:], inputs.params.ravel()]).view(np.uint64)
    assert ((values >> np.uint64(32)) != 0).all() and ((values & np.uint64(0xFFFFFFFF)) != 0).all()


def test_an_empty_grid_is_a_failed_check_not_a_crash():
    inputs = ref.make_inputs("fma", "fp32", 1)
    got = np.empty((0, 8, 1), np.float32)
    assert "no threads" in ref.check("fma", "fp32", inputs, 8, 1, got)

"""Inputs and host reference for the vector-ALU kernels: the contract every backend's kernel keeps.

Per thread `gid`, accumulator k (0..A-1) starts at seeds[(gid*A + k) % SEEDS] (a width-lane row)
and takes `steps` = iterations*unroll steps; the thread stores every accumulator, lanes kept
apart, at out[(gid*A + k)*width + lane]. The step of each family:
  fma      x = fma(x, b, c) for floats (bfloat16 too, where a backend has a native FMA),
           x*b + c (wrapping) for integers, 64-bit ones included
  dot4x8   x = x + dot(int8x4(x), int8x4(b)) per 32-bit word, wrapping
  bf16dot  v = (dot(v, M[0]), ..., dot(v, M[n-1])) rounded to bfloat16, stored as f32
The numbers are chosen so that the output depends on every seed and every step, and so that the
reference is exact where it can be: b = 63/64 has six significant bits, so a float32 or float16
product is exact in float64 and one rounding of the float64 sum is the fused result, while x
moves only 1/64 of the way to its fixed point per step; the integer multipliers are odd, so a
step is a bijection and no two seeds merge. float64 and bfloat16 get a tolerance.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SEEDS = 256

DTYPES = {"fp64": np.float64, "fp32": np.float32, "fp16": np.float16,
          "int64": np.int64, "int32": np.int32, "int16": np.int16, "int8": np.int32, "bf16": np.float32}

# Relative tolerance where the host cannot reproduce the rounding exactly, by (kernel, type): a
# float64 FMA (the float64 emulation rounds twice, at most half an ulp per step, and the chain
# contracts by 63/64) and the driver's bfloat16 dot product (whose internal rounding the
# extension leaves open). A bfloat16 FMA (CUDA's HFMA2.BF16) is exact: x*b + c of these inputs
# fits a float32, so the one rounding to bfloat16 is the reference's; a tolerance there would
# also pass a chain that lost its last steps (near the fixed point they move under 1%).
TOLERANCE = {("fma", "fp64"): 1e-14, ("bf16dot", "bf16"): 1e-2}


@dataclass(frozen=True)
class AluInputs:
    seeds: np.ndarray      # (SEEDS, width) in the element dtype
    params: np.ndarray     # fma: rows b, c; dot4x8: row b; bf16dot: the n x n matrix M

    def buffer(self) -> bytes:
        """Seeds then params, tightly packed rows: the layout of the kernels' input buffer."""
        return self.seeds.tobytes() + self.params.tobytes()


def make_inputs(kernel: str, dtype: str, width: int) -> AluInputs:
    i = np.arange(SEEDS * width, dtype=np.int64).reshape(SEEDS, width)
    if kernel == "fma" and (dtype.startswith("fp") or dtype == "bf16"):
        t = DTYPES[dtype]
        steps = 128 if dtype == "bf16" else 256                # bfloat16 keeps 7 fraction bits
        seeds = (1.0 + ((i * 37) % steps) / steps).astype(t)   # [1, 2), exact in the type
        params = np.array([[63 / 64] * width, [1 / 32] * width], dtype=t)
    elif kernel == "fma" and dtype == "int64":
        # Knuth's MMIX multiplier and increment: both halves of every operand are nonzero, so
        # no 32-bit piece of the 64-bit multiply-add is known to be zero.
        with np.errstate(over="ignore"):
            seeds = (i.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)).view(np.int64)
        params = np.array([[6364136223846793005] * width, [1442695040888963407] * width],
                          dtype=np.uint64).view(np.int64)
    elif kernel == "fma" and dtype == "int32":
        seeds = ((i * 2654435761) % 2**32).astype(np.uint32).view(np.int32)
        params = np.array([[1664525] * width, [1013904223] * width], dtype=np.int32)
    elif kernel == "fma" and dtype == "int16":
        seeds = ((i * 40503) % 2**16).astype(np.uint16).view(np.int16)
        params = np.array([[25173] * width, [13849] * width], dtype=np.int16)
    elif kernel == "dot4x8":
        seeds = ((i * 2654435761 + 12345) % 2**32).astype(np.uint32).view(np.int32)
        params = np.array([[0x05FD03FE + 0x01010101 * j for j in range(width)]],
                          dtype=np.uint32).view(np.int32)
    elif kernel == "bf16dot":
        seeds = (1.0 + ((i * 37) % 64) / 64.0).astype(np.float32)  # 7 significant bits: exact in bf16
        # A shear, v[i] += v[i+1] / 2: every step moves the lanes by at least half an ulp of
        # bfloat16 while they are small, and nothing overflows (growth is polynomial), where a
        # contracting matrix would reach its bfloat16 fixed point within a few steps.
        params = (np.eye(width) + 0.5 * np.eye(width, k=1)).astype(np.float32)
    else:
        raise ValueError(f"no inputs for kernel {kernel!r} on {dtype!r}")
    return AluInputs(seeds, params)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even), kept as float32."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def _sdot4x8(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ab = a.astype(np.int32).view(np.int8).reshape(*a.shape, 4).astype(np.int64)
    bb = b.astype(np.int32).view(np.int8).reshape(*b.shape, 4).astype(np.int64)
    return (ab * bb).sum(axis=-1)


def _wrap(x: np.ndarray, bits: int, dtype) -> np.ndarray:
    return (x % (1 << bits)).astype(np.uint64).astype(f"uint{bits}").view(dtype)


def reference(kernel: str, dtype: str, inputs: AluInputs, accumulators: int, steps: int,
              thread_ids: np.ndarray) -> np.ndarray:
    """The stored accumulators, shape (len(thread_ids), accumulators, width)."""
    rows = (thread_ids[:, None] * accumulators + np.arange(accumulators)) % SEEDS
    x = inputs.seeds[rows]                                   # (threads, A, width)
    if kernel == "fma" and (dtype.startswith("fp") or dtype == "bf16"):
        t = DTYPES[dtype]
        b, c = (p.astype(np.float64) for p in inputs.params)
        for _ in range(steps):
            x = (x.astype(np.float64) * b + c).astype(t)    # exact for bf16 inputs: 14 bits
            if dtype == "bf16":
                x = round_bf16(x)
        return x
    if kernel == "fma" and dtype == "int64":
        b, c = (p.view(np.uint64) for p in inputs.params)   # numpy's uint64 arithmetic wraps
        x = x.view(np.uint64)
        with np.errstate(over="ignore"):
            for _ in range(steps):
                x = x * b + c
        return x.view(np.int64)
    if kernel == "fma":
        bits = 32 if dtype == "int32" else 16
        b, c = (p.astype(np.int64) for p in inputs.params)
        x = x.astype(np.int64)
        for _ in range(steps):
            x = (x * b + c) % (1 << bits)
        return _wrap(x, bits, DTYPES[dtype])
    if kernel == "dot4x8":
        x = x.astype(np.int64)
        for _ in range(steps):
            x = (x + _sdot4x8(_wrap(x, 32, np.int32), inputs.params[0])) % (1 << 32)
        return _wrap(x, 32, np.int32)
    if kernel == "bf16dot":
        m = inputs.params.astype(np.float64)
        v = round_bf16(x).astype(np.float64)
        for _ in range(steps):
            v = round_bf16((v @ m.T).astype(np.float32)).astype(np.float64)
        return v.astype(np.float32)
    raise ValueError(f"no reference for kernel {kernel!r}")


def period(accumulators: int) -> int:
    """Threads apart whose outputs are the same: thread gid's chains start at seed rows
    (gid*A + k) % SEEDS, and a chain's value depends on nothing else."""
    return SEEDS // int(np.gcd(accumulators, SEEDS))


def matches(kernel: str, dtype: str, got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Where `got` equals the reference `want` (broadcast against it): bit for bit where the
    reference is exact, else within the type's TOLERANCE (NaN and infinities outside it)."""
    tolerance = TOLERANCE.get((kernel, dtype))
    if not tolerance:
        if got.dtype == want.dtype:       # integer compares: float16 has no fast ==
            bits = f"u{want.dtype.itemsize}"
            return got.view(bits) == want.view(bits)
        return got == want
    lo, hi = _interval(want, tolerance, got.dtype)
    return (got >= lo) & (got <= hi)


def _interval(want: np.ndarray, tolerance: float, dtype) -> tuple[np.ndarray, np.ndarray]:
    """The reference's float64 interval, its ends rounded inward to `dtype`: a value of that
    type lies inside exactly when it lies inside the float64 interval (compared without a cast)."""
    w = want.astype(np.float64)
    slack = tolerance * np.maximum(np.abs(w), 1e-30)
    lo, hi = w - slack, w + slack
    if np.dtype(dtype).kind != "f" or np.dtype(dtype).itemsize >= 8:
        return lo, hi
    t = np.dtype(dtype).type
    lo_t, hi_t = lo.astype(t), hi.astype(t)
    lo_t = np.where(lo_t < lo, np.nextafter(lo_t, t(np.inf)), lo_t)
    hi_t = np.where(hi_t > hi, np.nextafter(hi_t, t(-np.inf)), hi_t)
    return lo_t, hi_t


def compare(kernel: str, dtype: str, got: np.ndarray, want: np.ndarray) -> str | None:
    """None when `got` matches the reference, else a sentence naming the first mismatch."""
    got = np.asarray(got).reshape(want.shape)
    bad = ~matches(kernel, dtype, got, want)
    if not bad.any():
        return None
    idx = np.argwhere(bad)[0]
    return (f"{int(bad.sum())} of {bad.size} values differ from the host reference "
            f"(first at {tuple(int(i) for i in idx)}: got {got[tuple(idx)]!r}, want {want[tuple(idx)]!r})")


def check(kernel: str, dtype: str, inputs: AluInputs, accumulators: int, steps: int, got: np.ndarray) -> str | None:
    """A kernel's whole output (threads x accumulators x width, poisoned with NaN or -1 before the
    launch), every value of every thread, against the host reference. The output repeats every
    period() threads, so the reference is one period's, compared with each period of the output
    in place (no copy, no conversion); a thread that did not write fails (NaN, or -1 in every value)."""
    threads = got.shape[0]
    if not threads:
        return "the kernel's grid had no threads: no output to check"
    p = min(period(accumulators), threads)
    want = reference(kernel, dtype, inputs, accumulators, steps, np.arange(p))
    head = threads - threads % p
    if (matches(kernel, dtype, got[:head].reshape(-1, *want.shape), want).all()
            and matches(kernel, dtype, got[head:], want[:threads - head]).all()):
        return None
    if got.dtype.kind == "f" and np.isnan(got).any():
        return f"{int(np.isnan(got).any(axis=(1, 2)).sum())} of {threads} threads wrote no result"
    return compare(kernel, dtype, got, want[np.arange(threads) % p])

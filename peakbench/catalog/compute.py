"""Vector-ALU peaks: long independent dependency chains kept in registers.

Each thread keeps `accumulators` chains of `width` lanes and advances every chain `unroll` times
per loop iteration, `iterations` times (the size knob the harness calibrates); width and unroll
are per variant, so narrow vectors get a deeper unroll and every variant keeps the loop's own
instructions under one percent of the work:

    ops per thread = iterations * unroll * accumulators * ops_per_step

An item is one step of one chain (ComputeTest.per_item: ops_per_step); a launch does
threads * iterations * unroll * accumulators of them.

ops_per_step per kernel family (DESIGN.md op counting):
  fma      x = fma(x, b, c) on a width-lane vector: 2 ops per lane (a packed f16x2 FMA = 4);
           integers x = x*b + c, likewise 2 ops per lane (64-bit ones too, however many
           32-bit instructions the hardware spends on one: the count is of the source's
           multiply-adds, as vkpeak counts its int64 test).
  dot4x8   x = x + dot(bytes(x), bytes(b)) on packed 4x8-bit words: 8 ops per word.
  bf16dot  v = (dot(v, m0), dot(v, m1), ...) on an n-lane bfloat16 vector: each dot is n multiplies
           and n-1 adds, so n * (2n - 1) ops per step; no accumulate is folded in.
"""
from peakbench.catalog.descriptors import ComputeTest, Variant


def fma(width: int, unroll: int) -> Variant:
    return Variant(f"x{width}u{unroll}", width, 2 * width, unroll)


def dot4x8(words: int, unroll: int) -> Variant:
    return Variant(f"x{words}u{unroll}", words, 8 * words, unroll)


def bf16dot(n: int, unroll: int) -> Variant:
    return Variant(f"dot{n}u{unroll}", n, n * (2 * n - 1), unroll)


def _alu(name, unit, kernel, dtype, variants, description, operands, accumulators=8, packed=1, **census):
    """A vector test; `operands` and the `census` keywords (ComputeTest) are what its loop must
    compute in, as the censuses name types."""
    return ComputeTest(name, unit, kernel, dtype, tuple(variants), accumulators, description, packed,
                       operands=operands, **census)


def _no_kernel(name, unit, description):
    """A type with no native vector path in any API we drive; each backend states its reason.
    Its operand types are its own name: no module's arithmetic is of them."""
    dtype = name.split(".")[1]
    return ComputeTest(name, unit, dtype=dtype, description=description, operands=(dtype,))


TESTS = (
    _alu("compute.fp64", "TFLOPS", "fma", "fp64", [fma(1, 64), fma(2, 32)], "FP64 fused multiply-add", ("f64",),
         screen="x2u32"),
    _alu("compute.fp32", "TFLOPS", "fma", "fp32", [fma(1, 64), fma(2, 32), fma(4, 16)],
         "FP32 fused multiply-add", ("f32",)),
    _alu("compute.fp16", "TFLOPS", "fma", "fp16", [fma(2, 64), fma(4, 32)],
         "packed FP16 fused multiply-add (2 lanes per instruction)", ("f16",),
         packed=2),
    _alu("compute.bf16", "TFLOPS", "bf16dot", "bf16", [bf16dot(2, 32), bf16dot(4, 16)],
         "BF16 through the native bfloat16 dot product",
         ("bf16",)),
    _alu("compute.int32", "TOPS", "fma", "int32", [fma(1, 64), fma(4, 16)], "INT32 multiply-add", ("i32",)),
    _alu("compute.int64", "TOPS", "fma", "int64", [fma(1, 64), fma(2, 32)],
         "INT64 multiply-add, wrapping, every bit of both factors live (2 ops per multiply-add, as INT32;"
         " emulated in 32-bit steps where the ALU has no 64-bit multiplier)", ("i64",), pieces=True,
         bound_from=("compute.int32", 1, "a 64-bit multiply-add takes at least one 32-bit multiply-add instruction")),
    _alu("compute.int16", "TOPS", "fma", "int16", [fma(1, 64), fma(2, 32)], "INT16 multiply-add", ("i16",),
         widened=("i32",),
         bound_from=("compute.fp32", 2, "a 16-bit multiply-add packs at most two lanes into a 32-bit one, and no"
                                        " integer lane outruns an FP32 FMA lane")),
    _alu("compute.int8", "TOPS", "dot4x8", "int8", [dot4x8(1, 64), dot4x8(4, 16)],
         "INT8 4x8-bit dot product with 32-bit accumulate",
         ("i8x4", "i32"), required=("i8x4",),
         bound_from=("compute.fp32", 4, "a 4x8-bit dot-accumulate is 8 ops in one 32-bit lane where an FP32 FMA"
                                        " is 2, and no vector lane issues faster than an FP32 FMA lane")),
    _no_kernel("compute.fp8_e4m3", "TFLOPS", "FP8 E4M3 vector arithmetic"),
    _no_kernel("compute.fp8_e5m2", "TFLOPS", "FP8 E5M2 vector arithmetic"),
    _no_kernel("compute.int4", "TOPS", "INT4 vector arithmetic"),
    _no_kernel("compute.fp4", "TFLOPS", "FP4 vector arithmetic"),
)

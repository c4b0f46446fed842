"""What a vendor GEMM library (cuBLASLt, hipBLASLt) reaches, beside the matrix units' peak.

One test per operand type: D = A x B of large square matrices on random data, through the
library's best algorithm for the shape. A work item is one whole GEMM:

    ops per GEMM = 2 * M * N * K          (a multiply-add is 2 ops)

The accumulator is the library's compute type; the output (D's storage type) is the one the
frameworks use for the operand type (BF16 in, BF16 out, as torch.matmul does; FP8 in, BF16 out,
as torch._scaled_mm does), so the number is what an application's matrix multiply gets.
"""
from dataclasses import dataclass

from peakbench.catalog.descriptors import TestSpec, Variant

SIZE = 8192     # the default M = N = K


@dataclass(frozen=True)
class GemmTest(TestSpec):
    """A vendor GEMM. An item is one GEMM of the variant's shape; `output` is D's storage type."""
    output: str = ""
    clocked = True
    bursts = True
    tensor = True

    @property
    def types(self) -> tuple[str, str]:
        """(operand type, accumulator type), from dtype "a.c"."""
        a, c = self.dtype.split(".")
        return a, c

    @property
    def matrix(self) -> str:
        """The matrix-unit test of the same types, whose peak this GEMM is set beside."""
        return "matrix." + self.name.split(".", 1)[1]

    def per_item(self, variant: Variant) -> float:
        return variant.ops_per_step


def shape(m: int, n: int, k: int) -> Variant:
    """One GEMM of M x K by K x N: 2*M*N*K ops."""
    return Variant(f"{m}x{n}x{k}", ops_per_step=2 * m * n * k, unroll=1, shape=(m, n, k))


def _gemm(a: str, c: str, output: str, unit: str = "TFLOPS") -> GemmTest:
    return GemmTest(f"gemm.{a}.{c}", unit, "gemm", f"{a}.{c}", (shape(SIZE, SIZE, SIZE),), 1,
                    f"vendor GEMM, {a.upper()} operands, {c.upper()} accumulate, {output.upper()} out",
                    output=output)


TESTS = (
    _gemm("fp16", "fp32", "fp16"), _gemm("bf16", "fp32", "bf16"), _gemm("tf32", "fp32", "fp32"),
    _gemm("fp8_e4m3", "fp32", "bf16"), _gemm("int8", "int32", "int32", "TOPS"),
    _gemm("fp64", "fp64", "fp64"),
)

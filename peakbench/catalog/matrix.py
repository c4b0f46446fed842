"""Matrix-unit peaks (cooperative matrices, tensor cores, WMMA/MFMA).

A test names its operand and accumulator types; the shapes come from the device at run time
(each backend reports what its driver or architecture offers), and every shape is a variant.
Per step each of `accumulators` tiles takes one multiply-add of an M x K by a K x N matrix:

    ops per subgroup = iterations * unroll * accumulators * 2 * M * N * K
(per workgroup for workgroup-scope variants, where the whole workgroup shares one set of tiles).

Sparse tests (matrix.<operands>.<accumulator>.sparse, SparseMatrixTest) run A 2:4 structured-sparse
(TF32 1:2) with metadata (catalog/matrix_reference.py SparseInputs); their K is the logical K, so
2 * M * N * K counts the dense-equivalent ops, the zeros of A included, as vendor sparse peaks are
quoted.
"""
from dataclasses import dataclass

from peakbench.catalog.descriptors import MatrixTest, Variant

UNROLL = 4   # steps per loop iteration; an MMA step is long, so the loop costs nothing at 4


def shape(m: int, n: int, k: int, prefix: str = "") -> Variant:
    """A subgroup-scope shape: each subgroup owns its tiles."""
    return Variant(f"{prefix}{m}x{n}x{k}", width=1, ops_per_step=2 * m * n * k, unroll=UNROLL,
                   shape=(m, n, k), scope="subgroup")


def workgroup_shape(m: int, n: int, k: int, invocations: int, accumulators: int) -> Variant:
    """One set of tiles shared by a whole workgroup of `invocations` (named wg<invocations>:...)."""
    return Variant(f"wg{invocations}:{m}x{n}x{k}", width=1, ops_per_step=2 * m * n * k, unroll=UNROLL,
                   shape=(m, n, k), accumulators=accumulators, scope="workgroup", invocations=invocations)


def _mma(a: str, c: str, unit: str = "TFLOPS") -> MatrixTest:
    return MatrixTest(f"matrix.{a}.{c}", unit, "mma", f"{a}.{c}", (), 8,
                    f"{a.upper()} x {a.upper()} + {c.upper()} matrix multiply-accumulate")


# What a sparse test's params say it counts.
OPS_COUNTED = "dense-equivalent 2*M*N*K (K counts the zeros of the structured-sparse A)"


@dataclass(frozen=True)
class SparseMatrixTest(MatrixTest):
    """A 2:4 sparse-A matrix test; its dtype is the dense test's, so backends share the type rules."""
    sparse: bool = True
    bursts = True


def _sparse(a: str, c: str, unit: str = "TFLOPS") -> SparseMatrixTest:
    sparsity = "1:2" if a == "tf32" else "2:4"      # PTX: TF32 keeps one element of each pair
    return SparseMatrixTest(f"matrix.{a}.{c}.sparse", unit, "mma", f"{a}.{c}", (), 8,
                            f"{a.upper()} ({sparsity} sparse) x {a.upper()} + {c.upper()} matrix multiply-accumulate, "
                            f"dense-equivalent ops")


def is_sparse(test) -> bool:
    return getattr(test, "sparse", False)


DENSE = (
    _mma("fp16", "fp16"), _mma("fp16", "fp32"), _mma("bf16", "fp32"), _mma("tf32", "fp32"),
    _mma("fp8_e4m3", "fp32"), _mma("fp8_e5m2", "fp32"), _mma("int8", "int32", "TOPS"),
    _mma("int4", "int32", "TOPS"), _mma("fp4", "fp32"), _mma("fp64", "fp64"),
)
SPARSE = (
    _sparse("fp16", "fp16"), _sparse("fp16", "fp32"), _sparse("bf16", "fp32"), _sparse("tf32", "fp32"),
    _sparse("fp8_e4m3", "fp32"), _sparse("fp8_e5m2", "fp32"), _sparse("int8", "int32", "TOPS"),
)
TESTS = DENSE + SPARSE

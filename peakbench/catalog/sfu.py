"""Special-function units: long independent chains of one approximate hardware function each
(reciprocal, reciprocal square root, square root, base-2 exponential and logarithm, sine).

Each thread keeps `accumulators` chains and advances every chain `unroll` times per loop
iteration, `iterations` times; a step is one call of the function and one FMA that keeps the
chain in range (workloads/sfu.py):

    results per thread = iterations * unroll * accumulators

An item is one step of one chain and counts 1 op: one function result (SfuTest.per_item). The
FMA of each step is not counted; it runs on the FMA pipe, which on every GPU peakbench knows
has several times the special-function rate (Hopper: 128 FP32 lanes per SM against 16
special-function results per SM per clock), so the function stays the bottleneck.
"""
from dataclasses import dataclass

from peakbench.catalog.descriptors import TestSpec, Variant


@dataclass(frozen=True)
class SfuTest(TestSpec):
    """One special function; `function` names it for the kernels (rcp, rsqrt, sqrt, exp2, log2, sin)."""
    clocked = True

    def operand_types(self, variant: Variant | None = None) -> tuple[str, ...]:
        return ("f32",)         # every function here is the FP32 one: a half- or double-precision path is another

    @property
    def function(self) -> str:
        return self.name.split(".")[1]

    def per_item(self, variant: Variant) -> float:
        return variant.ops_per_step


def chains(accumulators: int, unroll: int) -> Variant:
    return Variant(f"a{accumulators}u{unroll}", 1, 1, unroll, accumulators=accumulators)


VARIANTS = (chains(8, 32), chains(16, 16))


def _sfu(function: str, description: str, **bound) -> SfuTest:
    return SfuTest(f"sfu.{function}", "TOPS", "sfu", "fp32", VARIANTS, 8, description, **bound)


TESTS = (
    _sfu("rcp", "FP32 reciprocal 1/x, the approximate hardware path (1 op per result)"),
    _sfu("rsqrt", "FP32 reciprocal square root, the approximate hardware path (1 op per result)"),
    _sfu("sqrt", "FP32 square root, the approximate hardware path (1 op per result)",
         bound_from=("sfu.rsqrt", 1, "a square root issues at least one special-function instruction, as rsqrt")),
    _sfu("exp2", "FP32 base-2 exponential, the approximate hardware path (1 op per result)"),
    _sfu("log2", "FP32 base-2 logarithm, the approximate hardware path (1 op per result)"),
    _sfu("sin", "FP32 sine, the approximate hardware path (1 op per result)"),
)

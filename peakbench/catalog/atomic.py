"""Atomic read-modify-write throughput: 32-bit adds on global memory (each thread its own
address, or one address per warp/wavefront) and on shared memory (each thread its own address).

Each thread does `unroll` atomic adds per loop iteration, `iterations` times (workloads/atomic.py):

    atomic operations per thread = iterations * unroll

An item is one atomic add of one thread and counts 1 op (AtomicTest.per_item). Variants: the
element type, u32 everywhere and f32 where the API and hardware add floats natively.
"""
from dataclasses import dataclass

from peakbench.catalog.descriptors import TestSpec, Variant

UNROLL = 16


@dataclass(frozen=True)
class AtomicTest(TestSpec):
    """`space`: global or shared memory; `contended`: one address per warp/wavefront."""
    space: str = "global"
    contended: bool = False

    @property
    def clocked(self) -> bool:
        """Shared-memory atomics run at the core clock (their bound is the banks' word a clock)."""
        return self.space == "shared"

    def operand_types(self, variant: Variant | None = None) -> tuple[str, ...]:
        """A variant's add is of its element type: an integer add where the variant claims a float
        one, or a 64-bit one, is another test's work. A 32-bit integer add is the same bits signed
        or not (SPIR-V's OpAtomicIAdd on an int is i32)."""
        if variant is None:
            return ()
        return ("u32", "i32") if variant.name == "u32" else (variant.name,)

    def per_item(self, variant: Variant) -> float:
        return variant.ops_per_step


def element(dtype: str) -> Variant:
    return Variant(dtype, 1, 1, UNROLL)


VARIANTS = (element("u32"), element("f32"))


def _atomic(name: str, space: str, contended: bool, description: str, **bound) -> AtomicTest:
    # screened on every variant: u32 and f32, whichever the backend runs faster (runner.SCREEN_ALL)
    return AtomicTest(name, "GOPS", "atomic", "u32", VARIANTS, 1, description, space, contended, screen="*",
                      **bound)


# A global atomic sends its 4-byte operand from the core through the L1/shared-memory data path
# (then to the L2, where it is done): at most that path's bytes a clock, a quarter of them in adds.
GLOBAL_BOUND = ("memory.shared", 0.25, "each add sends its 4-byte operand through the cores' L1/shared-memory"
                                       " data path, at most its bytes a clock")

TESTS = (
    _atomic("atomic.global_add", "global", False,
            "32-bit atomic add to global memory, each thread its own address (1 op per add)",
            bound_from=GLOBAL_BOUND),
    _atomic("atomic.global_add_contended", "global", True,
            "32-bit atomic add to global memory, one address per warp/wavefront (1 op per add)",
            bound_from=GLOBAL_BOUND),
    _atomic("atomic.shared_add", "shared", False,
            "32-bit atomic add to shared memory / LDS, each thread its own address (1 op per add)",
            bound_from=("memory.shared", 0.25, "each add reads and writes a 4-byte word of a bank, at most one a bank and clock")),
)

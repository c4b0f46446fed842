"""The test descriptors: what a test runs (its kernel family, element type, variants) and what one
work item of it is worth (`per_item`). Each family module of the catalog builds its tests from
these."""
from __future__ import annotations

from dataclasses import dataclass, field

# The operand types a vector test's kernel may do its arithmetic in, by its dtype, as the loop
# censuses name them (the work and types guards read these; the 4x8-bit dot product accumulates
# into 32-bit integers). A dtype of the catalog missing here fails its types guard.
OPERAND_TYPES = {"fp64": ("f64",), "fp32": ("f32",), "fp16": ("f16",), "bf16": ("bf16",), "int32": ("i32",),
                 "int64": ("i64",), "int16": ("i16",), "int8": ("i8x4", "i32"),
                 # no vector kernel anywhere: no module's arithmetic is of these types
                 "fp8_e4m3": ("fp8_e4m3",), "fp8_e5m2": ("fp8_e5m2",), "int4": ("int4",), "fp4": ("fp4",)}
# The type a loop must hold where OPERAND_TYPES admits more than one (an INT8 test whose loop only
# multiplies 32-bit integers is no dot product).
REQUIRED_TYPES = {"int8": ("i8x4",)}


@dataclass(frozen=True)
class Variant:
    """One way to run a test (vector width, formulation); the best variant is the test's value."""
    name: str
    width: int = 1            # lanes per accumulator (vector components or packed words)
    ops_per_step: int = 2     # ops one accumulator does per step (FMA on a scalar = 2)
    unroll: int = 16          # steps per loop iteration: loop overhead is amortized over
                              # unroll * accumulators steps, code size grows with it
    shape: tuple = ()         # (M, N, K) of a matrix variant
    accumulators: int = 0     # overrides the test's accumulators where a variant needs fewer
    scope: str = ""           # matrix variants: "subgroup", "workgroup" or "warpgroup" (CUDA wgmma)
    invocations: int = 0      # workgroup scope: the invocations that share one set of tiles


@dataclass(frozen=True)
class TestSpec:
    name: str                  # <family>.<type>[.<accumulator>]
    unit: str                  # TFLOPS, TOPS, GB/s, ns, us
    kernel: str = ""           # kernel family ("fma", "dot4x8", "bf16dot", "mma"); "" = no kernel
    dtype: str = ""            # element type; "a.c" (operands.accumulator) for matrix tests
    variants: tuple[Variant, ...] = ()   # empty for matrix tests: the device lists its shapes
    accumulators: int = 8
    description: str = ""
    # The variant --quick runs, where the first listed is not the one expected fastest ("": the
    # first; matrix tests, whose variants the device lists: the shape with the most work a step).
    screen: str = field(default="", kw_only=True)
    # The GPU's own figure (a spec entry's field) that is this test's peak where the entry names
    # none for it: a DRAM stream's is memory_bandwidth_gbs, whatever its mode or layout.
    peak_from: str = field(default="", kw_only=True)

    @property
    def family(self) -> str:
        return self.name.split(".")[0]

    @property
    def higher_is_better(self) -> bool:
        return self.unit not in ("ns", "us")

    def per_item(self, variant: Variant) -> float:
        """The unit's numerator (ops, bytes, loads, launches) one work item of `variant` counts;
        each family's descriptor says (a bare TestSpec counts an item as one unit of work)."""
        return 1


@dataclass(frozen=True)
class ComputeTest(TestSpec):
    """Vector ALU. An item is one step of one accumulator chain in one thread. `packed`: the
    lanes one instruction must work on (a packed FP16 test's arithmetic is f16x2 or wider)."""
    packed: int = 1

    def per_item(self, variant: Variant) -> float:
        return variant.ops_per_step


@dataclass(frozen=True)
class MatrixTest(TestSpec):
    """Matrix units. An item is one step of one accumulator tile of one tile owner."""

    @property
    def types(self) -> tuple[str, str]:
        """(operand type, accumulator type), from dtype "a.c"."""
        a, c = self.dtype.split(".")
        return a, c

    def per_item(self, variant: Variant) -> float:
        return variant.ops_per_step


@dataclass(frozen=True)
class MemoryTest(TestSpec):
    """Streams. An item is one vector of one pass over the buffer: `access_bytes` moved by each
    of `streams` (copy reads and writes: 2)."""
    access_bytes: int = 16
    streams: int = 1

    def per_item(self, variant: Variant) -> float:
        return self.access_bytes * self.streams


@dataclass(frozen=True)
class LatencyTest(TestSpec):
    """Load latency. An item is one dependent load."""

    def per_item(self, variant: Variant) -> float:
        return 1


@dataclass(frozen=True)
class LaunchTest(TestSpec):
    """Launch overhead. An item is one launch."""

    def per_item(self, variant: Variant) -> float:
        return 1

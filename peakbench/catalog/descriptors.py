"""The test descriptors: what a test runs (its kernel family, element type, variants) and what one
work item of it is worth (`per_item`). Each family module of the catalog builds its tests from
these."""
from __future__ import annotations

from dataclasses import dataclass, field

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
    # Where the vendor publishes no peak, the test whose peak bounds this one: (test, factor, why).
    # Not a peak (no % of spec), a ceiling the guards hold the value under.
    bound_from: tuple = field(default=(), kw_only=True)

    # Whether the test's peak scales with the core clock (arithmetic, shared memory); DRAM, caches
    # in their own clock domain, the host link and latencies do not.
    clocked = False
    # Whether a power cap holds the work down after its first second or two (GEMM, sparse matrix
    # units): its first launches are kept beside the sustained value (the burst, as GEMM
    # benchmarks time a few products), and the default suite rests the GPU before the test.
    bursts = False
    # Whether the work runs on the matrix (tensor) units: a tensor test's warm-up is shared only
    # with tensor tests before it. At the same clock, the tensor rate steps up 2-2.5% some 100-150 ms
    # into tensor work that follows other work, and not after tensor work (PERFORMANCE_ANALYSIS.md,
    # "The tensor rate's first 150 ms").
    tensor = False

    @property
    def family(self) -> str:
        return self.name.split(".")[0]

    @property
    def higher_is_better(self) -> bool:
        return self.unit not in ("ns", "us")

    def operand_types(self, variant: Variant | None = None) -> tuple[str, ...]:
        """The types, as censuses name them, the loop of `variant` must compute in (the types
        guard); empty where none are known. A family whose variants are types says so per variant."""
        return ()

    def per_item(self, variant: Variant) -> float:
        """The unit's numerator (ops, bytes, loads, launches) one work item of `variant` counts;
        each family's descriptor says (a bare TestSpec counts an item as one unit of work)."""
        return 1


@dataclass(frozen=True)
class ComputeTest(TestSpec):
    """Vector ALU. An item is one step of one accumulator chain in one thread. `packed`: the
    lanes one instruction must work on (a packed FP16 test's arithmetic is f16x2 or wider).

    What the work and types guards hold a loop census against, as censuses name types:
    `operands`, the types its arithmetic may be in (the 4x8-bit dot product accumulates into
    32-bit integers; a test without them fails its types guard); `required`, the one it must
    hold where several are admitted (an INT8 loop that only multiplies 32-bit integers is no dot
    product); `widened`, the type machine code (not SPIR-V) computes in where the hardware has
    no instruction of the width (NVIDIA has no 16-bit integer multiply-add: IMAD on 32-bit
    registers is exact in the low 16 bits); `pieces`, machine code computes it in 32-bit
    pieces, so no instruction is one step and the census is no count of steps (a 64-bit
    multiply-add is IMAD.WIDE.U32 + 2 IMAD + IADD3 in SASS)."""
    packed: int = 1
    operands: tuple[str, ...] = field(default=(), kw_only=True)
    required: tuple[str, ...] = field(default=(), kw_only=True)
    widened: tuple[str, ...] = field(default=(), kw_only=True)
    pieces: bool = field(default=False, kw_only=True)
    clocked = True

    def operand_types(self, variant: Variant | None = None) -> tuple[str, ...]:
        return self.operands

    def per_item(self, variant: Variant) -> float:
        return variant.ops_per_step


@dataclass(frozen=True)
class MatrixTest(TestSpec):
    """Matrix units. An item is one step of one accumulator tile of one tile owner."""
    clocked = True
    tensor = True

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
    of its `reads` and `writes` (a copy reads one and writes one: 2). `overwrites`: a write
    replaces the old contents whatever they were (the coverage guard proves every vector
    written by running a pass over two different prior contents); `shared_memory`: the
    on-chip shared memory, whose bandwidth scales with the core clock."""
    access_bytes: int = 16
    reads: int = field(default=1, kw_only=True)
    writes: int = field(default=0, kw_only=True)
    overwrites: bool = field(default=True, kw_only=True)
    shared_memory: bool = field(default=False, kw_only=True)

    @property
    def streams(self) -> int:
        return self.reads + self.writes

    @property
    def clocked(self) -> bool:
        return self.shared_memory

    @property
    def bytes_counted(self) -> str:
        """What the bytes counted are, as the result's params say."""
        return " + ".join(what if n == 1 else f"{what} x{n}"
                          for what, n in (("read", self.reads), ("written", self.writes)) if n)

    def per_item(self, variant: Variant) -> float:
        return self.access_bytes * self.streams


@dataclass(frozen=True)
class LatencyTest(TestSpec):
    """Load latency. An item is one dependent load."""

    def per_item(self, variant: Variant) -> float:
        return 1


@dataclass(frozen=True)
class SmTest(TestSpec):
    """A per-SM map (workloads/sm.py): each compute unit's value, the slowest unit's the test's.
    An item is one FMA of one invocation (2 ops) or one dependent load. `per_unit_of`: the
    device-wide test whose peak over the unit count bounds one unit's rate."""
    per_unit_of: str = field(default="", kw_only=True)

    def per_item(self, variant: Variant) -> float:
        return 1 if self.unit == "ns" else 2


@dataclass(frozen=True)
class LaunchTest(TestSpec):
    """Launch overhead. An item is one launch."""

    def per_item(self, variant: Variant) -> float:
        return 1

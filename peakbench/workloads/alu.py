"""The vector ALU, written once: long independent dependency chains kept in registers, on any
runtime. The backend names the kernel (source, entry point, defines) for a test and variant in an
AluKernel; the buffers, the grid, the op count and the check against catalog/alu_reference.py
are the same on every API."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from peakbench.backend import release, release_on_failure
from peakbench.catalog import alu_reference as ref
from peakbench.harness import guards
from peakbench.workload import Workload
from peakbench.workloads.witness import Witness

LOCAL = 256                # threads per workgroup
WAVES = 4                  # the grid fills the device this many times over
# What every ALU kernel takes from the host's reference, on every API: the seed rows that come
# before the parameters in the input buffer.
DEFINES = {"SEEDS": ref.SEEDS}
# Loop iterations the output is checked after: every chain still moves at 2 (the float chains are
# far from a fixed point, catalog/alu_reference.py's inputs), so a loop doing half fails.
VERIFY_ITERATIONS = (1, 2)


@dataclass(frozen=True)
class AluKernel:
    """What one API runs for a vector-ALU variant: `family` is the kernel family whose
    reference checks it (fma, dot4x8, bf16dot), `params` and `evidence` what the API adds to
    the JSON (the source named its way). `bf16_words`: bfloat16 elements travel as 16-bit
    words (the CUDA-dialect kernels), else as float32."""
    source: str
    entry: str
    family: str
    defines: dict
    params: dict = field(default_factory=dict)
    evidence: dict = field(default_factory=dict)
    bf16_words: bool = False


def encode(values: np.ndarray, dtype: str, bf16_words: bool) -> bytes:
    if dtype == "bf16" and bf16_words:     # float32 values exact in bfloat16: keep their upper 16 bits
        return (ref.round_bf16(values).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return np.ascontiguousarray(values).tobytes()


def decode(raw, dtype: str, bf16_words: bool) -> np.ndarray:
    """A download's values in the reference's dtype: a view of it, or one widened copy for
    bfloat16 words."""
    if dtype == "bf16" and bf16_words:
        wide = np.frombuffer(raw, np.uint16).astype(np.uint32)
        wide <<= 16
        return wide.view(np.float32)
    return np.frombuffer(raw, ref.DTYPES[dtype])


def itemsize(dtype: str, bf16_words: bool) -> int:
    return 2 if dtype == "bf16" and bf16_words else np.dtype(ref.DTYPES[dtype]).itemsize


class AluWorkload(Workload):
    """One vector-ALU variant: its kernel, input and output buffers. An item is one step of one
    accumulator chain in one thread."""

    @release_on_failure
    def __init__(self, test, variant, rt, kernel: AluKernel):
        self.test, self.variant, self.rt, self.name = test, variant, rt, variant.name
        self.family, self.bf16_words = kernel.family, kernel.bf16_words
        local = min(LOCAL, rt.limits.max_block)
        self.kernel = rt.compile(kernel.source, {**kernel.defines, **DEFINES}, kernel.entry, block=local, args="bbbu",
                                 label=f"{test.name}-{variant.name}")
        self.groups = max(1, rt.grid_threads(WAVES) // local)
        self.threads = self.groups * local
        self.inputs = ref.make_inputs(kernel.family, test.dtype, variant.width)
        self.out_shape = (test.accumulators, variant.width)
        data = (encode(self.inputs.seeds, test.dtype, self.bf16_words)
                + encode(self.inputs.params, test.dtype, self.bf16_words))
        self.inp = rt.alloc(len(data))
        self.out = rt.alloc(self.threads * int(np.prod(self.out_shape)) * itemsize(test.dtype, self.bf16_words))
        rt.upload(self.inp, data)
        self.witness = Witness(rt)
        self.params = {"variant": variant.name, **kernel.params, "workgroup_size": local, "workgroups": self.groups,
                       "threads": self.threads, "accumulators": test.accumulators, "unroll": variant.unroll,
                       "width": variant.width, "ops_per_step": variant.ops_per_step}
        if rt.arch:
            self.params["arch"] = rt.arch
        self.evidence = {**rt.evidence(self.kernel), **kernel.evidence}
        census = getattr(rt, "census", None)
        self.census = census(self.kernel, "pieces" if test.pieces else "arithmetic") if census else None
        self.loop_items = variant.unroll * test.accumulators     # items one invocation does per iteration

    def run(self, size: int) -> float:
        return self.witness.launch(self.kernel, self.groups, [self.out, self.inp], [np.uint32(size)])

    def items(self, size: int) -> int:
        return self.threads * size * self.variant.unroll * self.test.accumulators

    def verify(self) -> str | None:
        """One, then two loop iterations on the full grid, output poisoned first, recomputed on
        the host (exactly, except the float64 FMA and the bfloat16 dot product:
        alu_reference.TOLERANCE): a loop that runs fewer iterations than it is given fails the
        second (guard iterations)."""
        def check(n: int) -> str | None:
            self.rt.fill(self.out, 0xFF)                 # NaN for floats, -1 for integers
            self.run(n)
            got = decode(self.rt.download(self.out), self.test.dtype, self.bf16_words)
            return ref.check(self.family, self.test.dtype, self.inputs, self.test.accumulators,
                             n * self.variant.unroll, got.reshape(self.threads, *self.out_shape))
        return guards.at_counts(VERIFY_ITERATIONS, check, "iterations", self.evidence)

    def close(self) -> None:
        release(self, self.rt.free, "inp", "out")
        release(self, Witness.close, "witness")
        release(self, self.rt.discard, "kernel")

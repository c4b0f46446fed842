"""Special-function throughput, written once: long independent chains of one approximate hardware
function, on any runtime. The backend names the kernel (source, entry, defines) and the error
bound of its function in an SfuKernel; the buffers, the grid, the items and the check against
the host reference are the same on every API.

The kernels' contract (shaders/sfu.comp, shaders/sfu.cu): per thread `gid`, chain k starts at
seeds[(gid*ACC + k) % SEEDS]; each step does t = fma(t, m, d) once, then for every chain
x = fma(F(x), a[k], t); the thread stores chain k at out[gid*ACC + k]. The input buffer is
float32: SEEDS seeds, ACC multipliers a[k], then t0, m, d.

Why the numbers: each function's chain stays in a range where F is smooth and |a F'| <= L < 1,
so an approximation error of F in one step shrinks in the next and the chain's error stays under
(a * error of F + rounding) / (1 - L), which the check allows twice over. A contracting chain
alone would settle on its fixed point and forget how many steps it took; t moves that fixed
point: it walks from t0 = lo to lo + 1 by 1/64 of the remaining way per step (exact in float32:
m and d have few significant bits), so the output after n steps depends on n. The multipliers
differ per chain (a[k] = 1/4 + k/(4*ACC)), so each chain has its own path and a kernel that
computes one chain and stores it for all fails.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from peakbench.backend import release, release_on_failure
from peakbench.harness import guards
from peakbench.workload import Workload
from peakbench.workloads.witness import Witness

SEEDS = 256
LOCAL = 256                # threads per workgroup
WAVES = 4                  # the grid fills the device this many times over
VERIFY_ITERATIONS = (1, 2)
VERIFY_THREADS = 4096      # threads whose output the host recomputes (spread over the grid)
M = 1 - 2.0 ** -6          # t's step: t = t * M + (lo + 1) * (1 - M)
MARGIN = 2                 # the tolerance over the error bound


@dataclass(frozen=True)
class Function:
    """A function's reference (float64), its chain's range and contraction: seeds in
    [lo, lo + span), t from lo to lo + 1, and |a F'(x)| <= contraction on the chain's range."""
    reference: object
    lo: float
    span: float
    contraction: float


FUNCTIONS = {
    "rcp": Function(lambda x: 1.0 / x, 1.0, 2.0, 0.5),                 # x in [1, 3]: |F'| = 1/x^2 <= 1
    "rsqrt": Function(lambda x: 1.0 / np.sqrt(x), 1.0, 2.0, 0.25),     # |F'| = x^-1.5 / 2 <= 1/2
    "sqrt": Function(np.sqrt, 1.0, 2.0, 0.25),                         # |F'| = x^-0.5 / 2 <= 1/2
    "exp2": Function(np.exp2, -2.0, 1.5, 0.35),                        # x in [-2, -0.5]: |F'| <= ln2 / sqrt2
    "log2": Function(np.log2, 1.0, 2.0, 0.73),                         # |F'| = 1 / (x ln2) <= 1.443
    "sin": Function(np.sin, 0.5, 1.5, 0.5),                            # x in [0.5, 2]: |F'| = |cos x| <= 1
}
A_MAX = 0.5                # a[k] < 1/2
ROUNDING = 2.0 ** -22      # half an ulp of float32 at |x| < 4: the FMA's rounding


@dataclass(frozen=True)
class SfuKernel:
    """What one API runs for a special function: `error` is the absolute error bound of its F on
    the chain's range (the API's documented accuracy, `error_source` says where), `instruction`
    the opcode its machine code must show where the platform disassembles (e.g. MUFU.RCP)."""
    source: str
    entry: str
    defines: dict
    error: float
    error_source: str
    instruction: str = ""
    params: dict = field(default_factory=dict)
    evidence: dict = field(default_factory=dict)


def defines(function: str) -> dict:
    return {f"FN_{function.upper()}": 1}


@dataclass(frozen=True)
class SfuInputs:
    seeds: np.ndarray      # (SEEDS,) float32
    a: np.ndarray          # (ACC,) float32
    tmd: np.ndarray        # t0, m, d as float32

    def buffer(self) -> bytes:
        return self.seeds.tobytes() + self.a.tobytes() + self.tmd.tobytes()


def make_inputs(function: str, accumulators: int) -> SfuInputs:
    f = FUNCTIONS[function]
    i = np.arange(SEEDS)
    seeds = (f.lo + f.span * ((i * 37) % SEEDS) / SEEDS).astype(np.float32)     # exact: span * j / 256
    a = (0.25 + 0.25 * np.arange(accumulators) / accumulators).astype(np.float32)
    tmd = np.array([f.lo, M, (f.lo + 1) * (1 - M)], dtype=np.float32)
    return SfuInputs(seeds, a, tmd)


def reference(function: str, inputs: SfuInputs, steps: int, thread_ids: np.ndarray) -> np.ndarray:
    """The stored chains, (len(thread_ids), ACC) float32: F exact in float64 and rounded to
    float32, each FMA rounded once (its float64 result is exact for these operands)."""
    return references(function, inputs, (steps,), thread_ids)[steps]


def references(function: str, inputs: SfuInputs, steps: tuple[int, ...], thread_ids: np.ndarray) -> dict:
    """reference() after each count of `steps`, from one walk of the chains to the longest."""
    f, acc = FUNCTIONS[function], len(inputs.a)
    rows = (thread_ids[:, None] * acc + np.arange(acc)) % SEEDS
    x = inputs.seeds[rows].astype(np.float64)
    a = inputs.a.astype(np.float64)
    t, m, d = (float(v) for v in inputs.tmd)
    out = {0: x.astype(np.float32)} if 0 in steps else {}
    for step in range(1, max(steps) + 1):
        t = float(np.float32(t * m + d))
        fx = f.reference(x).astype(np.float32).astype(np.float64)
        x = (fx * a + t).astype(np.float32).astype(np.float64)
        if step in steps:
            out[step] = x.astype(np.float32)
    return out


def tolerance(function: str, error: float) -> float:
    """The absolute difference a chain may show: what one step's error grows to under contraction."""
    return MARGIN * (A_MAX * error + ROUNDING) / (1 - FUNCTIONS[function].contraction)


def compare(function: str, error: float, got: np.ndarray, want: np.ndarray) -> str | None:
    tol = tolerance(function, error)
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    bad = ~np.isfinite(got) | (diff > tol)
    if not bad.any():
        return None
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {bad.size} values differ from the host reference by more than "
            f"{tol:.3g} (first at {idx}: got {got[idx]!r}, want {want[idx]!r})")


def sampled(threads: int) -> np.ndarray:
    """The threads recomputed on the host: up to VERIFY_THREADS, spread over the grid."""
    return np.unique(np.linspace(0, threads - 1, min(VERIFY_THREADS, threads)).astype(np.int64))


def check(function: str, error: float, inputs: SfuInputs, steps: int, got: np.ndarray,
          want: np.ndarray | None = None) -> str | None:
    """A kernel's whole output (threads x ACC, poisoned with NaN before the launch): every thread
    wrote, and the sampled() threads match the host reference (`want`, where it is at hand)."""
    threads = got.shape[0]
    if np.isnan(got).any():
        return f"{int(np.isnan(got).any(axis=1).sum())} of {threads} threads wrote no result"
    ids = sampled(threads)
    if want is None:
        want = reference(function, inputs, steps, ids)
    return compare(function, error, got[ids], want)


def machine_code(kernel: SfuKernel, evidence: dict) -> str | None:
    """Where the platform gave an instruction mix, the function's instruction is in it."""
    mix = evidence.get("instruction_mix")
    if not mix or not kernel.instruction:
        return None
    if any(op == kernel.instruction or op.startswith((kernel.instruction + ".", kernel.instruction + "_"))
           for op in mix):
        return None
    return f"the kernel's machine code has no {kernel.instruction} (its mix: {mix})"


class SfuWorkload(Workload):
    """One special function's variant: its kernel, input and output buffers. An item is one step of
    one chain in one thread: one function result."""

    @release_on_failure
    def __init__(self, test, variant, rt, kernel: SfuKernel):
        self.test, self.variant, self.rt, self.name = test, variant, rt, variant.name
        self.function, self.sfu = test.function, kernel
        self.accumulators = variant.accumulators or test.accumulators
        local = min(LOCAL, rt.limits.max_block)
        settings = {**kernel.defines, "ACC": self.accumulators, "UNROLL": variant.unroll, "SEEDS": SEEDS}
        self.kernel = rt.compile(kernel.source, settings, kernel.entry, block=local, args="bbbu",
                                 label=f"{test.name}-{variant.name}")
        self.groups = max(1, rt.grid_threads(WAVES) // local)
        self.threads = self.groups * local
        self.inputs = make_inputs(self.function, self.accumulators)
        data = self.inputs.buffer()
        self.inp = rt.alloc(len(data))
        self.out = rt.alloc(self.threads * self.accumulators * 4)
        rt.upload(self.inp, data)
        self.witness = Witness(rt)
        self.params = {"variant": variant.name, **kernel.params, "workgroup_size": local, "workgroups": self.groups,
                       "threads": self.threads, "accumulators": self.accumulators, "unroll": variant.unroll,
                       "counted": "1 op per function result (the FMA of each step is not counted)"}
        if rt.arch:
            self.params["arch"] = rt.arch
        self.evidence = {**rt.evidence(self.kernel), **kernel.evidence,
                         "accuracy": f"{kernel.error:.3g} absolute ({kernel.error_source}); checked within "
                                     f"{tolerance(self.function, kernel.error):.3g}"}
        self.census, self.loop_items = rt.census(self.kernel, "special"), variant.unroll * self.accumulators

    def run(self, size: int) -> float:
        return self.witness.launch(self.kernel, self.groups, [self.out, self.inp], [np.uint32(size)])

    def items(self, size: int) -> int:
        return self.threads * size * self.variant.unroll * self.accumulators

    def verify(self) -> str | None:
        """The machine code shows the function's instruction (where the platform shows it); one,
        then two loop iterations on the full grid, output poisoned first, recomputed on the host
        within the function's documented accuracy (guard iterations)."""
        problem = machine_code(self.sfu, self.evidence)
        if problem:
            return problem
        unroll = self.variant.unroll
        wants = references(self.function, self.inputs, tuple(n * unroll for n in VERIFY_ITERATIONS),
                           sampled(self.threads))

        def check_after(n: int) -> str | None:
            self.rt.fill(self.out, 0xFF)                 # NaN
            self.run(n)
            got = np.frombuffer(self.rt.download(self.out), np.float32).reshape(self.threads, self.accumulators)
            return check(self.function, self.sfu.error, self.inputs, n * unroll, got, wants[n * unroll])
        return guards.at_counts(VERIFY_ITERATIONS, check_after, "iterations", self.evidence)

    def close(self) -> None:
        release(self, self.rt.free, "inp", "out")
        release(self, Witness.close, "witness")
        release(self, self.rt.discard, "kernel")

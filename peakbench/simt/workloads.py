"""Vector-ALU, memory, latency and launch workloads for CUDA and HIP, on any simt Runtime.

The kernels are shaders/alu.cu and shaders/mem.cu; the host references are the ones the Vulkan
kernels answer to (catalog/alu_reference.py, harness/sweeps.py), so the backends check the same
numbers the same way.
"""
from __future__ import annotations


import numpy as np

from peakbench.backend import Unsupported, release, release_on_failure
from peakbench.catalog import TestSpec, Variant
from peakbench.catalog import alu_reference as ref
from peakbench.catalog.compute import fma
from peakbench.harness import sweeps
from peakbench.harness.runner import VariantResult
from peakbench.simt.listing import instruction_mix as listing_mix
from peakbench.simt.runtime import Runtime
from peakbench.sources import SHADERS

BLOCK = sweeps.STREAM_BLOCK
WAVES = 4                  # the ALU grid fills the device this many times over

# Per element type: the C type one instruction works on, and the lanes it holds.
ELEMENTS = {"fp64": ("double", 1), "fp32": ("float", 1), "fp16": ("__half2", 2), "bf16": ("bfloat162", 2),
            "int32": ("int", 1), "int16": ("short", 1), "int8": ("int", 1)}
# CUDA has a native packed bfloat16 FMA (HFMA2.BF16), so compute.bf16 runs the fma family here,
# not Vulkan's bfloat16 dot product (the ROCm targets without one say so: rocm/targets.py).
BF16_VARIANTS = (fma(2, 64), fma(4, 32))
CHASE_PATH = {"cuda": "ld.global.ca (L1-cached global loads, vector memory), one thread",
              "hip": "global_load with the address in a VGPR (vector memory, not s_load), one lane"}


def source(name: str) -> str:
    return (SHADERS / name).read_text()


def variants(test: TestSpec) -> tuple[Variant, ...]:
    return BF16_VARIANTS if test.name == "compute.bf16" else test.variants


def kernel_family(test: TestSpec) -> str:
    return "fma" if test.name == "compute.bf16" else test.kernel


def _encode(dtype: str, values: np.ndarray) -> bytes:
    if dtype == "bf16":        # float32 values exact in bfloat16: keep their upper 16 bits
        return (ref.round_bf16(values).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    return np.ascontiguousarray(values).tobytes()


def _decode(dtype: str, raw: bytes) -> np.ndarray:
    if dtype == "bf16":
        return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.frombuffer(raw, ref.DTYPES[dtype])


class AluWorkload:
    """One vector-ALU variant of shaders/alu.cu: its kernel, buffers and op count."""

    @release_on_failure
    def __init__(self, test: TestSpec, variant: Variant, rt: Runtime):
        self.test, self.variant, self.rt, self.name = test, variant, rt, variant.name
        self.kernel_family = kernel_family(test)
        element, lanes = ELEMENTS[test.dtype]
        defines = {"E": element, "STEP_DOT4X8": int(self.kernel_family == "dot4x8"),
                   "VEC": variant.width // lanes, "ACC": test.accumulators, "UNROLL": variant.unroll}
        self.kernel = rt.compile(source("alu.cu"), defines, "alu")
        lim = rt.limits
        self.blocks = max(1, lim.units * lim.threads_per_unit * WAVES // BLOCK)
        self.threads = self.blocks * BLOCK
        self.inputs = ref.make_inputs(self.kernel_family, test.dtype, variant.width)
        data = _encode(test.dtype, self.inputs.seeds) + _encode(test.dtype, self.inputs.params)
        self.out_shape = (test.accumulators, variant.width)
        self.itemsize = 2 if test.dtype in ("fp16", "bf16", "int16") else (8 if test.dtype == "fp64" else 4)
        self.inp = rt.alloc(len(data))
        self.out = rt.alloc(self.threads * int(np.prod(self.out_shape)) * self.itemsize)
        rt.upload(self.inp, data)
        self.params = {"variant": variant.name, "kernel": f"alu.cu ({self.kernel_family}, {element})",
                       "block": BLOCK, "blocks": self.blocks, "threads": self.threads,
                       "accumulators": test.accumulators, "unroll": variant.unroll, "width": variant.width,
                       "ops_per_step": variant.ops_per_step, "arch": rt.arch}
        self.evidence = machine_code(rt, self.kernel)

    def run(self, size: int) -> float:
        return self.rt.launch(self.kernel, self.blocks, BLOCK, [self.out, self.inp, np.uint32(size)])

    def work(self, size: int) -> float:
        return float(self.threads) * size * self.variant.unroll * self.test.accumulators * self.variant.ops_per_step

    def verify(self) -> str | None:
        """One loop iteration on the full grid, output poisoned first, recomputed on the host
        (exactly, except float64: alu_reference.TOLERANCE)."""
        self.rt.fill(self.out, 0xFF)                 # NaN for floats, -1 for integers
        self.run(1)
        got = _decode(self.test.dtype, self.rt.download(self.out)).reshape(self.threads, *self.out_shape)
        return ref.check(self.kernel_family, self.test.dtype, self.inputs, self.test.accumulators,
                         self.variant.unroll, got)

    def close(self) -> None:
        release(self, self.rt.free, "inp", "out")


def machine_code(rt: Runtime, kernel) -> dict:
    """The instruction mix of a kernel, where the platform's disassembler is installed."""
    listing = rt.disassemble(kernel)
    if not listing:
        return {}
    return {"instruction_mix": listing_mix(listing), "isa": rt.arch}


def working_bytes(rt: Runtime) -> int:
    return int(min(sweeps.STREAM_BYTES, rt.limits.memory_bytes // 4))


class StreamWorkload:
    """memory.read / write / copy on one large buffer pair of random words. The chunk and stride
    reads are a grid resident all at once (READ_BLOCKS_PER_UNIT blocks per SM/CU) looping over
    the buffer `size` times in the kernel, so a line is reread only after the rest of the buffer
    went by (vulkan/memory.py says more); the rows read launches `size` * columns short-lived
    blocks, taken in order, write and copy `size` * tiles, one tile each (shaders/mem.cu says
    why)."""

    @release_on_failure
    def __init__(self, test: TestSpec, variant: Variant, rt: Runtime):
        self.test, self.rt, self.name, self.mode = test, rt, variant.name, test.dtype
        self.layout, self.unroll = variant.name, variant.unroll
        lim = rt.limits
        self.rows = self.mode == "read" and self.layout == "rows"
        self.block = min(sweeps.ROWS_BLOCK, lim.max_block) if self.rows else BLOCK
        self.tile = self.block * self.unroll
        self.resident = lim.units * sweeps.READ_BLOCKS_PER_UNIT
        self.threads = self.resident * BLOCK
        self.step = self.tile if self.rows else self.threads * self.unroll
        # Blocks in x of one launch: CUDA takes 2^31 - 1; HIP wants grid * block threads < 2^32.
        self.max_grid = (1 << 31) - 1 if rt.dialect == "cuda" else ((1 << 32) - 1) // self.block
        # At least 4 steps: verify() runs two passes over two (the rows read: four) and checks past them.
        self.n_vec = max(4 * self.step, working_bytes(rt) // 16 // self.step * self.step)
        self.kernel = rt.compile(source("mem.cu"), {"MODE": sweeps.MODES[self.mode], "UNROLL": self.unroll,
                                                    "LAYOUT": sweeps.LAYOUTS[self.layout]}, "stream")
        self.src = rt.alloc(self.n_vec * 16)
        out_vec = max(8, self.n_vec // self.tile) if self.rows else self.threads if self.mode == "read" else self.n_vec
        self.dst = rt.alloc(out_vec * 16)
        fill = rt.compile(source("mem.cu"), {"MODE": sweeps.MODES["fill"]}, "stream")
        rt.launch(fill, self.resident, BLOCK, [self.dst, self.src, np.uint32(1), np.uint32(self.n_vec),
                                               np.uint32(0xFFFFFFFF), np.uint32(0)])
        layout = {"chunk": "a resident grid, a contiguous chunk per block, passes in the kernel",
                  "stride": "a resident grid striding through the buffer, passes in the kernel",
                  "rows": "the buffer as unroll rows, a block per column of each, passes * columns per launch",
                  "tile": "a block per tile of block * unroll vectors, passes * tiles per launch"}[self.layout]
        self.params = {"buffer_bytes": self.n_vec * 16, "block": self.block,
                       "blocks": self.resident if self.mode == "read" and not self.rows else self.n_vec // self.tile,
                       "access_bytes": 16, "unroll": self.unroll, "layout": layout,
                       "bytes_counted": "read + written" if self.mode == "copy" else self.mode}
        self.evidence = machine_code(rt, self.kernel)

    def run(self, size: int, n_vec: int | None = None, mask: int = 0xFFFFFFFF, shift: int = 0) -> float:
        n = n_vec or self.n_vec
        if self.mode == "read" and not self.rows:
            return self.rt.launch(self.kernel, self.resident, BLOCK, self._args(size, n, mask, shift))
        per, repeat = sweeps.pass_dispatches(size, n // self.tile, self.max_grid)
        return self.rt.launch(self.kernel, per * (n // self.tile), self.block, self._args(1, n, mask, shift),
                              repeat=repeat)

    def _args(self, passes, n, mask, shift) -> list:
        return [self.src, self.dst, np.uint32(passes), np.uint32(n), np.uint32(mask), np.uint32(shift)]

    def work(self, size: int) -> float:
        return float(size) * self.n_vec * 16 * (2 if self.mode == "copy" else 1)

    def verify(self) -> str | None:
        return sweeps.verify_stream(self, lambda: self.rt.fill(self.dst, 0xFF),
                                    lambda nbytes: self.rt.download(self.dst, nbytes))

    def series(self) -> dict | None:
        """The read sweep, once per test, on the chunk variant (harness/sweeps.py says how)."""
        if self.layout != "chunk":
            return None
        return sweeps.bandwidth_sweep(self.run, self.resident, self.tile, self.n_vec * 16)

    def close(self) -> None:
        release(self, self.rt.free, "src", "dst")


class SimtChaser:
    """The chase kernel of shaders/mem.cu on one thread, for the shared ChaseSweep."""
    max_rounds = 1 << 24

    def __init__(self, rt: Runtime):
        self.rt = rt
        self.clocked = rt.dialect == "cuda"      # clock64() is the SM's cycle counter on NVIDIA
        self.kernel = rt.compile(source("mem.cu"), {"CLOCK": int(self.clocked)}, "chase")
        self.evidence = machine_code(rt, self.kernel)
        self.out = rt.alloc(32)
        self.buf = None

    def load(self, nxt: np.ndarray) -> None:
        if self.buf is not None:
            self.rt.free(self.buf)
        self.buf = self.rt.alloc(nxt.nbytes)
        self.rt.upload(self.buf, nxt.tobytes())

    def launch(self, rounds: int, start: int) -> float:
        return self.rt.launch(self.kernel, 1, 1, [self.buf, self.out, np.uint32(rounds), np.uint32(start)])

    def readout(self) -> tuple[int, int | None]:
        w = np.frombuffer(self.rt.download(self.out, 24), np.uint32)
        t = w[2:6].view(np.int64)
        return int(w[0]), int(t[1] - t[0]) if self.clocked else None

    def release(self) -> None:
        if self.buf is not None:
            self.rt.free(self.buf)
        self.rt.free(self.out)


def chase_sweep(rt: Runtime, sample_s: float = sweeps.SWEEP_SAMPLE_S) -> sweeps.ChaseSweep:
    return sweeps.ChaseSweep(SimtChaser(rt), min(sweeps.CHASE_MAX, working_bytes(rt)), sweeps.first_level(rt.info), sample_s)


class LaunchWorkload:
    """Launch-to-completion wall time of an empty kernel: the floor under any measured kernel."""

    def __init__(self, test: TestSpec, variant: Variant, rt: Runtime):
        self.rt, self.name = rt, variant.name
        self.kernel = rt.compile(source("mem.cu"), {}, "empty")
        self.params = {"launch": "1 block of 1 thread", "timed": "launch to stream synchronized, host clock"}
        self.evidence = {}

    def verify(self) -> str | None:
        return None

    def measure(self, settings, clock, spec=None) -> VariantResult:
        return sweeps.launch_overhead(self.name, lambda n: self.rt.launch_wall(self.kernel, 1, 1, [], n),
                                      settings, self.params)

    def close(self) -> None:
        pass


def prepare(test: TestSpec, variant: Variant, rt: Runtime, sweep: sweeps.ChaseSweep | None = None):
    """The workload for one compute, memory or launch variant (latency: the sweep's level)."""
    if test.family == "compute":
        return AluWorkload(test, variant, rt)
    if test.family == "memory":
        return StreamWorkload(test, variant, rt)
    if test.family == "latency":
        return sweeps.LatencyWorkload(test, variant, sweep, CHASE_PATH[rt.dialect])
    if test.family == "launch":
        return LaunchWorkload(test, variant, rt)
    raise Unsupported(f"[api] no {rt.dialect.upper()} kernel for {test.name}")

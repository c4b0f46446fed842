"""Memory tests on Vulkan: stream bandwidth (and its working-set sweep), the pointer-chase
latency sweep whose plateaus are the cache levels, and launch overhead."""
from __future__ import annotations

import numpy as np

from peakbench.backend import release, release_on_failure
from peakbench.catalog import TestSpec, Variant
from peakbench.harness import sweeps
from peakbench.harness.runner import VariantResult
from peakbench.vulkan.shaders import compile_shader

LOCAL = sweeps.STREAM_BLOCK
CPU_BYTES = 64 << 20             # lavapipe: past a CI machine's caches, inside a few hundred MiB
# llvmpipe ends a shader's loops after about 65535 iterations in one dispatch (inner and outer
# counted together; seen: 255 rounds of 256 fail, 250 pass), so a CPU device gets at most 128.
CPU_ROUNDS = 128


def working_bytes(dev) -> int:
    """The stream buffer: past every cache level, never more than a quarter of the memory budget
    nor than one storage-buffer binding may cover (a 4 GiB binding failed silently on NVIDIA)."""
    limit = dev.caps.max_storage_buffer_range
    if dev.info.kind == "cpu":
        return min(CPU_BYTES, limit)
    return int(min(sweeps.STREAM_BYTES, dev.memory_budget() // 4, limit))


class StreamWorkload:
    """memory.read / write / copy on one large buffer pair, filled with random-looking data.

    The chunk and stride reads are a grid resident all at once (READ_BLOCKS_PER_UNIT workgroups
    per compute unit) looping over the buffer `size` times inside the shader: a line is reread
    only after the rest of the buffer went by, so the L2 cannot serve it. The rows read
    dispatches `size` * columns short-lived workgroups, taken in order; write and copy `size` *
    tiles, one tile each (mem_stream.comp says why)."""

    @release_on_failure
    def __init__(self, test: TestSpec, variant: Variant, dev):
        self.test, self.dev, self.name = test, dev, variant.name
        self.mode = test.dtype
        self.layout, self.unroll = variant.name, variant.unroll
        self.rows = self.mode == "read" and self.layout == "rows"
        self.block = min(sweeps.ROWS_BLOCK, dev.caps.max_workgroup_size) if self.rows else LOCAL
        self.tile = self.block * self.unroll
        if dev.info.kind != "cpu" and dev.caps.units:
            self.resident = dev.caps.units * sweeps.READ_BLOCKS_PER_UNIT
        else:
            self.resident = max(1, dev.grid_threads(1) // LOCAL)
        self.threads = self.resident * LOCAL
        self.step = self.tile if self.rows else self.threads * self.unroll
        most = dev.caps.max_workgroups * self.tile            # one workgroup per tile (or column)
        # At least 4 steps: verify() runs two passes over two (the rows read: four) and checks past them.
        self.n_vec = max(4 * self.step, min(working_bytes(dev) // 16, most) // self.step * self.step)
        settings = {"MODE": sweeps.MODES[self.mode], "UNROLL": self.unroll, "LAYOUT": sweeps.LAYOUTS[self.layout]}
        self.pipeline = dev.pipeline(compile_shader("mem_stream.comp", settings),
                                     bindings=2, local_size=self.block, push_bytes=16, label=test.name)
        self.src = dev.buffer(self.n_vec * 16)
        out_vec = max(8, self.n_vec // self.tile) if self.rows else self.threads if self.mode == "read" else self.n_vec
        self.dst = dev.buffer(out_vec * 16)
        fill = dev.pipeline(compile_shader("mem_stream.comp", {"MODE": 3, "UNROLL": self.unroll}),
                            bindings=2, local_size=LOCAL, push_bytes=16, label="fill")
        dev.bind(fill, [self.dst, self.src])
        dev.dispatch(fill, self.resident, [1, self.n_vec, 0xFFFFFFFF, 0])
        dev.destroy(fill)
        dev.bind(self.pipeline, [self.src, self.dst])
        layout = {"chunk": "a resident grid, a contiguous chunk per workgroup, passes in the shader",
                  "stride": "a resident grid striding through the buffer, passes in the shader",
                  "rows": "the buffer as unroll rows, a workgroup per column of each, passes * columns per dispatch",
                  "tile": "a workgroup per tile of workgroup_size * unroll vectors, passes * tiles per dispatch"}[self.layout]
        self.params = {"buffer_bytes": self.n_vec * 16, "workgroup_size": self.block,
                       "workgroups": self.resident if self.mode == "read" and not self.rows else self.n_vec // self.tile,
                       "access_bytes": 16, "unroll": self.unroll, "layout": layout,
                       "bytes_counted": "read + written" if self.mode == "copy" else self.mode}
        self.evidence = {"pipeline_statistics": self.pipeline.statistics} if self.pipeline.statistics else {}

    def run(self, size: int, n_vec: int | None = None, mask: int = 0xFFFFFFFF, shift: int = 0) -> float:
        n = n_vec or self.n_vec
        if self.mode == "read" and not self.rows:
            return self.dev.dispatch(self.pipeline, self.resident, [size, n, mask, shift])
        per, repeat = sweeps.pass_dispatches(size, n // self.tile, self.dev.caps.max_workgroups)
        return self.dev.dispatch(self.pipeline, per * (n // self.tile), [1, n, mask, shift], repeat=repeat)

    def work(self, size: int) -> float:
        return float(size) * self.n_vec * 16 * (2 if self.mode == "copy" else 1)

    def verify(self) -> str | None:
        return sweeps.verify_stream(self, lambda: self.dev.fill(self.dst, 0xFFFFFFFF),
                                    lambda nbytes: self.dev.download(self.dst, nbytes))

    def series(self) -> dict | None:
        """The read sweep, once per test, on the chunk variant (harness/sweeps.py says how)."""
        return self.sweep(sweeps.SWEEP_SAMPLE_S) if self.layout == "chunk" else None

    def sweep(self, sample_s: float) -> dict:
        if self.layout != "chunk":
            raise ValueError(f"the bandwidth sweep runs on the chunk read, not {self.layout}")
        return sweeps.bandwidth_sweep(self.run, self.resident, self.tile, self.n_vec * 16, sample_s)

    def close(self) -> None:
        release(self, self.dev.free, "src", "dst")
        release(self, self.dev.destroy, "pipeline")


class VulkanChaser:
    """mem_chase.comp on one invocation, for the shared ChaseSweep."""

    def __init__(self, dev):
        self.dev = dev
        self.clocked = dev.caps.has("shaderSubgroupClock")
        self.max_rounds = CPU_ROUNDS if dev.info.kind == "cpu" else 1 << 24
        code = compile_shader("mem_chase.comp", {"CLOCK": int(self.clocked)})
        self.pipeline = dev.pipeline(code, bindings=2, local_size=1, push_bytes=8, label="chase")
        self.out = dev.buffer(32)
        self.buf = None

    def load(self, nxt: np.ndarray) -> None:
        if self.buf is not None:
            self.dev.free(self.buf)
        self.buf = self.dev.buffer(nxt.nbytes)
        self.dev.upload(self.buf, nxt.tobytes())
        self.dev.bind(self.pipeline, [self.buf, self.out])

    def launch(self, rounds: int, start: int) -> float:
        return self.dev.dispatch(self.pipeline, 1, [rounds, start])

    def readout(self) -> tuple[int, int | None]:
        w = np.frombuffer(self.dev.download(self.out, 20), np.uint32).astype(np.uint64)
        cycles = int(((w[4] << 32) | w[3]) - ((w[2] << 32) | w[1])) if self.clocked else None
        return int(w[0]), cycles

    def release(self) -> None:
        if self.buf is not None:
            self.dev.free(self.buf)
        self.dev.free(self.out)
        self.dev.destroy(self.pipeline)


def chase_sweep(dev, sample_s: float = sweeps.SWEEP_SAMPLE_S) -> sweeps.ChaseSweep:
    """The latency sweep of a device, 4 KiB up to CHASE_MAX (or the stream buffer's size)."""
    return sweeps.ChaseSweep(VulkanChaser(dev), min(sweeps.CHASE_MAX, working_bytes(dev)),
                             sweeps.first_level(dev.info), sample_s)


PATH = "storage-buffer loads (vector memory), one invocation"


class LaunchWorkload:
    """Submit-to-fence wall time of an empty dispatch: the floor under any measured kernel."""

    def __init__(self, test: TestSpec, variant: Variant, dev):
        self.dev, self.name = dev, variant.name
        self.pipeline = dev.pipeline(compile_shader("empty.comp"), bindings=0, local_size=1, label="empty")
        self.params = {"dispatch": "1 workgroup of 1 invocation, recorded once", "timed": "vkQueueSubmit to fence signalled, host clock"}
        self.evidence = {}

    def verify(self) -> str | None:
        return None

    def measure(self, settings, clock, spec=None) -> VariantResult:
        return sweeps.launch_overhead(self.name, lambda n: self.dev.submit_times(self.pipeline, n), settings, self.params)

    def close(self) -> None:
        self.dev.destroy(self.pipeline)

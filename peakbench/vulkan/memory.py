"""Memory tests on Vulkan: stream bandwidth (and its working-set sweep), the pointer-chase
latency sweep whose plateaus are the cache levels, and launch overhead."""
from __future__ import annotations

import numpy as np

from peakbench.catalog import TestSpec, Variant
from peakbench.catalog.memory import STREAM_UNROLL
from peakbench.harness.levels import documented_caches, name_levels, plateaus
from peakbench.harness.runner import VariantResult, calibrate
from peakbench.harness.stats import median, summarize
from peakbench.vulkan.shaders import compile_shader

LOCAL = 256
MODES = {"read": 0, "write": 1, "copy": 2, "fill": 3}
LINE = 128                       # chase stride in bytes: at least one cache line on every GPU here
CPU_BYTES = 64 << 20             # lavapipe: past a CI machine's caches, inside a few hundred MiB
GPU_BYTES = 1 << 30              # past the largest GPU last-level cache (256 MiB) by 4x
CHASE_MAX = 512 << 20
SWEEP_SAMPLE_S = 0.004           # per working-set point of the sweeps
ROUND = 256                      # chase loads per round of mem_chase.comp
# Vectors each sweep pass moves by: three workgroups' width, so in pass p+1 a workgroup reads what
# another workgroup (on another compute unit) read in pass p. Its own L1 cannot serve it unless the
# whole working set fits, and the L2 sees each line again only one full pass later.
SWEEP_SHIFT = 3 * LOCAL
CPU_ROUNDS = 128


def hash32(x: np.ndarray) -> np.ndarray:
    """The fill kernel's lowbias32, on uint32 arrays."""
    x = x.astype(np.uint32)
    x ^= x >> 16
    x = (x * np.uint32(0x7FEB352D)).astype(np.uint32)
    x ^= x >> 15
    x = (x * np.uint32(0x846CA68B)).astype(np.uint32)
    x ^= x >> 16
    return x


def filled(n_vec: int) -> np.ndarray:
    return hash32(np.arange(4 * n_vec, dtype=np.uint64).astype(np.uint32)).reshape(n_vec, 4)


def written(index: np.ndarray, passno: int) -> np.ndarray:
    j = index.astype(np.uint32)
    return np.stack([j, j ^ np.uint32(0x5BD1E995), ~j, (j * np.uint32(2654435761) + np.uint32(passno)).astype(np.uint32)], axis=1)


def working_bytes(dev) -> int:
    """The stream buffer: past every cache level, never more than a quarter of the memory budget
    nor than one storage-buffer binding may cover (a 4 GiB binding failed silently on NVIDIA)."""
    limit = dev.caps.max_storage_buffer_range
    if dev.info.kind == "cpu":
        return min(CPU_BYTES, limit)
    return int(min(GPU_BYTES, dev.memory_budget() // 4, limit))


class StreamWorkload:
    """memory.read / write / copy on one large buffer pair, filled with random-looking data."""

    def __init__(self, test: TestSpec, variant: Variant, dev):
        self.test, self.dev, self.name = test, dev, variant.name
        self.mode = test.dtype
        # One resident wave: passes loop inside the kernel, so every workgroup must be resident
        # for a line's reuse distance to be the whole buffer (a second wave would reread its
        # own slice from the L2 and count it as memory bandwidth).
        self.groups = max(1, dev.grid_threads(1) // LOCAL)
        self.threads = self.groups * LOCAL
        self.step = self.threads * STREAM_UNROLL
        self.n_vec = max(self.step, working_bytes(dev) // 16 // self.step * self.step)
        self.pipeline = dev.pipeline(compile_shader("mem_stream.comp", {"MODE": MODES[self.mode], "UNROLL": STREAM_UNROLL}),
                                     bindings=2, local_size=LOCAL, push_bytes=16, label=test.name)
        self.src = dev.buffer(self.n_vec * 16)
        out_vec = self.threads if self.mode == "read" else self.n_vec
        self.dst = dev.buffer(out_vec * 16)
        fill = dev.pipeline(compile_shader("mem_stream.comp", {"MODE": 3, "UNROLL": STREAM_UNROLL}),
                            bindings=2, local_size=LOCAL, push_bytes=16, label="fill")
        dev.bind(fill, [self.dst, self.src])
        dev.dispatch(fill, self.groups, [1, self.n_vec, 0xFFFFFFFF, 0])
        dev.destroy(fill)
        dev.bind(self.pipeline, [self.src, self.dst])
        self.params = {"buffer_bytes": self.n_vec * 16, "threads": self.threads, "workgroup_size": LOCAL,
                       "access_bytes": 16, "unroll": STREAM_UNROLL,
                       "bytes_counted": "read + written" if self.mode == "copy" else self.mode}
        self.evidence = {"pipeline_statistics": self.pipeline.statistics} if self.pipeline.statistics else {}

    def run(self, size: int, n_vec: int | None = None, mask: int = 0xFFFFFFFF, shift: int = 0) -> float:
        return self.dev.dispatch(self.pipeline, self.groups, [size, n_vec or self.n_vec, mask, shift])

    def work(self, size: int) -> float:
        return float(size) * self.n_vec * 16 * (2 if self.mode == "copy" else 1)

    def verify(self) -> str | None:
        """One pass over the first few vectors per thread, checked in full against the host."""
        n = self.step * 2
        self.dev.fill(self.dst, 0xFFFFFFFF)
        self.run(1, n)
        src = filled(n)
        if self.mode == "read":
            got = np.frombuffer(self.dev.download(self.dst, self.threads * 16), np.uint32).reshape(self.threads, 4)
            want = src.reshape(-1, self.threads, 4).astype(np.uint64).sum(axis=0) % (1 << 32)
        else:
            got = np.frombuffer(self.dev.download(self.dst, n * 16), np.uint32).reshape(n, 4)
            want = src if self.mode == "copy" else written(np.arange(n), 0)
        bad = got != want
        if bad.any():
            i = tuple(int(x) for x in np.argwhere(bad)[0])
            return f"{int(bad.sum())} of {bad.size} words differ from the host reference (first at {i})"
        return None

    def series(self) -> dict | None:
        return self.sweep(SWEEP_SAMPLE_S) if self.mode == "read" else None

    def sweep(self, sample_s: float) -> dict:
        """Read bandwidth with every thread inside one working set, from 4 KiB to the buffer."""
        sizes, rates = [], []
        ws = 4096
        while ws <= self.n_vec * 16:
            # Cover the whole working set (at least 4 accesses per thread): indices wrap at it.
            n = max(self.step * 4, ws // 16 // self.step * self.step)
            run = lambda passes: self.run(passes, n, ws // 16 - 1, SWEEP_SHIFT)
            passes, _ = calibrate(run, _Budget(sample_s))
            seconds = median([run(passes) for _ in range(3)])
            sizes.append(ws)
            rates.append(round(passes * n * 16 / seconds / 1e9, 2))
            ws *= 2
        return {"x": "working_set_bytes", "y": "GB/s", "working_set_bytes": sizes, "GB/s": rates}

    def close(self) -> None:
        self.dev.free(self.src)
        self.dev.free(self.dst)
        self.dev.destroy(self.pipeline)


class _Budget:
    """The two settings calibrate() reads, for the sweeps' short points."""
    def __init__(self, sample_s: float, max_size: int = 1 << 24):
        self.sample_s, self.max_size = sample_s, max_size


class ChaseSweep:
    """One pointer chase per working set, 4 KiB up; shared by every latency.* test of a device."""

    def __init__(self, dev, sample_s: float = SWEEP_SAMPLE_S):
        self.dev = dev
        self.clocked = dev.caps.has("shaderSubgroupClock")
        code = compile_shader("mem_chase.comp", {"CLOCK": int(self.clocked)})
        self.pipeline = dev.pipeline(code, bindings=2, local_size=1, push_bytes=8, label="chase")
        self.out = dev.buffer(32)
        self.sizes, self.latencies, self.cycles, self.mhz, self.problem = [], [], [], [], None
        self.position = 0
        limit = min(CHASE_MAX, working_bytes(dev))
        rng = np.random.default_rng(12345)
        ws = 4096
        try:
            while ws <= limit:
                self.sizes.append(ws)
                self.latencies.append(self._measure(ws, rng, sample_s))
                ws *= 2
        finally:
            dev.free(self.out)
            dev.destroy(self.pipeline)

    def _measure(self, ws: int, rng, sample_s: float) -> float:
        nodes, stride = ws // LINE, LINE // 4
        order = rng.permutation(nodes).astype(np.uint32)     # a uniformly random single cycle
        nxt = np.zeros(ws // 4, dtype=np.uint32)
        nxt[order * stride] = np.roll(order, -1) * stride
        buf = self.dev.buffer(ws)
        self.position = 0

        def run(rounds: int) -> float:
            """Each launch goes on from where the last one stopped, so a working set larger
            than the loads of one launch is still walked in full rather than its first nodes
            again (which would stay cached)."""
            seconds = self.dev.dispatch(self.pipeline, 1, [rounds, int(order[self.position]) * stride])
            self.position = (self.position + rounds * ROUND) % nodes
            return seconds

        try:
            self.dev.upload(buf, nxt.tobytes())
            self.dev.bind(self.pipeline, [buf, self.out])
            # llvmpipe ends a shader's loops after about 65535 iterations in one dispatch (inner
            # and outer counted together; seen: 255 rounds of 256 fail, 250 pass), so a CPU
            # device gets at most 128 rounds.
            rounds, _ = calibrate(run, _Budget(sample_s, CPU_ROUNDS if self.dev.info.kind == "cpu" else 1 << 24))
            run(rounds)                      # one untimed launch at the final length first
            times = [run(rounds) for _ in range(3)]
            words = np.frombuffer(self.dev.download(self.out, 20), np.uint32).astype(np.uint64)
            want = order[self.position] * stride
            if words[0] != want and self.problem is None:
                self.problem = f"working set {ws} B: the chase ended at {words[0]}, not at {want}"
            if self.clocked:    # cycles of the last launch, from the core's own counter
                cycles = float(((words[4] << 32) | words[3]) - ((words[2] << 32) | words[1]))
                self.cycles.append(round(cycles / (rounds * ROUND), 1))
                self.mhz.append(round(cycles / times[-1] / 1e6))
            return median(times) / (rounds * ROUND) * 1e9
        finally:
            self.dev.free(buf)

    def first_level(self) -> int:
        """Without documented sizes, where level names start: AMD's RDNA GPUs have an L0 vector
        cache, CDNA (Instinct) GPUs and everyone else start at L1."""
        amd, name = self.dev.info.vendor_id == 0x1002, self.dev.info.name.lower()
        return 0 if amd and not any(k in name for k in ("instinct", " mi")) else 1

    def levels(self, spec=None) -> dict:
        return name_levels(plateaus(self.sizes, self.latencies), self.first_level(), documented_caches(spec))

    def series(self) -> dict:
        out = {"x": "working_set_bytes", "y": "ns", "working_set_bytes": self.sizes,
               "ns": [round(t, 2) for t in self.latencies]}
        if self.cycles:
            out["cycles"], out["clock_mhz"] = self.cycles, self.mhz
        return out


class LatencyWorkload:
    """One level of the shared chase sweep, reported in ns (and cycles where the clock is known)."""

    def __init__(self, test: TestSpec, variant: Variant, dev, sweep: ChaseSweep):
        self.test, self.dev, self.sweep, self.name = test, dev, sweep, variant.name
        self.params = {"stride_bytes": LINE, "path": "storage-buffer loads (vector memory), one invocation"}
        self.evidence = {}

    def verify(self) -> str | None:
        return self.sweep.problem

    def measure(self, settings, clock, spec=None) -> VariantResult:
        found = plateaus(self.sweep.sizes, self.sweep.latencies)
        levels = name_levels(found, self.sweep.first_level(), documented_caches(spec))
        described = ", ".join(f"{p.latency_ns:.0f} ns from {p.first_bytes // 1024} KiB" for p in found)
        level = levels.get(self.test.dtype)
        if level is None:
            from peakbench.backend import Unsupported
            raise Unsupported(f"[hardware] the latency sweep found no {self.test.dtype.upper()} level (plateaus: {described})")
        on = [level.first_bytes <= s <= level.last_bytes for s in self.sweep.sizes]
        points = [t for t, inside in zip(self.sweep.latencies, on) if inside]
        params = {**self.params, "working_sets_bytes": [level.first_bytes, level.last_bytes]}
        mhz = None
        if self.sweep.cycles:    # the shader's own cycle counter: cycles need no outside clock
            params["cycles"] = median([c for c, inside in zip(self.sweep.cycles, on) if inside])
            mhz = median([m for m, inside in zip(self.sweep.mhz, on) if inside])
        evidence = {"plateaus": described, "path": self.params["path"],
                    "levels_named_from": "spec cache sizes" if documented_caches(spec) else "plateau order"}
        dram = levels.get("dram")
        beyond = [p for p in found if dram and p.first_bytes > dram.last_bytes]
        if beyond:   # past DRAM's own plateau the chase also misses the address translation caches
            evidence["page_or_tlb_effects"] = ", ".join(f"{p.latency_ns:.0f} ns from {p.first_bytes >> 20} MiB" for p in beyond)
        # The clock is the shader counter's cycles over the launch's GPU time, not NVML, which
        # reads the GPU idling between chase launches (600-810 MHz on the H200).
        return VariantResult(self.name, 0, summarize(points), mhz, params, evidence)

    def series(self) -> dict:
        return self.sweep.series()

    def close(self) -> None:
        pass


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
        self.dev.submit_times(self.pipeline, 20)                      # first submissions are slower
        samples = self.dev.submit_times(self.pipeline, 200 if settings.min_samples >= 10 else 50)
        # No clock: an empty dispatch leaves the GPU idle, so the reading would say nothing.
        return VariantResult(self.name, 0, summarize([t * 1e6 for t in samples]), None, dict(self.params), {})

    def close(self) -> None:
        self.dev.destroy(self.pipeline)

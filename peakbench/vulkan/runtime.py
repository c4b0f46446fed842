"""The Runtime (peakbench/runtime.py) on Vulkan: a kernel is a compute pipeline built from a
shaders/ source through vulkan/shaders.py (GLSL via glslang, or SPIR-V assembly), its workgroup
size a specialization constant; a launch binds the buffers as descriptor bindings 0, 1, ... (once,
until they change) and the scalars as push constants, and is timed with timestamp queries."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from peakbench.runtime import Kernel, Limits, LoopCensus, Words
from peakbench.vulkan.device import Buffer, VulkanDevice
from peakbench.vulkan.shaders import compile_shader

# llvmpipe ends a shader's loops after about 65535 iterations in one dispatch (inner and outer
# counted together; seen: 255 rounds of 256 fail, 250 pass), so a CPU device gets at most 128.
CPU_ROUNDS = 128


def layout(args: str) -> tuple[int, int]:
    """A kernel's descriptor bindings (its buffers, "b") and push-constant bytes (its scalars, "u")."""
    return args.count("b"), max(4, 4 * args.count("u"))


class VulkanRuntime:
    dialect = "vulkan"
    arch = ""
    words = Words(group="workgroup", program="shader",
                  launch="dispatch")

    _census_pool: ThreadPoolExecutor | None = None

    def __init__(self, dev: VulkanDevice):
        self.dev, self.info, self.caps = dev, dev.info, dev.caps
        caps = dev.caps
        self.kernel_clock = caps.has("shaderSubgroupClock")
        self.limits = Limits(units=caps.units or 0, threads_per_unit=caps.threads_per_unit or 0,
                             max_block=caps.max_workgroup_size, warp=caps.subgroup_size, l2_bytes=0,
                             memory_bytes=0, max_buffer=caps.max_storage_buffer_range)

    # Kernels -----------------------------------------------------------------------------------
    def compile(self, source: str, defines: dict, entry: str = "main", block: int = 1, args: str = "",
                label: str = "") -> Kernel:
        return self.load(compile_shader(source, defines), block, args, label or source)

    def prefetch(self, source: str, defines: dict, entry: str = "main", block: int = 1, args: str = "",
                 label: str = "") -> None:
        """What compile() makes, from any thread (harness/ahead.py): the validated SPIR-V and its
        census into the cache, and where the driver's cache shows machine code, the pipeline's
        disassembly (its pipeline is made again in the run, from the driver's cache)."""
        from peakbench.evidence.spirv import census
        code = compile_shader(source, defines)
        census(code)
        bindings, push_bytes = layout(args)
        self.dev.disassemble_ahead(code, bindings, block, push_bytes, label or source)

    def load(self, code: bytes, block: int, args: str, label: str) -> Kernel:
        """A pipeline from validated SPIR-V (the matrix modules are rewritten before this). The
        module's census (spirv-opt's unrolling, ~0.2-0.5 s for a 512-step loop) runs on a worker
        thread while the driver compiles the pipeline; census() waits for it."""
        from peakbench.evidence.spirv import census
        if self._census_pool is None:
            self._census_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spirv-census")
        counted = self._census_pool.submit(census, code)
        bindings, push_bytes = layout(args)
        pipeline = self.dev.pipeline(code, bindings=bindings, local_size=block, push_bytes=push_bytes, label=label)
        return Kernel(label, pipeline, block, code, extra={"bound": None, "census": counted})

    def discard(self, kernel: Kernel) -> None:
        self.dev.destroy(kernel.handle)

    def evidence(self, kernel: Kernel) -> dict:
        """The driver's pipeline statistics, and the SASS its cache shows (`sass`, completed when
        the kernel is discarded) or why none (`sass_note`): vulkan/driver_cache.py."""
        p = kernel.handle
        stats = {"pipeline_statistics": p.statistics} if p.statistics else {}
        return {**stats, **self.dev.code.evidence(p.code, p.statistics)}

    def census(self, kernel: Kernel, kind: str = "arithmetic") -> LoopCensus:
        """What the kernel's loop does of `kind` (runtime.CENSUS_KINDS), from its SPIR-V
        (evidence/spirv.py). The arithmetic census waits for the SASS the driver's cache gave (its
        disassembly started by evidence()), so the sass guard reads a complete `sass` evidence
        before the first launch; atomics and special functions are counted in that SASS where the
        driver shows it: what the device runs, after the driver's optimisations."""
        from peakbench.evidence import spirv
        if kind in ("memory", "shared"):
            return spirv.memory_census(kernel.binary, kind)
        if kind in ("atomic", "special"):
            listing = self.disassemble(kernel)
            if listing:
                from peakbench.evidence.sass import operation_census
                from peakbench.evidence.sass_rules import SOURCE
                return operation_census(listing, kind, SOURCE)
            return spirv.operation_census(kernel.binary, kind)
        counted = kernel.extra.get("census")
        found = counted.result() if counted else spirv.census(kernel.binary)
        self.dev.sass(kernel.handle)
        return found

    def disassemble(self, kernel: Kernel) -> str | None:
        """The kernel's SASS listing, where evidence() found its machine code."""
        self.evidence(kernel)
        return self.dev.sass(kernel.handle) or None

    # Buffers -----------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> Buffer:
        return self.dev.buffer(nbytes)

    def free(self, buf: Buffer) -> None:
        self.dev.free(buf)

    def upload(self, buf: Buffer, data) -> None:
        self.dev.upload(buf, data)

    def address(self, buf: Buffer) -> int | None:
        """The buffer's device address, where the device has bufferDeviceAddress (the pointer chase);
        None without it."""
        return self.dev.address(buf) if self.caps.has("bufferDeviceAddress") else None

    def download(self, buf: Buffer, nbytes: int | None = None) -> memoryview:
        return self.dev.download(buf, nbytes)

    def fill(self, buf: Buffer, byte: int) -> None:
        self.dev.fill(buf, (byte & 0xFF) * 0x01010101)

    # Launches ----------------------------------------------------------------------------------
    def launch(self, kernel: Kernel, grid: int, args: Sequence, repeat: int = 1) -> float:
        return self.dev.dispatch(kernel.handle, grid, self._bind(kernel, args), repeat=repeat)

    def _bind(self, kernel: Kernel, args: Sequence) -> list[int]:
        """Bind the buffers of `args` (where they changed); its scalars, as push constants."""
        buffers = [a for a in args if isinstance(a, Buffer)]
        if buffers and kernel.extra["bound"] != buffers:
            self.dev.bind(kernel.handle, buffers)
            kernel.extra["bound"] = buffers
        return [int(a) for a in args if not isinstance(a, Buffer)]

    def launch_times(self, kernel: Kernel, count: int, args: Sequence = ()) -> list[float]:
        return self.dev.submit_times(kernel.handle, count, self._bind(kernel, args))

    @property
    def launch_split(self) -> dict | None:
        """Where the last launch_times went: submission, the wait, a bare driver call, a blocking wait."""
        return self.dev.launch_split

    # Sizing ------------------------------------------------------------------------------------
    def grid_threads(self, waves: int) -> int:
        return self.dev.grid_threads(waves)

    def max_groups(self, block: int) -> int:
        return self.caps.max_workgroups

    def memory_budget(self) -> int:
        return self.dev.memory_budget()

    @property
    def max_rounds(self) -> int:
        return CPU_ROUNDS if self.info.kind == "cpu" else 1 << 24

    def clock_mhz(self) -> float | None:
        return self.dev.clock_mhz()

    def close(self) -> None:
        if self._census_pool is not None:
            self._census_pool.shutdown(wait=True, cancel_futures=True)
            self._census_pool = None
        self.dev.close()

    @property
    def driver_label(self) -> str:
        return self.dev.driver_label

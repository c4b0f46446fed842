"""What the shared CUDA/HIP workloads ask of a runtime: compile, allocate, copy, launch, time.

peakbench.cuda implements it on CuPy (NVRTC, CUDA events), peakbench.rocm on hip-python (hiprtc,
HIP events). Launch arguments are Buffers and numpy scalars (np.uint32, np.int32, np.uint64, ...),
in the kernel's parameter order; the runtime marshals them for its API.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

from peakbench.backend import DeviceInfo


@dataclass
class Kernel:
    """A compiled entry point. `handle` is the runtime's function object; `binary` the code object
    (cubin / hsaco) where the compiler returns one, for disassembly evidence."""
    name: str
    handle: object
    binary: bytes = b""
    log: str = ""
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Limits:
    """The device facts the workloads size their grids and working sets from."""
    units: int                     # SMs / CUs
    threads_per_unit: int          # resident threads per SM / CU
    max_block: int                 # threads per block
    warp: int                      # 32 (NVIDIA), 32 or 64 (AMD)
    l2_bytes: int
    memory_bytes: int              # device memory a test may use (free memory now)
    shared_per_block: int = 48 << 10


class Runtime(Protocol):
    info: DeviceInfo
    limits: Limits
    dialect: str                   # "cuda" or "hip"
    arch: str                      # sm_90a, gfx942, ...

    def compile(self, source: str, defines: dict, kernel: str) -> Kernel:
        """Compile `source` (text) for this device's exact architecture with -D defines."""

    def alloc(self, nbytes: int): ...
    def free(self, buf) -> None: ...
    def upload(self, buf, data: bytes) -> None: ...
    def download(self, buf, nbytes: int | None = None) -> bytes: ...
    def fill(self, buf, byte: int) -> None: ...

    def launch(self, kernel: Kernel, grid: int | tuple, block: int | tuple, args: Sequence,
               shared_bytes: int = 0, repeat: int = 1) -> float:
        """Launch `repeat` times back to back and wait; the GPU time between events around them,
        in seconds."""

    def launch_wall(self, kernel: Kernel, grid: int, block: int, args: Sequence, count: int) -> list[float]:
        """`count` launches, each timed on the host from launch to completion (seconds)."""

    def clock_mhz(self) -> float | None: ...
    def disassemble(self, kernel: Kernel) -> str | None:
        """The machine code listing (SASS, AMDGCN) where the tools are installed, else None."""
    def close(self) -> None: ...

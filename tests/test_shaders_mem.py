"""shaders/mem.cu, the CUDA/HIP stream and chase kernels, without a GPU: compiled to PTX with nvcc
(the stream moves 16 bytes per access, the chase is a chain of L1-cached loads between two clock
reads), and through clang's HIP front end for AMD targets: every stream mode and layout, and the
chase, type-check as the ROCm backend compiles them, HIP branches included (__shfl_xor, the
chase's VGPR constraint). Types and calls only: what the code does on a wave of 64 is for the
fake-HIP tests and real hardware. A stub hip/hip_runtime.h declares what the source uses;
clang-tidy comes from the [test] extra (tests/helpers.py)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import clang_tidy
from peakbench.workloads import chase as chase_workload
from peakbench.workloads import stream as sweeps

SOURCE = Path(__file__).resolve().parents[1] / "shaders" / "mem.cu"
# -- clang's HIP front end, for AMD targets ------------------------------------------------------

# What mem.cu takes from hip/hip_runtime.h, declared only: the front end checks types and calls.
RUNTIME = """#pragma once
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(n) __attribute__((amdgpu_flat_work_group_size(1, n)))
struct __pb_dim { unsigned x, y, z; };
__device__ extern const __pb_dim threadIdx, blockIdx, blockDim, gridDim;
__device__ extern const int warpSize;
struct uint4 { unsigned x, y, z, w; };
__device__ uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w);
__device__ unsigned __shfl_xor(unsigned var, int lane_mask);
__device__ void __syncthreads();
__device__ long long clock64();
"""
CASES = [("stream", {"MODE": mode, "LAYOUT": layout, "UNROLL": 4}) for mode in (0,) for layout in (0, 1, 2)]
CASES += [("stream", {"MODE": mode, "UNROLL": 4}) for mode in (1, 2, 3)]
CASES += [("chase", {"CLOCK": 0, "ROUND": chase_workload.ROUND})]


def front_end(tmp_path, defines: dict, target: str, source: Path = SOURCE) -> subprocess.CompletedProcess:
    (tmp_path / "hip").mkdir(exist_ok=True)
    (tmp_path / "hip" / "hip_runtime.h").write_text(RUNTIME)
    flags = ["-x", "hip", "--cuda-device-only", "-nogpulib", "-nogpuinc", "-std=c++17", f"-I{tmp_path}",
             f"--offload-arch={target}", "-D__HIP_PLATFORM_AMD__", *[f"-D{k}={v}" for k, v in defines.items()]]
    return subprocess.run([clang_tidy(), "--allow-no-checks", "--checks=-*", str(source), "--", *flags],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})


@pytest.mark.skipif(clang_tidy() is None, reason="clang-tidy is not installed (pip install clang-tidy)")
@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
@pytest.mark.parametrize("kernel, defines", CASES, ids=[f"{k}-" + "-".join(f"{a}{b}" for a, b in d.items()) for k, d in CASES])
def test_mem_source_passes_clang_for_amd(tmp_path, kernel, defines, target):
    done = front_end(tmp_path, defines, target)
    errors = [line for line in (done.stdout + done.stderr).splitlines() if "error:" in line]
    assert done.returncode == 0 and not errors, "\n".join(errors or [done.stderr[-2000:]])


@pytest.mark.skipif(clang_tidy() is None, reason="clang-tidy is not installed (pip install clang-tidy)")
def test_the_front_end_check_has_teeth(tmp_path):
    """A rows read whose source calls a shuffle HIP does not have fails the check."""
    broken = tmp_path / "mem.cu"
    broken.write_text(SOURCE.read_text().replace("__shfl_xor(v, offset)", "__shfl_xor_sync(v, offset)"))
    done = front_end(tmp_path, {"MODE": 0, "LAYOUT": sweeps.LAYOUTS["rows"], "UNROLL": 4}, "gfx942", broken)
    assert done.returncode != 0 and "__shfl_xor_sync" in done.stdout + done.stderr


# -- nvcc: PTX -----------------------------------------------------------------------------------

def mem_ptx(tmp_path, **defines) -> str:
    out = tmp_path / "mem.ptx"
    flags = [f"-D{k}={v}" for k, v in defines.items()]
    subprocess.run(["nvcc", "-ptx", "-arch=sm_90", *flags, str(SOURCE), "-o", str(out)], check=True,
                   capture_output=True, text=True)
    return out.read_text()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("mode, layout, load, store", [(0, 0, r"ld\.global\.nc\.v4\.u32", r"st\.global\.v4\.u32"),
                                                       (0, 1, r"ld\.global\.nc\.v4\.u32", r"st\.global\.v4\.u32"),
                                                       (0, 2, r"ld\.global\.nc\.v4\.u32", r"st\.global\.v4\.u32"),
                                                       (1, 0, None, r"st\.global\.v4\.u32"),
                                                       (2, 0, r"ld\.global\.nc\.v4\.u32", r"st\.global\.v4\.u32")],
                         ids=["read-chunk", "read-stride", "read-rows", "write", "copy"])
def test_stream_moves_16_bytes_per_access(tmp_path, mode, layout, load, store):
    ptx = mem_ptx(tmp_path, MODE=mode, UNROLL=4, LAYOUT=layout)
    stream = ptx[ptx.index(".entry stream"):ptx.index(".entry empty")]
    if load:
        assert len(re.findall(load, stream)) >= 4, "the 16-byte loads were split or lost"
        assert not re.search(r"ld\.global(\.nc)?\.u32", stream), "a narrow load in the stream loop"
    assert re.search(store, stream)
    if layout == 2:     # the rows read adds a block's sums by warp shuffles (5 steps x 4 words), then one barrier
        assert len(re.findall(r"shfl\.sync\.bfly\.b32", stream)) == 4 * 5
        assert len(re.findall(r"bar\.sync", stream)) == 1


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_chase_is_a_chain_of_l1_cached_loads_between_clock_reads(tmp_path):
    ptx = mem_ptx(tmp_path, CLOCK=1, ROUND=chase_workload.ROUND)
    chase = ptx[ptx.index(".entry chase"):ptx.index(".entry empty")]
    assert len(re.findall(r"ld\.global\.ca\.u32", chase)) >= 16          # the unrolled inner loop
    assert not re.search(r"ld\.global\.(nc|cg|cs|lu|cv)", chase)
    assert len(re.findall(r"%clock64", chase)) == 2

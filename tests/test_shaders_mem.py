"""shaders/mem.cu, the CUDA/HIP stream and chase kernels, without a GPU: compiled to PTX with nvcc
(the stream moves 16 bytes per access, the chase is a chain of L1-cached loads between two clock
reads) and, for the pointer chase, to sm_90a SASS (each LDG's address is the previous LDG's
result, nothing between), and through clang's HIP front end for AMD targets: every stream mode and layout, and the
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
CASES += [("chase", {"CLOCK": 0, "ROUND": chase_workload.ROUND, "POINTER": pointer}) for pointer in (0, 1)]


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


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_pointer_chase_loads_each_address_the_last_load_returned(tmp_path):
    ptx = mem_ptx(tmp_path, CLOCK=1, ROUND=chase_workload.ROUND, POINTER=1)
    chase = ptx[ptx.index(".entry chase("):ptx.index(".entry chase_link")]
    loads = re.findall(r"ld\.global\.ca\.u64\s+(%rd\d+), \[(%rd\d+)\];", chase)
    assert len(loads) >= 16 and len(re.findall(r"%clock64", chase)) == 2
    assert all(address == before for (before, _), (_, address) in zip(loads, loads[1:])), loads
    link = ptx[ptx.index(".entry chase_link"):ptx.index(".entry empty")]
    assert re.search(r"st\.global\.u64", link)                        # 8-byte addresses, written in place


def nvdisasm() -> str | None:
    """nvdisasm on PATH or from the nvidia-cuda-nvdisasm wheel in this environment."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    import sysconfig
    wheel = sorted(Path(sysconfig.get_paths()["purelib"]).glob("nvidia/*/bin/nvdisasm"))
    return str(wheel[0]) if wheel else None


@pytest.mark.skipif(shutil.which("nvcc") is None or nvdisasm() is None, reason="nvcc or nvdisasm is not installed")
def test_the_pointer_chase_sass_has_nothing_between_its_loads(tmp_path):
    cubin = tmp_path / "mem.cubin"     # ptxas for Hopper, as NVRTC builds it
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", "-DCLOCK=1", f"-DROUND={chase_workload.ROUND}", "-DPOINTER=1",
                    str(SOURCE), "-o", str(cubin)], check=True, capture_output=True, text=True)
    sass = subprocess.run([nvdisasm(), "-c", str(cubin)], check=True, capture_output=True, text=True).stdout
    body = sass[sass.index(".text.chase:"):]
    assert pointer_chase_problem(body[:body.index("EXIT")]) is None, pointer_chase_problem(body)


def pointer_chase_problem(sass: str) -> str | None:
    """Why a chase kernel's SASS is not a pointer chase (None where it is): 16 or more 8-byte LDG,
    each from the register pair the one before loaded, and between them no address arithmetic,
    bounds check or write to those registers (the loop counter may sit there). Also read by
    tests/test_gpu_chase.py on the kernel NVRTC built."""
    ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?P\d\s+)?([A-Z][\w.]*)\s*([^;]*);", sass)
    loads = [(op, args) for op, args in ops if op.startswith("LDG")]
    if len(loads) < 16 or any(not op.startswith("LDG.E.64") for op, _ in loads):
        return f"not 16 or more 8-byte loads: {sorted({op for op, _ in loads})}"
    chain = [re.match(r"(R\d+), desc\[UR\d+\]\[(R\d+)\.64\]", args).groups() for _, args in loads]
    if not all(address == before for (before, _), (_, address) in zip(chain, chain[1:])):
        return f"a load's address is not the last load's result: {chain}"
    first, last = ops.index(loads[0]), ops.index(loads[-1])
    between = [(op, args) for op, args in ops[first:last] if not op.startswith("LDG")]
    if any(op.startswith(("IMAD", "LEA", "SHF", "ISETP.GE")) for op, _ in between):
        return f"address arithmetic or a bounds check between the loads: {between}"
    if {args.split(",")[0].strip() for _, args in between if args} & {r for pair in chain for r in pair}:
        return f"an instruction between the loads writes their registers: {between}"
    return None

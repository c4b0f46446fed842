"""shaders/alu.cu, the CUDA/HIP vector-ALU source: compiled to PTX with nvcc and checked for the
instructions each variant must issue, and for the define it must not do without (CI, no GPU); on
an NVIDIA GPU with CuPy, run and checked against the same host reference as the Vulkan kernels
(marker gpu)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from peakbench.catalog import alu_reference as ref
from peakbench.catalog.matrix_reference import _encode
from peakbench.workloads import alu as alu_workload

SOURCE = Path(__file__).resolve().parents[1] / "shaders" / "alu.cu"
ACC, UNROLL = 8, 4
# (dtype, kernel, element, lanes per element, width in lanes, the instruction each step must be)
CASES = [("fp64", "fma", "double", 1, 2, r"fma\.rn\.f64"), ("fp32", "fma", "float", 1, 4, r"fma\.rn\.f32"),
         ("fp16", "fma", "__half2", 2, 4, r"fma\.rn\.f16x2"), ("bf16", "fma", "bfloat162", 2, 2, r"fma\.rn\.bf16x2"),
         ("int32", "fma", "int", 1, 4, r"mad\.lo\.s32"), ("int16", "fma", "short", 1, 1, r"mul\.lo\.s16"),
         ("int64", "fma", "long long", 1, 2, r"mul\.lo\.s64"),
         ("int8", "dot4x8", "int", 1, 2, r"dp4a\.s32\.s32")]
# The instructions one loop iteration issues: UNROLL 4 x ACC 8 x the elements of a width
# (width / lanes): fp64 4*8*2, fp32 4*8*4, fp16 4*8*(4/2), bf16 4*8*(2/2), int32 4*8*4, int16 4*8*1,
# int8 4*8*2, int64 4*8*2 (PTX's 64-bit multiply; ptxas splits it into 32-bit IMADs).
STEPS = {"fp64": 64, "fp32": 128, "fp16": 64, "bf16": 32, "int32": 128, "int16": 32, "int8": 64, "int64": 64}
IDS = [c[0] for c in CASES]


def defines(kernel, element, lanes, width):
    return {"E": element, "STEP_DOT4X8": int(kernel == "dot4x8"), "VEC": width // lanes, "ACC": ACC, "UNROLL": UNROLL,
            **alu_workload.DEFINES}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("dtype, kernel, element, lanes, width, instruction", CASES, ids=IDS)
def test_ptx_issues_the_native_instruction(tmp_path, dtype, kernel, element, lanes, width, instruction):
    out = tmp_path / "alu.ptx"
    flags = [f"-D{k}={v}" for k, v in defines(kernel, element, lanes, width).items()]
    subprocess.run(["nvcc", "-ptx", "-arch=sm_90", *flags, str(SOURCE), "-o", str(out)], check=True,
                   capture_output=True, text=True)
    ptx = out.read_text()
    assert len(re.findall(instruction, ptx)) >= STEPS[dtype], f"{dtype}: fewer {instruction} than steps"
    if dtype == "fp16":
        assert not re.search(r"fma\.rn\.f16\s", ptx), "fp16 must be packed, never scalar"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_seed_count_has_no_default_in_the_source(tmp_path):
    flags = [f"-D{k}={v}" for k, v in defines("fma", "float", 1, 1).items() if k != "SEEDS"]
    done = subprocess.run(["nvcc", "-ptx", "-arch=sm_90", *flags, str(SOURCE), "-o", str(tmp_path / "alu.ptx")],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "SEEDS" in done.stderr


def element_bytes(dtype, values):
    if dtype == "bf16":
        return _encode(values, "bf16")
    return np.ascontiguousarray(values).tobytes()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, kernel, element, lanes, width, instruction", CASES, ids=IDS)
def test_cuda_kernel_matches_the_host_reference(dtype, kernel, element, lanes, width, instruction):
    cp = pytest.importorskip("cupy")
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception:
        pytest.skip("no CUDA device")
    options = tuple(f"-D{k}={v}" for k, v in defines(kernel, element, lanes, width).items())
    module = cp.RawModule(code=SOURCE.read_text(), options=("--std=c++17", *options), name_expressions=None)
    fn = module.get_function("alu")
    inputs = ref.make_inputs(kernel, dtype, width)
    data = element_bytes(dtype, inputs.seeds) + element_bytes(dtype, inputs.params)
    threads, block = 4096, 256
    inp = cp.asarray(np.frombuffer(data, np.uint8))
    itemsize = 2 if dtype in ("bf16", "fp16", "int16") else (8 if dtype in ("fp64", "int64") else 4)
    out = cp.full(threads * ACC * width * itemsize, 0xFF, dtype=cp.uint8)
    done = cp.zeros(1, dtype=cp.uint32)
    fn((threads // block,), (block,), (out, inp, done, np.uint32(1)))
    assert int(done[0]) == threads // block          # the launch witness: one a block
    got = cp.asnumpy(out)
    want = ref.reference(kernel, dtype, inputs, ACC, UNROLL, np.arange(threads))
    if dtype == "bf16":
        got = (got.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        got = got.view(want.dtype)
    assert ref.compare(kernel, dtype, got.reshape(want.shape), want) is None

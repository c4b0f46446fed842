"""shaders/atomic.cu: compiled with nvcc for sm_90a, every add of the loop is the hardware's atomic
(REDG.E.ADD for global u32 and f32, ATOMS.ADD for shared u32) and the shared f32 add that the
CUDA table calls a compare-and-swap loop is one (CI, no GPU); on an NVIDIA GPU with CuPy, the
final memory holds the host's sums (marker gpu)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from peakbench.catalog import default_catalog
from peakbench.evidence import sass
from peakbench.kernels import atomic as cuda_atomic
from peakbench.workloads import atomic
from test_shaders_sfu import NVCC, nvdisasm

SOURCE = Path(__file__).resolve().parents[1] / "shaders" / "atomic.cu"
CATALOG = default_catalog()
UNROLL = 16


def flags(test, dtype: str) -> list[str]:
    variant = next(v for v in test.variants if v.name == dtype)
    return [f"-D{k}={v}" for k, v in atomic.defines(test, variant, 32, 256).items()]


def kernel_ops(tmp_path, test, dtype, loop: bool = False) -> list[str]:
    """The kernel's opcodes; `loop`: those of its iterations loop only (the launch count's add
    after the loop is not one of the test's adds)."""
    cubin = tmp_path / "atomic.cubin"
    subprocess.run([NVCC, "-cubin", "-arch=sm_90a", *flags(test, dtype), str(SOURCE), "-o", str(cubin)],
                   check=True, capture_output=True, text=True)
    listing = subprocess.run([nvdisasm(), "-c", str(cubin)], check=True, capture_output=True, text=True).stdout
    if loop:
        listing = sass.innermost(sass.with_addresses(listing))[0]
    return re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w\s+)?([A-Z][A-Z0-9_.]*)", listing)


needs_nvcc = pytest.mark.skipif(NVCC is None or nvdisasm() is None, reason="nvcc or nvdisasm is not installed")


@needs_nvcc
@pytest.mark.parametrize("name, dtype, opcode", [
    ("atomic.global_add", "u32", "REDG.E.ADD.STRONG.GPU"),
    ("atomic.global_add", "f32", "REDG.E.ADD.F32.FTZ.RN.STRONG.GPU"),
    ("atomic.global_add_contended", "u32", "REDG.E.ADD.STRONG.GPU"),
    ("atomic.global_add_contended", "f32", "REDG.E.ADD.F32.FTZ.RN.STRONG.GPU"),
    ("atomic.shared_add", "u32", "ATOMS.ADD")])
def test_every_add_is_one_hardware_atomic(tmp_path, name, dtype, opcode):
    test = CATALOG.get(name)
    ops = kernel_ops(tmp_path, test, dtype, loop=True)
    assert ops.count(opcode) % UNROLL == 0 and ops.count(opcode) >= UNROLL, ops
    assert not [op for op in kernel_ops(tmp_path, test, dtype) if "CAS" in op], "no compare-and-swap loop"
    assert opcode.startswith(cuda_atomic.INSTRUCTION["cuda"][test.space])


@needs_nvcc
def test_shared_float_add_is_a_compare_and_swap_loop_as_the_table_says(tmp_path):
    ops = kernel_ops(tmp_path, CATALOG.get("atomic.shared_add"), "f32")
    assert any(op.startswith("ATOMS.CAS") for op in ops) and "ATOMS.ADD" not in ops
    assert "ATOMS.CAS" in cuda_atomic.NO_SHARED_FLOAT


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["atomic.global_add", "atomic.global_add_contended", "atomic.shared_add"])
@pytest.mark.parametrize("dtype", ["u32", "f32"])
def test_cuda_kernel_leaves_the_host_sums(name, dtype):
    cp = pytest.importorskip("cupy")
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception:
        pytest.skip("no CUDA device")
    test = CATALOG.get(name)
    if test.space == "shared" and dtype == "f32":
        pytest.skip("not native on NVIDIA (the CUDA table says why)")
    fn = cp.RawModule(code=SOURCE.read_text(), options=("--std=c++17", *flags(test, dtype))).get_function("atomic")
    threads, block = 8192, 256
    n = atomic.words(test, threads, 32)
    for iterations in (1, 2):
        out, done = cp.zeros(n, dtype=atomic.DTYPES[dtype]), cp.zeros(1, dtype=cp.uint32)
        fn((threads // block,), (block,), (out, done, np.uint32(iterations)))
        assert int(done[0]) == threads // block          # the launch witness: one a block
        assert atomic.check(test, dtype, threads, 32, iterations * UNROLL, cp.asnumpy(out)) is None

"""On a real NVIDIA GPU (the H200), through cuBLASLt: the fill kernel makes the operands' words the
host makes for its check, every gemm test verifies at a small and at the default shape, a
corrupted operand on the device is caught, the CLI reports every gemm test ok
with its algorithm, and gemm.bf16.fp32 at 8192^3 is within 3% of torch.matmul (cuBLAS) on the
same board, timed the way the peers time it (a burst: the algorithm search), and sustained below
that only under a power throttle the result names. Run on the GPU machine with
`pytest --gpu tests/test_gpu_gemm.py`."""
from __future__ import annotations

import statistics

import numpy as np
import pytest

from helpers import run_peakbench
from peakbench.catalog import default_catalog
from peakbench.catalog.gemm import TESTS, shape
from peakbench.report.result import load_json
from peakbench.workloads.gemm import OFFSETS, STORAGE, Operand, OperandFill

pytestmark = pytest.mark.gpu

CATALOG = default_catalog()
TORCH_BF16_H200 = 793.4         # TFLOPS, torch bf16 8192^3 on this H200 (shared/peers/README.md)


@pytest.mark.parametrize("kind", ["fp64", "tf32", "bf16", "fp8_e4m3", "int8"])
def test_the_fill_kernel_makes_the_words_the_host_checks_against(cuda_device, kind):
    rt, op = cuda_device.rt, Operand(kind, 96, 4096, OFFSETS["b"])
    fill, buf = OperandFill(rt), rt.alloc(op.nbytes)
    try:
        fill(buf, op, op.form())
        got = np.frombuffer(rt.download(buf, op.nbytes), STORAGE[kind]).reshape(op.rows, op.cols)
        assert np.array_equal(got.view(np.uint8), op.host_rows(np.arange(op.rows)).view(np.uint8))
    finally:
        fill.close()
        rt.free(buf)


@pytest.mark.parametrize("test", TESTS, ids=lambda t: t.name)
@pytest.mark.parametrize("size", [1024, 8192])
def test_every_gemm_test_verifies_on_the_gpu(cuda_device, test, size):
    reason = cuda_device.support(test)
    if reason:
        pytest.skip(reason)
    w = cuda_device.prepare(test, shape(size, size, size))
    try:
        assert w.verify() is None, w.evidence
        assert w.evidence["library"].startswith("cuBLASLt ") and w.evidence["algorithms"]
        seconds = w.run(3)
        assert seconds > 0
        rate = 3 * 2 * size ** 3 / seconds / 1e12
        assert rate > (1 if size == 1024 else 20), f"{rate:.1f} T{test.unit[1:]}"
    finally:
        w.close()


def test_a_corrupted_operand_on_the_device_is_caught(cuda_device):
    test = CATALOG.get("gemm.bf16.fp32")
    w = cuda_device.prepare(test, shape(1024, 1024, 1024))
    try:
        import cupy
        w.gemm.buffers["a"].fill(0)       # the device's A no longer holds the host's operands
        cupy.cuda.runtime.deviceSynchronize()
        problem = w.verify()
        assert problem and "float64 product" in problem, problem
    finally:
        w.close()


@pytest.fixture(scope="module")
def cli_run(cuda_device, tmp_path_factory):
    path = tmp_path_factory.mktemp("gemm") / "gemm.json"
    p = run_peakbench("--backend", "cuda", "--tests", "gemm.*,matrix.bf16.fp32", "--json", str(path), timeout=900)
    assert path.exists(), p.stderr
    (run,) = load_json(path)["runs"]
    return p, {r["test"]: r for r in run["results"]}


def test_the_cli_reports_every_gemm_test_ok_with_its_algorithm(cli_run):
    p, results = cli_run
    assert p.returncode == 0, p.stderr
    for test in TESTS:
        r = results[test.name]
        assert r["status"] == "ok", f"{test.name}: {r['reason']}"
        assert r["evidence"]["verified"] and r["evidence"]["algorithm"], r["evidence"]
        assert r["params"]["m"] == r["params"]["n"] == r["params"]["k"] == 8192
    assert "gemm.bf16.fp32" in p.stdout


def torch_bf16_tflops(n: int = 8192, warm: int = 5, reps: int = 20) -> float:
    """torch.matmul on random normal bf16 data: `warm` untimed products, then the median of `reps`
    products each between its own pair of CUDA events."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(warm):
        torch.matmul(a, b, out=c)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        torch.matmul(a, b, out=c)
        end.record()
    torch.cuda.synchronize()
    ms = statistics.median(s.elapsed_time(e) for s, e in events)
    del a, b, c
    torch.cuda.empty_cache()
    return 2 * n ** 3 / (ms * 1e-3) / 1e12


def search_tflops(result) -> float:
    """The kept algorithm's rate in the algorithm search: 3 GEMMs each (bf16), right after the operands
    are made, as short a burst as torch's 20 timed products."""
    n = result["params"]["m"]
    fastest_ms = min(float(line.rsplit(": ", 1)[1].removesuffix(" ms")) for line in result["evidence"]["algorithms"])
    return 2 * n ** 3 / (fastest_ms * 1e-3) / 1e12


def test_bf16_gemm_is_within_3_percent_of_torch_on_this_board(cli_run):
    # Timed as torch is, in a burst, the kept algorithm is within 3% of torch.matmul; sustained
    # through the harness's warm-up and samples it may run slower only under a power throttle,
    # which the result then names (the H200: 692-750 sustained at sw_power_cap, 805-812 in the search).
    _, results = cli_run
    result = results["gemm.bf16.fp32"]
    ours, burst = result["value"], search_tflops(result)
    torch_now = torch_bf16_tflops()
    throttles = result["telemetry"].get("throttle_reasons") or []
    print(f"gemm.bf16.fp32 {ours} TFLOPS sustained ({throttles}), {burst:.1f} in the search:"
          f" {burst / torch_now:.3f} of torch.matmul now ({torch_now:.1f}),"
          f" {burst / TORCH_BF16_H200:.3f} of the peers' recorded {TORCH_BF16_H200}")
    assert burst >= 0.97 * torch_now, f"cuBLASLt {burst:.1f} TFLOPS in the search, torch {torch_now:.1f} TFLOPS now"
    assert ours >= 0.97 * torch_now or "sw_power_cap" in throttles or "hw_power_brake" in throttles, \
        f"cuBLASLt {ours} TFLOPS sustained, torch {torch_now:.1f}, and no power throttle: {result['telemetry']}"


def test_the_bf16_gemm_is_set_beside_the_matrix_peak(cli_run):
    _, results = cli_run
    gemm, matrix = results["gemm.bf16.fp32"], results["matrix.bf16.fp32"]
    assert matrix["status"] == "ok", matrix["reason"]
    ratio = gemm["value"] / matrix["value"]
    print(f"gemm.bf16.fp32 is {ratio:.2f} of matrix.bf16.fp32 ({gemm['value']} / {matrix['value']} TFLOPS)")
    assert 0.5 < ratio < 1.05, ratio

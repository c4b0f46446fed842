"""peakbench's GEMM bursts candidate by candidate, beside torch's own products, all on one
protocol: after the GPU idled IDLE_S, 5 products untimed, then 20 timed one by one (each its own
GPU time), the median, as the peer bundle's torch-peaks times torch (PERFORMANCE_ANALYSIS.md,
"The GEMM burst like with like"). peakbench's products run through the CUDA backend's own
workload (its operand fill, 8192^3, the cuBLASLt heuristic's candidates, TN); torch's on normal
data (torch.randn, what torch-peaks uses) and on peakbench's fill's bit pattern (two random
exponent bits). Two rounds, the second in reverse order. From the repository, on an NVIDIA GPU
with CuPy and torch:

    python3 scripts/probes/gemm_burst.py [out.json [dtype ...]]
"""
import json
import statistics
import sys
import time

import torch

from peakbench.backend import load
from peakbench.catalog import default_catalog

N, WARM, REPS, IDLE_S = 8192, 5, 20, 1.0
TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8_e4m3": torch.float8_e4m3fn}
SIZE = {"bf16": 2, "fp16": 2, "fp8_e4m3": 1}
WORDS = {1: torch.uint8, 2: torch.int16}
E2 = {"bf16": (0x81FF, 0x3E00), "fp16": (0x8FFF, 0x3000), "fp8_e4m3": (0x9F, 0x20)}   # workloads/gemm.py


def torch_operand(kind: str, form: str) -> torch.Tensor:
    dtype = TORCH[kind]
    if form == "normal":
        return torch.randn(N, N, device="cuda").to(dtype)
    size, (keep, set_bits) = SIZE[kind], E2[kind]
    words = (torch.randint(0, 1 << (8 * size), (N, N), device="cuda", dtype=torch.int32) & keep) | set_bits
    if size == 2:
        words = torch.where(words >= 1 << 15, words - (1 << 16), words)
    return words.to(WORDS[size]).view(dtype)


def torch_product(kind: str, form: str):
    a, b = torch_operand(kind, form), torch_operand(kind, form)
    if kind == "fp8_e4m3":
        one, bt = torch.ones((), device="cuda"), b.t()
        return lambda: torch._scaled_mm(a, bt, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return lambda: torch.matmul(a, b)


def torch_times(fn) -> list[float]:
    for _ in range(WARM):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(REPS)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e-3 for s, e in events]


def peakbench_times(gemm, algo: int) -> list[float]:
    gemm.algo = algo
    for _ in range(WARM):
        gemm.run(1)
    return [gemm.run(1) for _ in range(REPS)]


def save(out: str | None, rows: list[dict]) -> None:
    """The rows as JSON at `out`, where one was named."""
    if out:
        with open(out, "w") as f:
            json.dump(rows, f, indent=1)


def tflops(seconds: list[float]) -> float:
    return round(2 * N ** 3 / statistics.median(seconds) / 1e12, 1)


def main() -> int:
    out = sys.argv[1] if len(sys.argv) > 1 else None
    kinds = sys.argv[2:] or list(TORCH)
    backend = load("cuda")
    device = backend.open(0)
    catalog, found = default_catalog(), []
    try:
        for kind in kinds:
            test = catalog.get(f"gemm.{kind}.fp32")
            workload = device.prepare(test, device.variants(test)[0])
            gemm = workload.gemm
            searched = gemm.algo
            forms = [("torch", "normal"), ("torch", "e2")] + [("peakbench", i) for i in range(len(gemm.plan.algos))]
            products = {f: torch_product(kind, f[1]) for f in forms if f[0] == "torch"}
            for round_ in (1, 2):
                for form in (forms if round_ == 1 else forms[::-1]):
                    time.sleep(IDLE_S)
                    seconds = (torch_times(products[form]) if form[0] == "torch"
                               else peakbench_times(gemm, form[1]))
                    row = {"dtype": kind, "who": form[0], "form": form[1], "round": round_, "tflops": tflops(seconds),
                           "searched": form[0] == "peakbench" and form[1] == searched}
                    found.append(row)
                    print(json.dumps(row), flush=True)
            products.clear()
            workload.close()
            torch.cuda.empty_cache()
    finally:
        device.close()
        backend.close()
    save(out, found)
    return 0


if __name__ == "__main__":
    sys.exit(main())

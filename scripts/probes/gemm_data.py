"""What the operand data costs a GEMM's burst: torch's 8192^3 products (the peer bundle's
torch-peaks protocol: 5 warm-ups, 20 products timed one by one, the median) on the normal data
torch-peaks uses and on a stand-in for peakbench's (|x| uniform in [0.5, 2), random sign: a third
of the values under 1, where peakbench's fill puts half), each after the
GPU idled, with NVML's SM clock read every 5 ms while it ran (PERFORMANCE_ANALYSIS.md, "GEMM
bursts: the data and the algorithm"). On an NVIDIA GPU with torch:

    CUBLASLT_LOG_LEVEL=2 CUBLASLT_LOG_FILE=lt.log python3 scripts/probes/gemm_data.py
"""
import statistics
import threading
import time

import pynvml
import torch

N, WARM, REPS, IDLE_S = 8192, 5, 20, 3.0


def normal(dtype):
    return torch.randn(N, N, device="cuda").to(dtype)


def ours(dtype):
    """|x| uniform in [0.5, 2) with a random sign: every mantissa bit random, no value near zero."""
    x = torch.rand(N, N, device="cuda") * 1.5 + 0.5
    return (x * (torch.randint(0, 2, (N, N), device="cuda") * 2 - 1)).to(dtype)


def product(dtype, a, b):
    if dtype == torch.float8_e4m3fn:
        one = torch.ones((), device="cuda")
        bt = b.t()
        return lambda: torch._scaled_mm(a, bt, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return lambda: torch.matmul(a, b)


def sampled(fn, handle):
    """fn's result, and NVML's SM clock (MHz) every 5 ms while it ran."""
    seen, done = [], threading.Event()

    def sample():
        while not done.is_set():
            seen.append(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
            time.sleep(0.005)
    t = threading.Thread(target=sample)
    t.start()
    try:
        return fn(), seen
    finally:
        done.set()
        t.join()


def burst(fn):
    for _ in range(WARM):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(REPS)]
    for s, e in events:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in events]


def main():
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} cuda {torch.version.cuda}")
    for dtype in (torch.float8_e4m3fn, torch.bfloat16):
        for data in (normal, ours, normal, ours):
            torch.manual_seed(0)
            a, b = data(dtype), data(dtype)
            fn = product(dtype, a, b)
            torch.cuda.synchronize()
            time.sleep(IDLE_S)
            ms, clocks = sampled(lambda: burst(fn), handle)
            med = statistics.median(ms)
            print(f"{str(dtype).split('.')[-1]:14s} {data.__name__:7s} {2 * N ** 3 / med / 1e9:7.1f} TFLOPS"
                  f"  median {med:.4f} ms (first {ms[0]:.4f}, last {ms[-1]:.4f})"
                  f"  clock {min(clocks)}-{max(clocks)} MHz ({len(clocks)} readings)")
            del a, b, fn


if __name__ == "__main__":
    main()

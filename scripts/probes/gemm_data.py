"""What the operand data costs a GEMM: torch's 8192^3 products on normal data (torch.randn, what
torch-peaks and most benchmarks use) and on random bit patterns with 1, 2 or 3 random exponent
bits (e1: |x| in [0.5, 2), peakbench's fill before 2026-12-07; e2: [1/8, 2), its fill since
(workloads/gemm.py FLOAT_BITS); e3: [2^-7, 2)), each after the GPU idled: the burst (the peer
bundle's torch-peaks protocol: 5 warm-ups, 20 products timed one by one, the median) and the rate
held over HOLD_S of products back to back, with NVML's SM clock and power read every 10 ms while
they ran (PERFORMANCE_ANALYSIS.md, "The GEMM operands' data"). Each dtype's forms run twice, the
second round in reverse order. On an NVIDIA GPU with torch:

    python3 scripts/probes/gemm_data.py [out.json [dtype ...]]
"""
import json
import statistics
import sys
import threading
import time

import pynvml
import torch


N, WARM, REPS, IDLE_S, HOLD_S = 8192, 5, 20, 2.0, 3.0
TYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8_e4m3": torch.float8_e4m3fn}
SIZE = {"bf16": 2, "fp16": 2, "fp8_e4m3": 1}
WORDS = {1: torch.uint8, 2: torch.int16}
# (keep, set) of the raw element for 1, 2 and 3 random exponent bits below 2: sign and mantissa random
FORMS = {"bf16": {1: (0x80FF, 0x3F00), 2: (0x81FF, 0x3E00), 3: (0x83FF, 0x3C00)},
         "fp16": {1: (0x87FF, 0x3800), 2: (0x8FFF, 0x3000), 3: (0x9FFF, 0x2000)},
         "fp8_e4m3": {1: (0x8F, 0x30), 2: (0x9F, 0x20), 3: (0xBF, 0x00)}}


def operand(kind: str, form: str) -> torch.Tensor:
    dtype = TYPES[kind]
    if form == "normal":
        return torch.randn(N, N, device="cuda").to(dtype)
    size, (keep, set_bits) = SIZE[kind], FORMS[kind][int(form[1])]
    words = torch.randint(0, 1 << (8 * size), (N, N), device="cuda", dtype=torch.int32)
    words = (words & keep) | set_bits
    if size == 2:
        words = torch.where(words >= 1 << 15, words - (1 << 16), words)     # as int16's two's complement
    return words.to(WORDS[size]).view(dtype)


def product(kind, a, b):
    if kind == "fp8_e4m3":
        one, bt = torch.ones((), device="cuda"), b.t()
        return lambda: torch._scaled_mm(a, bt, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return lambda: torch.matmul(a, b)


class Sampler:
    """NVML's SM clock (MHz) and power (W) every 10 ms while it is on."""

    def __init__(self, handle):
        self.handle, self.seen, self.done = handle, [], threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self):
        while not self.done.is_set():
            self.seen.append((time.perf_counter(), pynvml.nvmlDeviceGetClockInfo(self.handle, pynvml.NVML_CLOCK_SM),
                              pynvml.nvmlDeviceGetPowerUsage(self.handle) / 1e3))
            time.sleep(0.01)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()

    def between(self, t0, t1):
        got = [(c, p) for t, c, p in self.seen if t0 <= t <= t1]
        if not got:
            return None, None
        return round(statistics.mean(c for c, _ in got)), round(statistics.mean(p for _, p in got), 1)


def measure(fn, handle) -> dict:
    for _ in range(WARM):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(REPS)]
    with Sampler(handle) as s:
        t0 = time.perf_counter()
        for a, e in events:
            a.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        ms = statistics.median(a.elapsed_time(e) for a, e in events)
        # held: products back to back for HOLD_S; the rate of the last second
        end, marks = t1 + HOLD_S, []
        while time.perf_counter() < end:
            e = torch.cuda.Event(enable_timing=True)
            for _ in range(20):
                fn()
            e.record()
            marks.append(e)
            marks[-1].synchronize()
        t2 = time.perf_counter()
    last = max(1, len(marks) // 3)
    held_ms = marks[-last - 1].elapsed_time(marks[-1]) / (20 * last)
    burst_clock, burst_power = s.between(t0, t1)
    held_clock, held_power = s.between(t2 - 1.0, t2)
    return {"burst_tflops": round(2 * N ** 3 / ms / 1e9, 1), "burst_mhz": burst_clock, "burst_w": burst_power,
            "held_tflops": round(2 * N ** 3 / held_ms / 1e9, 1), "held_mhz": held_clock, "held_w": held_power}


def main():
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} cuda {torch.version.cuda}", flush=True)
    rows = []
    forms = ["normal", "e1", "e2", "e3"]
    for kind in sys.argv[2:] or TYPES:
        for rnd, order in enumerate((forms, forms[::-1])):
            for form in order:
                torch.manual_seed(0)
                a, b = operand(kind, form), operand(kind, form)
                fn = product(kind, a, b)
                torch.cuda.synchronize()
                time.sleep(IDLE_S)
                row = {"type": kind, "form": form, "round": rnd + 1, **measure(fn, handle)}
                rows.append(row)
                print(json.dumps(row), flush=True)
                del a, b, fn
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

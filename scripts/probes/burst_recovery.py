"""How long after a power-capped load does a GEMM burst run as it does on a rested GPU? Inside
peakbench's default suite the GEMM bursts ran 2.5-5% under the same tests alone, and fp8's same
kernel burst 6.3% slower 1 s after capped matrix tests (PERFORMANCE_ANALYSIS.md, "The GEMM
burst after capped tests"). Here torch's 8192^3 products: HOLD_S of them back to back (the cap's
load), then an idle of each length in IDLES, then the burst on torch-peaks' protocol (5 untimed,
20 timed one by one, the median); NVML's power (its one-second average and the instantaneous
field), SM clock and temperature read every 10 ms throughout. Against a burst after REST_S of
idle. Two rounds, the second in reverse order: about 2 minutes a type. On an
NVIDIA GPU with torch, from the repository (gemm_burst.py beside it imports peakbench):

    PYTHONPATH=. python3 scripts/probes/burst_recovery.py [out.json [dtype ...]]
"""
import json
import sys
import threading
import time

import pynvml
import torch

from gemm_burst import save, tflops, torch_product, torch_times      # this folder's probe: torch-peaks' protocol

HOLD_S, REST_S = 4.0, 6.0
IDLES = (1.0, 2.0, 4.0, 8.0)
INSTANT = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", 186)     # nvml.h
TYPES = ("bf16", "fp8_e4m3")


def burst(fn) -> float:
    return tflops(torch_times(fn))


def hold(fn) -> None:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < HOLD_S:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()


class Readings:
    """NVML's power (W: its average, the instantaneous field), SM clock (MHz) and temperature (C)
    every 10 ms, with the time."""

    def __init__(self, handle):
        self.handle, self.seen, self.done = handle, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.done.is_set():
            h = self.handle
            instant = pynvml.nvmlDeviceGetFieldValues(h, [INSTANT])[0]
            self.seen.append((time.perf_counter(), pynvml.nvmlDeviceGetPowerUsage(h) / 1e3,
                              instant.value.uiVal / 1e3 if instant.nvmlReturn == 0 else None,
                              pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                              pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)))
            time.sleep(0.01)

    def at(self, t: float) -> dict:
        """The reading nearest before `t`."""
        before = [r for r in self.seen if r[0] <= t] or self.seen[:1]
        _, average, instant, mhz, celsius = before[-1]
        return {"power_w": round(average, 1), "instant_w": instant and round(instant, 1), "sm_mhz": mhz,
                "temperature_c": celsius}

    def trace(self, since: float, until: float, every: float = 0.25) -> list:
        """The readings from `since` to `until`, one each `every` s, as [s after since, dict]."""
        return [[round(t - since, 2), self.at(t)] for t in
                (since + i * every for i in range(int((until - since) / every) + 1))]


def main() -> int:
    out = sys.argv[1] if len(sys.argv) > 1 else None
    kinds = sys.argv[2:] or list(TYPES)
    pynvml.nvmlInit()
    readings = Readings(pynvml.nvmlDeviceGetHandleByIndex(0))
    readings.thread.start()
    rows = []
    try:
        for kind in kinds:
            fn = torch_product(kind, "normal")
            for round_ in (1, 2):
                for idle in (IDLES if round_ == 1 else IDLES[::-1]):
                    time.sleep(REST_S)
                    rested = burst(fn)
                    hold(fn)
                    ended = time.perf_counter()
                    time.sleep(idle)
                    began = time.perf_counter()
                    value = burst(fn)
                    row = {"dtype": kind, "round": round_, "idle_s": idle, "burst": value, "rested": rested,
                           "ratio": round(value / rested, 4), "at_burst": readings.at(began),
                           "after_burst": readings.at(time.perf_counter()), "at_hold_end": readings.at(ended)}
                    if idle == max(IDLES):
                        row["idle_trace"] = readings.trace(ended, began)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        readings.done.set()
        pynvml.nvmlShutdown()
    save(out, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How a test's rate settles once its kernel starts: after AFTER's kernel has loaded the GPU for
LOAD_S (as the test before it in a suite would), the test's screening variant (the one --quick
measures) is calibrated to 5 ms launches, as --quick's, and launched back to back for SECONDS;
each launch's rate and the clock read after it, printed in bins of BIN_S. From the repository:

    python3 scripts/probes/warmup_series.py BACKEND TEST [--after TEST] [--seconds S] [--json out.json]
"""
import argparse
import json
import statistics
import sys
import time

from peakbench.backend import load
from peakbench.catalog import default_catalog
from peakbench.harness.runner import Settings, calibrate, rate, screening_variants

LOAD_S, BIN_S, SAMPLE_S = 1.0, 0.05, 0.005


def prepared(device, test):
    variant = screening_variants(test, device.variants(test))[0]
    workload = device.prepare(test, variant)
    problem = workload.verify()
    if problem:
        workload.close()
        raise SystemExit(f"{test.name}: {problem}")
    axis = workload.axis(None)
    if axis is not None:
        workload.at(axis.points[0])
    return variant, workload


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backend")
    parser.add_argument("test")
    parser.add_argument("--after")
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--json")
    args = parser.parse_args()
    backend = load(args.backend)
    device = backend.open(0)
    catalog, rows = default_catalog(), []
    try:
        if args.after:
            _, before = prepared(device, catalog.get(args.after))
            size, _ = calibrate(before.run, Settings(sample_s=SAMPLE_S))
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < LOAD_S:
                before.run(size)
            before.close()
        test = catalog.get(args.test)
        variant, workload = prepared(device, test)
        try:
            t0 = time.perf_counter()
            size, _ = calibrate(workload.run, Settings(sample_s=SAMPLE_S))
            while time.perf_counter() - t0 < args.seconds:
                seconds = workload.run(size)
                rows.append((time.perf_counter() - t0, rate(workload.items(size), seconds, test.per_item(variant), test.unit),
                             device.clock_mhz()))
        finally:
            workload.close()
    finally:
        device.close()
        backend.close()
    bins = {}
    for t, value, mhz in rows:
        bins.setdefault(int(t / BIN_S), []).append((value, mhz))
    out = []
    for b, got in sorted(bins.items()):
        row = {"t_ms": round(b * BIN_S * 1e3), "launches": len(got),
               "rate": round(statistics.median(v for v, _ in got), 2),
               "mhz": statistics.median(m for _, m in got) if all(m for _, m in got) else None}
        out.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({"backend": args.backend, "test": args.test, "variant": variant.name, "after": args.after,
                      "size": size}))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"test": args.test, "after": args.after, "bins": out}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

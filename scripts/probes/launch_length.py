"""Does a test's rate depend on how long one launch runs? --quick calibrates each test to launches
of 5 ms and the default suite to 10 ms, so where the rate moves with the launch's length the two
profiles disagree for no fault of either (Vulkan on an H100: the contended atomic's f32 read 37.3
at 16 iterations against 35.3 at 32, memory.l2 14641 GB/s at size 1024 against 15320 at 4096;
PERFORMANCE_ANALYSIS.md, "Quick against the default suite"). Each variant of each test named is
prepared as the suite prepares it (a test over an axis at its first point, where --quick
measures it: memory.l2's smallest working set), warmed up for WARM_S, then timed at each size in SIZES x the
size whose launch takes BASE_S, LAUNCHES launches a size, the median; three rounds, the second in
reverse order. From the repository:

    python3 scripts/probes/launch_length.py BACKEND TEST [TEST ...] [--json out.json]
"""
import argparse
import json
import statistics
import sys
import time

from peakbench.backend import load
from peakbench.catalog import default_catalog
from peakbench.harness.runner import Settings, calibrate, rate
from peakbench.specs import load_database, match

WARM_S, BASE_S, LAUNCHES = 0.3, 0.005, 7
SIZES = (0.25, 0.5, 1, 2, 4, 8)


def rates_by_size(workload, per_item: float, unit: str) -> dict:
    base, _ = calibrate(workload.run, Settings(sample_s=BASE_S))
    sizes = sorted({max(1, int(base * f)) for f in SIZES})
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < WARM_S:
        workload.run(base)
    found = {s: [] for s in sizes}
    for round_ in range(3):
        for size in (sizes if round_ % 2 == 0 else sizes[::-1]):
            seconds = [workload.run(size) for _ in range(LAUNCHES)]
            found[size].append((statistics.median(seconds),
                                statistics.median(rate(workload.items(size), s, per_item, unit) for s in seconds)))
    return {s: {"ms": round(min(t for t, _ in r) * 1e3, 3), "rates": [round(v, 2) for _, v in r]}
            for s, r in found.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backend")
    parser.add_argument("tests", nargs="+")
    parser.add_argument("--json")
    args = parser.parse_args()
    backend = load(args.backend)
    device = backend.open(0)
    catalog, rows = default_catalog(), []
    info = device.info
    spec = match(load_database(), info.name, info.vendor_id, info.device_id)     # memory.l2's L2 size
    try:
        for name in args.tests:
            test = catalog.get(name)
            for variant in device.variants(test):
                workload = device.prepare(test, variant)
                try:
                    problem = workload.verify()
                    axis = workload.axis(spec)
                    if axis is not None:
                        workload.at(axis.points[0])
                    if problem:
                        print(f"{name} {variant.name}: {problem}", flush=True)
                        continue
                    by_size = rates_by_size(workload, test.per_item(variant), test.unit)
                finally:
                    workload.close()
                for size, found in by_size.items():
                    row = {"backend": args.backend, "test": name, "variant": variant.name, "size": size, **found}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        device.close()
        backend.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where in memory the contended atomic's words sit, against its rate, on CUDA: one large buffer
(its own allocation, so its start is aligned as the driver aligns large ones), the workload's
output pointed at OFFSETS into it in turn, each variant calibrated to BASE_S launches, warmed up
WARM_S and timed LAUNCHES times, the median. Two rounds, the second in reverse order. From the
repository:

    python3 scripts/probes/atomic_offset.py [TEST] [--json out.json]
"""
import argparse
import json
import statistics
import sys
import time

from peakbench.backend import load
from peakbench.catalog import default_catalog
from peakbench.harness.runner import Settings, calibrate, rate

WARM_S, BASE_S, LAUNCHES = 0.1, 0.01, 7
OFFSETS_KIB = (0, 4, 32, 64, 96, 128, 192, 256, 512, 960, 1024, 1088, 1920, 1984, 2048, 3072)
BIG = 8 << 20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("test", nargs="?", default="atomic.global_add_contended")
    parser.add_argument("--json")
    args = parser.parse_args()
    backend = load("cuda")
    device = backend.open(0)
    test, rows = default_catalog().get(args.test), []
    big = device.rt.alloc(BIG)
    try:
        for variant in device.variants(test):
            workload = device.prepare(test, variant)
            try:
                problem = workload.verify()
                if problem:
                    print(problem)
                    continue
                nbytes = workload.out.nbytes
                for round_ in range(2):
                    for kib in (OFFSETS_KIB if round_ == 0 else OFFSETS_KIB[::-1]):
                        workload.out = big[kib << 10:(kib << 10) + nbytes]
                        size, _ = calibrate(workload.run, Settings(sample_s=BASE_S))
                        t0 = time.perf_counter()
                        while time.perf_counter() - t0 < WARM_S:
                            workload.run(size)
                        seconds = [workload.run(size) for _ in range(LAUNCHES)]
                        ptr = workload.out.data.ptr
                        row = {"round": round_, "variant": workload.name, "offset_kib": kib, "ptr": hex(ptr),
                               "ptr_mod_2m_kib": (ptr % (2 << 20)) >> 10, "bytes": nbytes, "size": size,
                               "rate": round(statistics.median(rate(workload.items(size), s, test.per_item(variant),
                                                                    test.unit) for s in seconds), 3)}
                        rows.append(row)
                        print(json.dumps(row), flush=True)
            finally:
                workload.close()
    finally:
        del big
        device.close()
        backend.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

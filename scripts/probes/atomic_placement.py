"""Does an atomic test's rate depend on where its output buffer lands in device memory? The
contended atomic's words (one a warp, ~33K on an H100) share few cache lines, 32 words a line, and
the L2 slice a line lives in follows from its physical address: a placement that puts more of
those lines on one slice would slow every variant alike. Before each preparation a pad buffer of
PADS[i] bytes is allocated (and kept until the variant is measured), so the output lands
elsewhere; each variant is calibrated to BASE_S launches, warmed up for WARM_S and timed LAUNCHES
times, the median. Two rounds, the second in reverse order: a placement effect repeats with its pad,
noise does not. --buffer-mib N gives the placed output a buffer of N MiB instead (does a driver
start a large buffer at a 2 MiB boundary of device address, and map it in 2 MiB pages?); each row
names its buffer's offset into 2 MiB. From the repository:

    python3 scripts/probes/atomic_placement.py BACKEND [TEST] [--buffer-mib N] [--json out.json]
"""
import argparse
import json
import statistics
import sys
import time

from peakbench.backend import load
from peakbench.catalog import default_catalog
from peakbench.harness.runner import Settings, calibrate, rate
from peakbench.workloads import atomic

WARM_S, BASE_S, LAUNCHES = 0.3, 0.01, 9
PADS = (0, 1 << 16, 1 << 20, 3 << 20, 8 << 20, 33 << 20, 128 << 20, 700 << 20)


def measure(device, test, variant) -> dict:
    workload = device.prepare(test, variant)
    try:
        problem = workload.verify()
        if problem:
            return {"problem": problem}
        size, _ = calibrate(workload.run, Settings(sample_s=BASE_S))
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < WARM_S:
            workload.run(size)
        seconds = [workload.run(size) for _ in range(LAUNCHES)]
        address = device.rt.address(workload.out) if hasattr(device.rt, "address") else None
        return {"name": workload.name, "size": size, "address": address,
                "into_2mib": None if address is None else address % (2 << 20),
                "rate": round(statistics.median(rate(workload.items(size), s, test.per_item(variant), test.unit)
                                                for s in seconds), 3)}
    finally:
        workload.close()


def sized(mib: int):
    """atomic.placed with a buffer of `mib` MiB, or the words and PLACE where that is more (placed
    sizes the buffer from `nbytes` alone)."""
    placed = atomic.placed
    return lambda rt, nbytes, place: placed(rt, max(nbytes, (mib << 20) - atomic.PLACE) if place else nbytes, place)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backend")
    parser.add_argument("test", nargs="?", default="atomic.global_add_contended")
    parser.add_argument("--buffer-mib", type=int)
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.buffer_mib:
        atomic.placed = sized(args.buffer_mib)
    backend = load(args.backend)
    device = backend.open(0)
    test, rows = default_catalog().get(args.test), []
    try:
        for round_ in range(2):
            for pad in (PADS if round_ == 0 else PADS[::-1]):
                held = device.rt.alloc(pad) if pad else None
                try:
                    for variant in device.variants(test):
                        row = {"backend": args.backend, "buffer_mib": args.buffer_mib, "round": round_, "pad": pad,
                               "variant": variant.name,
                               **measure(device, test, variant)}
                        rows.append(row)
                        print(json.dumps(row), flush=True)
                finally:
                    if held is not None:
                        device.rt.free(held)
    finally:
        device.close()
        backend.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

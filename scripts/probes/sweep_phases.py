"""Where the screening latency sweep's seconds go: the sweep --quick takes (latency.l1's), with
each phase's wall time summed: waiting for the next chain, uploading (and linking) it, the untimed
walk or the flush, finding the launch length, the timed launches and reading the end back. From
the repository:

    python3 scripts/probes/sweep_phases.py BACKEND [--full]
"""
import argparse
import collections
import functools
import sys
import time

from peakbench.backend import load
from peakbench.catalog import default_catalog
from peakbench.harness import runner
from peakbench.specs import load_database, match
from peakbench.workloads import chase

SPENT = collections.defaultdict(float)
CALLS = collections.Counter()


def timed(owner, name, label):
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            SPENT[label] += time.perf_counter() - t
            CALLS[label] += 1
    setattr(owner, name, wrapper)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backend")
    parser.add_argument("--full", action="store_true", help="the default suite's sweep, not the screening one")
    args = parser.parse_args()
    backend = load(args.backend)
    device = backend.open(0)
    info = device.info
    spec = match(load_database(), info.name, info.vendor_id, info.device_id)
    timed(chase.Chaser, "load", "upload and link")
    timed(chase.ChaseSweep, "at", "at (wait, upload, walk or flush)")
    timed(chase.ChaseSweep, "run", "chase launches (walk, length, timed)")
    timed(chase.Chaser, "readout", "readout")
    timed(runner, "launch_length", "launch length")
    timed(chase, "chase_chain", "chain making (maker thread)")
    try:
        test = default_catalog().get("latency.l1")
        workload = device.prepare(test, device.variants(test)[0], spec)
        t = time.perf_counter()
        runner.sweep(workload.sweep, screening=not args.full)
        total = time.perf_counter() - t
        print(f"sweep: {total:.3f} s, {len(workload.sweep.sizes)} points, {workload.sweep.evidence.get('sweep')}")
        for label, seconds in sorted(SPENT.items(), key=lambda kv: -kv[1]):
            print(f"  {label:40} {seconds:7.3f} s  {CALLS[label]:4} calls")
        print("  levels:", {k: round(p.latency_ns, 1) for k, p in workload.sweep.levels(spec).items()})
    finally:
        device.close()
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""On a real GPU (the H200): the whole compute family with full settings, every kernel verified, and
the FMA peaks close to the vendor's at the clock the GPU actually ran. Skipped without a GPU
(see conftest.py); run on the GPU machine with `pytest --gpu tests/test_gpu.py`."""
from __future__ import annotations

import pytest

from helpers import gpu_required, run_peakbench
from peakbench.report.result import load_json

pytestmark = pytest.mark.gpu

FMA_PEAK_TESTS = ("compute.fp64", "compute.fp32", "compute.fp16")
MIN_PCT = 95.0


@pytest.fixture(scope="module")
def gpu_run(request, tmp_path_factory):
    # With --gpu a missing GPU is a failure, not a skip (conftest.py).
    missing = pytest.fail if gpu_required(request.config) else pytest.skip
    from peakbench.backend import BackendUnavailable, load
    try:
        backend = load("vulkan")
    except BackendUnavailable as e:
        missing(str(e))
    try:
        gpus = [d for d in backend.devices() if d.kind != "cpu"]
    finally:
        backend.close()
    if not gpus:
        missing("no Vulkan GPU: every Vulkan device here is a CPU driver")
    path = tmp_path_factory.mktemp("gpu") / "compute.json"
    p = run_peakbench("--backend", "vulkan", "--device", str(gpus[0].index), "--tests", "compute.*",
                      "--json", str(path), timeout=900)
    return p, load_json(path)["runs"][0] if path.exists() else None


def test_every_compute_test_ran_and_was_verified(gpu_run):
    p, run = gpu_run
    assert p.returncode == 0, p.stderr
    statuses = {r["test"]: r["status"] for r in run["results"]}
    assert "failed" not in statuses.values(), p.stderr
    # `ok` means the kernel's output matched the host reference before it was timed.
    for name in ("compute.fp64", "compute.fp32", "compute.fp16", "compute.int32", "compute.int16", "compute.int8"):
        assert statuses[name] == "ok", f"{name}: {statuses[name]}"
    for r in run["results"]:
        if r["status"] == "ok":
            assert r["value"] > 0 and r["stats"]["samples"] >= 10
        else:
            assert r["reason"].split()[0] in ("[hardware]", "[driver]", "[toolchain]", "[api]")


def test_fma_peaks_reach_the_spec_at_the_measured_clock(gpu_run):
    _, run = gpu_run
    if run["spec"] is None:
        pytest.skip(f"no spec matched {run['device']['name']}")
    by_test = {r["test"]: r for r in run["results"]}
    short = []
    for name in FMA_PEAK_TESTS:
        r = by_test[name]
        if r["spec_value"] is None:
            continue
        # % of the peak at the clock read during the test; without a clock reading (no NVML), % of
        # the boost-clock spec, which is the stricter of the two for a GPU at or below boost.
        pct = r["pct_of_clock_peak"] if r["pct_of_clock_peak"] is not None else r["pct_of_spec"]
        if pct < MIN_PCT:
            short.append(f"{name}: {r['value']} {r['unit']} = {pct}% (clock {r['clock_mhz']} MHz)")
    assert not short, "below 95% of peak: " + "; ".join(short)

"""examples/slurm/healthcheck.sh against a fake `peakbench` on PATH (its run writes a prepared record,
its `fleet` is the real one) and a fake `scontrol`: a healthy node exits 0 and stays, a node with a
slow GPU exits 1 and is drained with the reason, a run that writes nothing exits 2."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from helpers import ROOT

SCRIPT = ROOT / "examples" / "slurm" / "healthcheck.sh"

FAKE_PEAKBENCH = """#!/usr/bin/env bash
if [[ $1 == fleet ]]; then exec "$PYTHON" -m peakbench "$@"; fi
echo "$*" > "$CALLS/run"
while [[ $# -gt 0 ]]; do
    if [[ $1 == --json && -n "$RECORD" ]]; then cp "$RECORD" "$2"; fi
    shift
done
exit "${RUN_STATUS:-0}"
"""
FAKE_SCONTROL = """#!/usr/bin/env bash
echo "$*" > "$CALLS/scontrol"
"""


def record(pct_of_spec: float) -> dict:
    result = {"test": "compute.fp32", "status": "ok", "unit": "TFLOPS", "value": 0.67 * pct_of_spec,
              "spec_value": 67.0, "pct_of_spec": pct_of_spec, "reason": None, "stats": None, "clock_mhz": 1980,
              "pct_of_clock_peak": None, "params": {}, "evidence": {}, "series": None,
              "telemetry": {"throttle_reasons": ["sw_power_cap"], "power_w": {"min": 690, "mean": 699, "max": 700}}}
    return {"schema": "peakbench.result/1", "peakbench_version": "0.1.0", "created": "2026-12-01T12:00:00Z",
            "host": {"hostname": "node7", "os": "Linux", "python": "3.11"},
            "runs": [{"backend": "cuda", "device": {"index": 0, "name": "NVIDIA H200", "uuid": "1234abcd-0000"},
                      "spec": {"name": "NVIDIA H200 SXM", "boost_clock_mhz": 1980, "source": "x"},
                      "results": [result]}]}


@pytest.fixture
def node(tmp_path):
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    calls.mkdir()
    for name, text in (("peakbench", FAKE_PEAKBENCH), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)

    def run(pct_of_spec: float | None, **env):
        rec = ""
        if pct_of_spec is not None:
            rec = tmp_path / "record.json"
            rec.write_text(json.dumps(record(pct_of_spec)))
        full = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CALLS": str(calls),
                "RECORD": str(rec), "PYTHON": sys.executable, "RESULTS": str(tmp_path),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), **env}
        p = subprocess.run(["bash", str(SCRIPT)], env=full, capture_output=True, text=True, timeout=60)
        drained = (calls / "scontrol").read_text() if (calls / "scontrol").exists() else None
        return p, (calls / "run").read_text(), drained
    return run


def test_a_healthy_node_exits_0_and_is_not_drained(node):
    p, run, drained = node(98.0)
    assert p.returncode == 0, p.stderr
    assert "--device all --quick" in run and drained is None
    assert "GPUs healthy" in p.stdout


def test_a_slow_gpu_drains_the_node_with_the_reason_and_exits_1(node):
    p, _, drained = node(70.0)
    assert p.returncode == 1, p.stderr
    assert drained.startswith("update nodename=") and "state=drain" in drained
    assert "70.0% of spec, under the floor 85%" in drained and "sw_power_cap" in drained


def test_no_drain_when_told_not_to(node):
    p, _, drained = node(70.0, DRAIN="0")
    assert p.returncode == 1 and drained is None and "unhealthy" in p.stderr


def test_a_run_that_writes_nothing_exits_2_and_drains(node):
    p, _, drained = node(None, RUN_STATUS="2")
    assert p.returncode == 2
    assert "peakbench wrote no result (status 2)" in drained


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_the_script_is_shellcheck_clean():
    p = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout

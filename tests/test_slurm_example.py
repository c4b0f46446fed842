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
if [[ $1 == --version ]]; then echo "peakbench 9.9"; exit "${VERSION_STATUS:-0}"; fi
echo "$*" > "$CALLS/run"
echo "${RUN_MESSAGE:-}" >&2
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
            "host": {"hostname": "node7", "os": "Linux", "python": "3.11"}, "interrupted": False, "complete": True,
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

    def run(pct_of_spec: float | None, edit=lambda doc: None, **env):
        rec = ""
        if pct_of_spec is not None:
            rec = tmp_path / "record.json"
            doc = record(pct_of_spec)
            edit(doc)
            rec.write_text(json.dumps(doc))
        full = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CALLS": str(calls),
                "RECORD": str(rec), "PYTHON": sys.executable, "RESULTS": str(tmp_path),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), **env}
        full = {k: v for k, v in full.items() if v is not None}     # None: unset
        p = subprocess.run(["bash", str(SCRIPT)], env=full, capture_output=True, text=True, timeout=120)
        drained = (calls / "scontrol").read_text() if (calls / "scontrol").exists() else None
        ran = (calls / "run").read_text() if (calls / "run").exists() else None
        return p, ran, drained
    node_run = run
    node_run.bin, node_run.tmp = bin_dir, tmp_path
    return node_run


def test_a_healthy_node_exits_0_and_is_not_drained(node):
    p, run, drained = node(98.0)
    assert p.returncode == 0, p.stderr
    assert "--device all --profile prolog" in run and drained is None
    assert "GPUs healthy" in p.stdout


def test_a_slow_gpu_drains_the_node_with_the_reason_and_exits_1(node):
    p, _, drained = node(70.0)
    assert p.returncode == 1, p.stderr
    assert drained.startswith("update nodename=") and "state=drain" in drained
    assert "70.0% of spec, under the floor 85%" in drained and "sw_power_cap" in drained


def test_no_drain_when_told_not_to(node):
    p, _, drained = node(70.0, DRAIN="0")
    assert p.returncode == 1 and drained is None and "unhealthy" in p.stderr


def test_options_peakbench_refuses_exit_2_without_draining(node):
    p, _, drained = node(None, RUN_STATUS="2", RUN_MESSAGE="peakbench: error: --tests 'x' matches no test")
    assert p.returncode == 2 and drained is None
    assert "peakbench could not run" in p.stderr and "matches no test" in p.stderr


def test_a_run_killed_before_its_first_write_drains_and_exits_1(node):
    p, _, drained = node(None, RUN_STATUS="137")
    assert p.returncode == 1
    assert "wrote no result (status 137)" in drained


@pytest.mark.parametrize("flags, said", [({"interrupted": True, "complete": False}, "interrupted"),
                                         ({"complete": False}, "incomplete")])
def test_a_record_of_a_run_that_did_not_finish_drains_and_exits_1(node, flags, said):
    p, _, drained = node(98.0, edit=lambda doc: doc.update(flags), RUN_STATUS="143")
    assert p.returncode == 1, p.stderr
    assert said in drained and "GPUs healthy" not in p.stdout


def test_a_record_the_fleet_passes_from_a_run_that_ended_badly_is_unhealthy(node):
    p, _, drained = node(98.0, RUN_STATUS="1", RUN_MESSAGE="peakbench: error: cannot write x.csv")
    assert p.returncode == 1 and "ended with status 1" in drained and "cannot write x.csv" in drained


def test_missing_peakbench_exits_2_and_drains_only_when_asked(node):
    p, ran, drained = node(98.0, PEAKBENCH="no-such-peakbench")
    assert p.returncode == 2 and drained is None and ran is None
    assert "peakbench missing" in p.stderr
    p, _, drained = node(98.0, PEAKBENCH="no-such-peakbench", DRAIN_ON_ERROR="1")
    assert p.returncode == 2 and "peakbench missing" in drained


def test_a_broken_peakbench_exits_2_without_draining(node):
    p, ran, drained = node(98.0, VERSION_STATUS="1")
    assert p.returncode == 2 and drained is None and ran is None
    assert "peakbench broken" in p.stderr


def test_the_node_drained_is_the_one_slurm_names(node):
    p, _, drained = node(70.0, SLURMD_NODENAME="gpu-node-042")
    assert p.returncode == 1 and "nodename=gpu-node-042 " in drained
    assert (node.tmp / "gpu-node-042.json").is_file()


def test_without_results_the_temporary_folder_is_removed(node):
    tmp = node.tmp / "tmp"
    tmp.mkdir()
    for pct in (98.0, 70.0):
        p, _, _ = node(pct, RESULTS=None, TMPDIR=str(tmp))
        assert p.returncode in (0, 1), p.stderr
        assert list(tmp.iterdir()) == []


def test_a_real_run_ended_by_sigterm_never_passes(node, vulkan_backend):
    """The report's repro: peakbench ended by `timeout -s TERM` part-way through its tests."""
    wrapper = node.bin / "peakbench-term"
    # SIGTERM once the first test has finished and the second begun, however slow the machine.
    wrapper.write_text('#!/usr/bin/env bash\n'
                       'if [[ $1 != --device ]]; then exec "$PYTHON" -m peakbench "$@"; fi\n'
                       'err="$CALLS/run.err"\n'
                       '"$PYTHON" -m peakbench "$@" 2> "$err" & pid=$!\n'
                       'for _ in $(seq 600); do grep -q "compute.fp32 \\.\\.\\." "$err" && break; sleep 0.2; done\n'
                       'kill -TERM "$pid"; wait "$pid"; status=$?\n'
                       'cat "$err" >&2; exit "$status"\n')
    wrapper.chmod(0o755)
    p, _, drained = node(None, PEAKBENCH=str(wrapper),
                         PEAKBENCH_ARGS="--backend vulkan --tests compute.*,memory.*")
    record = json.loads((node.tmp / f"{os.uname().nodename.split('.')[0]}.json").read_text())
    assert record["interrupted"] is True and record["complete"] is False
    assert p.returncode == 1, p.stderr
    assert "GPUs healthy" not in p.stdout and "interrupted" in drained


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_the_script_is_shellcheck_clean():
    p = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout

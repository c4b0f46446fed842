"""SIGTERM ends a run as Ctrl-C does: the results so far are printed and written, the JSON says
"interrupted": true, and the exit status is 128 + the signal (143, 130). Checked in-process with the
fake driver, and for real: a quick lavapipe run in a subprocess, signalled while a test runs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from fakes import FakeWorkload
from helpers import ROOT
from peakbench.report.result import load_json
from test_cli import cli_main, fake  # noqa: F401  (fake is a fixture)


class SigtermNotHandled(Exception):
    pass


def not_handled(signum, frame):
    raise SigtermNotHandled


def test_sigterm_in_process_keeps_the_results_and_restores_the_handlers(capsys, fake, tmp_path):
    def terminated(test, variant):
        os.kill(os.getpid(), signal.SIGTERM)      # delivered here, in the main thread
        return FakeWorkload()

    fake.devices[0].plan["compute.int32"] = terminated
    path = tmp_path / "r.json"
    # The test's own handler: without peakbench's, SIGTERM fails this test instead of ending pytest.
    previous = signal.signal(signal.SIGTERM, not_handled)
    try:
        sigint = signal.getsignal(signal.SIGINT)
        code, out, err = cli_main(capsys, "--backend", "vulkan", "--quick", "--json", str(path),
                                  "--tests", "compute.fp32,compute.int32,compute.int16")
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == (not_handled, sigint)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert code == 143 and "interrupted (SIGTERM)" in err and "Traceback" not in err
    doc = load_json(path)
    assert doc["interrupted"] is True
    assert [r["test"] for r in doc["runs"][0]["results"]] == ["compute.fp32"]
    assert "compute.fp32" in out and fake.devices[0].closed


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_a_real_run_keeps_the_json(vulkan_backend, tmp_path, signum, code):
    path = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    # Tests after compute.int32 keep the run going for seconds, so the signal, sent once int32
    # has started, lands mid-run however fast the first two are (a quick test takes ~0.2 s).
    tests = "compute.fp32,compute.int32,compute.int16,compute.fp16,sfu.rcp,sfu.sqrt,sfu.exp2,sfu.log2"
    p = subprocess.Popen([sys.executable, "-m", "peakbench", "--backend", "vulkan", "--quick",
                          "--tests", tests, "--json", str(path)],
                         cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         # as a terminal starts it: a shell's background job (CI under nohup, &)
                         # would pass on SIGINT ignored, and Python then takes no Ctrl-C at all
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    try:
        for line in p.stderr:          # the second test has started: the first one's result is saved
            seen.append(line)
            if line.startswith("[vulkan:0] compute.int32 ..."):
                p.send_signal(signum)
                break
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    err = "".join(seen) + err
    assert p.returncode == code, err
    assert f"interrupted ({signal.Signals(signum).name})" in err and "Traceback" not in err
    doc = json.loads(path.read_text())          # complete and valid
    assert doc["interrupted"] is True and doc["options"]["tests"] == tests
    (run,) = doc["runs"]
    done = [r["test"] for r in run["results"]]      # what finished before the signal (catalog order)
    assert done[0] == "compute.fp32" and set(done) < set(tests.split(",")) and len(set(done)) == len(done), done
    assert all(r["status"] == "ok" for r in run["results"])
    assert "compute.fp32" in out                # the table of what was measured
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]

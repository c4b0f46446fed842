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
    assert doc["interrupted"] is True and doc["complete"] is False
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
    assert doc["interrupted"] is True and doc["complete"] is False and doc["options"]["tests"] == tests
    (run,) = doc["runs"]
    done = [r["test"] for r in run["results"]]      # what finished before the signal (catalog order)
    assert done[0] == "compute.fp32" and set(done) < set(tests.split(",")) and len(set(done)) == len(done), done
    assert all(r["status"] == "ok" for r in run["results"])
    assert "compute.fp32" in out                # the table of what was measured
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


# -- a record says whether it is finished ---------------------------------------------------

def test_every_save_during_a_run_says_incomplete_and_the_last_says_complete(capsys, fake, tmp_path):
    path = tmp_path / "r.json"
    seen = []

    def peek(test, variant):           # the second test: the first one's save is on disk
        seen.append(json.loads(path.read_text()))
        return FakeWorkload()

    fake.devices[0].plan["compute.int32"] = peek
    code, _, err = cli_main(capsys, "--backend", "vulkan", "--quick", "--json", str(path),
                            "--tests", "compute.fp32,compute.int32")
    assert code == 0, err
    during = seen[0]
    assert (during["complete"], during["interrupted"]) == (False, False)
    assert [r["test"] for r in during["runs"][0]["results"]] == ["compute.fp32"]
    assert load_json(path)["complete"] is True


def test_a_run_whose_device_fails_every_test_is_still_complete(capsys, fake, tmp_path):
    """Complete means every selected test has its result, failed ones included: the run finished."""
    fake.devices[0].plan["compute.fp32"] = lambda t, v: FakeWorkload(problem="2 of 512 values differ")
    path = tmp_path / "r.json"
    code, _, _ = cli_main(capsys, "--backend", "vulkan", "--quick", "--json", str(path), "--tests", "compute.fp32")
    assert code == 1 and load_json(path)["complete"] is True


def test_sigkill_leaves_a_record_no_reader_passes(vulkan_backend, tmp_path):
    """kill -9 (an OOM kill, a scheduler's) part-way: the file holds what was saved and says
    `complete: false`; fleet and compare fail it (exit 1) with the reason."""
    path = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    tests = "compute.fp32,compute.int32,compute.int16,compute.fp16,sfu.rcp,sfu.sqrt,sfu.exp2,sfu.log2"
    p = subprocess.Popen([sys.executable, "-m", "peakbench", "--backend", "vulkan", "--quick",
                          "--tests", tests, "--json", str(path)],
                         cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in p.stderr:
            if line.startswith("[vulkan:0] compute.int32 ..."):
                p.kill()
                break
        p.wait(timeout=60)
    finally:
        p.kill()
    assert p.returncode == -signal.SIGKILL
    doc = load_json(path)
    assert (doc["complete"], doc["interrupted"]) == (False, False)
    assert 1 <= len(doc["runs"][0]["results"]) < len(tests.split(","))
    for command in (["fleet", str(path)], ["compare", str(path), str(path)]):
        done = subprocess.run([sys.executable, "-m", "peakbench", *command], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        said = " ".join((done.stdout + done.stderr).split())       # the fleet table wraps its reasons
        assert "the record is incomplete" in said, command

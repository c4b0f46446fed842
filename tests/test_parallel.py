"""`--device all`: one process per GPU, merged into one document (peakbench.harness.parallel), on lavapipe
for real, and its grouping and failure handling on fakes."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from fakes import FakeBackend, FakeDevice, fake_info
from helpers import run_peakbench
from peakbench.catalog import default_catalog
from peakbench.harness import parallel


def test_device_all_runs_each_device_in_a_process_and_merges_one_record(vulkan_backend, tmp_path):
    out = tmp_path / "all.json"
    p = run_peakbench("--backend", "vulkan", "--device", "all", "--quick", "--tests", "compute.fp32",
                      "--json", str(out), "--csv", str(tmp_path / "all.csv"))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    names = [d.name for d in vulkan_backend.devices()]
    assert [r["device"]["name"] for r in doc["runs"]] == names        # a run per device, in order
    assert all(r["results"][0]["status"] == "ok" and r["results"][0]["value"] > 0 for r in doc["runs"])
    assert doc["options"]["device"] == "all" and doc["options"]["sequential"] is False
    assert "compute.fp32" in p.stdout                                   # the parent prints the tables
    assert "compute.fp32" in (tmp_path / "all.csv").read_text()


def test_a_node_test_runs_once_after_the_gpus_in_a_process_of_its_own_and_joins_the_first_run(vulkan_backend, tmp_path):
    out = tmp_path / "all.json"
    p = run_peakbench("--backend", "vulkan", "--device", "all", "--quick", "--tests", "transfer.p2p,compute.fp32",
                      "--json", str(out))
    assert p.returncode == 0, p.stderr
    runs = json.loads(out.read_text())["runs"]
    assert len(runs) == len(vulkan_backend.devices())
    first = [r["test"] for r in runs[0]["results"]]
    assert first == ["compute.fp32", "transfer.p2p"]                 # measured after the per-GPU suite
    assert all([r["test"] for r in run["results"]] == ["compute.fp32"] for run in runs[1:])
    assert runs[0]["results"][1]["status"] == "unsupported"           # Vulkan has no peer copy
    lines = p.stderr.splitlines()
    assert max(i for i, line in enumerate(lines) if "compute.fp32" in line) < \
        min(i for i, line in enumerate(lines) if "transfer.p2p" in line)


def test_child_options_name_exactly_the_tests_given():
    assert parallel.with_tests(["--tests", "compute.*", "--quick"], ["compute.fp32"]) == \
        ["--tests", "compute.fp32", "--quick"]
    assert parallel.with_tests(["--spec", "x"], ["a", "b"]) == ["--tests", "a,b", "--spec", "x"]


def test_plans_are_grouped_by_gpu_uuid_and_a_zero_uuid_is_a_gpu_of_its_own():
    same = fake_info(0, "A")
    zero = SimpleNamespace(**{**vars(fake_info(1, "B")), "uuid": "00000000-0000-0000-0000-000000000000"})
    vulkan = FakeBackend([FakeDevice(info=same), FakeDevice(info=zero), FakeDevice(info=zero)])
    cuda = FakeBackend([FakeDevice(info=same)])
    cuda.name = "cuda"
    groups = parallel.gpu_groups([(vulkan, 0), (vulkan, 1), (vulkan, 2), (cuda, 0)])
    assert [[(b.name, i) for b, i in g] for g in groups] == [[("vulkan", 0), ("cuda", 0)], [("vulkan", 1)],
                                                             [("vulkan", 2)]]


def test_a_process_that_leaves_no_record_fails_its_tests_with_its_status(tmp_path):
    child = parallel.Child.__new__(parallel.Child)
    child.backend, child.index, child.json = FakeBackend([FakeDevice()]), 0, str(tmp_path / "none.json")
    child.last_line = "Segmentation fault"
    tests = default_catalog().select(["compute.fp32", "memory.read"])
    (run,) = child.runs(tests, -11)
    assert run.device["name"] == "Fake GPU 9000"
    assert {r.status for r in run.results} == {"failed"}
    assert run.results[0].reason == "the process measuring this device ended with signal 11: Segmentation fault"


@pytest.mark.gpu
def test_device_all_on_the_gpu_node_gives_every_gpu_a_run_with_telemetry(request, tmp_path):
    from helpers import gpu_required
    from peakbench.backend import load
    try:
        backend = load("cuda")
    except Exception as e:
        (pytest.fail if gpu_required(request.config) else pytest.skip)(str(e))
    count = len(backend.devices())
    backend.close()
    out = tmp_path / "all.json"
    p = run_peakbench("--backend", "cuda", "--device", "all", "--quick", "--tests", "compute.fp32,memory.read",
                      "--json", str(out), timeout=600)
    assert p.returncode == 0, p.stderr
    runs = json.loads(out.read_text())["runs"]
    assert len(runs) == count and len({r["device"]["uuid"] for r in runs}) == count
    assert all(r["results"][0]["telemetry"]["power_w"]["mean"] > 50 for r in runs)


def test_sigterm_reaches_every_device_process_and_what_they_measured_is_kept(vulkan_backend, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time
    from helpers import ROOT
    out = tmp_path / "all.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    p = subprocess.Popen([sys.executable, "-m", "peakbench", "--backend", "vulkan", "--device", "all", "--quick",
                          "--tests", "compute.fp32,compute.int32,compute.fp16,compute.fp64", "--json", str(out)],
                         cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = ""
    deadline = time.monotonic() + 120
    while "compute.fp32 ..." not in seen and time.monotonic() < deadline:     # the first, fp64, is done
        seen += p.stderr.readline()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 143, seen + err
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True
    results = doc["runs"][0]["results"]
    assert results[0]["test"] == "compute.fp64" and results[0]["status"] == "ok"
    assert len(results) < 4 and "Traceback" not in err


def test_alone_first_measures_each_gpu_alone_then_together_and_keeps_the_ratio(vulkan_backend, tmp_path):
    out = tmp_path / "all.json"
    p = run_peakbench("--backend", "vulkan", "--device", "all", "--alone-first", "--quick", "--tests", "compute.fp32",
                      "--json", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["options"]["alone_first"] is True
    assert len(doc["runs"]) == len(vulkan_backend.devices())                     # the together pass's runs
    for run in doc["runs"]:
        r = run["results"][0]
        alone = r["evidence"]["alone"]
        assert alone["value"] > 0 and alone["ratio"] == round(r["value"] / alone["value"], 4)
        assert alone["word"] in ("same", "faster", "slower", "unclear")
    lines = p.stderr.splitlines()
    assert lines.index(next(x for x in lines if x.startswith("alone: vulkan:0"))) < \
        max(i for i, x in enumerate(lines) if "compute.fp32" in x)


def test_with_alone_puts_each_gpus_value_alone_beside_its_value_together():
    from peakbench.report.result import Result, Run

    def run_of(index, value, status="ok"):
        return Run("cuda", {"index": index, "name": "GPU"}, None,
                   [Result("memory.read", status, "GB/s", value=value, stats={"min": value * 0.999, "max": value * 1.001})])
    alone = [run_of(0, 4700.0), run_of(1, 4700.0)]
    together = [run_of(0, 4230.0), run_of(1, 4698.0, "failed")]
    parallel.with_alone(together, alone)
    assert together[0].results[0].evidence["alone"] == {"value": 4700.0, "ratio": 0.9, "word": "slower"}
    assert "alone" not in together[1].results[0].evidence          # a failed result has no ratio


def test_alone_first_needs_device_all_in_processes():
    p = run_peakbench("--backend", "vulkan", "--alone-first", "--tests", "compute.fp32")
    assert p.returncode == 2 and "--alone-first needs --device all without --sequential" in p.stderr

"""`peakbench ray` on a real local Ray cluster of two nodes (ray.cluster_utils.Cluster), each a CPU-only
node declaring one GPU, measured on lavapipe; then a planted slow GPU is flagged by the fleet report."""
from __future__ import annotations

import copy
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from helpers import ROOT, run_peakbench
from peakbench.harness import cluster as ray_driver
from peakbench.harness.stats import round_significant, summarize

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

NODE = {"num_cpus": 1, "num_gpus": 1, "object_store_memory": 80 * 1024 ** 2}
RUN = ("--backend", "vulkan", "--quick", "--tests", "compute.fp32")


@pytest.fixture(scope="module")
def cluster(vulkan_backend):
    # The workers start from this environment: they must import this peakbench.
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), old]))
    c = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    c.add_node(**NODE)
    c.wait_for_nodes()
    yield c
    c.shutdown()
    if old is None:
        os.environ.pop("PYTHONPATH")
    else:
        os.environ["PYTHONPATH"] = old


def test_every_gpu_of_every_node_is_measured_and_a_planted_slow_one_is_flagged(cluster, tmp_path):
    results, report = tmp_path / "results", tmp_path / "fleet.json"
    results.mkdir()
    p = run_peakbench("ray", "--address", cluster.address, *RUN, "--results", str(results),
                      "--json", str(report), timeout=240)
    assert p.returncode == 0, p.stderr
    fleet = json.loads(report.read_text())
    assert [g["verdict"] for g in fleet["gpus"]] == ["pass", "pass"]
    assert len({g["host"] for g in fleet["gpus"]}) == 2            # one per node
    records = sorted(results.glob("*.json"))
    assert len(records) == 2
    docs = [json.loads(r.read_text()) for r in records]
    assert all(d["runs"][0]["results"][0]["status"] == "ok" for d in docs)

    # Lavapipe's two runs share two cores and differ by several %: the fleet judged below is those
    # two, two healthy copies of the slower one (as other hosts), and the planted "GPU", that record
    # edited 10% low. The median is then the slower record, the MAD 0: the planted one alone is 10%
    # under, past the 5% threshold.
    slower = min(docs, key=lambda d: d["runs"][0]["results"][0]["value"])
    for host, scale in (("twin-1", 1.0), ("twin-2", 1.0), ("planted", 0.9)):
        doc = copy.deepcopy(slower)
        doc["host"]["hostname"] = host
        r = doc["runs"][0]["results"][0]      # a slower GPU's samples are slower: the value follows from them
        r["samples"] = [x * scale for x in r["samples"]]
        summary = summarize(r["samples"])
        r["value"], r["stats"] = round_significant(summary.median, 4), {**r["stats"], **summary.as_json()}
        (results / f"{host}.json").write_text(json.dumps(doc))
    p = run_peakbench("fleet", *map(str, sorted(results.glob("*.json"))), "--json", str(report))
    assert p.returncode == 1, p.stdout + p.stderr
    verdicts = {g["host"]: g["verdict"] for g in json.loads(report.read_text())["gpus"]}
    assert verdicts.pop("planted") == "flagged" and set(verdicts.values()) == {"pass"}
    assert "planted" in p.stdout and "10.0% under the median" in p.stdout


def test_a_gpu_that_hangs_past_the_timeout_is_failed_and_the_others_still_report(cluster, tmp_path):
    report = tmp_path / "fleet.json"
    p = run_peakbench("ray", "--address", cluster.address, "--backend", "vulkan", "--tests", "memory.*",
                      "--timeout", "0.5", "--json", str(report), timeout=240)
    assert p.returncode == 1, p.stderr
    gpus = json.loads(report.read_text())["gpus"]
    assert [g["verdict"] for g in gpus] == ["failed", "failed"]
    assert all("hung: still running after the 0.5 s timeout" in g["flagged"][0]["reason"] for g in gpus)


def test_no_cluster_at_the_address_is_one_line_and_status_2():
    p = run_peakbench("ray", "--address", "127.0.0.1:1", *RUN, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1].startswith("peakbench ray: error: cannot reach the Ray cluster at 127.0.0.1:1")
    assert "Traceback" not in p.stderr


@pytest.mark.gpu
def test_ray_on_the_gpu_node_measures_each_gpu_through_cuda(request, tmp_path):
    from helpers import gpu_required
    from peakbench.backend import load
    try:
        load("cuda").close()
    except Exception as e:
        (pytest.fail if gpu_required(request.config) else pytest.skip)(str(e))
    report = tmp_path / "fleet.json"
    # No address: Ray starts a local cluster with the node's GPUs.
    p = run_peakbench("ray", "--backend", "cuda", "--quick", "--tests", "compute.fp32,memory.read",
                      "--json", str(report), timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    gpus = json.loads(report.read_text())["gpus"]
    assert gpus and {g["verdict"] for g in gpus} == {"pass"} and all(g["uuid"] for g in gpus)


# -- bad input is refused before any task is sent, and an unreachable cluster in seconds ---------

def quick_refusal(*args, env=None, within=20.0):
    began = time.monotonic()
    p = run_peakbench("ray", *args, env=env, timeout=60)
    assert time.monotonic() - began < within, "refused in seconds, not after Ray's retries"
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("peakbench ray: error: ") and "Traceback" not in p.stderr
    return lines[0]


@pytest.mark.parametrize("args, said", [
    (("--tests", "nomatch"), "'nomatch' matches no test"),
    (("--backend", "foo"), "unknown backend 'foo'"),
    (("--spec", "nothere.toml"), "nothere.toml"),
    (("--address", "not a host:port"), "not a cluster address"),
    (("--address", "127.0.0.1:99999"), "not a cluster address"),
])
def test_bad_run_options_are_one_line_before_any_task(args, said, tmp_path):
    # A live-looking address: were the options sent on, every GPU would come back failed instead.
    line = quick_refusal(*args, "--address", "127.0.0.1:1") if args[0] != "--address" else quick_refusal(*args)
    assert said in line


def test_shaders_folder_that_does_not_exist_is_refused_before_any_task():
    line = quick_refusal("--address", "127.0.0.1:1", env={"PEAKBENCH_SHADERS": "/nonexistent"})
    assert "PEAKBENCH_SHADERS=/nonexistent: no such folder" in line


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("source", ["RAY_ADDRESS", "--address", "ray://"])
def test_a_dead_cluster_from_any_source_is_one_line_in_seconds(source):
    address = f"127.0.0.1:{closed_port()}"
    if source == "RAY_ADDRESS":
        line = quick_refusal(env={"RAY_ADDRESS": address})
    elif source == "--address":
        line = quick_refusal("--address", address, env={"RAY_ADDRESS": ""})
    else:
        line = quick_refusal(env={"RAY_ADDRESS": f"ray://{address}"})
    assert f"cannot reach the Ray cluster at {address}" in line and "refused" in line


def test_a_port_that_listens_but_is_not_ray_is_refused_in_seconds():
    """Ray's own connect to such a port waits 35 s in native code, deaf to SIGTERM."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        address = f"127.0.0.1:{server.getsockname()[1]}"
        line = quick_refusal("--address", address, within=ray_driver.REACH_S + 15)
    assert "not Ray" in line


def test_a_live_gcs_answers_the_probe(cluster):
    ray_driver.check_reachable(cluster.address)       # raises where the probe would refuse Ray itself


def test_sigterm_ends_a_ray_run_waiting_on_its_tasks(cluster, tmp_path):
    """Once connected, the driver waits in short slices: a SIGTERM ends it with 143 in seconds."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    p = subprocess.Popen([sys.executable, "-m", "peakbench", "ray", "--address", cluster.address,
                          "--backend", "vulkan", "--tests", "memory.*"], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in p.stderr:
            if line.startswith("peakbench ray: ") and "GPUs on" in line:
                break
        time.sleep(1.0)
        sent = time.monotonic()
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 143, err
    assert time.monotonic() - sent < 20 and "interrupted (SIGTERM)" in err

"""`peakbench ray` on a real local Ray cluster of two nodes (ray.cluster_utils.Cluster), each a CPU-only
node declaring one GPU, measured on lavapipe; then a planted slow GPU is flagged by the fleet report."""
from __future__ import annotations

import copy
import json
import os

import pytest

from helpers import ROOT, run_peakbench

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
        doc["runs"][0]["results"][0]["value"] *= scale
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

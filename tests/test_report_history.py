"""peakbench.report.history: `peakbench --history DIR` keeps each GPU's record under its UUID and
never overwrites; `peakbench fleet --history DIR` flags a GPU slower than its own recent median,
and reports most of a group stepping down together (after a driver change) as one fleet-wide step."""
from __future__ import annotations

import copy
import json

from peakbench import cli
from peakbench.report import history
from test_fleet import MODEL, fleet_of, run_fleet, scale, uuid_of

DAYS = ["2026-11-2%dT10:00:00Z" % d for d in range(5)]


def kept(tmp_path, days=DAYS, driver: str | None = None) -> str:
    """The history of the 8 GPUs of fleet_of(): one fleet run a day."""
    folder = tmp_path / "history"
    for day in days:
        for doc in fleet_of().values():
            doc["created"] = day
            if driver:
                for run in doc["runs"]:
                    run["device"]["driver"] = driver
            history.keep(doc, str(folder))
    return str(folder)


def test_each_run_is_kept_under_its_gpu_and_never_overwritten(tmp_path):
    doc = fleet_of(1)["node0.json"]
    first = history.keep(doc, str(tmp_path))
    assert len(first) == 4                                   # 2 GPUs x (CUDA, Vulkan)
    again = history.keep(doc, str(tmp_path))
    assert set(first).isdisjoint(again) and all(p.endswith("-1.json") for p in again)
    one = json.loads(open(first[0]).read())
    assert len(one["runs"]) == 1 and one["created"] == doc["created"] and one["host"] == doc["host"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({uuid_of(0, 0), uuid_of(0, 1)})
    doc["runs"][0]["device"]["uuid"] = "00000000-0000-0000-0000-000000000000"   # unknown: not kept
    assert len(history.keep(doc, str(tmp_path / "other"))) == 3


def test_a_gpu_slower_than_its_own_median_is_flagged_to_watch(tmp_path, capsys):
    folder = kept(tmp_path)
    docs = fleet_of()
    scale(docs["node2.json"], 1, "cuda", "compute.fp32", 0.96)      # 4%: inside the fleet's 5%...
    code, out, _, report = run_fleet(tmp_path, capsys, docs, "--history", folder, "--threshold", "3")
    assert code == 1
    gpu = next(g for g in report["gpus"] if g["flagged"])
    assert (gpu["host"], gpu["uuid"], gpu["backend"], gpu["action"]) == ("node2", uuid_of(2, 1), "cuda", "watch")
    reasons = [f["reason"] for f in gpu["flagged"]]
    assert any("is 4.0% under its own median" in r and "of its last 5 records" in r for r in reasons), reasons


def test_most_of_a_group_stepping_down_after_a_driver_change_is_one_fleet_wide_step(tmp_path, capsys):
    folder = kept(tmp_path, driver="570.124.06")
    docs = fleet_of()
    for doc in docs.values():
        for run in doc["runs"]:
            if run["backend"] == "cuda":
                run["device"]["driver"] = "580.159.04"
        for gpu in (0, 1):
            scale(doc, gpu, "cuda", "memory.read", 0.9)
    code, out, _, report = run_fleet(tmp_path, capsys, docs, "--history", folder)
    assert code == 1
    steps = [r["reason"] for r in report["regressions"]]
    assert steps == [f"{MODEL} (cuda) memory.read: 8 of 8 GPUs 10.0% (median) worse than their own recent medians"
                     " after the driver changed from 570.124.06 to 580.159.04: a fleet-wide step, not 8 bad GPUs"]
    assert not any(f["test"] == "memory.read" for g in report["gpus"] for f in g["flagged"])


def test_too_short_a_history_is_said_not_judged(tmp_path, capsys):
    folder = kept(tmp_path, DAYS[:2])
    code, _, _, report = run_fleet(tmp_path, capsys, fleet_of(), "--history", folder)
    assert code == 0
    assert any("2 earlier records in the history, 3 needed" in n for n in report["notes"])
    code, _, err, _ = run_fleet(tmp_path, capsys, fleet_of(), "--history", str(tmp_path / "none"))
    assert code == 2 and "--history" in err and "no such folder" in err


def test_a_lavapipe_run_keeps_its_record(vulkan_backend, tmp_path):
    folder = tmp_path / "h"
    assert cli.main(["--backend", "vulkan", "--quick", "--tests", "compute.fp32", "--history", str(folder)]) == 0
    files = list(folder.glob("*/*.json"))
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    assert doc["runs"][0]["results"][0]["test"] == "compute.fp32" and doc["complete"] is True

"""`peakbench fleet`: a slow, throttling or failed GPU among copies of the real H200 results is
flagged (and only it), floors and baselines are applied, and bad input is one line with status 2."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from conftest import schema_problems
from peakbench.report import fleet

ROOT = Path(__file__).resolve().parents[1]
CUDA = json.loads((ROOT / "results/nvidia-h200/cuda-0.1.0.json").read_text())
VULKAN = json.loads((ROOT / "results/nvidia-h200/vulkan-0.1.0.json").read_text())
FLOORS = ROOT / "tests/data/fleet/floors.toml"
MODEL = "NVIDIA H200 SXM"


def uuid_of(host: int, gpu: int) -> str:
    return f"{0xa000 + host:04x}{0xb000 + gpu:04x}-16e4-a406-85cf-40a90bb1814f"


def node(host: int, gpus: int = 2, created: str = "2026-12-01T10:00:00Z", backends=(CUDA, VULKAN)) -> dict:
    """A result document of host `node{host}`: each GPU through each backend, the real values."""
    doc = copy.deepcopy(CUDA)
    doc["host"]["hostname"] = f"node{host}"
    doc["created"] = created
    doc["interrupted"], doc["complete"] = False, True     # a run that finished (the committed ones predate the flag)
    doc["runs"] = []
    for i in range(gpus):
        for source in backends:
            run = copy.deepcopy(source["runs"][0])
            run["device"].update(index=i, uuid=uuid_of(host, i))
            if "pci_bus_id" in run["device"]:        # CUDA names the bus, Vulkan does not
                run["device"]["pci_bus_id"] = f"0000:{0x18 + i:02x}:00.0"
            doc["runs"].append(run)
    return doc


def result(doc: dict, gpu: int, backend: str, test: str) -> dict:
    run = next(r for r in doc["runs"] if r["backend"] == backend and r["device"]["index"] == gpu)
    return next(r for r in run["results"] if r["test"] == test)


def scale(doc: dict, gpu: int, backend: str, test: str, factor: float) -> dict:
    r = result(doc, gpu, backend, test)
    r["value"] *= factor
    if r["pct_of_spec"] is not None:
        r["pct_of_spec"] *= factor
    return r


def write(tmp_path, docs: dict[str, dict]) -> list[str]:
    paths = []
    for name, doc in docs.items():
        path = tmp_path / name
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    return paths


def fleet_of(hosts: int = 4) -> dict[str, dict]:
    """8 GPUs on 4 hosts, each through CUDA and Vulkan: 16 records in 2 groups."""
    return {f"node{h}.json": node(h) for h in range(hosts)}


def run_fleet(tmp_path, capsys, docs: dict[str, dict], *options: str) -> tuple[int, str, str, dict | None]:
    report = tmp_path / "fleet.json"
    code = fleet.main([*write(tmp_path, docs), "--json", str(report), *options])
    out, err = capsys.readouterr()
    return code, out, err, json.loads(report.read_text()) if report.exists() else None


def verdicts(report: dict) -> dict[tuple, str]:
    return {(g["host"], g["uuid"][:8], g["backend"]): g["verdict"] for g in report["gpus"]}


def gpu_entry(report: dict, host: str, gpu: int, backend: str) -> dict:
    return next(g for g in report["gpus"]
                if g["host"] == host and g["uuid"] == uuid_of(int(host[4:]), gpu) and g["backend"] == backend)


def one_line_error(code: int, out: str, err: str, *fragments: str) -> None:
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith("peakbench fleet: error: ")
    for fragment in fragments:
        assert fragment in err


def test_the_test_documents_are_valid_results():
    assert schema_problems(node(0)) == []


def test_median_and_mad():
    assert fleet.median([4.0, 1.0, 3.0, 2.0]) == 2.5          # even count: the mean of the middle two
    assert fleet.mad([1.0, 2.0, 3.0, 4.0, 100.0]) == 1.0       # one outlier does not move it


def test_a_gpu_10_percent_slow_is_flagged_and_the_others_pass(tmp_path, capsys):
    docs = fleet_of()
    scale(docs["node2.json"], 1, "cuda", "compute.fp32", 0.9)
    slow = scale(docs["node2.json"], 1, "cuda", "memory.read", 0.9)
    slow["clock_mhz"] = 1755.0
    slow["telemetry"] = {"sm_clock_mhz": {"min": 1700, "mean": 1755, "max": 1800},
                         "power_w": {"min": 690, "mean": 699, "max": 700}, "throttle_reasons": ["sw_power_cap"]}
    assert schema_problems(docs["node2.json"]) == []
    code, out, _, report = run_fleet(tmp_path, capsys, docs)
    assert code == 1
    slow_key = ("node2", uuid_of(2, 1)[:8], "cuda")
    got = verdicts(report)
    assert len(got) == 16
    assert got.pop(slow_key) == "flagged"
    assert set(got.values()) == {"pass"}             # its Vulkan run, and every other GPU, pass
    flagged = {f["test"]: f for f in gpu_entry(report, "node2", 1, "cuda")["flagged"]}
    assert sorted(flagged) == ["compute.fp32", "memory.read"]
    read = flagged["memory.read"]
    assert read["median"] == 4718.0 and read["ratio"] == pytest.approx(0.9)
    assert read["reason"] == ("memory.read 4246 GB/s is 10.0% under the median 4718 "
                              "(power cap: throttle_reasons=['sw_power_cap'], 1755 MHz, 699 W)")
    assert flagged["compute.fp32"]["reason"] == "compute.fp32 59.6 TFLOPS is 10.0% under the median 66.2 (1980 MHz)"
    lines = out.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith(f"{MODEL} (cuda)"))
    assert lines[row].split()[4:10] == ["node2", uuid_of(2, 1)[:8], "0000:19:00.0", "compute.fp32", "59.6", "TFLOPS"]
    assert f"- watch: node2 {uuid_of(2, 1)[:8]} ({MODEL}, cuda)" in lines
    below = next(line for line in lines[row + 1:] if "memory.read" in line)   # the same GPU's next test
    assert below.startswith(" ") and below.split()[:3] == ["memory.read", "4246", "GB/s"]
    assert out.splitlines()[-1] == "16 GPUs on 4 hosts in 2 groups: 15 pass, 1 flagged, 0 failed"


def test_3_percent_slow_is_within_the_threshold(tmp_path, capsys):
    docs = fleet_of()
    scale(docs["node2.json"], 1, "cuda", "compute.fp32", 0.97)
    scale(docs["node2.json"], 1, "cuda", "memory.read", 0.97)
    code, out, _, report = run_fleet(tmp_path, capsys, docs)
    assert code == 0
    assert set(verdicts(report).values()) == {"pass"}
    assert out.startswith("no GPU flagged")
    # the same GPU under a 2% threshold
    code, _, _, report = run_fleet(tmp_path, capsys, docs, "--threshold", "2")
    assert code == 1
    assert [f["test"] for f in gpu_entry(report, "node2", 1, "cuda")["flagged"]] == ["compute.fp32", "memory.read"]


def test_a_time_is_worse_when_higher(tmp_path, capsys):
    docs = fleet_of()
    scale(docs["node1.json"], 0, "vulkan", "latency.dram", 1.1)       # slower
    scale(docs["node3.json"], 1, "vulkan", "launch.overhead", 0.5)    # faster: fine
    scale(docs["node0.json"], 0, "vulkan", "memory.read", 1.1)        # a faster read: fine
    code, _, _, report = run_fleet(tmp_path, capsys, docs)
    assert code == 1
    assert [g["verdict"] for g in report["gpus"]].count("flagged") == 1
    [flag] = gpu_entry(report, "node1", 0, "vulkan")["flagged"]
    assert flag["reason"] == "latency.dram 393.4 ns is 10.0% over the median 357.6 (1977 MHz)"
    assert flag["ratio"] == pytest.approx(1.1)


def test_a_wide_spread_widens_the_threshold_to_3_mads(tmp_path, capsys):
    docs = fleet_of()
    # median 0.985, MAD 0.045: 0.91 is 7.6% under the median, more than 5% but inside 3 MADs (13.5%)
    for i, factor in enumerate([1.00, 0.96, 1.04, 0.94, 1.07, 0.97, 1.03, 0.91]):
        scale(docs[f"node{i // 2}.json"], i % 2, "cuda", "compute.fp32", factor)
    code, _, _, report = run_fleet(tmp_path, capsys, docs)
    assert code == 0
    stats = next(g for g in report["groups"] if g["backend"] == "cuda")["tests"]["compute.fp32"]
    assert stats["median"] == pytest.approx(66.19 * 0.985)
    assert stats["mad"] == pytest.approx(66.19 * 0.045)
    code, _, _, report = run_fleet(tmp_path, capsys, docs, "--mads", "1")   # 1 MAD: 5% is the wider
    assert code == 1
    assert [g["uuid"] for g in report["gpus"] if g["verdict"] == "flagged"] == [uuid_of(3, 1)]


def test_a_failed_test_makes_the_verdict_failed(tmp_path, capsys):
    docs = fleet_of()
    r = result(docs["node3.json"], 0, "cuda", "memory.copy")
    r.update(status="failed", value=None, pct_of_spec=None, reason="output wrong: 3 of 1024 elements differ")
    assert schema_problems(docs["node3.json"]) == []
    code, out, _, report = run_fleet(tmp_path, capsys, docs)
    assert code == 1
    gpu = gpu_entry(report, "node3", 0, "cuda")
    assert gpu["verdict"] == "failed"
    assert gpu["flagged"] == [{"test": "memory.copy", "value": None, "median": None, "ratio": None,
                               "reason": "memory.copy failed: output wrong: 3 of 1024 elements differ"}]
    row = next(line for line in out.splitlines() if "memory.copy" in line)
    assert row.split()[4:10] == ["node3", uuid_of(3, 0)[:8], "0000:18:00.0", "memory.copy", "failed:", "output"]
    assert out.splitlines()[-1].endswith("15 pass, 0 flagged, 1 failed")


def test_floors_from_a_toml_file(tmp_path, capsys):
    code, out, _, report = run_fleet(tmp_path, capsys, fleet_of(), "--floor", str(FLOORS))
    assert code == 1
    # the glob's 99% catches every write (91.5-98.2% of spec); the read (90, exact name) and the
    # copy (80, the model's table) pass
    for gpu in report["gpus"]:
        assert gpu["verdict"] == "flagged"
        assert [f["test"] for f in gpu["flagged"]] == ["memory.write"]
    cuda = next(g for g in report["gpus"] if g["backend"] == "cuda")
    assert cuda["flagged"][0]["reason"] == ("memory.write 4715 GB/s is 98.2% of spec, under the floor 99% "
                                            "(1980 MHz)")
    floors = {g["backend"]: {t: s["floor"] for t, s in g["tests"].items()} for g in report["groups"]}
    assert floors["cuda"]["memory.read"] == 90 and floors["cuda"]["memory.copy"] == 80
    assert floors["cuda"]["compute.fp32"] == 85 and floors["cuda"]["matrix.fp16.fp32"] == 50   # the defaults
    assert floors["cuda"]["latency.dram"] is None
    assert max(len(line) for line in out.splitlines()) <= 120


def test_the_floor_of_a_test_the_exact_name_then_the_longest_glob():
    floors = fleet.Floors({"memory.read*": 99, "memory.read": 90, "memory.*": 70, "*": 10},
                          {MODEL: {"memory.w*": 60}})
    assert floors.floor(MODEL, "memory.read") == 90
    assert floors.floor(MODEL, "memory.copy") == 70
    assert floors.floor(MODEL, "memory.write") == 60          # the model's table first
    assert floors.floor("other", "memory.write") == 70
    assert floors.floor(MODEL, "latency.l1") == 10
    assert fleet.Floors().floor(MODEL, "latency.l1") is None   # no default floor for times
    assert fleet.Floors().floor(MODEL, "matrix.fp16.fp32") == 50


def test_floors_from_a_json_file(tmp_path, capsys):
    floor = tmp_path / "floor.json"
    floor.write_text(json.dumps({"floor": {"compute.*": 0, "memory.*": 0},
                                 "model": {MODEL: {"memory.read": 98.5}}}))
    code, _, _, report = run_fleet(tmp_path, capsys, fleet_of(), "--floor", str(floor))
    assert code == 1
    # CUDA reads at 98.3% of spec, Vulkan at 98.6%
    assert {g["backend"]: g["verdict"] for g in report["gpus"]} == {"cuda": "flagged", "vulkan": "pass"}


def test_a_lone_gpu_is_judged_by_the_default_floors(tmp_path, capsys):
    doc = node(0, gpus=1, backends=(CUDA,))
    scale(doc, 0, "cuda", "memory.read", 0.9)              # 88.5% of spec: above the 85% floor
    scale(doc, 0, "cuda", "matrix.fp16.fp32", 0.5)         # 44.1%: under the 50% floor
    code, out, _, report = run_fleet(tmp_path, capsys, {"one.json": doc})
    assert code == 1
    [flag] = report["gpus"][0]["flagged"]
    assert flag["test"] == "matrix.fp16.fp32" and flag["median"] is None
    assert "44.1% of spec, under the floor 50%" in flag["reason"]
    assert f"{MODEL} (cuda): 1 GPU, too few to compare with each other (3 needed)" in out


BAD_FLOORS = [
    ("f.toml", "[floor\n", "not valid TOML"),
    ("f.toml", '[floor]\n"compute.*" = "high"\n', "[floor] 'compute.*' must be a % of spec from 0 to 100, not 'high'"),
    ("f.toml", f'[model."{MODEL}"]\n"memory.read" = 180\n', f"[model.\"{MODEL}\"] 'memory.read' must be a % of spec"),
    ("f.toml", '[floors]\n"compute.*" = 80\n', "unknown key 'floors'"),
    ("f.toml", "", "expected a [floor] table"),
    ("f.json", '{"floor": [80]}', "[floor] must be a table of test globs"),
    ("f.json", "{", "not valid JSON"),
    ("f.json", '{"model": {"X": true}}', '[model."X"] must be a table'),
]


@pytest.mark.parametrize("name,text,fragment", BAD_FLOORS)
def test_a_bad_floor_file_is_one_line_and_exit_2(tmp_path, capsys, name, text, fragment):
    (tmp_path / name).write_text(text)
    files = write(tmp_path, fleet_of(1))
    code = fleet.main([*files, "--floor", str(tmp_path / name)])
    one_line_error(code, *capsys.readouterr(), f"--floor {tmp_path / name}: ", fragment)


def test_a_missing_floor_file_is_one_line_and_exit_2(tmp_path, capsys):
    code = fleet.main([*write(tmp_path, fleet_of(1)), "--floor", str(tmp_path / "none.toml")])
    one_line_error(code, *capsys.readouterr(), "none.toml: cannot read: No such file or directory")


def test_a_fleet_wide_regression_against_the_baseline(tmp_path, capsys):
    base = tmp_path / "base"
    base.mkdir()
    code, _, _, before = run_fleet(base, capsys, fleet_of())
    assert code == 0
    docs = fleet_of()                                      # a driver update: every CUDA read 10% slower
    for h in range(4):
        for i in range(2):
            scale(docs[f"node{h}.json"], i, "cuda", "memory.read", 0.9)
    code, out, _, report = run_fleet(tmp_path, capsys, docs)
    assert code == 0                                       # alike, so no GPU stands out
    code, out, _, report = run_fleet(tmp_path, capsys, docs, "--baseline", str(base / "fleet.json"))
    assert code == 1
    assert set(verdicts(report).values()) == {"pass"}
    [regression] = report["regressions"]
    assert regression["model"] == MODEL and regression["backend"] == "cuda" and regression["test"] == "memory.read"
    assert regression["ratio"] == pytest.approx(0.9)
    assert f"- {MODEL} (cuda) memory.read: median 4246 GB/s is 10.0% under the baseline's 4718" in out
    assert out.splitlines()[-1].endswith("16 pass, 0 flagged, 0 failed; 1 fleet-wide regression")


def test_a_small_group_is_judged_against_the_baseline_median(tmp_path, capsys):
    base = tmp_path / "base"
    base.mkdir()
    assert run_fleet(base, capsys, fleet_of())[0] == 0
    docs = {"node9.json": node(9, gpus=2, backends=(CUDA,))}
    scale(docs["node9.json"], 1, "cuda", "memory.read", 0.9)
    code, out, _, _ = run_fleet(tmp_path, capsys, docs)
    assert code == 0                                       # two GPUs alone: neither can be called slow
    assert "2 GPUs, too few to compare with each other (3 needed): judged by the floors" in out
    code, out, _, report = run_fleet(tmp_path, capsys, docs, "--baseline", str(base / "fleet.json"))
    assert code == 1
    assert verdicts(report) == {("node9", uuid_of(9, 0)[:8], "cuda"): "pass",
                                ("node9", uuid_of(9, 1)[:8], "cuda"): "flagged"}
    [flag] = gpu_entry(report, "node9", 1, "cuda")["flagged"]
    assert flag["reason"].startswith("memory.read 4246 GB/s is 10.0% under the baseline median 4718")
    assert report["regressions"] == []                     # the GPU is flagged, not the group
    assert f"{MODEL} (vulkan): in the baseline, not in these results" in out


@pytest.mark.parametrize("text,fragment", [
    (json.dumps(CUDA), "not a fleet report (schema 'peakbench.fleet/1' expected, found 'peakbench.result/1')"),
    ("[", "not valid JSON"),
    (json.dumps({"schema": "peakbench.fleet/1", "groups": [{"model": MODEL, "tests": {}}]}),
     "group 0 needs a model, a backend and tests"),
    (json.dumps({"schema": "peakbench.fleet/1", "groups": [{"model": MODEL, "backend": "cuda",
                                                            "tests": {"memory.read": {"median": "fast"}}}]}),
     "'memory.read' has no numeric median"),
])
def test_a_bad_baseline_is_one_line_and_exit_2(tmp_path, capsys, text, fragment):
    (tmp_path / "base.json").write_text(text)
    code = fleet.main([*write(tmp_path, fleet_of(1)), "--baseline", str(tmp_path / "base.json")])
    one_line_error(code, *capsys.readouterr(), "--baseline ", fragment)


def test_the_json_report_has_the_documented_keys(tmp_path, capsys):
    docs = fleet_of()
    scale(docs["node1.json"], 0, "vulkan", "memory.read", 0.8)
    _, _, _, report = run_fleet(tmp_path, capsys, docs)
    assert report["schema"] == "peakbench.fleet/1"
    assert report["created"].endswith("Z")
    assert {"groups", "gpus", "regressions", "notes"} <= set(report)
    groups = {(g["model"], g["backend"], g["gpus"]) for g in report["groups"]}
    assert groups == {(MODEL, "cuda", 8), (MODEL, "vulkan", 8)}
    for group in report["groups"]:
        for stats in group["tests"].values():
            assert {"median", "mad", "floor"} <= set(stats)
    for gpu in report["gpus"]:
        assert {"host", "uuid", "pci_bus", "model", "backend", "flagged", "verdict"} <= set(gpu)
        assert gpu["verdict"] in ("pass", "flagged", "failed")
        for flag in gpu["flagged"]:
            assert set(flag) == {"test", "value", "median", "ratio", "reason"}
    # Vulkan names no PCI bus: the same GPU's CUDA run lends it
    assert gpu_entry(report, "node1", 1, "vulkan")["pci_bus"] == "0000:19:00.0"
    assert gpu_entry(report, "node1", 0, "vulkan")["flagged"][0]["ratio"] == pytest.approx(0.8)


def test_the_report_goes_to_stdout_and_the_table_to_stderr(tmp_path, capsys):
    code = fleet.main([*write(tmp_path, fleet_of(2)), "--json", "-"])
    out, err = capsys.readouterr()
    assert code == 0
    assert json.loads(out)["schema"] == "peakbench.fleet/1"
    assert err.splitlines()[-1] == "8 GPUs on 2 hosts in 2 groups: 8 pass, 0 flagged, 0 failed"


def test_the_table_fits_120_columns(tmp_path, capsys):
    docs = fleet_of()
    long = node(7)
    long["host"]["hostname"] = "gpu-node-0042.rack-17.datacenter-west.example.com"
    docs["long.json"] = long
    for test in ("compute.fp64", "compute.fp32", "memory.read", "memory.write", "matrix.fp16.fp32"):
        r = scale(long, 0, "cuda", test, 0.8)
        r["telemetry"] = {"temperature_c": {"min": 80, "mean": 85, "max": 91},
                          "throttle_reasons": ["hw_thermal_slowdown", "sw_thermal_slowdown"]}
    result(long, 1, "vulkan", "latency.l2").update(status="failed", value=None, reason="x" * 150)
    code, out, _, report = run_fleet(tmp_path, capsys, docs)
    assert code == 1
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 120
    assert lines[0].split() == ["GPU", "host", "UUID", "PCI", "bus", "flagged", "tests", "reason"]
    hot = next(g for g in report["gpus"] if g["uuid"] == uuid_of(7, 0) and g["backend"] == "cuda")
    slow = [f for f in hot["flagged"] if f["test"] != "health"]
    assert len(slow) == 5
    # thermal throttles flag the GPU whatever its speed: one health flag a reason, to watch
    assert [f["reason"].split(" (")[0] for f in hot["flagged"] if f["test"] == "health"] == [
        "throttled by hw_thermal_slowdown", "throttled by sw_thermal_slowdown"]
    assert hot["action"] == "watch"
    assert slow[0]["reason"].endswith(
        "(thermal: throttle_reasons=['hw_thermal_slowdown', 'sw_thermal_slowdown'], 1980 MHz, 91 C)")
    assert "gpu-node-0042.ra" in out                                         # wrapped, not cut
    assert "west.example.com" in out


@pytest.mark.parametrize("old_last", [True, False], ids=["old file last", "old file first"])
def test_a_gpu_in_several_files_is_taken_from_the_latest(tmp_path, capsys, old_last):
    docs = fleet_of()
    old = node(0, created="2026-11-30T08:00:00Z")
    scale(old, 0, "cuda", "memory.read", 0.8)              # slow before the re-run, healthy after
    files = {**docs, "old.json": old} if old_last else {"old.json": old, **docs}
    code, out, _, report = run_fleet(tmp_path, capsys, files)
    assert code == 0                                       # by `created`, not by the order of the files
    assert len(report["gpus"]) == 16
    note = next(n for n in report["notes"] if n.startswith(f"node0 {uuid_of(0, 0)[:8]} ({MODEL}, cuda)"))
    assert "2 results; took the latest, " in note and "node0.json (2026-12-01T10:00:00Z), over " in note
    assert note.endswith("old.json (2026-11-30T08:00:00Z)")
    # and the other way round: the later document holds the slow GPU
    docs["node0.json"]["created"] = "2026-11-29T08:00:00Z"
    code, _, _, report = run_fleet(tmp_path, capsys, {**docs, "old.json": old})
    assert code == 1
    assert gpu_entry(report, "node0", 0, "cuda")["verdict"] == "flagged"


def test_a_gpu_without_uuid_is_told_apart_by_its_index(tmp_path, capsys):
    doc = node(0, gpus=4, backends=(CUDA,))
    for run in doc["runs"]:
        run["device"]["uuid"] = "00000000-0000-0000-0000-000000000000"
    scale(doc, 2, "cuda", "memory.read", 0.9)
    code, out, _, report = run_fleet(tmp_path, capsys, {"zeros.json": doc})
    assert code == 1
    assert [(g["index"], g["verdict"]) for g in report["gpus"]] == [(0, "pass"), (1, "pass"), (2, "flagged"),
                                                                  (3, "pass")]
    assert out.splitlines()[2].split()[4:7] == ["node0", "#2", "0000:1a:00.0"]


def test_a_test_missing_on_one_gpu_fails_that_gpu(tmp_path, capsys):
    docs = fleet_of()
    run = next(r for r in docs["node1.json"]["runs"] if r["backend"] == "cuda" and r["device"]["index"] == 1)
    run["results"] = [r for r in run["results"] if r["test"] != "memory.copy"]
    code, out, _, report = run_fleet(tmp_path, capsys, docs)
    assert code == 1
    got = verdicts(report)
    assert got.pop(("node1", uuid_of(1, 1)[:8], "cuda")) == "failed"
    assert set(got.values()) == {"pass"}
    (flag,) = gpu_entry(report, "node1", 1, "cuda")["flagged"]
    assert flag["test"] == "memory.copy" and "memory.copy missing" in flag["reason"] and "7 other GPUs" in flag["reason"]


def test_a_test_unsupported_on_one_gpu_is_noted(tmp_path, capsys):
    docs = fleet_of()
    r = result(docs["node1.json"], 1, "cuda", "memory.copy")
    r.update(status="unsupported", value=None, pct_of_spec=None, reason="[driver] no copy here")
    code, out, _, report = run_fleet(tmp_path, capsys, docs)
    assert code == 0
    assert f"node1 {uuid_of(1, 1)[:8]} ({MODEL}, cuda): memory.copy unsupported" in " ".join(out.split())


@pytest.mark.parametrize("flags, said", [
    ({"interrupted": True, "complete": False}, "interrupted by a signal"),
    ({"interrupted": False, "complete": False}, "the record is incomplete"),      # SIGKILL: its last write never came
    ({"interrupted": False}, "does not say it is complete"),                     # no flag at all
])
def test_a_record_that_did_not_finish_fails_its_gpus(tmp_path, capsys, flags, said):
    docs = fleet_of()
    doc = docs["node3.json"]
    doc.pop("complete")
    doc.update(flags)
    for run in doc["runs"]:                       # killed part-way: 20 of its results
        run["results"] = run["results"][:20]
    code, out, _, report = run_fleet(tmp_path, capsys, docs)
    assert code == 1
    for gpu in report["gpus"]:
        assert gpu["verdict"] == ("failed" if gpu["host"] == "node3" else "pass"), gpu
    first = gpu_entry(report, "node3", 0, "cuda")["flagged"][0]
    assert said in first["reason"] and "20 results" in first["reason"] and "node3.json" in first["reason"]


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert fleet.main([]) == 2
    one_line_error(2, *capsys.readouterr(), "the following arguments are required: RESULT.json")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "something/1"}))
    good = write(tmp_path, fleet_of(1))
    one_line_error(fleet.main([*good, str(other)]), *capsys.readouterr(), f"{other} is not a peakbench result")
    empty = node(0)
    empty["runs"] = []
    one_line_error(fleet.main(write(tmp_path, {"empty.json": empty})), *capsys.readouterr(), "the files hold no runs")
    one_line_error(fleet.main([*good, "--json", str(tmp_path / "no" / "f.json")]), *capsys.readouterr(),
                   "does not exist")
    one_line_error(fleet.main([*good, "--threshold", "many"]), *capsys.readouterr(), "'many' is not a number")


def test_ray_without_the_ray_package_says_how_to_install_it(monkeypatch, capsys):
    import sys
    from peakbench.harness import cluster
    monkeypatch.setitem(sys.modules, "ray", None)
    assert cluster.main(["--backend", "vulkan"]) == 2
    err = capsys.readouterr().err
    assert err == "peakbench ray: error: Python package 'ray' is not installed (pip install 'peakbench[ray]')\n"


def test_ray_rejects_a_results_folder_that_does_not_exist(tmp_path, capsys):
    from peakbench.harness import cluster
    assert cluster.main(["--results", str(tmp_path / "nope")]) == 2
    assert "--results" in capsys.readouterr().err


def test_the_report_may_not_replace_an_input(tmp_path, capsys):
    good = write(tmp_path, fleet_of(1))[0]
    before = Path(good).read_text()
    one_line_error(fleet.main(["--json", good, good]), *capsys.readouterr(), "may not replace an input")
    assert Path(good).read_text() == before
    floors = tmp_path / "floors.toml"
    floors.write_text(FLOORS.read_text())
    one_line_error(fleet.main([good, "--floor", str(floors), "--json", str(floors)]), *capsys.readouterr(),
                   "the --floor file")


@pytest.mark.parametrize("text, said", [
    ('{"schema": "peakbench.result/1", "runs": [], "x": NaN}', "NaN is not a JSON number"),
    ('{"schema": "peakbench.result/1", "runs": [], "x": -Infinity}', "-Infinity is not a JSON number"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
])
def test_json_no_writer_of_ours_makes_is_refused(tmp_path, capsys, text, said):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    one_line_error(fleet.main([str(bad)]), *capsys.readouterr(), said)


def test_a_result_path_with_a_trailing_slash_is_refused(tmp_path, capsys):
    good = write(tmp_path, fleet_of(1))[0]
    one_line_error(fleet.main([good + "/"]), *capsys.readouterr(), "names a folder")


def test_an_ok_that_no_guard_could_verify_is_named_never_a_plain_ok(tmp_path, capsys):
    docs = fleet_of()
    for host in (1, 2):
        r = result(docs[f"node{host}.json"], 0, "cuda", "memory.copy")
        r.update(verified=False, evidence={**r["evidence"], "unverified": "bound: no spec peak for memory.copy"})
    assert schema_problems(docs["node1.json"]) == []
    code, out, _, report = run_fleet(tmp_path, capsys, docs)
    assert code == 0                                  # unverified is said, not flagged
    assert gpu_entry(report, "node1", 0, "cuda")["unverified"] == ["memory.copy"]
    assert gpu_entry(report, "node1", 1, "cuda")["unverified"] == []
    note = f"{MODEL} (cuda): memory.copy ok but unverified on 2 of 8 GPUs (bound: no spec peak for memory.copy)"
    assert note in report["notes"] and note in " ".join(out.split())


def test_a_gpu_whose_value_is_not_its_samples_median_fails(tmp_path, capsys):
    # A statistic taken from the wrong sample: node2's CUDA memory.read reports its best sample.
    docs = fleet_of()
    r = result(docs["node2.json"], 1, "cuda", "memory.read")
    r["samples"] = [0.98 * r["value"], r["value"], 1.02 * r["value"]]
    r["stats"] = {**r["stats"], "samples": 3, "min": round(0.98 * r["value"], 1), "max": round(1.02 * r["value"], 1)}
    r["value"] = r["stats"]["median"] = r["stats"]["max"]
    code, _, _, report = run_fleet(tmp_path, capsys, docs)
    assert code == 1
    gpu = gpu_entry(report, "node2", 1, "cuda")
    assert gpu["verdict"] == "failed"
    assert gpu["flagged"][0]["reason"].startswith("memory.read failed: the value does not follow from its samples:")


@pytest.mark.parametrize("health, reason, action", [
    ({"ecc_uncorrected": 2}, "2 uncorrected ECC errors since the driver loaded", "drain"),
    ({"remapping_failed": True}, "a row remapping failed: the memory has no spare row left", "drain"),
    ({"remapping_pending": True}, "a row remapping is pending: it takes effect at the next GPU reset", "reset"),
    ({"pcie_generation": 3, "pcie_generation_max": 5, "pcie_width": 16, "pcie_width_max": 16},
     "the PCIe link trained at Gen3 x16, its maximum Gen5 x16", "reset"),
    ({"retired_pages": 1}, "1 retired page", "watch"),
    ({"remapped_rows_uncorrected": 3}, "3 rows remapped for uncorrectable errors", "watch"),
])
def test_health_flags_a_gpu_whatever_its_speed_with_an_action(tmp_path, capsys, health, reason, action):
    docs = fleet_of()
    run_of = next(r for r in docs["node1.json"]["runs"] if r["backend"] == "cuda")
    run_of["device"]["health"] = {"pcie_generation": 5, "pcie_generation_max": 5, "pcie_width": 16,
                                  "pcie_width_max": 16, "ecc_uncorrected": 0, **health}
    code, out, _, report = run_fleet(tmp_path, capsys, docs)
    assert code == 1
    sick = next(g for g in report["gpus"] if g["health"].get("pcie_generation"))
    assert sick["verdict"] == "flagged" and sick["action"] == action
    assert [f["reason"] for f in sick["flagged"]] == [reason]
    assert all(g["action"] == "ok" for g in report["gpus"] if g is not sick)


def test_a_burn_in_that_did_not_hold_steady_is_flagged_to_watch(tmp_path, capsys):
    docs = fleet_of()
    r = result(docs["node2.json"], 0, "cuda", "compute.fp32")
    r["stability"] = {"drift_pct": -8.1, "worst_window_pct": -4.2, "windows": 5, "seconds": 60.0,
                      "unstable": "drift -8.1% from the first window to the last"}
    code, _, _, report = run_fleet(tmp_path, capsys, docs)
    assert code == 1
    gpu = next(g for g in report["gpus"] if g["flagged"])
    assert gpu["action"] == "watch" and gpu["flagged"][0]["reason"] == (
        "compute.fp32: the burn-in did not hold steady: drift -8.1% from the first window to the last")


def test_a_weak_sm_inside_a_gpu_is_flagged_to_watch(tmp_path, capsys):
    docs = fleet_of()
    for name in docs:                  # every GPU's map, one with an SM at 0.91x its siblings
        for run in docs[name]["runs"]:
            run["results"].append({"test": "sm.fp32", "status": "ok", "unit": "TFLOPS", "value": 0.5,
                                   "params": {"slowest_unit": 3, "slowest_of_median": 0.99, "median_unit": 0.505},
                                   "stats": {"median": 0.5, "min": 0.5, "max": 0.5, "samples": 5}})
    weak = result(docs["node2.json"], 0, "cuda", "sm.fp32")
    weak["params"] = {"slowest_unit": 37, "slowest_of_median": 0.91, "median_unit": 0.505}
    code, _, _, report = run_fleet(tmp_path, capsys, docs)
    assert code == 1
    flagged = [g for g in report["gpus"] if any(f["test"] == "sm.fp32" for f in g["flagged"])]
    assert len(flagged) == 1 and flagged[0]["action"] == "watch"
    assert next(f["reason"] for f in flagged[0]["flagged"] if f["test"] == "sm.fp32") == (
        "sm.fp32: unit 37 reads 0.910x the median unit (0.505 TFLOPS): one part of this GPU trails its siblings")


def test_a_gpu_held_down_by_power_is_reported_as_that_not_as_bad_silicon(tmp_path, capsys):
    # 10% slower under sw_power_cap at 1782 MHz, but at that clock as good as its group
    docs = fleet_of()
    r = scale(docs["node1.json"], 0, "cuda", "compute.fp32", 0.9)
    group = [x for doc in docs.values() for run in doc["runs"] if run["backend"] == "cuda"
             for x in run["results"] if x["test"] == "compute.fp32"]
    for x in group:
        x["pct_of_clock_peak"] = 98.8
    r.update(clock_mhz=1782.0, pct_of_clock_peak=98.5,
             limit={"by": "power", "why": "99% of the peak at the measured 1782 MHz; throttle: sw_power_cap"},
             telemetry={"throttle_reasons": ["sw_power_cap"], "power_w": {"min": 690.0, "mean": 699.0, "max": 701.0}})
    code, _, _, report = run_fleet(tmp_path, capsys, docs)
    assert code == 1
    flag = next(f for g in report["gpus"] for f in g["flagged"])
    assert flag["cause"] == "power"
    assert flag["reason"].endswith("; held down by power: at the clock it ran it reaches 98.5% of the peak, the group"
                                   " 98.8%: its power supply or limit, not its silicon")
    # slow at its clock too: no such excuse
    r["pct_of_clock_peak"] = 88.0
    code, _, _, report = run_fleet(tmp_path, capsys, docs)
    assert "cause" not in next(f for g in report["gpus"] for f in g["flagged"])


def test_gpus_of_one_model_under_other_drivers_or_power_limits_are_judged_apart(tmp_path, capsys):
    docs = fleet_of()
    for name in ("node0.json", "node1.json"):
        for run in docs[name]["runs"]:
            run["device"]["health"] = {"power_limit_w": 600.0}
    code, _, _, report = run_fleet(tmp_path, capsys, docs)
    settings = sorted(g.get("setting", "") for g in report["groups"] if g["backend"] == "cuda")
    assert len(settings) == 2 and any(s.endswith("600 W") for s in settings)
    assert any(n.startswith(f"{MODEL} (cuda): judged in 2 groups by driver and power limit") for n in report["notes"])

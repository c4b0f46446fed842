"""docs/result.schema.json against the result documents: every committed one validates, planted
faults do not, and a real lavapipe run does. (conftest.py checks every document the rest of the
suite writes through save_json against the same schema.)"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

pytest.importorskip("jsonschema", reason="jsonschema is not installed: the schema itself cannot be checked")

from conftest import RESULT_SCHEMA, result_validator, schema_problems
from peakbench import cli
from peakbench.report.result import SCHEMA, load_json

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted(ROOT.glob("results/**/*.json"))


def test_the_schema_is_a_valid_draft_2020_12_schema():
    import jsonschema
    schema = json.loads(RESULT_SCHEMA.read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema"] == {"const": SCHEMA}


def test_there_are_committed_results_to_check():
    assert COMMITTED, "no result file under results/"


@pytest.mark.parametrize("path", COMMITTED, ids=[str(p.relative_to(ROOT)) for p in COMMITTED])
def test_every_committed_result_file_validates(path):
    assert schema_problems(json.loads(path.read_text())) == []


# -- planted faults --------------------------------------------------------------------------

def _document() -> dict:
    """A small valid document in the shape the CLI writes: one measured, one unsupported, one
    failed result."""
    common = {"spec_value": None, "pct_of_spec": None, "clock_mhz": None, "pct_of_clock_peak": None,
              "params": {}, "evidence": {}, "series": None}
    return {
        "schema": SCHEMA, "peakbench_version": "0.1.0", "created": "2026-11-29T12:00:00Z",
        "host": {"hostname": "h", "os": "Linux 6.1", "python": "3.11.7"},
        "options": {"backend": "vulkan", "quick": True}, "interrupted": False,
        "runs": [{
            "backend": "vulkan",
            "device": {"index": 0, "name": "Test GPU", "vendor_id": "0x10de", "device_id": "0x2335",
                       "driver": "1.0", "api": "1.3.280", "uuid": "0", "type": "gpu", "units": 4},
            "spec": {"name": "Test GPU", "boost_clock_mhz": 1000, "source": "here"},
            "results": [
                {**common, "test": "compute.fp32", "status": "ok", "unit": "TFLOPS", "value": 64.1, "reason": None,
                 "stats": {"median": 64.1, "min": 63.8, "max": 64.3, "samples": 10, "spread_pct": 0.8},
                 "telemetry": {"sm_clock_mhz": {"min": 1900, "mean": 1950, "max": 1980},
                               "power_w": {"min": 500, "mean": 600, "max": 700}, "throttle_reasons": []},
                 "energy_j": 12.0, "efficiency": {"value": 0.107, "unit": "TFLOPS/W"},
                 "samples": [63.8, 64.1, 64.3]},
                {**common, "test": "compute.fp8_e4m3", "status": "unsupported", "unit": "TFLOPS", "value": None,
                 "reason": "[api] SPIR-V has no FP8 arithmetic", "stats": None},
                {**common, "test": "compute.int8", "status": "failed", "unit": "TOPS", "value": None,
                 "reason": "variant x1u64: 3 of 4096 words differ", "stats": None},
            ],
        }],
    }


def test_the_planted_document_is_valid_before_it_is_broken():
    assert schema_problems(_document()) == []


def _result(doc: dict, test: str) -> dict:
    return next(r for r in doc["runs"][0]["results"] if r["test"] == test)


def _set(test: str, key: str, value):
    def plant(doc):
        _result(doc, test)[key] = value
    return plant


def _drop(*path):
    def plant(doc):
        node = doc
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return plant


PLANTED = {
    "wrong schema string": (lambda d: d.update(schema="peakbench.result/2"), "peakbench.result/1"),
    "unknown status": (_set("compute.fp32", "status", "skipped"), "'skipped' is not one of"),
    "unsupported reason without category": (_set("compute.fp8_e4m3", "reason", "no FP8 here"), "does not match"),
    "unsupported reason with an unknown category": (_set("compute.fp8_e4m3", "reason", "[firmware] no"), "does not match"),
    "unsupported without a reason": (_set("compute.fp8_e4m3", "reason", None), "None is not of type 'string'"),
    "value a string": (_set("compute.fp32", "value", "64.1"), "'64.1' is not of type 'number', 'null'"),
    "ok without a value": (_set("compute.fp32", "value", None), "None is not of type 'number'"),
    "failed without a reason": (_set("compute.int8", "reason", None), "None is not of type 'string'"),
    "unit not a string": (_set("compute.fp32", "unit", 1e12), "is not of type 'string'"),
    "stats without a median": (lambda d: _result(d, "compute.fp32")["stats"].pop("median"), "'median' is a required"),
    "samples count not an integer": (lambda d: _result(d, "compute.fp32")["stats"].update(samples=9.5),
                                     "9.5 is not of type 'integer'"),
    "no runs": (_drop("runs"), "'runs' is a required property"),
    "a result without its test": (lambda d: _result(d, "compute.fp32").pop("test"), "'test' is a required"),
    "interrupted not a boolean": (lambda d: d.update(interrupted="yes"), "'yes' is not of type 'boolean'"),
    "options not an object": (lambda d: d.update(options=["--quick"]), "is not of type 'object'"),
    "telemetry reading without its mean": (lambda d: _result(d, "compute.fp32")["telemetry"]["power_w"].pop("mean"),
                                           "'mean' is a required"),
    "samples not numbers": (_set("compute.fp32", "samples", ["fast"]), "'fast' is not of type 'number'"),
    "energy a string": (_set("compute.fp32", "energy_j", "12 J"), "'12 J' is not of type 'number', 'null'"),
}


@pytest.mark.parametrize("plant, expected", PLANTED.values(), ids=PLANTED.keys())
def test_a_planted_fault_fails_validation(plant, expected):
    doc = copy.deepcopy(_document())
    plant(doc)
    problems = schema_problems(doc)
    assert problems, "the schema accepted a broken document"
    assert any(expected in p for p in problems), problems


def test_older_files_without_the_additive_fields_still_validate():
    doc = _document()
    for key in ("options", "interrupted"):
        del doc[key]
    for result in doc["runs"][0]["results"]:
        for key in ("telemetry", "energy_j", "efficiency", "samples"):
            result.pop(key, None)
    assert schema_problems(doc) == []


# -- a real run ------------------------------------------------------------------------------

def test_a_lavapipe_run_validates(tmp_path, capsys, vulkan_backend):
    path = tmp_path / "r.json"
    code = cli.main(["--backend", "vulkan", "--quick", "--tests", "compute.fp32,launch.overhead",
                     "--json", str(path)])
    assert code == 0, capsys.readouterr().err
    doc = load_json(path)
    assert [r["test"] for r in doc["runs"][0]["results"]] == ["compute.fp32", "launch.overhead"]
    assert all(r["status"] == "ok" for r in doc["runs"][0]["results"])
    assert schema_problems(doc) == []
    assert result_validator().is_valid(doc)


def test_the_suite_checks_every_document_it_saves(tmp_path):
    """conftest.py's hook is in place: save_json, by any name the code reaches it, checks the
    document, records what is wrong, and still writes it."""
    import conftest
    from peakbench.report import result
    assert hasattr(result.save_json, "__wrapped__")
    assert getattr(cli, "save_json", result.save_json) is result.save_json
    doc = result.new_document()
    doc["schema"] = "someone.else/2"
    result.save_json(tmp_path / "r.json", doc)
    found = list(conftest._schema_violations)
    conftest._schema_violations.clear()        # planted here: not a failure of this test
    assert len(found) == 1 and "'peakbench.result/1' was expected" in found[0]
    assert json.loads((tmp_path / "r.json").read_text())["schema"] == "someone.else/2"


def test_the_example_in_the_format_page_validates():
    text = (ROOT / "docs" / "result-format.md").read_text()
    example = text.split("```json\n", 1)[1].split("```", 1)[0]
    assert schema_problems(json.loads(example)) == []


# -- statistics tied to samples: what every reader recomputes --------------------------------------

def _measured(tmp_path, capsys) -> dict:
    out = tmp_path / "run.json"
    assert cli.main(["--backend", "vulkan", "--quick", "--tests", "compute.fp32,memory.write", "--json", str(out)]) == 0
    capsys.readouterr()
    return json.loads(out.read_text())


def test_a_value_taken_from_the_wrong_sample_is_failed_when_read(tmp_path, capsys, vulkan_backend):
    doc = _measured(tmp_path, capsys)
    loaded = load_json(_saved(tmp_path, "good.json", doc))
    assert [r["status"] for r in loaded["runs"][0]["results"]] == ["ok", "ok"]      # a real run follows
    planted = copy.deepcopy(doc)
    r = planted["runs"][0]["results"][1]
    r["value"] = r["stats"]["median"] = r["stats"]["max"]         # the best sample, not the median
    if r["stats"]["max"] == doc["runs"][0]["results"][1]["stats"]["median"]:
        pytest.skip("the samples' median is their maximum: nothing planted")
    loaded = load_json(_saved(tmp_path, "planted.json", planted))
    got = loaded["runs"][0]["results"][1]
    assert got["status"] == "failed" and got["value"] is None
    assert got["reason"].startswith("the value does not follow from its samples: its value ")
    assert f"is not the median of its {len(r['samples'])} samples" in got["reason"]
    assert loaded["runs"][0]["results"][0]["status"] == "ok"


def test_statistics_that_do_not_match_the_samples_are_failed_too():
    from peakbench.report.result import sample_problem
    r = {"status": "ok", "value": 2.0, "stats": {"median": 2.0, "min": 1.0, "max": 3.0, "samples": 3},
         "samples": [1.0, 2.0, 3.0]}
    assert sample_problem(r) is None
    assert sample_problem({**r, "stats": {**r["stats"], "max": 4.0}}) == "its stats.max 4.0 is not its samples' 3"
    assert sample_problem({**r, "stats": {**r["stats"], "samples": 10}}) == "its stats.samples 10 is not its samples' 3"
    assert sample_problem({**r, "samples": [1.0, float("nan"), 3.0]}) == "its samples are not all finite numbers"
    assert sample_problem({**r, "samples": None}) is None          # an older document: nothing to recompute
    assert sample_problem({**r, "status": "failed", "value": None}) is None


def _saved(tmp_path, name: str, doc: dict) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("key, value, words", [("samples", 5, "samples is not a list"),
                                               ("stats", "x", "stats is not an object"),
                                               ("evidence", [], "evidence is not an object")])
def test_a_result_whose_samples_or_stats_are_of_the_wrong_kind_is_one_error_naming_the_file(tmp_path, key, value, words):
    from peakbench.report.result import ResultFileError
    doc = json.loads(COMMITTED[0].read_text())
    doc["runs"][0]["results"][0][key] = value
    path = _saved(tmp_path, "odd.json", doc)
    with pytest.raises(ResultFileError, match=f"{path}: run 0: .*{words}"):
        load_json(path)

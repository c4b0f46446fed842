"""`peakbench compare`: runs labelled A, B, ... with a legend, ratios against A, a note where lower
is better, and every file that the result-file check accepts is compared without a crash."""
from __future__ import annotations

import copy
import json

import pytest

from peakbench.report import compare
from peakbench.report.result import load_json, new_document
from test_report_render import H200, LAVAPIPE


def saved(tmp_path, name: str, *runs: dict) -> tuple[str, dict]:
    """A result file holding `runs`, read back through the result-file check, as the CLI does."""
    doc = new_document()
    doc["runs"] = list(runs)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    return name, load_json(path)


def lines_of(text: str, test: str) -> list[str]:
    return next(line for line in text.splitlines() if line.startswith(test + " ")).split()


def run_of(backend: str, *results: dict, index: int | None = 0, name: str = "GPU") -> dict:
    device = {"name": name} if index is None else {"index": index, "name": name}
    return {"backend": backend, "device": device, "results": list(results)}


def ok(test: str, value, unit: str) -> dict:
    return {"test": test, "status": "ok", "value": value, "unit": unit}


def test_three_real_runs_fit_120_columns_with_short_labels_and_a_legend(tmp_path):
    vulkan = copy.deepcopy(H200)
    vulkan["backend"] = "vulkan"
    docs = [saved(tmp_path, "cuda-0.1.0", H200), saved(tmp_path, "vulkan-0.1.0", vulkan),
            saved(tmp_path, "lavapipe-quick-run", LAVAPIPE)]
    text = compare.compare(docs)
    assert max(len(line) for line in text.splitlines()) <= 120
    assert text.splitlines()[0].split() == ["test", "unit", "A", "B", "B/A", "C", "C/A"]
    assert text.splitlines()[-3:] == [
        "A = cuda-0.1.0: cuda 0, NVIDIA H200",
        "B = vulkan-0.1.0: vulkan 0, NVIDIA H200",
        "C = lavapipe-quick-run: vulkan 0, llvmpipe (LLVM 15.0.6, 256 bits)"]
    assert lines_of(text, "compute.fp64") == ["compute.fp64", "TFLOPS", "33.3", "33.3", "1.00x", "same", "0.111", "0.00x", "slower"]
    # a test that only the lavapipe run has is shown as missing in the others
    assert lines_of(text, "compute.fp32") == ["compute.fp32", "TFLOPS", "-", "-", "0.142"]


def test_several_runs_of_one_file_get_their_own_labels(tmp_path):
    two = saved(tmp_path, "node", run_of("cuda", ok("compute.fp32", 60.0, "TFLOPS")),
                run_of("cuda", ok("compute.fp32", 30.0, "TFLOPS"), index=1))
    text = compare.compare([two])
    assert lines_of(text, "compute.fp32") == ["compute.fp32", "TFLOPS", "60.0", "30.0", "0.50x", "slower"]
    assert text.splitlines()[-2:] == ["A = node: cuda 0, GPU", "B = node: cuda 1, GPU"]


def test_lower_is_better_is_said_for_times_and_the_ratio_keeps_its_meaning(tmp_path):
    a = saved(tmp_path, "a", run_of("cuda", ok("latency.l1", 20.0, "ns"), ok("launch.overhead", 10.0, "us"),
                                    ok("memory.read", 4000.0, "GB/s")))
    b = saved(tmp_path, "b", run_of("cuda", ok("latency.l1", 40.0, "ns"), ok("launch.overhead", 5.0, "us"),
                                    ok("memory.read", 2000.0, "GB/s")))
    text = compare.compare([a, b])
    # B / A in every row: 2x the latency (slower), half the launch time (faster), half the bandwidth
    assert lines_of(text, "latency.l1")[-2:] == ["2.00x", "slower"]
    assert lines_of(text, "launch.overhead")[-2:] == ["0.50x", "faster"]
    assert lines_of(text, "memory.read")[-2:] == ["0.50x", "slower"]
    assert "ns, us: lower is better, so a ratio under 1 is faster than A" in text


def test_no_note_where_every_unit_is_a_rate(tmp_path):
    a = saved(tmp_path, "a", run_of("cuda", ok("compute.fp32", 60.0, "TFLOPS")))
    text = compare.compare([a, a])
    assert "lower is better" not in text


def test_an_ok_row_without_a_value_and_rows_missing_optional_keys(tmp_path):
    a = saved(tmp_path, "a", run_of("vulkan", {"test": "compute.fp32", "status": "ok", "unit": "TFLOPS", "value": None},
                                    {"test": "compute.fp64", "status": "ok", "unit": "TFLOPS"},
                                    {"test": "compute.int4", "status": "unsupported", "unit": "TOPS"}))
    b = saved(tmp_path, "b", run_of("vulkan", ok("compute.fp32", 2.0, "TFLOPS"), ok("compute.fp64", 1.0, "TFLOPS"),
                                    ok("compute.int4", 3.0, "TOPS")))
    text = compare.compare([a, b])
    assert lines_of(text, "compute.fp32") == ["compute.fp32", "TFLOPS", "no", "value", "2.000"]
    assert lines_of(text, "compute.fp64") == ["compute.fp64", "TFLOPS", "no", "value", "1.000"]
    assert lines_of(text, "compute.int4") == ["compute.int4", "TOPS", "unsupported", "3.000"]
    back = compare.compare([b, a])          # and as the later run: no ratio
    assert lines_of(back, "compute.fp32") == ["compute.fp32", "TFLOPS", "2.000", "no", "value"]


def test_runs_without_a_device_index(tmp_path):
    a = saved(tmp_path, "a", run_of("rocm", ok("compute.fp32", 1.0, "TFLOPS"), index=None, name="MI300X"))
    b = saved(tmp_path, "b", run_of("rocm", ok("compute.fp32", 1.5, "TFLOPS"), index=None, name="MI300X"))
    text = compare.compare([a, b])
    assert text.splitlines()[-2:] == ["A = a: rocm, MI300X", "B = b: rocm, MI300X"]
    assert lines_of(text, "compute.fp32")[-2:] == ["1.50x", "faster"]


def test_a_unit_missing_in_one_run_or_different_units(tmp_path):
    a = saved(tmp_path, "a", run_of("cuda", ok("memory.read", 4000.0, ""), ok("memory.copy", 4000.0, "GB/s")))
    b = saved(tmp_path, "b", run_of("cuda", ok("memory.read", 2000.0, "GB/s"), ok("memory.copy", 3.0, "TB/s")))
    text = compare.compare([a, b])
    assert lines_of(text, "memory.read") == ["memory.read", "GB/s", "4000.0", "2000.0", "0.50x", "slower"]
    # different units: both are named, and no ratio is taken across them
    assert lines_of(text, "memory.copy") == ["memory.copy", "GB/s", "or", "TB/s", "4000.0", "3.000"]


def test_a_zero_base_gives_no_ratio(tmp_path):
    a = saved(tmp_path, "a", run_of("cuda", ok("compute.fp32", 0.0, "TFLOPS")))
    b = saved(tmp_path, "b", run_of("cuda", ok("compute.fp32", 1.0, "TFLOPS")))
    assert lines_of(compare.compare([a, b]), "compute.fp32") == ["compute.fp32", "TFLOPS", "0.000", "1.000"]


def test_fewer_than_two_runs(tmp_path):
    assert compare.compare([saved(tmp_path, "a", LAVAPIPE)]).startswith("nothing to compare")


@pytest.mark.parametrize("i, label", [(0, "A"), (25, "Z"), (26, "AA"), (27, "AB"), (701, "ZZ"), (702, "AAA")])
def test_labels(i, label):
    assert compare.letter(i) == label


def test_side_by_side_keeps_backend_labels_and_notes_times():
    cuda = copy.deepcopy(H200)
    cuda["device"]["uuid"] = vulkan_uuid = "GPU-1234"
    vulkan = copy.deepcopy(cuda)
    vulkan["backend"] = "vulkan"
    vulkan["device"]["uuid"] = vulkan_uuid
    ((heading, text),) = compare.side_by_side([cuda, vulkan])
    assert heading == "NVIDIA H200: cuda vs vulkan (ratio = column / cuda)"
    assert text.splitlines()[0].split() == ["test", "unit", "cuda", "vulkan", "vulkan/cuda"]
    assert "lower is better" in text
    md = compare.side_by_side([cuda, vulkan], "github")[0][1]
    assert "\n\nns, us: lower is better" in md        # a blank line ends the Markdown table first

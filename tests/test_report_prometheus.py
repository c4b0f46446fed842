"""peakbench.report.prometheus (`--prometheus FILE`): the text exposition format, read back with
prometheus_client's own parser: a series per test and GPU with host, UUID, model, backend and unit,
the verdicts as labels, the GPU's health; a real lavapipe run writes one; without the library the
option is refused before anything is measured."""
from __future__ import annotations

import pytest

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from peakbench import cli  # noqa: E402
from peakbench.report import prometheus  # noqa: E402

UUID = "e20c94aa-4e6d-f4b5-f1a1-4ff0dfbd5b87"
RUNS = [{"backend": "cuda", "device": {"name": "NVIDIA H200", "uuid": UUID,
                                       "health": {"pcie_generation": 5, "ecc_uncorrected": 0, "remapping_pending": False}},
         "results": [
             {"test": "compute.fp32", "status": "ok", "unit": "TFLOPS", "value": 66.16, "pct_of_spec": 98.9,
              "pct_of_clock_peak": 98.9, "clock_mhz": 1980.0, "verified": True,
              "limit": {"by": "silicon", "why": "99% of the per-clock peak"}},
             {"test": "memory.read", "status": "failed", "unit": "GB/s", "reason": "guard bound: ..."},
             {"test": "compute.int4", "status": "unsupported", "unit": "TOPS", "reason": "[hardware] ..."}]}]


def samples(text: str) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_each_test_and_gpu_is_a_labelled_series_with_its_verdicts():
    found = samples(prometheus.text(RUNS, "node-17"))
    gpu = {"host": "node-17", "uuid": UUID, "model": "NVIDIA H200", "backend": "cuda"}
    fp32 = tuple(sorted({**gpu, "test": "compute.fp32", "unit": "TFLOPS"}.items()))
    assert found[("peakbench_value", fp32)] == 66.16
    assert found[("peakbench_pct_of_clock_peak", fp32)] == 98.9 and found[("peakbench_clock_mhz", fp32)] == 1980.0
    assert found[("peakbench_ok", fp32)] == 1.0 and found[("peakbench_verified", fp32)] == 1.0
    assert found[("peakbench_limit", tuple(sorted({**dict(fp32), "by": "silicon"}.items())))] == 1.0
    read = tuple(sorted({**gpu, "test": "memory.read", "unit": "GB/s"}.items()))
    assert found[("peakbench_ok", read)] == 0.0 and ("peakbench_value", read) not in found
    assert not any(dict(labels).get("test") == "compute.int4" for _, labels in found)
    health = {labels: v for (name, labels), v in found.items() if name == "peakbench_gpu_health"}
    assert {dict(labels)["field"]: v for labels, v in health.items()} == {
        "pcie_generation": 5.0, "ecc_uncorrected": 0.0, "remapping_pending": 0.0}


def test_a_lavapipe_run_writes_a_file_the_parser_reads(vulkan_backend, tmp_path):
    out = tmp_path / "peakbench.prom"
    assert cli.main(["--backend", "vulkan", "--quick", "--tests", "compute.fp32", "--prometheus", str(out)]) == 0
    found = samples(out.read_text())
    values = [v for (name, labels), v in found.items() if name == "peakbench_value"]
    assert len(values) == 1 and values[0] > 0
    assert {dict(labels)["by"] for name, labels in found if name == "peakbench_limit"} == {"unknown"}


def test_without_the_library_the_option_is_refused_before_any_test(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(prometheus, "available", lambda: False)
    code = cli.main(["--backend", "vulkan", "--quick", "--tests", "compute.fp32", "--prometheus",
                     str(tmp_path / "p.prom")])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == f"peakbench: error: {prometheus.MISSING}"
    assert not (tmp_path / "p.prom").exists()

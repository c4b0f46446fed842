"""The terminal table fits 120 columns: long reasons are shortened to '… [n]' and given in full in
the numbered list under the table; Markdown keeps them whole. Inputs are the result rows of real
runs (lavapipe quick run; the H200 CUDA run, every spec column filled) plus synthetic reasons."""
from __future__ import annotations

import copy
import re

import pytest

from peakbench.catalog import default_catalog
from peakbench.report import render

MESA = "llvmpipe Mesa 22.3.6 (LLVM 15.0.6)"
COOPMAT = f"[driver] VK_KHR_cooperative_matrix not exposed by {MESA}"
FP8 = (f"[api] SPIR-V has no FP8 arithmetic: VK_EXT_shader_float8 (not exposed by {MESA}) allows FP8 only "
       "in conversions and cooperative matrices")
NO_LEVEL = "[hardware] the latency sweep found no {} level (plateaus: 9 ns from 32 KiB, 153 ns from 8192 KiB)"


def row(test, status, value=None, unit="TFLOPS", reason=None, spread=None, clock=None, spec=None, pct=None,
        at_clock=None):
    return {"test": test, "status": status, "value": value, "unit": unit, "reason": reason,
            "stats": None if spread is None else {"median": value, "spread_pct": spread},
            "clock_mhz": clock, "spec_value": spec, "pct_of_spec": pct, "pct_of_clock_peak": at_clock,
            "params": {}, "evidence": {}, "series": None}


# `peakbench --backend vulkan --quick` on lavapipe: every row, reasons verbatim.
LAVAPIPE = {
    "backend": "vulkan", "spec": None,
    "device": {"index": 0, "name": "llvmpipe (LLVM 15.0.6, 256 bits)", "driver": "Mesa 22.3.6 (LLVM 15.0.6)",
               "api": "1.3.230"},
    "results": [
        row("compute.fp64", "ok", 0.1107, spread=2.1), row("compute.fp32", "ok", 0.1418, spread=1.0),
        row("compute.fp16", "ok", 0.0271, spread=3.4),
        row("compute.bf16", "unsupported", reason=f"[driver] VK_KHR_shader_bfloat16 not exposed by {MESA}"),
        row("compute.int32", "ok", 0.169, "TOPS", spread=12.0), row("compute.int16", "ok", 0.138, "TOPS", spread=2.0),
        row("compute.int8", "ok", 0.082, "TOPS", spread=1.5),
        row("compute.fp8_e4m3", "unsupported", reason=FP8), row("compute.fp8_e5m2", "unsupported", reason=FP8),
        row("compute.int4", "unsupported", unit="TOPS", reason="[api] Vulkan and SPIR-V have no 4-bit integer type"),
        row("compute.fp4", "unsupported", reason="[api] Vulkan and SPIR-V have no 4-bit float type"),
        row("matrix.fp16.fp16", "unsupported", reason=COOPMAT), row("matrix.fp16.fp32", "unsupported", reason=COOPMAT),
        row("matrix.bf16.fp32", "unsupported", reason=COOPMAT),
        row("matrix.tf32.fp32", "unsupported",
            reason="[api] Vulkan has no TF32 component type for cooperative matrices"),
        row("matrix.fp8_e4m3.fp32", "unsupported", reason=COOPMAT),
        row("matrix.fp8_e5m2.fp32", "unsupported", reason=COOPMAT),
        row("matrix.int8.int32", "unsupported", unit="TOPS", reason=COOPMAT),
        row("matrix.int4.int32", "unsupported", unit="TOPS",
            reason="[api] Vulkan has no 4-bit integer component type for cooperative matrices"),
        row("matrix.fp4.fp32", "unsupported",
            reason="[api] Vulkan has no 4-bit float component type for cooperative matrices"),
        row("matrix.fp64.fp64", "unsupported", reason=COOPMAT),
        row("memory.read", "ok", 8.0425, "GB/s", spread=53.7), row("memory.write", "ok", 2.573, "GB/s", spread=63.0),
        row("memory.copy", "ok", 3.633, "GB/s", spread=103.0),
        row("latency.l0", "unsupported", unit="ns", reason=NO_LEVEL.format("L0")),
        row("latency.l1", "ok", 9.4163, "ns", spread=7.4, clock=914.5),
        row("latency.l2", "unsupported", unit="ns", reason=NO_LEVEL.format("L2")),
        row("latency.l3", "unsupported", unit="ns", reason=NO_LEVEL.format("L3")),
        row("latency.dram", "ok", 153.9, "ns", spread=15.0, clock=991.5),
        row("launch.overhead", "ok", 58.48, "us", spread=109.1),
    ],
}

# The H200 CUDA run (results/nvidia-h200/cuda-0.1.0.json): every column filled, the longest reasons.
H200 = {
    "backend": "cuda", "spec": {"name": "NVIDIA H200 SXM", "boost_clock_mhz": 1980.0, "source": ""},
    "device": {"index": 0, "name": "NVIDIA H200", "driver": "NVIDIA 580.159.04", "api": "CUDA 13.2 (CuPy 14.2.0)"},
    "results": [
        row("compute.fp64", "ok", 33.3, spread=0.32, clock=1980.0, spec=33.5, pct=99.4, at_clock=99.4),
        row("compute.fp8_e4m3", "unsupported", reason=(
            "[hardware] NVIDIA GPUs have no FP8 vector arithmetic: PTX converts FP8 (cvt .e4m3x2) to f16 for math; "
            "FP8 runs only on the tensor cores (matrix.fp8_*)")),
        row("compute.int4", "unsupported", unit="TOPS", reason=(
            "[hardware] NVIDIA GPUs have no 4-bit integer vector instruction (INT4 exists only as a tensor-core "
            "operand on Turing and Ampere)")),
        row("matrix.fp8_e4m3.fp32", "ok", 1762.0, spread=0.65, clock=1800.0, spec=1978.9, pct=89.0, at_clock=90.5),
        row("matrix.int4.int32", "unsupported", unit="TOPS", reason=(
            "[hardware] Hopper (sm_90) has no INT4 tensor-core path: ptxas lowers mma.sync .s4 to unpacking and "
            "INT8 steps, and wgmma has no 4-bit integer type")),
        row("matrix.fp4.fp32", "unsupported",
            reason="[hardware] Hopper (sm_90) has no FP4 tensor-core path (FP4 arrives with Blackwell)"),
        row("memory.read", "ok", 4718.0, "GB/s", spread=0.1, clock=1980.0, spec=4800, pct=98.3),
        row("latency.l0", "unsupported", unit="ns", reason=(
            "[hardware] the latency sweep found no L0 level (plateaus: 20 ns from 4 KiB, 146 ns from 512 KiB, "
            "352 ns from 65536 KiB)")),
        row("latency.dram", "ok", 351.6, "ns", spread=0.76, clock=1962.5),
        row("launch.overhead", "ok", 11.15, "us", spread=220.99),
    ],
}

LONGEST_TEST = max((t.name for t in default_catalog().tests), key=len)
SYNTHETIC = [
    "[driver] " + "a reason that goes on and on " * 20,
    "[api] " + "x" * 300,                                      # one word longer than the table
    "compiling kernel.comp failed:\nkernel.comp:12: error: 'foo' undeclared\nkernel.comp:13: error: bar",
    "[toolchain] ptxas: a pipe | inside, " + "then more words to pass the column " * 3,
]


def synthetic_run() -> dict:
    run = copy.deepcopy(H200)
    run["device"]["name"] = "A Very Long Device Name From A Vendor (Rev. B) " * 2
    run["results"] += [row(f"{LONGEST_TEST}.x{i}", "failed", reason=r, clock=1980.0, spec=1978.9, pct=12345.6,
                           at_clock=100.0) for i, r in enumerate(SYNTHETIC)]
    return run


def reason_list(text: str) -> dict[int, str]:
    """The numbered reasons under a table: {n: reason}, continuation lines joined."""
    listed: dict[int, str] = {}
    n = None
    for line in text.split("\n\n", 1)[1].splitlines() if "\n\n" in text else []:
        m = re.match(r"\[(\d+)\] (.*)", line)
        if m:
            n = int(m[1])
            listed[n] = m[2]
        else:
            assert line.startswith("    ") and n is not None, line
            listed[n] += "\n" + line.strip()
    return listed


def squeeze(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize("run", [LAVAPIPE, H200, synthetic_run()], ids=["lavapipe", "h200", "synthetic"])
def test_every_line_fits_120_columns_and_every_shortened_reason_is_listed_in_full(run):
    before = copy.deepcopy(run)
    text = render.table(run)
    assert run == before, "rendering leaves the rows (and so the JSON) untouched"
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 120, max(lines, key=len)
    listed = reason_list(text)
    body = [line for line in text.split("\n\n")[0].splitlines() if line.startswith(tuple(
        r["test"] for r in run["results"]))]
    assert len(body) == len(run["results"])
    for line, r in zip(body, run["results"]):
        mark = re.search(r"… \[(\d+)\]$", line)
        if mark:
            # the cell starts the status and the reason; the list holds that reason whole
            assert squeeze(listed[int(mark[1])]) == squeeze(r["reason"])
            assert squeeze(f"{r['status']}: {r['reason']}").startswith(squeeze(line.split("  ")[-1][:-len(mark[0])]))
        elif r["status"] != "ok":
            assert line.endswith(f"{r['status']}: {r['reason']}"), "a reason that fits stays in the table"
    reasons = {squeeze(r["reason"]) for r in run["results"] if r["reason"]}
    assert listed and {squeeze(x) for x in listed.values()} <= reasons


def test_the_longest_real_reasons_are_listed():
    listed = reason_list(render.table(LAVAPIPE)).values()
    assert {FP8, COOPMAT, NO_LEVEL.format("L0")} <= {" ".join(x.split()) for x in listed}


def test_the_list_numbers_each_reason_once_in_order_of_appearance():
    text = render.table(LAVAPIPE)
    listed = reason_list(text)
    assert sorted(listed) == list(range(1, len(listed) + 1))
    assert squeeze(listed[1]) == squeeze(LAVAPIPE["results"][3]["reason"])       # compute.bf16 comes first
    coopmat = [n for n, r in listed.items() if r == COOPMAT]
    assert len(coopmat) == 1
    rows = sum(r["reason"] == COOPMAT for r in LAVAPIPE["results"])
    assert rows == 7 and sum(line.endswith(f"… [{coopmat[0]}]") for line in text.splitlines()) == rows


def test_a_multi_line_reason_keeps_its_lines_in_the_list():
    text = render.table(synthetic_run())
    compiler = next(r for r in reason_list(text).values() if r.startswith("compiling"))
    assert compiler.splitlines() == SYNTHETIC[2].splitlines()
    # in the table it is one line
    line = next(x for x in text.splitlines() if x.startswith(f"{LONGEST_TEST}.x2"))
    # cut at a word where the room ends (the catalog's longest name sets the room)
    assert re.search(r"failed: compiling kernel\.comp( failed\S*)?… \[\d+\]$", line)


def test_short_reasons_need_no_list():
    run = {"backend": "vulkan", "device": {"name": "GPU"}, "spec": None, "results": [
        row("compute.int4", "unsupported", unit="TOPS", reason="[api] no 4-bit integer type"),
        row("compute.fp32", "failed", reason=None)]}
    text = render.table(run)
    assert "unsupported: [api] no 4-bit integer type" in text and "…" not in text and "[1]" not in text
    assert text.splitlines()[-1].endswith("failed")


def test_empty_columns_are_left_out_and_the_title_wraps():
    text = render.table(LAVAPIPE)
    header = text.splitlines()[2].split()
    assert header == ["test", "value", "unit", "MHz", "status", "/", "reason"]     # no spec matched
    assert text.splitlines()[:2] == [
        "vulkan | llvmpipe (LLVM 15.0.6, 256 bits) | driver Mesa 22.3.6 (LLVM 15.0.6) | API 1.3.230",
        "spec: none matched (use --spec)"]
    full = render.table(H200).splitlines()[1].split()
    assert full[:8] == ["test", "value", "unit", "spec", "%", "spec", "MHz", "%"]


def test_values_and_noisy_status():
    text = render.table(H200)
    line = next(x for x in text.splitlines() if x.startswith("matrix.fp8_e4m3.fp32"))
    assert line.split() == ["matrix.fp8_e4m3.fp32", "1762.0", "TFLOPS", "1978.9", "89.0", "1800", "90.5", "ok"]
    assert next(x for x in text.splitlines() if x.startswith("launch.overhead")).endswith("ok (noisy: spread 221%)")


def test_a_gemm_row_says_what_share_of_the_matrix_peak_it_reached():
    run = {"backend": "cuda", "device": {"name": "GPU"}, "results": [
        {"test": "gemm.bf16.fp32", "status": "ok", "unit": "TFLOPS", "value": 780.0,
         "evidence": {"matrix_ratio": {"of": "matrix.bf16.fp32", "ratio": 0.853, "matrix_value": 914.7}}}]}
    line = render.table(run).splitlines()[-1]
    assert line.split()[:2] == ["gemm.bf16.fp32", "780.0"] and line.endswith("ok (0.85 of matrix.bf16.fp32)")


def test_a_device_without_driver_or_api_and_rows_without_optional_keys():
    run = {"backend": "rocm", "device": {"name": "GPU"},
           "results": [{"test": "compute.fp32", "status": "ok", "unit": "TFLOPS", "value": None}]}
    text = render.table(run)
    assert text.splitlines()[0] == "rocm | GPU | spec: none matched (use --spec)"
    assert text.splitlines()[-1].split() == ["compute.fp32", "TFLOPS", "ok"]
    assert "compute.fp32" in render.markdown([run]) and "compute.fp32" in render.csv_text([run])


def test_markdown_keeps_full_reasons_on_one_line_with_pipes_escaped():
    run = synthetic_run()
    md = render.markdown([LAVAPIPE, run])
    assert f"| unsupported: {FP8}" in md
    assert "failed: [toolchain] ptxas: a pipe \\| inside," in md
    assert "failed: compiling kernel.comp failed: kernel.comp:12: error: 'foo' undeclared kernel.comp:13" in md
    for block in md.split("###")[1:]:           # every row of a table has its header's cells
        pipes = {len(re.findall(r"(?<!\\)\|", line)) for line in block.splitlines() if line.startswith("|")}
        assert len(pipes) == 1, block
    assert "…" not in md
    for r in run["results"]:
        if r["reason"]:
            assert " ".join(r["reason"].split()).replace("|", "\\|") in md


def test_csv_keeps_full_reasons():
    text = render.csv_text([synthetic_run()])
    for reason in SYNTHETIC:
        assert reason in text

"""Sweep charts: labels in the unit that fits the value (MB/s, GB/s, TB/s; ns, us), PNGs for a
document with sweeps, and nothing (no error) for one without."""
from __future__ import annotations

import pytest

from peakbench.report import plots


@pytest.mark.parametrize("gbs, label", [
    (0.512, "512 MB/s"), (0.0005, "0.50 MB/s"), (8.0425, "8.04 GB/s"), (905.0, "905 GB/s"),
    (999.7, "1.00 TB/s"), (4718.0, "4.72 TB/s"), (12345.0, "12.3 TB/s"), (1.0, "1.00 GB/s")])
def test_rate_label(gbs, label):
    assert plots.rate_label(gbs) == label


@pytest.mark.parametrize("ns, label", [
    (9.4163, "9.42 ns"), (153.9, "154 ns"), (999.9, "1.00 us"), (1500.0, "1.50 us"), (58480.0, "58.5 us"),
    (2.5e6, "2.50 ms")])
def test_time_label(ns, label):
    assert plots.time_label(ns) == label


@pytest.mark.parametrize("peak, unit", [(0.8, "MB/s"), (8.0, "GB/s"), (999.0, "GB/s"), (4718.0, "TB/s")])
def test_the_bandwidth_axis_takes_the_unit_of_its_largest_value(peak, unit):
    assert plots.scale(peak, plots.RATES)[0] == unit


SIZES = [4096 << i for i in range(8)]


def sweep_run(gbs: list[float], ns: list[float], name="Test GPU") -> dict:
    read = {"x": "working_set_bytes", "y": "GB/s", "working_set_bytes": SIZES, "GB/s": gbs}
    chase = {"x": "working_set_bytes", "y": "ns", "working_set_bytes": SIZES, "ns": ns}
    return {"backend": "cuda", "device": {"index": 0, "name": name, "driver": "1.0"}, "results": [
        {"test": "memory.read", "status": "ok", "unit": "GB/s", "value": gbs[-1], "series": read},
        {"test": "latency.l1", "status": "ok", "unit": "ns", "value": ns[0], "series": chase,
         "params": {"working_sets_bytes": [SIZES[0], SIZES[2]]}},
        {"test": "latency.l2", "status": "unsupported", "unit": "ns", "value": None, "series": None},
        {"test": "latency.dram", "status": "ok", "unit": "ns", "value": ns[-1], "series": chase,
         "params": {"working_sets_bytes": [SIZES[5], SIZES[7]]}}]}


@pytest.fixture
def drawn(monkeypatch):
    """What each saved chart shows: its y label, its texts, the largest y it plots."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    charts = {}
    save = Figure.savefig

    def record(fig, path, *args, **kwargs):
        ax = fig.axes[0]
        charts[path.name] = (ax.get_ylabel(), [t.get_text() for t in ax.texts], max(ax.lines[0].get_ydata()))
        return save(fig, path, *args, **kwargs)
    monkeypatch.setattr(Figure, "savefig", record)
    return charts


def test_write_makes_pngs_with_units_that_fit_an_h200(tmp_path, drawn):
    run = sweep_run([9000.0, 9100.0, 9050.0, 7000.0, 5000.0, 4700.0, 4720.0, 4718.0],
                    [20.4, 20.5, 20.3, 146.0, 147.0, 351.0, 352.0, 351.6])
    files = plots.write([run], tmp_path / "charts")
    assert sorted(f.name for f in files) == ["cuda0-test-gpu-bandwidth.png", "cuda0-test-gpu-latency.png"]
    assert all(f.read_bytes().startswith(b"\x89PNG") and f.stat().st_size > 5000 for f in files)
    ylabel, texts, top = drawn["cuda0-test-gpu-bandwidth.png"]
    assert ylabel == "read bandwidth (TB/s)" and top == pytest.approx(9.1)
    assert texts == ["L1 9.05 TB/s", "DRAM 4.72 TB/s"]
    ylabel, texts, top = drawn["cuda0-test-gpu-latency.png"]
    assert ylabel == "load-to-use latency (ns)" and top == pytest.approx(352.0)
    assert texts == ["L1 20.4 ns", "DRAM 352 ns"]


def test_write_makes_pngs_with_units_that_fit_a_slow_device(tmp_path, drawn):
    run = sweep_run([0.9, 0.8, 0.85, 0.5, 0.4, 0.3, 0.31, 0.3],
                    [90.0, 91.0, 92.0, 400.0, 900.0, 1500.0, 1510.0, 1505.0])
    plots.write([run], tmp_path)
    ylabel, texts, top = drawn["cuda0-test-gpu-bandwidth.png"]
    assert ylabel == "read bandwidth (MB/s)" and top == pytest.approx(900.0)
    assert texts == ["L1 850 MB/s", "DRAM 300 MB/s"]
    ylabel, texts, top = drawn["cuda0-test-gpu-latency.png"]
    assert ylabel == "load-to-use latency (us)" and top == pytest.approx(1.51)
    assert texts == ["L1 90.0 ns", "DRAM 1.50 us"]


def test_a_document_without_sweeps_writes_nothing(tmp_path):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "charts"
    runs = [{"backend": "vulkan", "device": {"name": "GPU"}, "results": [
                {"test": "compute.fp32", "status": "ok", "unit": "TFLOPS", "value": 1.0, "series": None},
                {"test": "memory.read", "status": "unsupported", "unit": "GB/s", "value": None},
                {"test": "latency.l1", "status": "ok", "unit": "ns", "value": 9.0,
                 "series": {"working_set_bytes": [], "ns": []}}]},
            {"backend": "cuda", "device": {"name": "Other"}, "results": []}]
    assert plots.write(runs, folder) == []
    assert not folder.exists()
    assert plots.write([], folder) == []


def test_the_transfer_sweeps_share_one_chart_with_a_line_per_direction(tmp_path, drawn):
    sizes = [65536 << (2 * i) for i in range(6)]
    run = {"backend": "cuda", "device": {"index": 0, "name": "Test GPU", "driver": "1.0"}, "results": [
        {"test": t, "status": "ok", "unit": "GB/s", "value": top,
         "series": {"x": "transfer_bytes", "y": "GB/s", "transfer_bytes": sizes, "GB/s": [top * f for f in
                    (0.2, 0.5, 0.8, 0.95, 0.99, 1.0)]}}
        for t, top in (("transfer.h2d", 55.3), ("transfer.d2h", 55.1), ("transfer.bidir", 101.0))]}
    files = plots.write([run], tmp_path)
    assert [f.name for f in files] == ["cuda0-test-gpu-transfer.png"]
    ylabel, _, top = drawn["cuda0-test-gpu-transfer.png"]
    assert ylabel == "host link (GB/s)"
    assert top == pytest.approx(55.3)          # the first line drawn is transfer.h2d's


@pytest.fixture
def shown(monkeypatch) -> dict:
    """Each chart plots.write saves, by file name: per panel with a title, (its title, its texts,
    its image's cells or None)."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    found, save = {}, Figure.savefig

    def record(fig, path, *args, **kwargs):
        found[path.name] = [(ax.get_title(), [t.get_text() for t in ax.texts],
                             ax.images[0].get_array() if ax.images else None) for ax in fig.axes if ax.get_title()]
        return save(fig, path, *args, **kwargs)
    monkeypatch.setattr(Figure, "savefig", record)
    return found


def p2p_run(matrices: dict, status="ok") -> dict:
    return {"backend": "cuda", "device": {"index": 0, "name": "Test GPU", "driver": "1.0"}, "results": [
        {"test": "transfer.p2p", "status": status, "unit": "GB/s", "value": 750.0, "series": None,
         "evidence": {"p2p_matrix": matrices}}]}


def test_the_p2p_matrix_is_a_heat_map_per_variant_with_each_pair_annotated(tmp_path, shown):
    one_way = [[None, 371.2, 0.0], [369.8, None, None], [370.0, None, None]]
    both = [[None, 742.5, 740.1], [742.5, None, None], [740.1, None, None]]
    files = plots.write([p2p_run({"ce": one_way, "ce_bidir": both})], tmp_path)
    assert [f.name for f in files] == ["cuda0-test-gpu-p2p.png"]
    assert files[0].read_bytes().startswith(b"\x89PNG")
    (ce_title, ce_texts, ce_cells), (bidir_title, bidir_texts, _) = shown["cuda0-test-gpu-p2p.png"]
    assert (ce_title, bidir_title) == ("ce (GB/s)", "ce_bidir (GB/s)")
    # row by row: the diagonal blank, a pair without peer access "none"
    assert ce_texts == ["", "371", "0", "370", "", "none", "370", "none", ""]
    assert bidir_texts == ["", "742", "740", "742", "", "none", "740", "none", ""]
    assert ce_cells.mask[1][2] and not ce_cells.mask[0][1] and ce_cells[0][1] == pytest.approx(371.2)


def test_no_p2p_chart_for_a_failed_test_or_a_matrix_that_is_not_square(tmp_path):
    pytest.importorskip("matplotlib")
    assert plots.write([p2p_run({"ce": [[None, 1.0]]})], tmp_path) == []
    assert plots.write([p2p_run({"ce": [[None, 1.0], [1.0, None]]}, status="failed")], tmp_path) == []


def sm_run(values, status="ok", y="tflops"):
    units = list(range(len(values)))
    series = {"x": "unit", "y": y, "unit": units[::-1], y: values[::-1], "workgroups": [8] * len(values),
              "cycles": [1000] * len(values)}
    return {"backend": "cuda", "device": {"name": "Test GPU", "index": 0, "driver": "1.0"},
            "results": [{"test": "sm.fp32" if y == "tflops" else "sm.l2_latency", "status": status,
                         "series": series}]}


def test_the_sm_map_is_a_heat_map_of_each_unit_against_the_median_with_the_slowest_named(tmp_path, shown):
    values = [0.50] * 30
    values[7] = 0.45                                    # unit 7: 0.9x its siblings
    files = plots.write([sm_run(values)], tmp_path)
    assert [f.name for f in files] == ["cuda0-test-gpu-sm.png"]
    [(title, texts, cells)] = shown["cuda0-test-gpu-sm.png"]
    assert "slowest: unit 7, 0.45 TFLOPS (0.900x)" in title
    assert texts[:8] == [str(u) for u in range(8)]     # units in id order, 22 a row
    assert cells.shape == (2, 22) and cells[0][7] == pytest.approx(0.9) and cells.mask[1][21]


def test_no_sm_map_for_a_failed_test(tmp_path):
    pytest.importorskip("matplotlib")
    assert plots.write([sm_run([1.0, 1.0], status="failed")], tmp_path) == []


def test_a_burn_in_is_drawn_over_time_with_its_telemetry_and_stability(tmp_path, shown):
    t = [0.05 * i for i in range(200)]
    series = {"x": "time_s", "y": "TFLOPS", "time_s": t, "TFLOPS": [66.0 - 0.01 * i for i in range(200)],
              "clock_mhz": [1980] * 200, "power_w": [650.0] * 200}
    run = {"backend": "cuda", "device": {"name": "Test GPU", "index": 0}, "results": [
        {"test": "compute.fp32", "status": "ok", "series": series,
         "stability": {"drift_pct": -2.9, "worst_window_pct": -1.8, "windows": 5, "seconds": 10.0, "unstable": None}}]}
    files = plots.write([run], tmp_path)
    assert [f.name for f in files] == ["cuda0-test-gpu-burn-in.png"]
    assert [title for title, _, _ in shown["cuda0-test-gpu-burn-in.png"]] == [
        "compute.fp32: drift -2.9%, worst window -1.8% over 10.0 s (steady)"]


def test_svgs_are_the_same_charts_as_text_and_the_same_every_time():
    pytest.importorskip("matplotlib")
    run = sweep_run([9000.0, 9100.0, 9050.0, 7000.0, 5000.0, 4700.0, 4720.0, 4718.0],
                    [20.4, 20.5, 20.3, 146.0, 147.0, 351.0, 352.0, 351.6])
    drawn = plots.svgs(run)
    assert [kind for kind, _ in drawn] == ["latency", "bandwidth"]
    latency = drawn[0][1]
    assert latency.lstrip().startswith("<?xml") and "</svg>" in latency
    # svg.fonttype none: the labels stay text, not glyph outlines
    assert "L1 20.4 ns" in latency and "DRAM 352 ns" in latency and "<image" not in latency
    assert plots.svgs(run) == drawn             # no date, ids from a fixed salt


def test_figures_draws_each_chart_once_for_png_and_svg_alike():
    pytest.importorskip("matplotlib")
    run = sweep_run([1.0] * 8, [10.0] * 8)
    assert [kind for kind, _ in plots.figures(run)] == ["latency", "bandwidth"]
    assert plots.figures({"backend": "cuda", "device": {"name": "GPU"}, "results": []}) == []

"""Charts of the working-set sweeps (latency and bandwidth), levels marked: the latency of
each level the chase found, and on the bandwidth chart the same levels' working sets with the
read rate over them; the host transfers over their sizes; the GPU-to-GPU matrix of transfer.p2p
as a heat map per variant, each pair's GB/s written in its cell; the per-SM maps and a burn-in's
time series. figures() draws a run's charts once; write() saves them as PNG files (--plot),
svgs() as SVG text for a page (report/html.py). Needs matplotlib (pip install 'peakbench[plot]');
imported only for --plot and --html."""
from __future__ import annotations

import io
import re
from pathlib import Path
from statistics import median


def available() -> str | None:
    """None when plotting works here, else what to install."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "--plot needs matplotlib (pip install 'peakbench[plot]')"
    return None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()


def _bytes_label(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n:g} B"


LEVELS = ("latency.l0", "latency.l1", "latency.l2", "latency.l2_far", "latency.l3", "latency.dram")
TRANSFERS = ("transfer.h2d", "transfer.d2h", "transfer.bidir")

# (unit, size in the series' unit), smallest first
RATES = (("MB/s", 1e-3), ("GB/s", 1.0), ("TB/s", 1e3))
TIMES = (("ns", 1.0), ("us", 1e3), ("ms", 1e6))


def scale(value: float, units=RATES) -> tuple[str, float]:
    """The largest unit in which `value` is at least 1 (the smallest for values under 1)."""
    unit, size = units[0]
    for u, s in units[1:]:
        if abs(value) >= s:
            unit, size = u, s
    return unit, size


def _label(value: float, units) -> str:
    value = float(f"{value:.3g}")        # rounded first: 999.7 GB/s reads 1.00 TB/s, not 1000 GB/s
    unit, size = scale(value, units)
    x = value / size
    digits = 0 if abs(x) >= 100 else 1 if abs(x) >= 10 else 2
    return f"{x:.{digits}f} {unit}"


def rate_label(gbs: float) -> str:
    """A rate given in GB/s, in the unit that fits it: '512 MB/s', '8.04 GB/s', '4.80 TB/s'."""
    return _label(gbs, RATES)


def time_label(ns: float) -> str:
    """A time given in ns, in the unit that fits it: '9.42 ns', '154 ns', '1.50 us'."""
    return _label(ns, TIMES)


def level_bandwidths(by_test: dict) -> list[tuple[str, int, int, float]]:
    """(level, first and last working set, median read GB/s over them) for each latency level
    found, from the read sweep: the bandwidth of each level the chase found."""
    read = by_test.get("memory.read") or {}
    series = read.get("series") or {}
    points = list(zip(series.get("working_set_bytes", []), series.get("GB/s", [])))
    out = []
    for test in LEVELS:
        r = by_test.get(test) or {}
        span = (r.get("params") or {}).get("working_sets_bytes")
        rates = [g for w, g in points if span and span[0] <= w <= span[1]]
        if r.get("status") == "ok" and rates:
            out.append((test.split(".")[1].upper(), span[0], span[1], median(rates)))
    return out


def transfer_sweeps(by_test: dict) -> list[tuple[str, list, list]]:
    """(test, transfer sizes, GB/s) of each host-transfer test that kept its size sweep."""
    out = []
    for test in TRANSFERS:
        series = (by_test.get(test) or {}).get("series") or {}
        x, y = series.get("transfer_bytes"), series.get("GB/s")
        if x and isinstance(y, list) and len(x) == len(y):
            out.append((test, x, y))
    return out


def _figure(rows: int = 1, cols: int = 1, figsize=(8, 4.5)):
    """A figure outside pyplot's state (nothing to close: it is freed when dropped) and its grid
    of axes."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=figsize, dpi=120)
    return fig, fig.subplots(rows, cols, squeeze=False)


def _heading(run: dict, what: str) -> str:
    device = run["device"]
    driver = f", driver {device['driver']}" if device.get("driver") else ""
    return f"{device['name']} ({run['backend']}{driver}): {what}"


def _bytes_axis(ax, label: str) -> None:
    from matplotlib.ticker import FuncFormatter
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _bytes_label(v)))
    ax.tick_params(axis="x", labelrotation=45)
    ax.set_xlabel(label)


def _sweep_chart(run: dict, kind: str, series: dict, key: str, units, levels):
    """A working-set sweep: latency with a line at each level the chase found, or the read
    bandwidth with each level's working sets shaded and its rate written."""
    unit, size = scale(max(series[key]), units)
    fig, axes = _figure()
    ax = axes[0, 0]
    ax.plot(series["working_set_bytes"], [v / size for v in series[key]], marker="o", ms=3, lw=1.5)
    _bytes_axis(ax, "working set")
    if kind == "latency":
        ax.set_ylabel(f"load-to-use latency ({unit})")
        ax.set_yscale("log")
        for label, ns in levels:
            ax.axhline(ns / size, color="grey", lw=0.8, ls="--")
            ax.annotate(f"{label} {time_label(ns)}", (series["working_set_bytes"][0], ns / size),
                        textcoords="offset points", xytext=(2, 3), fontsize=8, color="dimgrey")
    else:
        ax.set_ylabel(f"read bandwidth ({unit})")
        for i, (label, first, last, gbs) in enumerate(levels):
            ax.axvspan(first, last, color="tab:blue", alpha=0.06 if i % 2 else 0.12, lw=0)
            ax.annotate(f"{label} {rate_label(gbs)}", (first, gbs / size), textcoords="offset points",
                        xytext=(2, 4), fontsize=8, color="dimgrey")
    ax.set_title(_heading(run, kind))
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    return fig


def _transfer_chart(run: dict, sweeps):
    fig, axes = _figure()
    ax = axes[0, 0]
    unit, size = scale(max(max(y) for _, _, y in sweeps))
    for test, x, y in sweeps:
        ax.plot(x, [v / size for v in y], marker="o", ms=3, lw=1.5, label=test)
    _bytes_axis(ax, "transfer size")
    ax.set_ylabel(f"host link ({unit})")
    ax.legend(fontsize=8)
    ax.set_title(_heading(run, "host transfers"))
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    return fig


def p2p_matrices(by_test: dict) -> dict[str, list]:
    """transfer.p2p's N x N matrix of GB/s per variant (rows: source GPU, columns: destination),
    where the test is ok and kept them."""
    r = by_test.get("transfer.p2p") or {}
    found = (r.get("evidence") or {}).get("p2p_matrix") or {}
    return {v: m for v, m in found.items() if r.get("status") == "ok" and isinstance(m, list) and m
            and all(isinstance(row, list) and len(row) == len(m) for row in m)}


def _p2p_chart(run: dict, matrices: dict):
    import numpy as np
    from matplotlib import colormaps
    top = max((x for m in matrices.values() for row in m for x in row if x is not None), default=1.0) or 1.0
    fig, axes = _figure(1, len(matrices), figsize=(4.2 * len(matrices) + 0.6, 4.8))
    for ax, (variant, m) in zip(axes[0], matrices.items()):
        n = len(m)
        grid = np.array([[np.nan if x is None else x for x in row] for row in m], dtype=float)
        ax.imshow(grid, cmap=colormaps["viridis"].with_extremes(bad="lightgrey"), vmin=0, vmax=top)
        for a in range(n):
            for b in range(n):
                text = "" if a == b else "none" if m[a][b] is None else f"{m[a][b]:.0f}"
                light = m[a][b] is not None and m[a][b] < 0.6 * top
                ax.annotate(text, (b, a), ha="center", va="center", fontsize=8 if n <= 4 else 6,
                            color="white" if light else "black")
        ax.set_xticks(range(n))
        ax.set_yticks(range(n))
        ax.set_xlabel("destination GPU")
        ax.set_ylabel("source GPU")
        ax.set_title(f"{variant} (GB/s)", fontsize=9)
    return _titled(fig, run, "GPU-to-GPU copies")


def _titled(fig, run: dict, what: str):
    """A chart of several panels, titled with the run's device, backend and driver."""
    fig.suptitle(_heading(run, what), fontsize=10)
    fig.tight_layout()
    return fig


SM_MAPS = ("sm.fp32", "sm.l2_latency")


def _series_over(r: dict, x: str) -> dict | None:
    """An ok result's series over `x` with as many values as points, else None."""
    series = r.get("series") or {}
    y = series.get("y")
    points = series.get(x) or []
    if r.get("status") == "ok" and series.get("x") == x and y and points and len(series.get(y) or []) == len(points):
        return series
    return None


def sm_maps(by_test: dict) -> list[tuple[str, dict]]:
    """The per-SM maps (sm.*) a run kept: (test, series) where the test is ok and its series
    holds a value per unit."""
    return [(test, series) for test in SM_MAPS if (series := _series_over(by_test.get(test) or {}, "unit"))]


def _sm_chart(run: dict, maps: list[tuple[str, dict]]):
    """Each map as a heat map of the units in id order, `columns` a row, each unit's share of the
    median unit: the slowest outlined, its value and id named."""
    import math
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle
    fig, axes = _figure(len(maps), 1, figsize=(10, 2.2 + 1.6 * len(maps)))
    for ax, (test, series) in zip(axes[:, 0], maps):
        y = series["y"]
        order = sorted(range(len(series["unit"])), key=lambda i: series["unit"][i])
        units = [series["unit"][i] for i in order]
        values = np.array([series[y][i] for i in order], dtype=float)
        mid = float(np.median(values))
        share = values / mid if mid else values
        columns = min(len(units), 22)
        rows = math.ceil(len(units) / columns)
        grid = np.full(rows * columns, np.nan)
        grid[:len(units)] = share
        slow_high = y == "ns"                      # latency: the highest is the slowest
        spread = max(0.02, float(np.nanmax(np.abs(share - 1))))
        cmap = colormaps["RdYlGn_r" if slow_high else "RdYlGn"].with_extremes(bad="white")
        ax.imshow(grid.reshape(rows, columns), cmap=cmap, vmin=1 - spread, vmax=1 + spread, aspect="auto")
        worst = int(np.argmax(values) if slow_high else np.argmin(values))
        ax.add_patch(Rectangle((worst % columns - 0.5, worst // columns - 0.5), 1, 1, fill=False, lw=2, ec="black"))
        for i, u in enumerate(units):
            ax.annotate(str(u), (i % columns, i // columns), ha="center", va="center", fontsize=6)
        ax.set_xticks([])
        ax.set_yticks([])
        label = "ns" if slow_high else "TFLOPS"
        ax.set_title(f"{test}: each unit against the median {mid:.4g} {label} (id in the cell); slowest: unit"
                     f" {units[worst]}, {values[worst]:.4g} {label} ({share[worst]:.3f}x)", fontsize=9)
    return _titled(fig, run, "per-SM maps")


def burn_in_series(results: list[dict]) -> list[tuple[str, dict]]:
    """The burn-in time series a run kept: (test, series) of each ok result whose series runs
    over time_s."""
    return [(r["test"], series) for r in results if (series := _series_over(r, "time_s"))]


def _burn_in_chart(run: dict, found: list[tuple[str, dict]]):
    """A row per test: its value over time against its median, with the clock, power and
    temperature where the series has them, and the stability summary in the title."""
    stability = {r["test"]: r.get("stability") or {} for r in run["results"]}
    fig, axes = _figure(len(found), 1, figsize=(10, 2.6 * len(found) + 0.6))
    for ax, (test, series) in zip(axes[:, 0], found):
        y, t = series["y"], series["time_s"]
        values = series[y]
        mid = sorted(values)[len(values) // 2]
        ax.plot(t, [v / mid for v in values], lw=1.2, color="tab:blue", label=f"{y} / median")
        ax.set_ylabel(f"{y} / median {mid:.4g}")
        ax.set_xlabel("seconds")
        ax.grid(True, alpha=0.3)
        other = ax.twinx()
        for key, color in (("clock_mhz", "tab:orange"), ("power_w", "tab:red"), ("temperature_c", "tab:green")):
            if key in series:
                top = max(series[key]) or 1
                other.plot(t, [x / top for x in series[key]], lw=0.8, color=color, alpha=0.7,
                           label=f"{key} / {top:.0f}")
        other.set_ylabel("telemetry / its highest")
        lines = ax.get_legend_handles_labels()
        more = other.get_legend_handles_labels()
        ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="lower left")
        s = stability.get(test) or {}
        verdict = f"unstable: {s['unstable']}" if s.get("unstable") else "steady"
        ax.set_title(f"{test}: drift {s.get('drift_pct')}%, worst window {s.get('worst_window_pct')}% over"
                     f" {s.get('seconds')} s ({verdict})", fontsize=9)
    return _titled(fig, run, "burn-in")


def figures(run: dict) -> list[tuple[str, object]]:
    """The charts of one run, each as (kind, matplotlib Figure): `latency`, `bandwidth`,
    `transfer`, `p2p`, `sm`, `burn-in`, for the sweeps, matrices, maps and time series it has
    (none for a run without them)."""
    by_test = {r["test"]: r for r in run["results"]}
    out = []
    latency = next((r for r in run["results"] if r["test"].startswith("latency.") and _sweep(r, "ns")), None)
    if latency:
        levels = [(t.split(".")[1].upper(), by_test[t]["value"]) for t in LEVELS
                  if by_test.get(t, {}).get("status") == "ok" and by_test[t].get("value")]
        out.append(("latency", _sweep_chart(run, "latency", latency["series"], "ns", TIMES, levels)))
    read = by_test.get("memory.read")
    if read and _sweep(read, "GB/s"):
        out.append(("bandwidth", _sweep_chart(run, "bandwidth", read["series"], "GB/s", RATES,
                                              level_bandwidths(by_test))))
    if sweeps := transfer_sweeps(by_test):
        out.append(("transfer", _transfer_chart(run, sweeps)))
    if matrices := p2p_matrices(by_test):
        out.append(("p2p", _p2p_chart(run, matrices)))
    if maps := sm_maps(by_test):
        out.append(("sm", _sm_chart(run, maps)))
    if burn_in := burn_in_series(run["results"]):
        out.append(("burn-in", _burn_in_chart(run, burn_in)))
    return out


def write(runs: list[dict], folder: str | Path) -> list[Path]:
    """Each run's charts as `<backend><index>-<device>-<kind>.png` in `folder`; returns the files
    (none, and no folder made, when no run has a chart)."""
    folder = Path(folder)
    written = []
    for run in runs:
        device = run["device"]
        name = f"{run['backend']}{device.get('index', 0)}-{_slug(device['name'])}"
        for kind, fig in figures(run):
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{name}-{kind}.png"
            fig.savefig(path)
            written.append(path)
    return written


# Text stays text (small, searchable, in the page's own fonts); ids are hashed from a fixed salt,
# so one run always gives the same page.
SVG_RC = {"svg.fonttype": "none", "svg.hashsalt": "peakbench"}


def svgs(run: dict) -> list[tuple[str, str]]:
    """One run's charts as (kind, SVG text), for a page to inline."""
    import matplotlib
    out = []
    with matplotlib.rc_context(SVG_RC):
        for kind, fig in figures(run):
            buf = io.StringIO()
            fig.savefig(buf, format="svg", metadata={"Date": None})
            out.append((kind, buf.getvalue()))
    return out


def _sweep(result: dict, key: str) -> bool:
    """Whether a result holds a sweep that can be drawn: working sets and `key`, as many of each."""
    series = result.get("series") or {}
    x, y = series.get("working_set_bytes"), series.get(key)
    return bool(x) and isinstance(y, list) and len(x) == len(y)

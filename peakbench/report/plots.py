"""PNG charts of the working-set sweeps (latency and bandwidth), levels marked: the latency of
each level the chase found, and on the bandwidth chart the same levels' working sets with the
read rate over them; the host transfers over their sizes; and the GPU-to-GPU matrix of
transfer.p2p as a heat map per variant, each pair's GB/s written in its cell. Needs matplotlib
(pip install 'peakbench[plot]'); imported only for --plot."""
from __future__ import annotations

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


def _transfer_chart(plt, FuncFormatter, run: dict, sweeps, path: Path) -> Path:
    device = run["device"]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    unit, size = scale(max(max(y) for _, _, y in sweeps))
    for test, x, y in sweeps:
        ax.plot(x, [v / size for v in y], marker="o", ms=3, lw=1.5, label=test)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _bytes_label(v)))
    ax.tick_params(axis="x", labelrotation=45)
    ax.set_xlabel("transfer size")
    ax.set_ylabel(f"host link ({unit})")
    ax.legend(fontsize=8)
    driver = f", driver {device['driver']}" if device.get("driver") else ""
    ax.set_title(f"{device['name']} ({run['backend']}{driver}): host transfers")
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def p2p_matrices(by_test: dict) -> dict[str, list]:
    """transfer.p2p's N x N matrix of GB/s per variant (rows: source GPU, columns: destination),
    where the test is ok and kept them."""
    r = by_test.get("transfer.p2p") or {}
    found = (r.get("evidence") or {}).get("p2p_matrix") or {}
    return {v: m for v, m in found.items() if r.get("status") == "ok" and isinstance(m, list) and m
            and all(isinstance(row, list) and len(row) == len(m) for row in m)}


def _p2p_chart(plt, run: dict, matrices: dict, path: Path) -> Path:
    import numpy as np
    top = max((x for m in matrices.values() for row in m for x in row if x is not None), default=1.0) or 1.0
    fig, axes = plt.subplots(1, len(matrices), figsize=(4.2 * len(matrices) + 0.6, 4.8), dpi=120, squeeze=False)
    for ax, (variant, m) in zip(axes[0], matrices.items()):
        n = len(m)
        grid = np.array([[np.nan if x is None else x for x in row] for row in m], dtype=float)
        ax.imshow(grid, cmap=plt.get_cmap("viridis").with_extremes(bad="lightgrey"), vmin=0, vmax=top)
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
    return _save(plt, fig, run, "GPU-to-GPU copies", path)


def _save(plt, fig, run: dict, what: str, path: Path) -> Path:
    """A chart of several panels, titled with the run's device, backend and driver, written to `path`."""
    device = run["device"]
    driver = f", driver {device['driver']}" if device.get("driver") else ""
    fig.suptitle(f"{device['name']} ({run['backend']}{driver}): {what}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


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


def _sm_chart(plt, run: dict, maps: list[tuple[str, dict]], path: Path) -> Path:
    """Each map as a heat map of the units in id order, `columns` a row, each unit's share of the
    median unit: the slowest outlined, its value and id named."""
    import math
    import numpy as np
    fig, axes = plt.subplots(len(maps), 1, figsize=(10, 2.2 + 1.6 * len(maps)), dpi=120, squeeze=False)
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
        cmap = plt.get_cmap("RdYlGn_r" if slow_high else "RdYlGn").with_extremes(bad="white")
        ax.imshow(grid.reshape(rows, columns), cmap=cmap, vmin=1 - spread, vmax=1 + spread, aspect="auto")
        worst = int(np.argmax(values) if slow_high else np.argmin(values))
        ax.add_patch(plt.Rectangle((worst % columns - 0.5, worst // columns - 0.5), 1, 1, fill=False, lw=2, ec="black"))
        for i, u in enumerate(units):
            ax.annotate(str(u), (i % columns, i // columns), ha="center", va="center", fontsize=6)
        ax.set_xticks([])
        ax.set_yticks([])
        label = "ns" if slow_high else "TFLOPS"
        ax.set_title(f"{test}: each unit against the median {mid:.4g} {label} (id in the cell); slowest: unit"
                     f" {units[worst]}, {values[worst]:.4g} {label} ({share[worst]:.3f}x)", fontsize=9)
    return _save(plt, fig, run, "per-SM maps", path)


def burn_in_series(results: list[dict]) -> list[tuple[str, dict]]:
    """The burn-in time series a run kept: (test, series) of each ok result whose series runs
    over time_s."""
    return [(r["test"], series) for r in results if (series := _series_over(r, "time_s"))]


def _burn_in_chart(plt, run: dict, found: list[tuple[str, dict]], path: Path) -> Path:
    """A row per test: its value over time against its median, with the clock, power and
    temperature where the series has them, and the stability summary in the title."""
    stability = {r["test"]: r.get("stability") or {} for r in run["results"]}
    fig, axes = plt.subplots(len(found), 1, figsize=(10, 2.6 * len(found) + 0.6), dpi=120, squeeze=False)
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
    return _save(plt, fig, run, "burn-in", path)


def write(runs: list[dict], folder: str | Path) -> list[Path]:
    """One latency, one bandwidth, one host-transfer, one GPU-to-GPU, one per-SM and one burn-in
    chart per run that has those sweeps, matrices, maps or time series; returns the files (none, and no folder made, when no run has one)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    folder = Path(folder)
    written = []
    for run in runs:
        by_test = {r["test"]: r for r in run["results"]}
        device = run["device"]
        name = f"{run['backend']}{device.get('index', 0)}-{_slug(device['name'])}"
        charts = []
        latency = next((r for r in run["results"] if r["test"].startswith("latency.") and _sweep(r, "ns")), None)
        if latency:
            levels = [(t.split(".")[1].upper(), by_test[t]["value"]) for t in LEVELS
                      if by_test.get(t, {}).get("status") == "ok" and by_test[t].get("value")]
            charts.append(("latency", latency["series"], "ns", TIMES, levels))
        read = by_test.get("memory.read")
        if read and _sweep(read, "GB/s"):
            charts.append(("bandwidth", read["series"], "GB/s", RATES, level_bandwidths(by_test)))
        for kind, series, key, units, levels in charts:
            unit, size = scale(max(series[key]), units)
            fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
            ax.plot(series["working_set_bytes"], [v / size for v in series[key]], marker="o", ms=3, lw=1.5)
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _bytes_label(x)))
            ax.tick_params(axis="x", labelrotation=45)
            ax.set_xlabel("working set")
            if kind == "latency":        # each level the chase found, as a line at its latency
                ax.set_ylabel(f"load-to-use latency ({unit})")
                ax.set_yscale("log")
                for label, ns in levels:
                    ax.axhline(ns / size, color="grey", lw=0.8, ls="--")
                    ax.annotate(f"{label} {time_label(ns)}", (series["working_set_bytes"][0], ns / size),
                                textcoords="offset points", xytext=(2, 3), fontsize=8, color="dimgrey")
            else:                        # the chase's levels, shaded, with the read rate over each
                ax.set_ylabel(f"read bandwidth ({unit})")
                for i, (label, first, last, gbs) in enumerate(levels):
                    ax.axvspan(first, last, color="tab:blue", alpha=0.06 if i % 2 else 0.12, lw=0)
                    ax.annotate(f"{label} {rate_label(gbs)}", (first, gbs / size), textcoords="offset points",
                                xytext=(2, 4), fontsize=8, color="dimgrey")
            driver = f", driver {device['driver']}" if device.get("driver") else ""
            ax.set_title(f"{device['name']} ({run['backend']}{driver}): {kind}")
            ax.grid(True, which="major", alpha=0.3)
            fig.tight_layout()
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{name}-{kind}.png"
            fig.savefig(path)
            plt.close(fig)
            written.append(path)
        sweeps = transfer_sweeps(by_test)
        if sweeps:
            written.append(_transfer_chart(plt, FuncFormatter, run, sweeps, folder / f"{name}-transfer.png"))
        matrices = p2p_matrices(by_test)
        if matrices:
            written.append(_p2p_chart(plt, run, matrices, folder / f"{name}-p2p.png"))
        maps = sm_maps(by_test)
        if maps:
            written.append(_sm_chart(plt, run, maps, folder / f"{name}-sm.png"))
        burn_in = burn_in_series(run["results"])
        if burn_in:
            written.append(_burn_in_chart(plt, run, burn_in, folder / f"{name}-burn-in.png"))
    return written


def _sweep(result: dict, key: str) -> bool:
    """Whether a result holds a sweep that can be drawn: working sets and `key`, as many of each."""
    series = result.get("series") or {}
    x, y = series.get("working_set_bytes"), series.get(key)
    return bool(x) and isinstance(y, list) and len(x) == len(y)

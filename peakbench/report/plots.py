"""PNG charts of the working-set sweeps (latency and bandwidth), levels marked: the latency of
each level the chase found, and on the bandwidth chart the same levels' working sets with the
read rate over them. Needs matplotlib (pip install 'peakbench[plot]'); imported only for --plot."""
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


LEVELS = ("latency.l0", "latency.l1", "latency.l2", "latency.l3", "latency.dram")


def _rate_label(gbs: float) -> str:
    return f"{gbs / 1000:.1f} TB/s" if gbs >= 1000 else f"{gbs:.0f} GB/s"


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


def write(runs: list[dict], folder: str | Path) -> list[Path]:
    """One latency and one bandwidth chart per run that has the sweeps; returns the files."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for run in runs:
        by_test = {r["test"]: r for r in run["results"]}
        name = f"{run['backend']}{run['device'].get('index', 0)}-{_slug(run['device']['name'])}"
        charts = []
        latency = next((r for r in run["results"] if r["test"].startswith("latency.") and r.get("series")), None)
        if latency:
            levels = [(t.split(".")[1].upper(), by_test[t]["value"]) for t in LEVELS
                      if by_test.get(t, {}).get("status") == "ok"]
            charts.append(("latency", latency["series"], "ns", "load-to-use latency (ns)", levels))
        read = by_test.get("memory.read")
        if read and read.get("series"):
            charts.append(("bandwidth", read["series"], "GB/s", "read bandwidth (GB/s)", []))
        for kind, series, key, ylabel, levels in charts:
            fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
            ax.plot(series["working_set_bytes"], series[key], marker="o", ms=3, lw=1.5)
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _bytes_label(x)))
            ax.tick_params(axis="x", labelrotation=45)
            ax.set_xlabel("working set")
            ax.set_ylabel(ylabel)
            if kind == "latency":
                ax.set_yscale("log")
            for label, value in levels:
                ax.axhline(value, color="grey", lw=0.8, ls="--")
                ax.annotate(f"{label} {value:.0f} ns", (series["working_set_bytes"][0], value),
                            textcoords="offset points", xytext=(2, 3), fontsize=8, color="dimgrey")
            if kind == "bandwidth":     # the chase's levels, shaded, with the read rate over each
                for i, (label, first, last, gbs) in enumerate(level_bandwidths(by_test)):
                    ax.axvspan(first, last, color="tab:blue", alpha=0.06 if i % 2 else 0.12, lw=0)
                    ax.annotate(f"{label} {_rate_label(gbs)}", (first, gbs), textcoords="offset points",
                                xytext=(2, 4), fontsize=8, color="dimgrey")
            ax.set_title(f"{run['device']['name']} ({run['backend']}, driver {run['device']['driver']}): {kind}")
            ax.grid(True, which="major", alpha=0.3)
            fig.tight_layout()
            path = folder / f"{name}-{kind}.png"
            fig.savefig(path)
            plt.close(fig)
            written.append(path)
    return written

"""PNG charts of the working-set sweeps (latency and bandwidth), levels marked. Needs matplotlib
(pip install 'peakbench[plot]'); imported only for --plot."""
from __future__ import annotations

import re
from pathlib import Path


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
            levels = [(t.split(".")[1].upper(), by_test[t]["value"]) for t in
                      ("latency.l0", "latency.l1", "latency.l2", "latency.l3", "latency.dram")
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
            ax.set_title(f"{run['device']['name']} ({run['backend']}, driver {run['device']['driver']}): {kind}")
            ax.grid(True, which="major", alpha=0.3)
            fig.tight_layout()
            path = folder / f"{name}-{kind}.png"
            fig.savefig(path)
            plt.close(fig)
            written.append(path)
    return written

"""Pure formatters: the same rows as a terminal table, Markdown or CSV."""
from __future__ import annotations

import csv
import io

from tabulate import tabulate

HEADERS = ("test", "measured", "unit", "spec", "% spec", "clock MHz", "% at clock", "status / reason")


def _num(x, digits=1):
    if x is None:
        return ""
    return f"{x:.{digits}f}" if abs(x) < 10000 else f"{x:.0f}"


def _value_digits(x):
    return 3 if x is not None and abs(x) < 10 else 1


def rows(run: dict) -> list[tuple]:
    out = []
    for r in run["results"]:
        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {r.get('reason') or ''}"
        stats = r.get("stats") or {}
        if r["status"] == "ok" and stats.get("spread_pct", 0) > 5:
            status = f"ok (noisy: spread {stats['spread_pct']:.0f}%)"
        out.append((r["test"], _num(r.get("value"), _value_digits(r.get("value"))), r["unit"],
                    _num(r.get("spec_value")), _num(r.get("pct_of_spec")), _num(r.get("clock_mhz"), 0),
                    _num(r.get("pct_of_clock_peak")), status))
    return out


def title(run: dict) -> str:
    d = run["device"]
    spec = run.get("spec") or {}
    spec_text = f"spec: {spec['name']}" if spec else "spec: none matched (use --spec)"
    return f"{run['backend']} | {d['name']} | driver {d['driver']} | API {d['api']} | {spec_text}"


def table(run: dict) -> str:
    return f"{title(run)}\n{tabulate(rows(run), HEADERS, tablefmt='simple', disable_numparse=True)}"


def markdown(runs: list[dict]) -> str:
    parts = []
    for run in runs:
        parts.append(f"### {title(run)}\n")
        parts.append(tabulate(rows(run), HEADERS, tablefmt="github", disable_numparse=True) + "\n")
    return "\n".join(parts)


def csv_text(runs: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(("backend", "device", "driver", "test", "status", "value", "unit", "spec_value",
                "pct_of_spec", "clock_mhz", "pct_of_clock_peak", "median", "min", "max", "samples",
                "spread_pct", "reason"))
    for run in runs:
        for r in run["results"]:
            s = r.get("stats") or {}
            w.writerow((run["backend"], run["device"]["name"], run["device"]["driver"], r["test"],
                        r["status"], r.get("value"), r["unit"], r.get("spec_value"),
                        r.get("pct_of_spec"), r.get("clock_mhz"), r.get("pct_of_clock_peak"),
                        s.get("median"), s.get("min"), s.get("max"), s.get("samples"),
                        s.get("spread_pct"), r.get("reason")))
    return buf.getvalue()

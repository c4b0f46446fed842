"""Pure formatters: the same rows as a terminal table, Markdown or CSV."""
from __future__ import annotations

import csv
import io
import textwrap

from tabulate import tabulate

from peakbench.telemetry import throttle_cause

HEADERS = ("test", "value", "unit", "spec", "% spec", "MHz", "% at clock", "W", "per W", "limit", "status / reason")
WIDTH = 120               # the terminal table's lines, title and reason list included
MIN_STATUS = 24           # the status column keeps this much even beside very long test names
# Columns that stay even when no row fills them; the others are left out when empty.
ALWAYS = {"test", "value", "unit", "status / reason"}


def _num(x, digits=1):
    if not isinstance(x, (int, float)):
        return ""
    return f"{x:.{digits}f}" if abs(x) < 10000 else f"{x:.0f}"


def _value_digits(x):
    return 3 if isinstance(x, (int, float)) and abs(x) < 10 else 1


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _telemetry(r: dict) -> dict:
    return r.get("telemetry") if isinstance(r.get("telemetry"), dict) else {}


def throttled(r: dict) -> str | None:
    """'power throttle: sw_power_cap' where the result was taken under a throttle, else None."""
    reasons = _telemetry(r).get("throttle_reasons")
    if not isinstance(reasons, list) or not reasons:
        return None
    reasons = [str(x) for x in reasons]
    return f"{throttle_cause(reasons)} throttle: {', '.join(reasons)}"


def _status(r: dict) -> str:
    marks = [m for m in (throttled(r),) if m]
    if r["status"] != "ok":
        reason = _one_line(r.get("reason") or "")
        text = f"{r['status']}: {reason}" if reason else r["status"]
        return f"{text} ({marks[0]})" if marks else text
    unstable = (r.get("stability") or {}).get("unstable") if isinstance(r.get("stability"), dict) else None
    if unstable:
        marks.insert(0, f"unstable: {unstable}")
    spread = (r.get("stats") or {}).get("spread_pct")
    if isinstance(spread, (int, float)) and spread > 5 and not r.get("stability"):
        marks.insert(0, f"noisy: spread {spread:.0f}%")
    if r.get("verified") is False:       # the short form; evidence.unverified says why in full
        why = str((r.get("evidence") or {}).get("unverified") or "work: ; bound: ")
        missing = [text for text, part in (("no work check", why.startswith("work:")),
                                           ("no bound", why.startswith("bound:") or "; bound: " in why)) if part]
        marks.insert(0, f"unverified: {', '.join(missing) or why}")
    ratio = (r.get("evidence") or {}).get("matrix_ratio")
    if isinstance(ratio, dict) and isinstance(ratio.get("ratio"), (int, float)):
        marks.append(f"{ratio['ratio']:.2f} of {ratio.get('of')}")
    return f"ok ({'; '.join(marks)})" if marks else "ok"


def _power(r: dict) -> str:
    power = _telemetry(r).get("power_w")
    return _num(power.get("mean"), 0) if isinstance(power, dict) else ""


def _efficiency(r: dict) -> str:
    e = r.get("efficiency")
    if not isinstance(e, dict) or not isinstance(e.get("value"), (int, float)):
        return ""
    return f"{_num(e['value'], 3 if abs(e['value']) < 10 else 1)} {e.get('unit', '')}".strip()


def rows(run: dict) -> list[tuple]:
    return [(r["test"], _num(r.get("value"), _value_digits(r.get("value"))), r["unit"],
             _num(r.get("spec_value")), _num(r.get("pct_of_spec")), _num(r.get("clock_mhz"), 0),
             _num(r.get("pct_of_clock_peak")), _power(r), _efficiency(r), _limit(r), _status(r)) for r in run["results"]]


def _limit(r: dict) -> str:
    """The limit verdict's word (report/verdict.py); its sentence is in the JSON and `explain`."""
    limit = r.get("limit")
    return str(limit.get("by", "")) if isinstance(limit, dict) else ""


def columns_shown(body: list[tuple]) -> list[int]:
    """The columns to show: the fixed ones and any that some row fills."""
    return [i for i, h in enumerate(HEADERS) if h in ALWAYS or any(row[i] for row in body)]


def title(run: dict) -> str:
    return " | ".join(_title_parts(run))


def _title_parts(run: dict) -> list[str]:
    d = run["device"]
    spec = run.get("spec") or {}
    parts = [run["backend"], d["name"].strip()]
    parts += [f"{word} {d[key]}" for key, word in (("driver", "driver"), ("api", "API")) if d.get(key)]
    parts.append(f"spec: {spec['name']}" if spec.get("name") else "spec: none matched (use --spec)")
    return parts


def _wrap_parts(parts: list[str], width: int) -> list[str]:
    """Parts joined by ' | ', a new line wherever the next part would pass `width`."""
    lines = [parts[0]]
    for p in parts[1:]:
        if len(lines[-1]) + 3 + len(p) <= width:
            lines[-1] += f" | {p}"
        else:
            lines.append(p)
    return [_cut(line, width) for line in lines]


def _cut(text: str, width: int, suffix: str = "…") -> str:
    """`text` in at most `width` characters, ending in `suffix` when shortened; a cut falls at a
    space where one is near, so a word is not split."""
    if len(text) <= width:
        return text
    keep = text[:max(0, width - len(suffix))]
    space = keep.rfind(" ")
    if space >= len(keep) - 12 and space > 0:
        keep = keep[:space]
    return keep.rstrip(" ,;:(") + suffix


def _simple(body: list[list[str]], headers: list[str]) -> str:
    """tabulate's "simple" layout without its padding of the headers, so that every column is
    as wide as its widest cell and the reasons get the room."""
    widths = [max(map(len, col)) for col in zip(headers, *body)]

    def line(cells):
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, body)])


def table(run: dict) -> str:
    """The run as a table in at most WIDTH columns: a status that does not fit is shortened to
    end in '… [n]', and the list under the table gives reason n in full."""
    body = rows(run)
    cols = columns_shown(body)
    headers = [HEADERS[i] for i in cols]
    widths = [max([len(h), *(len(row[i]) for row in body)]) for h, i in zip(headers, cols[:-1])]
    room = max(MIN_STATUS, WIDTH - sum(w + 2 for w in widths))     # two spaces after each column
    reasons: dict[str, int] = {}        # full reason -> its number in the list
    shown = []
    for row, r in zip(body, run["results"]):
        status = row[-1]
        if len(status) > room and r.get("reason"):
            n = reasons.setdefault(str(r["reason"]), len(reasons) + 1)
            status = _cut(status, room, f"… [{n}]")
        elif len(status) > room:
            status = _cut(status, room)
        shown.append([*(row[i] for i in cols[:-1]), status])
    lines = [*_wrap_parts(_title_parts(run), WIDTH), _simple(shown, headers)]
    if reasons:
        lines.append("")
        for reason, n in reasons.items():
            lines += _numbered(n, reason)
    return "\n".join(lines)


def _numbered(n: int, reason: str) -> list[str]:
    """Reason n in full, wrapped to WIDTH under its mark; its own line breaks are kept."""
    mark = f"[{n}] "
    indent = " " * len(mark)
    out = []
    for line in reason.splitlines() or [""]:
        out += textwrap.wrap(line, WIDTH, initial_indent=indent, subsequent_indent=indent,
                             break_on_hyphens=False) or [indent]
    out[0] = mark + out[0][len(indent):]
    return [line.rstrip() for line in out]


def markdown(runs: list[dict]) -> str:
    """Full reasons in the cells (a Markdown viewer wraps them), on one line, pipes escaped."""
    parts = []
    for run in runs:
        body = rows(run)
        cols = columns_shown(body)
        cells = [[row[i].replace("|", "\\|") for i in cols] for row in body]
        parts.append(f"### {title(run)}\n")
        parts.append(tabulate(cells, [HEADERS[i] for i in cols], tablefmt="github", disable_numparse=True) + "\n")
    return "\n".join(parts)


def csv_text(runs: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(("backend", "device", "driver", "test", "status", "value", "unit", "spec_value",
                "pct_of_spec", "clock_mhz", "pct_of_clock_peak", "median", "min", "max", "samples",
                "spread_pct", "reason", "power_w", "energy_j", "efficiency", "efficiency_unit",
                "throttle_reasons", "verified", "unverified", "limit", "limit_why"))
    for run in runs:
        for r in run["results"]:
            s = r.get("stats") or {}
            w.writerow((run["backend"], run["device"]["name"], run["device"].get("driver"), r["test"],
                        r["status"], r.get("value"), r["unit"], r.get("spec_value"),
                        r.get("pct_of_spec"), r.get("clock_mhz"), r.get("pct_of_clock_peak"),
                        s.get("median"), s.get("min"), s.get("max"), s.get("samples"),
                        s.get("spread_pct"), r.get("reason"), *_csv_telemetry(r), r.get("verified"),
                        (r.get("evidence") or {}).get("unverified"), _limit(r) or None,
                        (r.get("limit") or {}).get("why") if isinstance(r.get("limit"), dict) else None))
    return buf.getvalue()


def _csv_telemetry(r: dict) -> tuple:
    power = _telemetry(r).get("power_w")
    e = r.get("efficiency") if isinstance(r.get("efficiency"), dict) else {}
    reasons = _telemetry(r).get("throttle_reasons")
    return (power.get("mean") if isinstance(power, dict) else None, r.get("energy_j"), e.get("value"),
            e.get("unit"), ";".join(map(str, reasons)) if isinstance(reasons, list) else None)

"""Runs side by side: one column per run, ratios against the first."""
from __future__ import annotations

from tabulate import tabulate


def label(run: dict, source: str) -> str:
    return f"{source}:{run['backend']}{run['device'].get('index', 0)}:{run['device']['name']}"


def compare(docs: list[tuple[str, dict]]) -> str:
    """A table of every test in any run; each later run gets a ratio column against the first."""
    runs = [(label(r, src), r) for src, doc in docs for r in doc["runs"]]
    if len(runs) < 2:
        return "nothing to compare: the files hold fewer than two runs"
    return table(runs)


def side_by_side(runs: list[dict], fmt: str = "simple") -> list[tuple[str, str]]:
    """One GPU measured through several backends (runs with the same device UUID): a table per
    GPU, a column per backend, ratios against the first backend."""
    groups: dict[str, list[dict]] = {}
    for i, r in enumerate(runs):
        uuid = r["device"].get("uuid") or ""
        known = uuid.strip("0-")                  # an all-zero UUID is a backend's "unknown"
        groups.setdefault(uuid if known else f"run{i}", []).append(r)
    out = []
    for group in groups.values():
        if len({r["backend"] for r in group}) > 1:
            names = " vs ".join(r["backend"] for r in group)
            heading = f"{group[0]['device']['name']}: {names} (ratio = column / {group[0]['backend']})"
            out.append((heading, table([(r["backend"], r) for r in group], fmt)))
    return out


def table(runs: list[tuple[str, dict]], fmt: str = "simple") -> str:
    tests: list[str] = []
    for _, r in runs:
        tests += [x["test"] for x in r["results"] if x["test"] not in tests]
    by_test = [{x["test"]: x for x in r["results"]} for _, r in runs]
    headers = ["test", "unit", runs[0][0]]
    for name, _ in runs[1:]:
        headers += [name, "ratio"]
    body = []
    for t in tests:
        cells = [by_test[i].get(t) for i in range(len(runs))]
        unit = next(c["unit"] for c in cells if c)
        base = _value(cells[0])
        row = [t, unit, _show(cells[0])]
        for c in cells[1:]:
            v = _value(c)
            row += [_show(c), f"{v / base:.2f}x" if v is not None and base else ""]
        body.append(row)
    return tabulate(body, headers, tablefmt=fmt, disable_numparse=True)


def _value(cell):
    return cell["value"] if cell and cell["status"] == "ok" else None


def _show(cell):
    if cell is None:
        return "-"
    if cell["status"] != "ok":
        return cell["status"]
    v = cell["value"]
    return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"

"""Runs side by side: one column per run, ratios against the first with the word the samples
allow (faster, slower, same, unclear: report/verdict.py), and for a GPU measured through several
backends, why each faster or slower row differs: both limits and both loops' machine code."""
from __future__ import annotations

from tabulate import tabulate

from peakbench.report import verdict

# Units of time: for these rows (latency, launch) lower is better.
LOWER_IS_BETTER = ("ps", "ns", "us", "ms", "s")


def letter(i: int) -> str:
    """A, B, ... Z, AA, AB, ...: the short label of the i-th run (from 0)."""
    out = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        out = chr(ord("A") + r) + out
    return out


def describe(run: dict, source: str) -> str:
    """What a label stands for: the file, the backend and device index, the device."""
    index = run["device"].get("index")
    backend = run["backend"] if index is None else f"{run['backend']} {index}"
    return f"{source}: {backend}, {run['device']['name']}"


def compare(docs: list[tuple[str, dict]]) -> str:
    """A table of every test in any run, a column per run labelled A, B, ..., and for each later
    run its ratio to A; the legend under the table says which run each label is."""
    runs = [(src, r) for src, doc in docs for r in doc["runs"]]
    if len(runs) < 2:
        return "nothing to compare: the files hold fewer than two runs"
    verdict.refine([r for _, r in runs])
    labelled = [(letter(i), r) for i, (_, r) in enumerate(runs)]
    legend = [f"{letter(i)} = {describe(r, src)}" for i, (src, r) in enumerate(runs)]
    why = explained(labelled)
    return table(labelled) + "\n\n" + "\n".join(legend) + (f"\n\n{why}" if why else "")


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
            labelled = [(r["backend"], r) for r in group]
            why = explained(labelled)
            out.append((heading, table(labelled, fmt) + (f"\n\n{why}" if why else "")))
    return out


def explained(runs: list[tuple[str, dict]]) -> str:
    """For each test a later run of the same GPU (device UUID) through another backend reads
    faster or slower than the first: both limits and both loops' heavy opcodes."""
    first_label, first = runs[0]
    uuid = (first.get("device") or {}).get("uuid")
    lines = []
    base = {x["test"]: x for x in first["results"]}
    for label, run in runs[1:]:
        if run["backend"] == first["backend"] or (run.get("device") or {}).get("uuid") != uuid or not uuid:
            continue
        for r in run["results"]:
            a = base.get(r["test"])
            if not a or verdict.word(a, r) not in ("faster", "slower"):
                continue
            lines.append(f"{r['test']}: {label} {verdict.word(a, r)} than {first_label}"
                         f" ({float(r['value']) / float(a['value']):.2f}x)")
            for who, x in ((first_label, a), (label, r)):
                limit = x.get("limit") or {}
                code = verdict.loop_code(x)
                lines.append(f"  {who}: {limit.get('by', '?')}: {limit.get('why', 'no verdict')}"
                             + (f" [loop: {' + '.join(f'{n} {op}' for op, n in code.items())}]" if code else ""))
    return ("Why they differ (limit, and the loop's heavy opcodes):\n" + "\n".join(lines)) if lines else ""


def table(runs: list[tuple[str, dict]], fmt: str = "simple") -> str:
    """A row per test, a column per run, and after each later run its ratio to the first run;
    a note under the table where some rows are times (lower is better)."""
    tests: list[str] = []
    for _, r in runs:
        tests += [x["test"] for x in r["results"] if x["test"] not in tests]
    by_test = [{x["test"]: x for x in r["results"]} for _, r in runs]
    first = runs[0][0]
    headers = ["test", "unit", first]
    for name, _ in runs[1:]:
        headers += [name, f"{name}/{first}"]
    body = []
    times: dict[str, None] = {}
    for t in tests:
        cells = [by_test[i].get(t) for i in range(len(runs))]
        units = list(dict.fromkeys(c["unit"] for c in cells if c and c["unit"]))
        times.update((u, None) for u in units if u in LOWER_IS_BETTER)
        base = value_of(cells[0])
        row = [t, " or ".join(units), cell_text(cells[0])]
        for c in cells[1:]:
            v = value_of(c)
            # no ratio across different units (a run that names none is taken to mean the same)
            ratio = (f"{v / base:.2f}x {verdict.word(cells[0], c)}" if v is not None and base
                     and same_unit(c, cells[0]) else "")
            row += [cell_text(c), ratio]
        body.append(row)
    text = tabulate(body, headers, tablefmt=fmt, disable_numparse=True)
    if times:
        text += (f"\n\n{', '.join(times)}: lower is better, so a ratio under 1 is faster than {first}; "
                 "for the other units higher is better.")
    return text


def same_unit(a: dict, b: dict) -> bool:
    return not (a["unit"] and b["unit"] and a["unit"] != b["unit"])


def value_of(cell):
    """The number a ratio is taken of: an ok row's value, where it has one."""
    if not cell or cell["status"] != "ok":
        return None
    v = cell.get("value")
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def cell_text(cell):
    if cell is None:
        return "-"
    if cell["status"] != "ok":
        return cell["status"]
    v = value_of(cell)
    if v is None:
        return "no value"
    return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"

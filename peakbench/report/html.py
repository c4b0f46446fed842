"""One self-contained HTML page for a run, a comparison or a fleet (`peakbench report FILE...
--html PAGE`, and `--html PAGE` on a run). Everything is inline: the styles, the charts (SVG from
report/plots.py, text kept as text), no script but a JSON block that names the sources (file,
peakbench version, sha256), and a Content-Security-Policy that lets the page fetch nothing. The
rows, words and flags come from the modules that print them: render (the table's cells), verdict
(limits), compare (the side-by-side words), fleet (medians, flags, reasons). Needs jinja2 and
matplotlib, the [report] extra.

Which page: a fleet page when the files hold MIN_PEERS (3) or more GPUs of one model through one
backend (what `peakbench fleet` needs to tell a slow GPU from its peers); else a comparison page
when they hold two runs or more; else the page of the one run."""
from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections import Counter
from pathlib import Path

from peakbench import __version__
from peakbench.report import compare, fleet, render, verdict
from peakbench.report.result import dumps, unfinished

TEMPLATES = Path(__file__).parent / "templates"
EXTRA = "pip install 'peakbench[report]'"
BAR_GOOD = verdict.SILICON * 100        # % of spec from which a bar reads as at the peak
BAR_FAIR = 60.0
HEAT_SPAN = 2.0                         # a cell is fully coloured at this many thresholds from the median
WORSE_RGB, BETTER_RGB = (200, 40, 40), (40, 100, 200)
FAMILY_NAMES = {"compute": "vector ALU", "sfu": "special functions", "atomic": "atomics",
                "matrix": "matrix units", "gemm": "vendor GEMM", "memory": "memory bandwidth",
                "latency": "load latency", "launch": "launch", "transfer": "host and GPU links",
                "sm": "per-SM maps"}


def available() -> str | None:
    """None when a page can be made here, else the one line that says what to install."""
    for module in ("jinja2", "matplotlib"):
        try:
            __import__(module)
        except ImportError:
            return f"--html needs {module} ({EXTRA})"
    return None


# -- what a page is made of ------------------------------------------------------------------

def source(name: str | None, data: bytes, doc: dict) -> dict:
    """The machine-readable trace of one input: its name, the peakbench that wrote it, its sha256."""
    return {"name": name, "schema": doc.get("schema"), "peakbench_version": doc.get("peakbench_version"),
            "created": doc.get("created"), "sha256": hashlib.sha256(data).hexdigest()}


def file_source(path: str, doc: dict) -> dict:
    return source(path, Path(path).read_bytes(), doc)


def document_source(name: str | None, doc: dict) -> dict:
    """A document not read from a file (a run's own): hashed as `--json` writes it."""
    return source(name, (dumps(doc) + "\n").encode(), doc)


def page_kind(docs: list[tuple[str, dict]]) -> str:
    """`fleet`, `comparison` or `run` (the module docstring says when)."""
    gpus, _ = fleet.gpus_of(docs)
    per_model = Counter((g.model, g.backend) for g in gpus)
    if per_model and max(per_model.values()) >= fleet.MIN_PEERS:
        return "fleet"
    return "comparison" if sum(len(doc["runs"]) for _, doc in docs) >= 2 else "run"


def report(docs: list[tuple[str, dict]], sources: list[dict]) -> str:
    """The page of the loaded documents, (name, document) in order, with one source per document."""
    kind = page_kind(docs)
    problems = [f"{name}: {why}" for name, doc in docs if (why := unfinished(doc))]
    view = {"kind": kind, "problems": problems, "version": __version__,
            "trace": _json_block({"generator": f"peakbench {__version__}", "page": kind, "sources": sources}),
            "sources": sources, "runs": [], "comparison": None, "fleet": None,
            "bar_good": f"{BAR_GOOD:g}", "words": WORDS}
    if kind == "fleet":
        view["fleet"] = fleet_view(docs)
        view["title"] = f"peakbench fleet: {', '.join(view['fleet']['models']) or 'no GPU'}"
    else:
        verdict.judge([run for _, doc in docs for run in doc["runs"]])
        view["runs"] = [run_view(run, doc, name, compare.letter(i) if kind == "comparison" else None)
                        for i, (name, doc, run) in enumerate(_runs(docs))]
        if kind == "comparison":
            view["comparison"] = comparison_view(docs)
        view["title"] = "peakbench: " + _subject([run for _, _, run in _runs(docs)])
    return _template().render(**view)


def run_report(doc: dict, name: str | None) -> str:
    """The page of the document a run has just written (`--html` on a run), chosen as for any
    document; `name` is its --json file, if any."""
    return report([(name or "this run", doc)], [document_source(name, doc)])


def _runs(docs):
    return [(name, doc, run) for name, doc in docs for run in doc["runs"]]


def _subject(runs: list[dict]) -> str:
    if not runs:
        return "no run"
    names = ", ".join(dict.fromkeys(r["device"]["name"].strip() for r in runs))
    return f"{names}, {' vs '.join(dict.fromkeys(r['backend'] for r in runs))}"


def _json_block(data) -> str:
    """JSON that cannot end its <script> element or open a comment, whatever the names hold."""
    text = json.dumps(data, indent=1, sort_keys=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _template():
    import jinja2
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("report.html.j2")


# -- a run -----------------------------------------------------------------------------------

def run_view(run: dict, doc: dict, source_name: str, label: str | None) -> dict:
    body = render.rows(run)
    shown = {render.HEADERS[i] for i in render.columns_shown(body)}
    families: dict[str, dict] = {}
    for r, cells in zip(run["results"], body):
        name = r["test"].split(".")[0]
        family = families.setdefault(name, {"name": name, "title": FAMILY_NAMES.get(name, name),
                                            "rows": [], "folded": []})
        row = row_view(r, cells)
        (family["folded"] if r["status"] == "unsupported" else family["rows"]).append(row)
    for family in families.values():
        family["categories"] = _categories(family["folded"])
    charts, chart_problem = _charts(run, label or "")
    return {"label": label, "heading": _heading(run), "facts": facts(run, doc, source_name),
            "glance": glance(run), "families": list(families.values()),
            "columns": [(key, header) for key, header, column in COLUMNS if column is None or column in shown],
            "charts": charts, "chart_problem": chart_problem}


# (key, header, the render.HEADERS column that must be filled for it to show; None: always)
COLUMNS = (("test", "test", None), ("value", "value", None), ("spec", "spec", "spec"),
           ("pct", "% of spec", "% spec"), ("at_clock", "% at clock", "% at clock"), ("mhz", "MHz", "MHz"),
           ("watts", "W", "W"), ("per_w", "per W", "per W"), ("limit", "limit", "limit"),
           ("status", "status / reason", None))


def _heading(run: dict) -> str:
    index = run["device"].get("index")
    return f"{run['device']['name'].strip()} · {run['backend']}" + (f" {index}" if index is not None else "")


def row_view(r: dict, cells: tuple) -> dict:
    test, value, unit, spec, pct_text, mhz, at_clock_text, watts, per_w, limit_by, status_text = cells
    pct, at_clock = _number(r.get("pct_of_spec")), _number(r.get("pct_of_clock_peak"))
    limit = r.get("limit") if isinstance(r.get("limit"), dict) else {}
    return {"test": test, "value": value, "unit": unit, "spec": spec, "pct": pct, "pct_text": pct_text,
            "bar": min(pct, 100.0) if pct is not None else None, "bar_class": _bar_class(pct),
            "at_clock": at_clock, "at_clock_text": at_clock_text,
            "marker": min(at_clock, 100.0) if at_clock is not None and pct is not None else None,
            "mhz": mhz, "watts": watts, "per_w": per_w, "limit_by": limit_by, "limit_why": limit.get("why") or "",
            "status": r["status"], "status_note": _status_note(r["status"], status_text),
            "reason": r.get("reason") or ""}


def _bar_class(pct: float | None) -> str:
    if pct is None:
        return ""
    return "good" if pct >= BAR_GOOD else "fair" if pct >= BAR_FAIR else "low"


def _status_note(status: str, text: str) -> str:
    """What the table's status cell says besides the word: 'noisy: spread 7%', a failure's reason."""
    rest = text[len(status):].strip()
    if status == "ok" and rest.startswith("(") and rest.endswith(")"):
        return rest[1:-1]
    return rest.removeprefix(":").strip()


def _categories(folded: list[dict]) -> str:
    counts = Counter(row["reason"].split("]", 1)[0] + "]" for row in folded if row["reason"].startswith("["))
    return ", ".join(f"{category} {n}" for category, n in counts.items())


def glance(run: dict) -> dict:
    """The counts by status and, per family, the range of % of spec: the GPU against its spec
    sheet in one line."""
    counts = Counter(r["status"] for r in run["results"])
    ranges = []
    for family in dict.fromkeys(r["test"].split(".")[0] for r in run["results"]):
        pcts = [p for r in run["results"] if r["test"].split(".")[0] == family and r["status"] == "ok"
                and (p := _number(r.get("pct_of_spec"))) is not None]
        if pcts:
            low, high = min(pcts), max(pcts)
            ranges.append({"family": family, "text": f"{low:.1f}%" if low == high else f"{low:.1f}–{high:.1f}%",
                           "bar_class": _bar_class(low)})
    return {"ok": counts["ok"], "unsupported": counts["unsupported"], "failed": counts["failed"], "ranges": ranges}


def facts(run: dict, doc: dict, source_name: str) -> list[tuple[str, str]]:
    """The run's identity as (label, text): device, driver, board, spec, date, host, command."""
    d, spec = run["device"], run.get("spec") or {}
    out = [("device", d["name"].strip()), ("backend", run["backend"])]
    out += [(label, str(d[key])) for key, label in (("driver", "driver"), ("api", "API"), ("uuid", "board UUID"))
            if d.get(key)]
    if d.get("vendor_id") and d.get("device_id"):
        out.append(("PCI ID", f"{d['vendor_id']}:{d['device_id']}" + (f" at {d['pci_bus_id']}" if d.get("pci_bus_id") else "")))
    if d.get("units"):
        out.append(("units", f"{d['units']}" + (f" ({d['arch']})" if d.get("arch") else "")))
    if spec.get("name"):
        boost = _number(spec.get("boost_clock_mhz"))
        out.append(("spec entry", spec["name"] + (f", boost {boost:.0f} MHz" if boost else "")))
        if spec.get("source"):
            out.append(("spec source", str(spec["source"])))
    else:
        out.append(("spec entry", "none matched (use --spec): no % of spec"))
    if d.get("health"):
        out.append(("health", ", ".join(f"{k} {v}" for k, v in d["health"].items())))
    host = doc.get("host") if isinstance(doc.get("host"), dict) else {}
    out.append(("date", _date(doc.get("created"))))
    if host:
        out.append(("host", ", ".join(str(host[k]) for k in ("hostname", "os") if host.get(k))
                    + (f"; Python {host['python']}" if host.get("python") else "")))
    out.append(("command", command(doc.get("options")) or "not recorded (the file predates the options field)"))
    out.append(("peakbench", str(doc.get("peakbench_version") or "?")))
    out.append(("file", source_name))
    return out


def _date(created) -> str:
    if not isinstance(created, str) or not created:
        return "not recorded"
    return created.replace("T", " ").replace("Z", " UTC")


def command(options) -> str | None:
    """The run's command line, as far as its options say (defaults left out)."""
    if not isinstance(options, dict) or not options:
        return None
    parts = ["peakbench"]
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        parts.append(flag if value is True else f"{flag} {shlex.quote(str(value))}")
    return " ".join(parts)


def _number(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


# -- charts ----------------------------------------------------------------------------------

CHART_NAMES = {"latency": "load latency over the working set, each level found marked",
               "bandwidth": "read bandwidth over the working set, each level's span shaded",
               "transfer": "host transfers over their size", "p2p": "GPU-to-GPU copies",
               "sm": "per-SM maps", "burn-in": "burn-in over time"}


def _charts(run: dict, label: str) -> tuple[list[dict], str | None]:
    """The run's charts as inline SVG, or why they could not be drawn (the page goes on)."""
    from peakbench.report import plots
    try:
        drawn = plots.svgs(run)
    except Exception as e:            # a chart is never worth the page
        return [], f"the charts could not be drawn: {type(e).__name__}: {e}"
    prefix = f"c{_slug(label + run['backend'] + str(run['device'].get('index', '')))}-"
    return [{"kind": kind, "caption": CHART_NAMES.get(kind, kind), "svg": inline_svg(svg, f"{prefix}{kind}-")}
            for kind, svg in drawn], None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "", text).lower()


def inline_svg(text: str, prefix: str) -> str:
    """matplotlib's SVG as an element of the page: no XML prolog, DOCTYPE, metadata or namespace
    URLs, its ids prefixed (several charts on one page would share `patch_1`, and a clip path's
    id), its stylesheet kept to its own elements."""
    text = re.sub(r"<\?xml[^>]*\?>\s*|<!DOCTYPE[^>]*>\s*|<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    text = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", text)
    text = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}\1"', text)
    text = re.sub(r'\b((?:xlink:)?href)="#([^"]+)"', rf'\1="#{prefix}\2"', text)
    text = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}\1)", text)
    text = text.replace("*{stroke-linejoin", f"#{prefix}chart *{{stroke-linejoin", 1)
    return text.replace("<svg ", f'<svg id="{prefix}chart" class="chart" role="img" ', 1).strip()


# -- a comparison ----------------------------------------------------------------------------

WORDS = ("same", "faster", "slower", "unclear")


def comparison_view(docs: list[tuple[str, dict]]) -> dict:
    """`peakbench compare` as a table: a column per run (A, B, ...), each later one with its
    ratio to A and the word its samples allow; the legend; why one GPU's backends differ."""
    runs = [(name, run) for name, _, run in _runs(docs)]
    labelled = [(compare.letter(i), run) for i, (_, run) in enumerate(runs)]
    tests = list(dict.fromkeys(x["test"] for _, run in runs for x in run["results"]))
    by_test = [{x["test"]: x for x in run["results"]} for _, run in runs]
    rows, times = [], set()
    for test in tests:
        cells = [found.get(test) for found in by_test]
        units = list(dict.fromkeys(c["unit"] for c in cells if c and c["unit"]))
        times |= {u for u in units if u in compare.LOWER_IS_BETTER}
        base = compare.value_of(cells[0])
        entries = [{"text": compare.cell_text(cells[0]), "ratio": None, "word": None}]
        for c in cells[1:]:
            value = compare.value_of(c)
            ratio = value / base if value is not None and base and compare.same_unit(c, cells[0]) else None
            entries.append({"text": compare.cell_text(c), "ratio": f"{ratio:.2f}x" if ratio is not None else None,
                            "word": verdict.word(cells[0], c) if ratio is not None else None})
        rows.append({"test": test, "unit": " or ".join(units), "cells": entries})
    return {"heads": [(label, f"{run['backend']} {run['device'].get('index', '')}".strip()) for label, run in labelled],
            "legend": [(label, compare.describe(run, name)) for (label, run), (name, _) in zip(labelled, runs)],
            "rows": rows, "times": sorted(times), "why": _why(compare.explained(labelled)),
            "counts": Counter(c["word"] for row in rows for c in row["cells"] if c["word"])}


def _why(text: str) -> list[dict]:
    """compare.explained's lines as items: a test's line, then its indented lines (each run's limit)."""
    items: list[dict] = []
    for line in text.splitlines()[1:]:        # the first is the heading
        if line.startswith(" ") and items:
            items[-1]["lines"].append(line.strip())
        else:
            items.append({"head": line, "lines": []})
    return items


# -- a fleet ---------------------------------------------------------------------------------

def fleet_view(docs: list[tuple[str, dict]]) -> dict:
    """`peakbench fleet`'s judgement (default thresholds, no floors file or baseline) as a heat
    map per group: GPUs x tests, each cell the % of the group's median, the flagged GPUs first."""
    gpus, notes = fleet.gpus_of(docs)
    judged = fleet.judge(gpus, notes=notes)
    order = sorted(gpus, key=lambda g: (-fleet.ACTIONS.index(g.action), g.host, g.model, g.backend, g.short_id))
    groups = []
    for group in judged.groups:
        members = [g for g in order if (g.model, g.backend, g.setting) ==
                   (group["model"], group["backend"], group.get("setting", ""))]
        groups.append(heat_map(group, members, judged.threshold_pct))
    bad = [{"label": g.label, "verdict": g.verdict, "action": g.action, "pci_bus": g.pci_bus,
            "source": g.source, "reasons": [f["reason"] for f in g.flagged]} for g in order if g.flagged]
    return {"summary": fleet.summary(judged), "groups": groups,
            "models": list(dict.fromkeys(group["model"] for group in judged.groups)), "flagged": bad, "notes": judged.notes,
            "regressions": [r["reason"] for r in judged.regressions], "threshold": judged.threshold_pct,
            "span": HEAT_SPAN * judged.threshold_pct}


def heat_map(group: dict, members: list, threshold_pct: float) -> dict:
    tests = list(group["tests"])
    rows = []
    for gpu in members:
        reasons = {f["test"]: f["reason"] for f in gpu.flagged}
        rows.append({"host": gpu.host, "id": gpu.short_id, "pci_bus": gpu.pci_bus or "", "verdict": gpu.verdict,
                     "action": gpu.action, "cells": [heat_cell(gpu.results.get(t), group["tests"][t],
                                                               reasons.get(t), threshold_pct) for t in tests]})
    title = f"{group['model']} ({group['backend']})" + (f", {group['setting']}" if group.get("setting") else "")
    return {"title": title, "gpus": group["gpus"], "tests": tests, "rows": rows,
            "medians": [(fleet.short_number(group["tests"][t]["median"]), group["tests"][t]["unit"]) for t in tests]}


def heat_cell(r: dict | None, stats: dict, reason: str | None, threshold_pct: float) -> dict:
    """One GPU's result as % of its group's median, coloured by how much worse (red) or better
    (blue) it is; a flagged cell carries its reason."""
    cell = {"text": "missing", "style": "", "flag": reason, "kind": "none"}
    if r is None:
        return cell
    value, centre = _number(r.get("value")), stats["median"]
    if r.get("status") != "ok" or value is None or not centre:
        return {**cell, "text": "n/a" if r.get("status") == "unsupported" else r.get("status", "?"),
                "kind": r.get("status", "none")}
    worse = fleet.worse_pct(value, centre, stats["unit"] in compare.LOWER_IS_BETTER)
    return {**cell, "text": f"{value / centre * 100:.1f}", "style": _heat_style(worse, threshold_pct), "kind": "ok"}


def _heat_style(worse: float, threshold_pct: float) -> str:
    share = max(-1.0, min(1.0, worse / (HEAT_SPAN * threshold_pct)))
    rgb = WORSE_RGB if share > 0 else BETTER_RGB
    alpha = abs(share) ** 0.8
    mixed = tuple(round(255 + (c - 255) * alpha) for c in rgb)
    ink = "#fff" if alpha > 0.55 else "#111"
    return f"background:rgb{mixed};color:{ink}"

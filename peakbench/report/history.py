"""Each GPU against its own history. `peakbench --history DIR` keeps every run's record under
DIR/<UUID>/ (one file a run, never overwritten); `peakbench fleet --history DIR` flags a GPU slower
than the median of its own last RECENT records by more than the fleet's threshold, and where most
GPUs of a group step down together, reports one fleet-wide step (naming the driver change where
there is one) instead of many bad GPUs."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from statistics import median

RECENT = 5          # a GPU's own median: over its last this many records
MIN_HISTORY = 3     # ... and only from this many
MOST = 0.5          # a group's share of GPUs stepping down together that makes a fleet-wide step
LOWER_IS_BETTER = ("ps", "ns", "us", "ms", "s")


def _name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "unknown"


def keep(doc: dict, folder: str) -> list[str]:
    """Write each run of `doc` that names its GPU's UUID as a document of its own under
    folder/<uuid>/<created>-<host>-<backend>.json; an existing file is never replaced (a second
    record of the same moment gets a counter)."""
    written = []
    host = (doc.get("host") or {}).get("hostname", "")
    for run in doc.get("runs", []):
        uuid = ((run.get("device") or {}).get("uuid") or "").lower().removeprefix("gpu-")
        if not uuid.strip("0-"):
            continue
        where = Path(folder) / _name(uuid)
        where.mkdir(parents=True, exist_ok=True)
        stem = _name(f"{doc.get('created', '')}-{host}-{run['backend']}")
        for n in range(1000):
            path = where / (f"{stem}.json" if n == 0 else f"{stem}-{n}.json")
            try:
                with open(path, "x", encoding="utf-8") as f:
                    json.dump({**{k: v for k, v in doc.items() if k != "runs"}, "runs": [run]}, f)
                break
            except FileExistsError:
                continue
        written.append(str(path))
    return written


def records(folder: str, uuid: str, backend: str, before: str) -> list[dict]:
    """The runs kept for one GPU and backend created before `before` (ISO time), oldest first."""
    where = Path(folder) / _name(uuid.lower())
    found = []
    for path in sorted(where.glob("*.json")) if where.is_dir() else []:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        created = str(doc.get("created", ""))
        if doc.get("complete") is not True:         # an interrupted run is no reference
            continue
        for run in doc.get("runs", []):
            if run.get("backend") == backend and created and (not before or created < before):
                found.append((created, run))
    return [run for _, run in sorted(found, key=lambda e: e[0])]


def _value(result: dict | None) -> float | None:
    v = (result or {}).get("value")
    return float(v) if (result or {}).get("status") == "ok" and isinstance(v, (int, float)) else None


def judge(gpus, folder: str, threshold_pct: float) -> tuple[list[dict], list[str]]:
    """Flag each GPU (fleet.Gpu) slower than its own recent median; return the fleet-wide steps
    (as the fleet report's regressions) and notes. Changes the GPUs' `flagged` in place."""
    found: dict[tuple, list[tuple]] = {}        # (model, backend, test) -> [(gpu, worse_pct, own, driver_before)]
    with_history: dict[tuple, int] = {}
    drivers_now: dict[tuple, set] = {}
    notes = []
    for gpu in gpus:
        if not gpu.uuid:
            continue
        past = records(folder, gpu.uuid, gpu.backend, gpu.created)[-RECENT:]
        if len(past) < MIN_HISTORY:
            if past:
                notes.append(f"{gpu.label}: {len(past)} earlier record{'s' if len(past) > 1 else ''} in the history,"
                             f" {MIN_HISTORY} needed to judge it against itself")
            continue
        before = {str((run.get("device") or {}).get("driver", "")) for run in past}
        for test, r in gpu.results.items():
            now = _value(r)
            own = [v for run in past if (v := _value(next((x for x in run["results"] if x["test"] == test), None)))]
            if now is None or len(own) < MIN_HISTORY:
                continue
            key = (gpu.model, gpu.backend, test)
            with_history[key] = with_history.get(key, 0) + 1
            drivers_now.setdefault(key, set()).add(gpu.driver)
            centre = median(own)
            lower = r.get("unit") in LOWER_IS_BETTER
            worse = ((now - centre) if lower else (centre - now)) / abs(centre) * 100
            if worse > threshold_pct:
                found.setdefault(key, []).append((gpu, worse, centre, before, r.get("unit", ""), now))
    steps = []
    for key, slow in found.items():
        model, backend, test = key
        if with_history[key] >= 3 and len(slow) >= MOST * with_history[key]:
            before, now = set().union(*(s[3] for s in slow)), drivers_now[key]
            change = (f" after the driver changed from {', '.join(sorted(before))} to {', '.join(sorted(now))}"
                      if now - before else " with no driver change")
            worst = median([w for _, w, *_ in slow])
            steps.append({"model": model, "backend": backend, "test": test, "median": None, "baseline_median": None,
                          "ratio": None, "reason": f"{model} ({backend}) {test}: {len(slow)} of {with_history[key]}"
                                                   f" GPUs {worst:.1f}% (median) worse than their own recent medians"
                                                   f"{change}: a fleet-wide step, not {len(slow)} bad GPUs"})
            continue
        for gpu, worse, centre, _, unit, now_value in slow:
            side = "over" if unit in LOWER_IS_BETTER else "under"
            gpu.flagged.append({"test": test, "value": now_value, "median": centre, "ratio": now_value / centre,
                                "action": "watch",
                                "reason": f"{test} {now_value:.4g} {unit} is {worse:.1f}% {side} its own median"
                                          f" {centre:.4g} of its last {RECENT} records or fewer"})
    return steps, notes


def writable(folder: str) -> str | None:
    """Why `folder` cannot take the history, or None (it is made if missing)."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        return f"--history {folder}: {e.strerror or e}"
    return None if os.access(folder, os.W_OK) else f"--history {folder}: not writable"

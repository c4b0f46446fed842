"""Results as versioned, self-describing rows, and the JSON document that holds them."""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import socket
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from peakbench import __version__

SCHEMA = "peakbench.result/1"
STATUSES = ("ok", "unsupported", "failed")
CATEGORIES = ("[hardware]", "[driver]", "[toolchain]", "[api]")


class ResultFileError(Exception):
    """A result file that cannot be read or written; the message names the file and the problem."""


@dataclass
class Result:
    test: str
    status: str
    unit: str
    value: float | None = None
    spec_value: float | None = None
    pct_of_spec: float | None = None
    reason: str | None = None
    stats: dict | None = None
    clock_mhz: float | None = None
    pct_of_clock_peak: float | None = None   # value / (spec at the measured clock)
    params: dict = field(default_factory=dict)
    evidence: dict = field(default_factory=dict)
    series: dict | None = None

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"bad status {self.status!r}")
        if self.status == "unsupported" and not (self.reason or "").startswith(CATEGORIES):
            raise ValueError(f"unsupported reason must start with a category: {self.reason!r}")


@dataclass
class Run:
    backend: str
    device: dict
    spec: dict | None
    results: list[Result] = field(default_factory=list)


def host_info() -> dict:
    return {"hostname": socket.gethostname(), "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version()}


def new_document() -> dict:
    created = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()
    return {"schema": SCHEMA, "peakbench_version": __version__,
            "created": created.replace("+00:00", "Z"), "host": host_info(), "runs": []}


def document(runs: list[Run], base: dict | None = None) -> dict:
    doc = dict(base or new_document())
    doc["runs"] = [asdict(r) for r in runs]
    return doc


def check_writable(path: str | Path) -> None:
    """Fail before any test runs when the result file could not be written."""
    folder = Path(path).resolve().parent
    if Path(path).is_dir():
        raise ResultFileError(f"cannot write {path}: it is a folder")
    if not folder.is_dir():
        raise ResultFileError(f"cannot write {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (Path(path).exists() and not os.access(path, os.W_OK)):
        raise ResultFileError(f"cannot write {path}: permission denied")


def write_atomic(path: str | Path, text: str) -> None:
    """Write via a temporary file in the same folder and rename, so readers never see half."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.resolve().parent)
    except OSError as e:
        raise ResultFileError(f"cannot write {path}: {e.strerror}") from None
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.fchmod(fd, 0o666 & ~umask)     # mkstemp makes 0600; a result file is an ordinary file
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise ResultFileError(f"cannot write {path}: {e.strerror}") from None


def save_json(path: str | Path, doc: dict) -> None:
    write_atomic(path, json.dumps(doc, indent=2) + "\n")


def load_json(path: str | Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise ResultFileError(f"cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise ResultFileError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ResultFileError(f"{path} is not a peakbench result (schema {SCHEMA!r} expected, "
                              f"found {doc.get('schema') if isinstance(doc, dict) else None!r})")
    if not isinstance(doc.get("runs"), list):
        raise ResultFileError(f"{path}: 'runs' must be a list")
    for i, run in enumerate(doc["runs"]):
        problem = _run_problem(run)
        if problem:
            raise ResultFileError(f"{path}: run {i}: {problem}")
    return doc


def _run_problem(run) -> str | None:
    """What makes a run unusable by the renderers, or None."""
    if not isinstance(run, dict) or not isinstance(run.get("backend"), str):
        return "no backend"
    if not isinstance(run.get("device"), dict) or not isinstance(run["device"].get("name"), str):
        return "no device name"
    if not isinstance(run.get("results"), list):
        return "no results list"
    for r in run["results"]:
        if not isinstance(r, dict) or not all(isinstance(r.get(k), str) for k in ("test", "status", "unit")):
            return "a result without test, status and unit"
        if r["status"] not in STATUSES:
            return f"{r['test']}: unknown status {r['status']!r}"
        value = r.get("value")
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            return f"{r['test']}: value is not a number"
    return None

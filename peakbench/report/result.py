"""Results as versioned, self-describing rows, the JSON document that holds them, and how an output
file is written (regular files atomically, FIFOs and devices in place, `-` to standard output)."""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import socket
import stat
import sys
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from peakbench import __version__

SCHEMA = "peakbench.result/1"
STATUSES = ("ok", "unsupported", "failed")
CATEGORIES = ("[hardware]", "[driver]", "[toolchain]", "[api]")


class ResultFileError(Exception):
    """A result file that cannot be read or written; the message names the file and the problem."""


@dataclass(frozen=True)
class Result:
    """One test's row, built once (with its spec columns, by harness/session.py)."""
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
    samples: list | None = None              # the best variant's per-sample values, in `unit`
    telemetry: dict | None = None            # management-library readings while it ran (peakbench.telemetry)
    energy_j: float | None = None            # mean board power x the timed samples' duration
    efficiency: dict | None = None           # {"value", "unit"}: the value per watt
    elapsed_s: float | None = None           # wall time of the test: compiles, checks, sweeps and samples

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


def new_document(options: dict | None = None) -> dict:
    """The header of a result: `options` are the run's command-line settings; `interrupted` turns
    true when a signal ended the run (see document)."""
    created = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()
    return {"schema": SCHEMA, "peakbench_version": __version__,
            "created": created.replace("+00:00", "Z"), "host": host_info(),
            "options": dict(options or {}), "interrupted": False, "runs": []}


def document(runs: list[Run], base: dict | None = None, interrupted: bool = False,
             rows: dict | None = None) -> dict:
    """The JSON document of `runs`. `rows`: (result, its dict) by id(result), kept across calls,
    so a document rebuilt after every test converts each row once (results do not change)."""
    doc = dict(base or new_document())
    doc["interrupted"] = interrupted
    rows = {} if rows is None else rows

    def row(result: Result) -> dict:
        kept = rows.get(id(result))
        if kept is None or kept[0] is not result:      # holding the result keeps its id its own
            kept = rows[id(result)] = (result, asdict(result))
        return kept[1]
    doc["runs"] = [{**{f.name: getattr(r, f.name) for f in fields(r) if f.name != "results"},
                    "results": [row(x) for x in r.results]} for r in runs]
    return doc


# -- output files ----------------------------------------------------------------------------
#
# An output path (--json, --csv, --markdown) is resolved once, before any test runs:
# - `-`, /dev/stdout, /dev/stderr, /dev/fd/N (or a symlink to one) is written to that file
#   descriptor, so a redirected stdout keeps its offset and nothing is truncated;
# - otherwise symlinks are followed to their final target (a dangling link's target is created);
# - a regular file there, or none, is replaced atomically (temporary file beside it, then rename),
#   keeping the mode of the file it replaces (a new one gets 0666 & ~umask);
# - anything else that exists (a FIFO, a character device) is opened and written in place: never
#   replaced, unlinked or chmod-ed.

@dataclass(frozen=True)
class Output:
    name: str                   # as given on the command line, for messages
    path: str | None = None     # the file written (a symlink's final target); None for a descriptor
    fd: int | None = None       # written to this open file descriptor
    replace: bool = False       # a regular or new file: replaced atomically, so it may be rewritten often

    @property
    def key(self) -> tuple:
        """Equal for two outputs that would write the same file."""
        if self.fd is not None:
            return ("fd", self.fd)
        try:
            st = os.stat(self.path)
        except OSError:
            return ("path", self.path)
        return ("inode", st.st_dev, st.st_ino)

    def write(self, text: str) -> None:
        try:
            if self.fd is not None:
                _write_descriptor(self.fd, text)
            elif self.replace:
                _replace(self.path, text)
            else:
                fd = os.open(self.path, os.O_WRONLY)     # no O_CREAT, no O_TRUNC: the node stays as it is
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
        except OSError as e:
            raise ResultFileError(f"cannot write {self.name}: {e.strerror or e}") from None


def _descriptor(name: str) -> int | None:
    """The file descriptor that `name` stands for (`-`, /dev/stdout, /dev/fd/N, /proc/self/fd/N,
    or a symlink to one of them), or None. Those are followed link by link, not with realpath,
    which would name the file behind the descriptor and so have it replaced."""
    if name == "-":
        return 1
    pattern = re.compile(rf"/(?:dev/fd|proc/(?:self|{os.getpid()})/fd)/(\d+)")
    hop = os.path.abspath(name)
    for _ in range(40):       # the kernel's own limit on a chain of links
        found = pattern.fullmatch(hop)
        if found:
            return int(found.group(1))
        if not os.path.islink(hop):
            return None
        hop = os.path.abspath(os.path.join(os.path.dirname(hop), os.readlink(hop)))
    return None


def _write_descriptor(fd: int, text: str) -> None:
    for stream in (sys.stdout, sys.stderr):
        stream.flush()              # what was printed before comes first
    stream = {1: sys.stdout, 2: sys.stderr}.get(fd)
    if stream is not None:
        stream.write(text)
        stream.flush()
        return
    with open(fd, "w", encoding="utf-8", closefd=False) as f:
        f.write(text)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _replace(path: str, text: str) -> None:
    """Write via a temporary file in the same folder and rename, so readers never see half."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    folder, base = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), mode)      # mkstemp makes 0600
            f.write(text)
        os.replace(tmp, path)
    except BaseException:                    # an OSError, or a signal: no temporary file is left
        Path(tmp).unlink(missing_ok=True)
        raise


def check_writable(name: str | Path) -> Output:
    """Where an output goes; ResultFileError before any test runs when it could not be written."""
    name = str(name)
    fd = _descriptor(name)
    if fd is not None:
        try:
            os.fstat(fd)
        except OSError:
            raise ResultFileError(f"cannot write {name}: file descriptor {fd} is not open") from None
        return Output(name, fd=fd)
    target = os.path.realpath(name)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as e:      # a loop of symlinks, a path through a file
        raise ResultFileError(f"cannot write {name}: {e.strerror}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ResultFileError(f"cannot write {name}: it is a folder")
    if st is not None and not stat.S_ISREG(st.st_mode):
        if not os.access(target, os.W_OK):
            raise ResultFileError(f"cannot write {name}: permission denied")
        return Output(name, path=target)
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise ResultFileError(f"cannot write {name}: folder {folder} does not exist")
    if st is not None and not os.access(target, os.W_OK):
        raise ResultFileError(f"cannot write {name}: permission denied")
    try:                      # the rename needs a file of our own in the folder: try making one
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise ResultFileError(f"cannot write {name}: {e.strerror or e}") from None
    return Output(name, path=target, replace=True)


def save_json(path: str | Path | Output, doc: dict, indent: int | None = 2) -> None:
    """`indent=None`: compact, which json encodes in C (the saves during a run; the last one is indented)."""
    out = path if isinstance(path, Output) else check_writable(path)
    out.write(json.dumps(doc, indent=indent) + "\n")


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
    # Added later in the same schema: a file without them loads, one with the wrong type does not.
    if not isinstance(doc.get("options", {}), dict):
        raise ResultFileError(f"{path}: 'options' must be an object")
    if not isinstance(doc.get("interrupted", False), bool):
        raise ResultFileError(f"{path}: 'interrupted' must be true or false")
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

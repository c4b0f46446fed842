"""Results as versioned, self-describing rows, the JSON document that holds them, and how an output
file is written (regular files atomically, FIFOs and devices in place, `-` to standard output)."""
from __future__ import annotations

import datetime as dt
import errno
import json
import math
import os
import platform
import re
import socket
import stat
import sys
import tempfile
import time
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
    verified: bool | None = None             # ok: a guard proved its work and one its bound (else evidence["unverified"] says why)
    limit: dict | None = None                # ok: what limits the value (report/verdict.py): by, why, evidence
    stability: dict | None = None            # a burn-in's: drift, worst window, unstable (harness/stability.py)

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
    true when a signal ended the run, `complete` only in the last write of a run in which every
    selected test got its result (see document)."""
    created = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()
    return {"schema": SCHEMA, "peakbench_version": __version__,
            "created": created.replace("+00:00", "Z"), "host": host_info(),
            "options": dict(options or {}), "interrupted": False, "complete": False, "runs": []}


def document(runs: list[Run], base: dict | None = None, interrupted: bool = False,
             rows: dict | None = None, complete: bool = False) -> dict:
    """The JSON document of `runs`. Every save during a run says `complete: false`, so a file
    left by a process that was killed (SIGKILL, an OOM kill) never reads as finished. `rows`:
    (result, its dict) by id(result), kept across calls, so a document rebuilt after every test
    converts each row once (results do not change)."""
    doc = dict(base or new_document())
    doc["interrupted"] = interrupted
    doc["complete"] = complete and not interrupted
    rows = {} if rows is None else rows

    def row(result: Result) -> dict:
        kept = rows.get(id(result))
        if kept is None or kept[0] is not result:      # holding the result keeps its id its own
            kept = rows[id(result)] = (result, asdict(result))
        return kept[1]
    doc["runs"] = [{**{f.name: getattr(r, f.name) for f in fields(r) if f.name != "results"},
                    "results": [row(x) for x in r.results]} for r in runs]
    return doc


def unfinished(doc: dict) -> str | None:
    """Why a loaded document is not a finished run, or None: readers (fleet, compare) take such
    a record as failed for its GPUs. A document without `complete` (an older peakbench, or a file
    cut short by hand) cannot say it finished, so it counts as unfinished too."""
    counts = ", ".join(f"{len(r['results'])} result{'s' if len(r['results']) != 1 else ''}"
                       for r in doc.get("runs", [])) or "no result"
    if doc.get("interrupted"):
        return f"the run was interrupted by a signal ({counts})"
    if "complete" not in doc:
        return f"the record does not say it is complete (no 'complete' field: an older peakbench or an edited file; {counts})"
    if doc["complete"] is not True:
        return (f"the record is incomplete ({counts}): the run was killed or is still going "
                f"(its last write never happened)")
    return None


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
                with os.fdopen(_open_in_place(self.path, self.name), "w", encoding="utf-8") as f:
                    f.write(text)
        except OSError as e:
            raise ResultFileError(f"cannot write {self.name}: {e.strerror or e}") from None

    @property
    def waits(self) -> bool:
        """Whether writing may wait on another process (a FIFO's reader): such outputs go last."""
        return self.path is not None and not self.replace and _is_fifo(self.path)


FIFO_WAIT_S = 10.0      # how long a FIFO with no reader is waited for before the output is given up


def _is_fifo(path: str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def _open_in_place(path: str, name: str) -> int:
    """A FIFO or a device opened for writing, never created or truncated. A FIFO is opened without
    blocking (a FIFO with no reader would hold the run for good): a reader is waited for up to
    FIFO_WAIT_S, then the output is given up with one line."""
    deadline = time.monotonic() + FIFO_WAIT_S
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as e:
            if e.errno != errno.ENXIO:          # ENXIO: a FIFO that no process reads
                raise
            if time.monotonic() >= deadline:
                raise ResultFileError(f"cannot write {name}: no process read the FIFO within "
                                      f"{FIFO_WAIT_S:g} s; gave it up") from None
            time.sleep(0.05)
    os.set_blocking(fd, True)                   # the reader is there: write as to any file
    return fd


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
        except (OSError, OverflowError):
            raise ResultFileError(f"cannot write {name}: file descriptor {fd} is not open") from None
        return Output(name, fd=fd)
    if name.endswith("/"):      # names a folder; realpath would drop the slash and write a file
        what = "it is a folder" if os.path.isdir(name) else "no such folder (a trailing slash names a folder)"
        raise ResultFileError(f"cannot write {name}: {what}")
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
    out.write(dumps(doc, indent) + "\n")


def dumps(doc, indent: int | None = 2) -> str:
    """Strict JSON: a NaN or an infinity (which JSON has not) is written as null, not as the
    `NaN` that other readers refuse."""
    try:
        return json.dumps(doc, indent=indent, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(doc), indent=indent, allow_nan=False)


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def strict_loads(text: str):
    """json.loads without the NaN and Infinity that JSON has not."""
    return json.loads(text, parse_constant=_no_constant)


def read_json_text(path: str | Path, what: str) -> object:
    """Strict JSON from a file (NaN and Infinity refused, a path with a trailing slash taken as a
    folder); ResultFileError naming `what` and the problem."""
    if str(path).endswith("/"):
        raise ResultFileError(f"cannot read {what}: it names a folder (trailing slash)")
    try:
        return strict_loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ResultFileError(f"cannot read {what}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ResultFileError(f"{what} is not a text file") from None
    except RecursionError:
        raise ResultFileError(f"{what} is not a peakbench result: nested too deeply") from None
    except ValueError as e:
        raise ResultFileError(f"{what} is not valid JSON: {e}") from None


def sample_problem(r: dict) -> str | None:
    """Why an ok result's value and statistics do not follow from the samples it kept, or None
    (a result without samples, as an older peakbench wrote them, has nothing to recompute)."""
    from peakbench.harness.stats import median, round_significant
    samples = r.get("samples")
    if r.get("status") != "ok" or not samples:
        return None
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in samples):
        return "its samples are not all finite numbers"
    typical = round_significant(median(samples), 4)
    if r.get("value") != typical:
        return f"its value {r.get('value')} is not the median of its {len(samples)} samples, {typical:g}"
    stats = r.get("stats") or {}
    for key, want in (("median", typical), ("min", round_significant(min(samples), 4)),
                      ("max", round_significant(max(samples), 4)), ("samples", len(samples))):
        if key in stats and stats[key] != want:
            return f"its stats.{key} {stats[key]} is not its samples' {want:g}"
    return None


def recheck(doc: dict) -> dict:
    """The document with every ok result whose value does not follow from its samples (a
    statistic taken from the wrong sample, a hand edit) turned failed, saying why: what every
    reader (compare, fleet) does on loading."""
    for run in doc.get("runs", []):
        for i, r in enumerate(run.get("results", [])):
            problem = sample_problem(r) if isinstance(r, dict) else None
            if problem:
                run["results"][i] = {**r, "status": "failed", "value": None,
                                     "reason": f"the value does not follow from its samples: {problem}"}
    return doc


def load_json(path: str | Path) -> dict:
    doc = read_json_text(path, str(path))
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ResultFileError(f"{path} is not a peakbench result (schema {SCHEMA!r} expected, "
                              f"found {doc.get('schema') if isinstance(doc, dict) else None!r})")
    if not isinstance(doc.get("runs"), list):
        raise ResultFileError(f"{path}: 'runs' must be a list")
    # Added later in the same schema: a file without them loads, one with the wrong type does not.
    if not isinstance(doc.get("options", {}), dict):
        raise ResultFileError(f"{path}: 'options' must be an object")
    for flag in ("interrupted", "complete"):
        if not isinstance(doc.get(flag, False), bool):
            raise ResultFileError(f"{path}: '{flag}' must be true or false")
    for i, run in enumerate(doc["runs"]):
        problem = _run_problem(run)
        if problem:
            raise ResultFileError(f"{path}: run {i}: {problem}")
    return recheck(doc)


def refuse_inputs(outputs: dict[str, Output], inputs: dict[str, str]) -> None:
    """ResultFileError when an output (by option) is one of the command's inputs (by what names
    it): `fleet --json a.json a.json` would replace the record it reads with the report."""
    for option, out in outputs.items():
        for what, name in inputs.items():
            try:
                st = os.stat(name)
            except (OSError, ValueError):
                continue
            if out.key == ("inode", st.st_dev, st.st_ino) or (out.fd is not None and _same_descriptor(out.fd, st)):
                raise ResultFileError(f"{option} {out.name} is {what}: an output may not replace an input")


def _same_descriptor(fd: int, st: os.stat_result) -> bool:
    try:
        mine = os.fstat(fd)
    except OSError:
        return False
    return stat.S_ISREG(mine.st_mode) and (mine.st_dev, mine.st_ino) == (st.st_dev, st.st_ino)


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
        for key, kind, what in (("samples", list, "a list"), ("stats", dict, "an object"),
                                ("evidence", dict, "an object")):
            if r.get(key) is not None and not isinstance(r[key], kind):
                return f"{r['test']}: {key} is not {what}"
    return None

"""What clang-22 printed for each compile of the ISA census (test_rocm_isa.py, test_rocm_census.py),
by everything that decides it.

A compile's key hashes the compiler's version line, its command (the session's folders written as
<tmp> and <shaders>), the source text, and the headers and device library it reads: a change to any
of them is another key, so an entry is only ever the output of the same compiler on the same
input. An entry holds the assembly, or the error output of a compile that failed. Lookups go to
  1. ARCHIVE, committed: the entries of the last full census, so a clean clone compiles only what
     changed since. `PEAKBENCH_ISA_CACHE_PACK=1 pytest tests/test_rocm_isa.py tests/test_rocm_census.py`
     rewrites it with every entry that run used;
  2. FOLDER (PEAKBENCH_ISA_CACHE, default ~/.cache/peakbench-test/isa), where a miss is stored.
PEAKBENCH_ISA_CACHE=off compiles everything and stores nothing.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHIVE = ROOT / "tests" / "data" / "isa-cache.json.zst"
FOLDER = os.environ.get("PEAKBENCH_ISA_CACHE") or str(
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "peakbench-test" / "isa")

_lock = threading.Lock()
_archive: dict[str, dict] | None = None
used: dict[str, dict] = {}            # key -> entry, every entry this process read or wrote


@dataclass(frozen=True)
class Output:
    asm: str
    error: str
    where: str                        # "archive", "folder" or "compiled"


def key(version: str, inputs: str, source: str, command: list[str], folders: dict[str, str]) -> str:
    """The entry's name: a hash of everything the assembly depends on."""
    def spelled(arg: str) -> str:
        for folder, name in folders.items():
            arg = arg.replace(folder, name)
        return arg
    text = "\0".join([version, inputs, source, *map(spelled, command)])
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _load_archive() -> dict[str, dict]:
    global _archive
    with _lock:
        if _archive is None:
            _archive = {}
            if ARCHIVE.is_file():
                try:
                    import zstandard
                    _archive = json.loads(zstandard.ZstdDecompressor().decompress(ARCHIVE.read_bytes()))["entries"]
                except (ImportError, ValueError, KeyError, OSError):
                    _archive = {}      # unreadable: every compile runs, nothing is wrong
        return _archive


def lookup(k: str) -> Output | None:
    if FOLDER == "off":
        return None
    entry, where = _load_archive().get(k), "archive"
    if entry is None:
        path = Path(FOLDER) / f"{k}.json"
        try:
            entry, where = json.loads(path.read_text()), "folder"
        except (OSError, ValueError):
            return None
    with _lock:
        used[k] = entry
    return Output(entry["asm"], entry["error"], where)


def store(k: str, asm: str, error: str) -> None:
    """Kept whole or not at all (a reader never sees half an entry); an unwritable folder just
    means compiling next time too."""
    if FOLDER == "off":
        return
    entry = {"asm": asm, "error": error}
    with _lock:
        used[k] = entry
    path = Path(FOLDER) / f"{k}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.part")
        part.write_text(json.dumps(entry))
        os.replace(part, path)
    except OSError:
        pass


def pack_if_asked() -> str | None:
    """With PEAKBENCH_ISA_CACHE_PACK=1, ARCHIVE becomes the entries this process used."""
    if os.environ.get("PEAKBENCH_ISA_CACHE_PACK") != "1" or not used:
        return None
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return "PEAKBENCH_ISA_CACHE_PACK needs one process (-n 0): a worker sees only its own compiles"
    import zstandard
    data = json.dumps({"entries": dict(sorted(used.items()))}, separators=(",", ":")).encode()
    part = ARCHIVE.with_name(ARCHIVE.name + ".part")
    part.write_bytes(zstandard.ZstdCompressor(level=19, threads=-1).compress(data))
    os.replace(part, ARCHIVE)
    return f"{ARCHIVE.relative_to(ROOT)}: {len(used)} entries, {ARCHIVE.stat().st_size // 1024} KiB"

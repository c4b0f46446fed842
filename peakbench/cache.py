"""Derived artifacts kept on disk, so a second run redoes none of the work: compiled modules
(SPIR-V, cubins, code objects), disassembly listings and loop censuses, under $PEAKBENCH_CACHE
(default ~/.cache/peakbench), one folder per kind.

An entry is a header (tag, size of the data, sha256 of its key and data) and the data, written to
a temporary file and renamed into place, so a reader sees a whole entry or none, from any thread or
process. It is used only when the header matches: a truncated, corrupted or foreign entry (one
copied under another key) is deleted, with one note on stderr per folder per run. The cache only
saves time: a folder that cannot be read or written means doing the work again, never an error.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable

TAG = b"PBCACHE1"
HEADER = struct.Struct("<8sQ32s")           # tag, size of the data, sha256(key + data)
SUFFIX = {"spirv": ".spv"}                  # file name endings other than .bin
_swept: set[Path] = set()                   # folders already checked and reported this run
_lock = threading.Lock()


def root() -> Path:
    return Path(os.environ.get("PEAKBENCH_CACHE") or Path.home() / ".cache" / "peakbench")


def folder(kind: str) -> Path:
    return root() / kind


def key(*parts: str | bytes) -> str:
    """A digest of the parts, each length-prefixed, so ("ab", "c") and ("a", "bc") differ."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else bytes(part)
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()[:32]


def path(kind: str, key: str, label: str = "") -> Path:
    """The entry's file: `label-key.bin` (the label, such as a shader's name, is for a reader)."""
    return folder(kind) / f"{label + '-' if label else ''}{key}{SUFFIX.get(kind, '.bin')}"


def _entry_key(file: Path) -> bytes:
    return file.stem.rsplit("-", 1)[-1].encode()


def pack(file: Path, data: bytes) -> bytes:
    return HEADER.pack(TAG, len(data), hashlib.sha256(_entry_key(file) + data).digest()) + data


def unpack(file: Path, raw: bytes) -> bytes | None:
    """The data of an entry, or None for one that is truncated, corrupted, foreign (a digest made
    for another key) or of another format."""
    if len(raw) < HEADER.size:
        return None
    tag, size, digest = HEADER.unpack_from(raw)
    data = raw[HEADER.size:]
    if tag != TAG or size != len(data) or digest != hashlib.sha256(_entry_key(file) + data).digest():
        return None
    return data


def _read(file: Path) -> bytes | None:
    """A file's bytes; None when it (or its folder) does not exist, b"" when it cannot be read.
    Something other than a regular file in its place (a folder, a FIFO, a socket, a link) was
    never written by us: it is removed and reads as missing, never opened (a FIFO would block)."""
    try:
        st = os.lstat(file)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return b""
    if not stat.S_ISREG(st.st_mode):
        _remove_foreign(file, st)
        return None
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as f:
        try:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):   # swapped in since the lstat
                return b""
            return f.read()
        except OSError:
            return b""


def _remove_foreign(file: Path, st: os.stat_result) -> None:
    with contextlib.suppress(OSError):
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(file)
        else:
            file.unlink()


def _unlink(file: Path) -> None:
    with contextlib.suppress(OSError):
        file.unlink()


def _drop_damaged(file: Path, valid: Callable[[bytes], bool]) -> None:
    """Delete a damaged entry. On the first in a folder this run, check the whole folder and say
    once, on stderr, how many entries were dropped (one line, however many). Under the lock, so
    a thread that finds another damaged entry meanwhile (compiling ahead) waits for the sweep,
    which counts its entry, instead of deleting it uncounted."""
    where = file.parent
    with _lock:
        if where in _swept:
            _unlink(file)
            return
        _swept.add(where)
        bad = {file} | {p for p in where.glob(f"*{file.suffix}")
                        if (raw := _read(p)) is not None and not _usable(p, raw, valid)}
        for p in bad:
            _unlink(p)
    count = f"{len(bad)} damaged or outdated cache {'entry' if len(bad) == 1 else 'entries'}"
    print(f"note: dropped {count} in {where}; rebuilding as needed", file=sys.stderr, flush=True)


def _usable(file: Path, raw: bytes, valid: Callable[[bytes], bool]) -> bool:
    data = unpack(file, raw)
    return data is not None and valid(data)


def load(kind: str, key: str, label: str = "", valid: Callable[[bytes], bool] = lambda data: True) -> bytes | None:
    """The data stored under `key`, or None (missing, damaged, or failing `valid`: then deleted)."""
    file = path(kind, key, label)
    raw = _read(file)
    if raw is None:
        return None
    data = unpack(file, raw)
    if data is not None and valid(data):
        return data
    _drop_damaged(file, valid)
    return None


def store(kind: str, key: str, data: bytes, label: str = "") -> None:
    """Keep `data` under `key`; silently nothing where the folder cannot be written."""
    file = path(kind, key, label)
    tmp = None
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(pack(file, bytes(data)))
        os.replace(tmp, file)
    except OSError:
        if tmp:
            _unlink(Path(tmp))


def _json_shaped(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def load_json(kind: str, key: str, label: str = ""):
    """A JSON value stored by store_json, or None."""
    data = load(kind, key, label, valid=_json_shaped)
    return None if data is None else json.loads(data)


def store_json(kind: str, key: str, value, label: str = "") -> None:
    store(kind, key, json.dumps(value, sort_keys=True).encode(), label)


def load_text(kind: str, key: str, label: str = "") -> str | None:
    data = load(kind, key, label)
    return None if data is None else data.decode(errors="replace")


def store_text(kind: str, key: str, text: str, label: str = "") -> None:
    store(kind, key, text.encode(), label)


def load_parts(kind: str, key: str, label: str = "") -> list[bytes] | None:
    """The byte strings stored together by store_parts, or None."""
    data = load(kind, key, label, valid=lambda data: _split(data) is not None)
    return None if data is None else _split(data)


def store_parts(kind: str, key: str, parts: list[bytes], label: str = "") -> None:
    store(kind, key, b"".join(len(p).to_bytes(8, "little") + bytes(p) for p in parts), label)


def _split(data: bytes) -> list[bytes] | None:
    parts, at = [], 0
    while at < len(data):
        size = int.from_bytes(data[at:at + 8], "little")
        if at + 8 + size > len(data):
            return None
        parts.append(data[at + 8:at + 8 + size])
        at += 8 + size
    return parts


def remember(kind: str, key: str, make: Callable[[], list[bytes]], label: str = "") -> tuple[list[bytes], bool]:
    """make()'s parts (a compiled module, its log, ...) and whether they came from the cache: read
    where stored before, else made and stored. An exception from make() is not cached."""
    found = load_parts(kind, key, label)
    if found is not None:
        return found, True
    parts = [bytes(p) for p in make()]
    store_parts(kind, key, parts, label)
    return parts, False


@functools.cache
def tool_identity(exe: str) -> str:
    """A tool as a cache key sees it: its path and all that `--version` says (the first line of
    cuobjdump's names no release), read once per process."""
    try:
        done = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return exe
    return f"{exe}\n{done.stdout.strip()}"

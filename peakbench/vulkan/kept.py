"""NVIDIA's Vulkan shader cache kept between runs: the driver's folder (driver_cache.py makes a
fresh one per process) packed into peakbench's cache at close and unpacked into the next run's
folder before the instance is created, so the driver finds the pipelines it compiled before
instead of compiling them again: a warm `--quick`'s compile-ahead on an H100 took 1.3-1.5 s
without it, 0.3 s with it (PERFORMANCE_ANALYSIS.md, "Start-up, sixth round").

A pipeline the driver finds there writes no record, so its machine code is found by the record
its first creation wrote: `remember` keeps, per pipeline fingerprint and driver, the record's file
and key, and `recall` returns them. The record is still checked against the pipeline's own
workgroup size and the driver's statistics (driver_cache.PipelineCode), as a record written in
this run is.

The archive is one cache entry (header and digest checked on load; written to a temporary file
and renamed), replaced only when the run added records; two runs at once each leave a whole
archive, the last one's. Past KEEP_AT_MOST it keeps only the files this run wrote, so records of
drivers no longer installed do not pile up. Anything unreadable here costs compile time only."""
from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path, PurePosixPath

from peakbench import cache

KIND = "nvidia-vulkan"           # the cache folder of both the archive and the record map
ARCHIVE = "driver-cache"
KEEP_AT_MOST = 64 << 20          # bytes of the driver's files kept; more and only this run's are


def files(folder: str) -> dict[str, int]:
    """Each regular file under `folder` (relative POSIX path: size)."""
    root = Path(folder)
    found = {}
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            found[path.relative_to(root).as_posix()] = path.stat().st_size
    return found


def restore(folder: str) -> dict[str, int]:
    """Unpack the kept archive into the empty `folder`; the files it gave (path: size)."""
    data = cache.load(KIND, ARCHIVE)
    if not data:
        return {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar.getmembers():
                if member.isfile() and _inside(member.name):
                    target = Path(folder, *PurePosixPath(member.name).parts)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with tar.extractfile(member) as source:
                        target.write_bytes(source.read())
    except (tarfile.TarError, OSError, EOFError):
        pass                        # what came out whole is the driver's to check, as any cache file
    return files(folder)


def keep(folder: str, restored: dict[str, int]) -> None:
    """Pack `folder` into the archive when this run wrote to it (files other than `restored`)."""
    found = files(folder)
    written = {name for name, size in found.items() if restored.get(name) != size}
    if not written:
        return
    chosen = sorted(found) if sum(found.values()) <= KEEP_AT_MOST else sorted(written)
    if sum(found[name] for name in chosen) > KEEP_AT_MOST:
        return
    buffer = io.BytesIO()
    try:
        with tarfile.open(fileobj=buffer, mode="w:", format=tarfile.PAX_FORMAT) as tar:
            for name in chosen:
                tar.add(os.path.join(folder, name), arcname=name, recursive=False)
    except OSError:
        return
    cache.store(KIND, ARCHIVE, buffer.getvalue())


def _inside(name: str) -> bool:
    parts = PurePosixPath(name).parts
    return bool(parts) and not name.startswith("/") and ".." not in parts


def _map_key(fingerprint: bytes, driver: str) -> str:
    return cache.key(b"record", fingerprint, driver)


def remember(fingerprint: bytes, driver: str, file: str, key: str) -> None:
    """The record (file, 16-byte key in hex) the driver wrote for a pipeline of this fingerprint."""
    cache.store_json(KIND, _map_key(fingerprint, driver), {"file": file, "key": key})


def recall(fingerprint: bytes, driver: str) -> tuple[str, str] | None:
    """The (file, key) `remember` kept for this fingerprint and driver, or None."""
    found = cache.load_json(KIND, _map_key(fingerprint, driver))
    if isinstance(found, dict) and isinstance(found.get("file"), str) and isinstance(found.get("key"), str):
        return found["file"], found["key"]
    return None

"""SASS evidence on NVIDIA's Vulkan driver: its shader disk cache pointed at a folder of ours for
the backend's life, and each pipeline's machine code found by the records its creation wrote
there (evidence/nvidia_cache.py reads them).

The driver takes its cache settings from the environment (__GL_SHADER_DISK_CACHE=1,
__GL_SHADER_DISK_CACHE_PATH, __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1) at vkCreateInstance, each
instance anew (driver 580.159.04: set after the instance or the device, they are ignored; a
second backend in one process writes to its own folder; a folder that does not exist is not
created). So DriverCache sets them before the instance is created, whichever driver
it is: only NVIDIA's reads them. Settings of the user's own are left in force, and SASS evidence
is then off; so the user's cache is never read or written. The folder starts with what an
earlier run kept (kept.py); close() keeps it again and removes it, and the exit handler removes
it again in case anything wrote there after.

Attribution: the driver appends a pipeline's records to its .bin before vkCreateComputePipelines
returns, and writes none for a pipeline it already holds. So the records between the .bin's sizes
before and after one creation are that pipeline's; a pipeline made again from the same SPIR-V,
workgroup size and layout takes the record found the first time; one an earlier run made takes
the record kept.py says that run's creation wrote. Each match is checked: the record's workgroup
size against the pipeline's, its register count and code size against the driver's pipeline
executable statistics.

Disassembly costs nvdisasm's start (~0.3 s), so it runs on worker threads while the pipeline is
measured, and its listing is cached (peakbench/cache.py) for the next run: the `sass` dict of
evidence() is completed in place when the pipeline is destroyed (the workloads destroy theirs
before their result is built), or by disassemble(). Compile-ahead makes each planned pipeline once
before the run and disassembles it on its own thread (disassemble_now): the sass guard waits for
a listing before a test's first launch, which cold would be one nvdisasm start a test.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import tempfile
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from peakbench import cache
from peakbench.evidence.listing import instruction_mix, opcodes
from peakbench.evidence import nvidia_cache as ns
from peakbench.vulkan import kept

ENV = "__GL_SHADER_DISK_CACHE"
PREFIX = "peakbench-nvcache-"
NVIDIA = 0x10DE
TOP = 12                          # opcodes kept of the whole stream's mix (the loop's are all kept)
REGISTER_FLOOR = 16               # the least "Register Count" the driver's statistics report
# nvdisasm runs at once: each costs ~0.3 s of one core, most of it its start (a cold quick run
# waited 9.1 s on one worker); half the cores at most, so a measurement keeps the rest.
DISASSEMBLERS = max(1, min(4, (os.cpu_count() or 2) // 2))

# nvdisasm's architecture by PCI device ID (the cache's container names none); only SM90 (the H200
# SXM, 0x2335) has been read back and checked:
# PERFORMANCE_ANALYSIS.md, "What NVIDIA's Vulkan compiler emits".
ARCHES = ((0x1E00, 0x1FFF, "SM75"), (0x2180, 0x21FF, "SM75"), (0x20B0, 0x20FF, "SM80"),
          (0x2200, 0x22FF, "SM86"), (0x2300, 0x23FF, "SM90"), (0x2400, 0x25FF, "SM86"),
          (0x2600, 0x28FF, "SM89"), (0x2900, 0x29FF, "SM100"), (0x2B00, 0x2FFF, "SM120"))

_made: set[str] = set()           # every folder of ours in this process


@atexit.register
def _remove_all() -> None:
    for folder in list(_made):
        shutil.rmtree(folder, ignore_errors=True)


def sweep_stale(where: str | None = None) -> None:
    """Remove the folders of ours that a process killed before its exit handler ran (SIGKILL, an
    OOM kill, a scheduler's timeout) left behind: each is named after its process, and one whose
    process is gone is stale."""
    where = where or tempfile.gettempdir()
    pattern = re.compile(rf"{re.escape(PREFIX)}(\d+)-")
    try:
        names = os.listdir(where)
    except OSError:
        return
    for name in names:
        found = pattern.match(name)
        if not found or _alive(int(found.group(1))):
            continue
        path = os.path.join(where, name)
        try:
            if os.lstat(path).st_uid == os.getuid() and os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def sass_arch(device_id: int) -> str | None:
    return next((arch for low, high, arch in ARCHES if low <= device_id <= high), None)


class DriverCache:
    """The driver's cache settings pointed at a fresh folder of ours, unless the user has set any
    of them (then `off` says so and `folder` is None). `environ` is os.environ but in tests."""

    def __init__(self, environ=None):
        self.environ = os.environ if environ is None else environ
        self.folder: str | None = None
        self.off: str | None = None
        self.restored: dict[str, int] = {}      # the files an earlier run kept (kept.py)
        self._set: dict[str, str] = {}
        theirs = sorted(k for k in self.environ if k.startswith(ENV))
        if theirs and not self._inherited():
            self.off = f"SASS evidence is off: the user's shader cache settings are in force ({', '.join(theirs)})"
            return
        sweep_stale()
        try:
            self.folder = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")
        except OSError as e:
            self.off = f"SASS evidence is off: no folder for the driver's cache ({e})"
            return
        _made.add(self.folder)
        self.restored = kept.restore(self.folder)
        self._set = {ENV: "1", f"{ENV}_PATH": self.folder, f"{ENV}_SKIP_CLEANUP": "1"}
        self._before = {key: self.environ.get(key) for key in self._set}
        self.environ.update(self._set)

    def _inherited(self) -> bool:
        """Settings a peakbench process above this one made (its folder, not the user's)."""
        path = self.environ.get(f"{ENV}_PATH", "")
        return (Path(path).name.startswith(PREFIX) and self.environ.get(ENV) == "1"
                and {k for k in self.environ if k.startswith(ENV)} == {ENV, f"{ENV}_PATH", f"{ENV}_SKIP_CLEANUP"})

    def close(self) -> None:
        """The settings as they were before (where nothing changed them since), the folder removed."""
        for key, value in self._set.items():
            if self.environ.get(key) == value:
                if self._before[key] is None:
                    del self.environ[key]
                else:
                    self.environ[key] = self._before[key]
        self._set = {}
        if self.folder:
            kept.keep(self.folder, self.restored)
            shutil.rmtree(self.folder, ignore_errors=True)


@dataclass
class Code:
    """One pipeline's machine code as found in the cache: its record, or why there is none
    (`note`; with a record, a warning). `sass` is its evidence once asked for."""
    entry: ns.Entry | None = None
    note: str | None = None
    sass: dict | None = None
    earlier_run: bool = False       # the record was written when an earlier run made the pipeline


def fingerprint(code: bytes, local_size: int, bindings: int, push_bytes: int, flags: int) -> bytes:
    """What makes two pipelines the same to the driver, as far as we can tell."""
    return hashlib.sha256(code + f"|{local_size}|{bindings}|{push_bytes}|{flags}".encode()).digest()


class PipelineCode:
    """The machine code of one device's pipelines, or one note saying why there is none."""

    def __init__(self, cache: DriverCache | None, info, driver_label: str):
        self.cache, self.arch = cache, sass_arch(info.device_id)
        self.source = f"NVIDIA shader disk cache (driver {info.driver})"
        self.driver = f"{info.vendor_id:04x}:{info.device_id:04x} {info.driver}"   # whose records kept.py maps
        self.note = self._unavailable(cache, info, driver_label)
        self._known: dict[bytes, Code] = {}       # fingerprint -> its record, as first found
        self._earlier: dict[str, dict[str, ns.Entry]] = {}  # a kept .bin's records by key, read once
        self._listings: dict[str, Future] = {}     # record key -> its disassembly
        self._pool: ThreadPoolExecutor | None = None

    def _unavailable(self, cache, info, driver_label: str) -> str | None:
        if info.vendor_id != NVIDIA or info.extra.get("driver_name") != "NVIDIA":
            return f"machine code not available: {driver_label} keeps no readable shader cache"
        if cache is None or cache.folder is None:
            return cache.off if cache else "SASS evidence is off: the driver's cache was not set"
        try:
            import zstandard  # noqa: F401
        except ImportError:
            return ns.NO_ZSTANDARD
        if not ns.nvdisasm():
            return ns.NO_NVDISASM
        if not self.arch:
            return f"no SASS architecture known for NVIDIA device 0x{info.device_id:04x}: not disassembled"
        return None

    def mark(self) -> dict | None:
        """The cache's sizes, taken just before a pipeline is created (None: evidence is off)."""
        return None if self.note else ns.sizes(self.cache.folder)

    def created(self, before: dict | None, same: bytes, local_size: int) -> Code:
        """The code of the pipeline created since `before`; `same` is its fingerprint()."""
        if before is None:
            return Code(note=self.note)
        found = ns.decode_cache(self.cache.folder, count=False, since=before)
        nvvm = [e for e in found.entries if e.kind == "nvvm"]
        warning = found.notes[0] if found.notes else None
        if not nvvm:
            if same in self._known:
                first = self._known[same]
                return Code(first.entry, warning, earlier_run=first.earlier_run)
            earlier = self._from_earlier_run(same, local_size)
            if isinstance(earlier, ns.Entry):
                self._known[same] = Code(earlier, earlier_run=True)
                return Code(earlier, warning, earlier_run=True)
            return Code(note=warning or earlier or "the driver wrote no machine code for this pipeline to its cache")
        if len(nvvm) > 1:
            return Code(note=f"{len(nvvm)} machine-code records appeared while one pipeline was made: "
                             f"records {', '.join(str(e.index) for e in nvvm)} of {nvvm[0].file}")
        entry = nvvm[0]
        if not entry.code:
            return Code(note=warning or f"record {entry.index} of {entry.file} holds no instruction stream")
        if entry.workgroup and entry.workgroup != (local_size, 1, 1):
            return Code(note=f"record {entry.index} of {entry.file} is for a workgroup of "
                             f"{'x'.join(map(str, entry.workgroup))}, not this pipeline's {local_size}")
        self._known[same] = Code(entry)
        kept.remember(same, self.driver, entry.file, entry.key)
        return Code(entry, warning)

    def _from_earlier_run(self, same: bytes, local_size: int) -> ns.Entry | str | None:
        """The record an earlier run's creation wrote for this fingerprint, found in the folder
        kept.py restored; or why it cannot be used; None where no run kept one."""
        found = kept.recall(same, self.driver)
        if found is None or found[0] not in self.cache.restored:
            return None
        file, key = found
        if file not in self._earlier:
            decoded = ns.decode_cache(self.cache.folder, count=False, only=file)
            self._earlier[file] = {e.key: e for e in decoded.entries if e.kind == "nvvm" and e.code}
        entry = self._earlier[file].get(key)
        if entry is None:
            return f"the driver compiled nothing new, and record {key} of {file}, an earlier run's, is not in its cache"
        if entry.workgroup and entry.workgroup != (local_size, 1, 1):
            return (f"record {entry.index} of {entry.file}, an earlier run's, is for a workgroup of "
                    f"{'x'.join(map(str, entry.workgroup))}, not this pipeline's {local_size}")
        return entry

    def evidence(self, code: Code, statistics: dict) -> dict:
        """{"sass": ...} (its mixes filled by finish()), and "sass_note" where there is something
        to say; a record that the driver's statistics contradict is not used."""
        if code.entry is not None and code.sass is None:
            mismatch = _contradicts(code.entry, statistics)
            if mismatch:
                code.entry, code.note = None, mismatch
        if code.entry is None:
            return {"sass_note": code.note or "no machine code"}
        if code.sass is None:
            e = code.entry
            code.sass = {"instruction_mix": {}, "loop_mix": {}, "registers": e.registers, "arch": self.arch,
                         "source": self.source, "cache_record": f"{e.file} #{e.index}"}
            if e.key not in self._listings:
                self._pool = self._pool or ThreadPoolExecutor(max_workers=DISASSEMBLERS, thread_name_prefix="nvdisasm")
                self._listings[e.key] = self._pool.submit(_listing, e.code, self.arch)
        return {"sass": code.sass, **({"sass_note": code.note} if code.note else {})}

    def disassemble_now(self, code: Code) -> None:
        """The code's listing made on this thread, for evidence() to find done."""
        if code.entry is not None and code.entry.key not in self._listings:
            done: Future = Future()
            done.set_result(_listing(code.entry.code, self.arch))
            self._listings[code.entry.key] = done

    def finish(self, code: Code) -> str:
        """Wait for the pipeline's disassembly and complete its `sass`; the listing ("" if none)."""
        if code.sass is None or code.entry is None:
            return ""
        listing, why, cached = self._listings[code.entry.key].result()
        if why:
            code.sass["note"] = why
            return ""
        if code.earlier_run:
            code.sass["cached"] = "binary"
        elif cached:
            code.sass["cached"] = "listing"
        if not code.sass["instruction_mix"]:
            loop = ns.loop_body(listing)
            code.sass["instruction_mix"] = instruction_mix(listing, TOP)
            code.sass["loop_mix"] = instruction_mix(loop, top=None)
            mma = Counter(op for op in opcodes(loop or listing) if op.split(".")[0].endswith("MMA"))
            if mma:
                code.sass["mma_instruction"] = mma.most_common(1)[0][0]
        return listing

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _listing(code: bytes, arch: str) -> tuple[str, str | None, bool]:
    """ns.disassemble's (listing, note) of an instruction stream, and whether the listing came from
    peakbench's cache (folder nvdisasm, keyed by the stream, the architecture and the nvdisasm
    binary). Run on the worker thread: the lookup needs nvdisasm's version once per process."""
    key = cache.key(hashlib.sha256(code).digest(), arch, cache.tool_identity(ns.nvdisasm() or "nvdisasm"))
    text = cache.load_text("nvdisasm", key)
    if text is not None:
        return text, None, True
    listing, why = ns.disassemble(code, arch)
    if not why:
        cache.store_text("nvdisasm", key, listing)
    return listing, why, False


def _contradicts(entry: ns.Entry, statistics: dict) -> str | None:
    """Why the record cannot be this pipeline's code, by the driver's own statistics (NVIDIA's
    one executable "CS": "Register Count", "Binary Size"), or None. The statistics count at least
    REGISTER_FLOOR registers (SM90, driver 580.159.04: 10 in the container, 16 in the statistics,
    for the write, copy and chase shaders; equal from 16 up)."""
    for values in statistics.values():
        if not isinstance(values, dict) or "Register Count" not in values:
            continue
        theirs = (values["Register Count"], values.get("Binary Size", len(entry.code)))
        registers = max(entry.registers or 0, REGISTER_FLOOR)
        if theirs != (registers, len(entry.code)):
            return (f"record {entry.index} of {entry.file} ({entry.registers} registers, {len(entry.code)} bytes) "
                    f"is not this pipeline's code: the driver's statistics say {theirs[0]} registers, {theirs[1]} bytes")
    return None


def dump_name(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{label}-sass") + ".txt"

"""The machine code NVIDIA's Vulkan driver runs, read back from its shader disk cache: each
pipeline's SM90 instruction stream, disassembled with nvdisasm and counted, so evidence can show
that compute.fp32 ran FFMA and a cooperative-matrix test ran HMMA (or HGMMA).

Point the driver's cache at an empty folder for the run:
    __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_PATH=DIR __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1
then `decode_cache(DIR)`. The format is undocumented: what follows is what driver 580.159.04 wrote
for SM90, and every field is checked before use. A field that does not check out, a missing
tool, a cut or foreign file: each becomes a one-line note in the result, never an exception.

DIR/GLCache/<32 hex>/<16 hex>/<16 hex>.bin and .toc open with the same 32-byte header: "CDVN",
u16 0, u16 version 3, then the parent folder's name as a u64 and the grandparent's as four u32.
- .bin: records back to back, up to the end of the file, in the order the pipelines were made:
  u32 mark 0x9846A19D, 16-byte key, 8 unidentified bytes (not a CRC32, xxHash or CityHash of the
  payload), u32 payload size, then the payload: u32 decompressed size and one zstd frame (its
  header repeats the size). The chain of sizes is what finds the frames: it ends exactly at the
  end of the file, and needs no .toc; scanning for the zstd magic finds the same frames here, but
  the magic could also occur inside compressed data.
- .toc: one 24-byte row per record, in .bin order: key, the record's offset, its payload size.
  An index, checked against the .bin.
A payload decompresses to one of:
- an NVVM container ("NVDANVVMNVuc", u32 version 1). Word 12 (u32 index) + 24 is the offset of
  the raw instruction stream and word 19 its size; word 20 is word 12 + 16 in every container seen.
  The 24 bytes before the stream hold the register count at +8. Word 8 - 8 is the offset of a
  function record: the entry point's name (64 bytes: "main_4" for SPIR-V's "main") and the
  workgroup size at +0x48 (three u32). Then come the driver's settings (YAML under hashed names;
  one of them repeats the key's first 8 bytes) and an NVVM bitcode module whose string table keeps
  the SPIR-V's block names (In, Out, Operands, ...) and the intrinsics' types (fma.ftz.v2f32,
  coopmat.muladd.v8f32.v8f16.v8f16.v8f32): `Entry.hints`. No SPIR-V words are kept.
- an ELF stub: u32 size and a small x86-64 ELF with one host function bindUBO_<hex>_0; one such
  entry preceded the pipelines of each pipeline layout. No GPU code.
The key's first 8 bytes were the same for pipelines made from one SPIR-V module with different
specialization (workgroup size 128 and 256), and differ otherwise: a hash of the module by a
function not identified (not xxHash, MurmurHash3, CityHash, FarmHash, FNV-1a or a truncated MD5/SHA
of the words). The container names no architecture (nvdisasm -b SM80 reads this SM90 code too), so
the caller says which it is.

Attribution (driver 580.159.04, SM90): the driver appends a pipeline's records to the .bin and
.toc before vkCreateComputePipelines returns (the ELF stub with the first pipeline of a new
layout), and a pipeline it already holds adds none; so the records between the .bin's sizes before
and after one call are that pipeline's (`sizes`, `between`). Keys and machine code came out the
same in a second run (the containers differed in 3 bytes, and so did the 8 unidentified bytes),
and the driver's pipeline executable statistics "Register Count" and "Binary Size" equal
`registers` and the stream's size.
"""
from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from peakbench.evidence.listing import instruction_mix, opcodes
from peakbench.evidence.sass import loop_body, loops  # noqa: F401  (the listing's loops)

HEADER = struct.Struct("<4sHH8s16s")      # magic, 0, version, parent folder's name, grandparent's
FILE_MAGIC, FILE_VERSION = b"CDVN", 3
RECORD = struct.Struct("<I16s8sI")        # mark, key, unidentified, payload size
RECORD_MARK = 0x9846A19D
TOC_ROW = struct.Struct("<16sII")         # key, record offset, payload size
CONTAINER_MAGIC, CONTAINER_VERSION = b"NVDANVVMNVuc", 1
CONTAINER_WORDS = 21                      # the header words read: 0..20
CODE_HEADER = 24                          # bytes from word 12's offset to the instruction stream
INSTRUCTION_BYTES = 16                    # Volta and later: 128-bit instructions
FUNCTION_NAME_BYTES, WORKGROUP_AT = 64, 0x48
MAX_PAYLOAD = 64 << 20                    # a decompressed size beyond this is not a shader
NO_ZSTANDARD = "zstandard is not installed (pip install zstandard): the cache cannot be decompressed"
NO_NVDISASM = "nvdisasm not found (pip install nvidia-cuda-nvdisasm): no instruction counts"


@dataclass(frozen=True)
class Entry:
    index: int                  # position in its .bin: the order the driver wrote the records
    file: str                   # the .bin, relative to the cache folder
    offset: int                 # the record's byte offset in the .bin
    key: str                    # the record's 16-byte key, hex
    kind: str                   # "nvvm" (a pipeline's GPU code), "elf" (a host stub) or "unknown"
    arch: str = ""              # what the code was disassembled as
    code: bytes = b""           # the raw instruction stream
    registers: int | None = None
    entry_point: str = ""
    workgroup: tuple[int, int, int] | None = None
    hints: tuple[str, ...] = ()     # names that tie the entry to its SPIR-V (module docstring)
    listing: str = ""
    mix: dict[str, int] = field(default_factory=dict)        # opcode counts, the whole stream
    loop_mix: dict[str, int] = field(default_factory=dict)   # one trip of the main loop

    @property
    def module_hash(self) -> str:
        """The key's first 8 bytes: shared by the pipelines of one SPIR-V module."""
        return self.key[:16]


@dataclass(frozen=True)
class CacheDecode:
    entries: list[Entry]
    notes: list[str]


def nvdisasm() -> str | None:
    """NVIDIA's wheel keeps the binary in site-packages/nvidia/<cu13 or cuda_nvdisasm>/bin; else
    beside the interpreter, else on PATH."""
    candidates = [c for p in sys.path if p for c in sorted(Path(p).glob("nvidia/*/bin/nvdisasm"))]
    candidates.append(Path(sys.executable).parent / "nvdisasm")
    found = next((str(c) for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)
    return found or shutil.which("nvdisasm")


def disassemble(code: bytes, arch: str = "SM90") -> tuple[str, str | None]:
    """The listing of a raw instruction stream, or "" and a note saying why there is none."""
    exe = nvdisasm()
    if not exe:
        return "", NO_NVDISASM
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "code.bin"
        path.write_bytes(code)
        try:
            done = subprocess.run([exe, "-b", arch, str(path)], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            return "", f"nvdisasm did not run: {e}"
    if done.returncode != 0 or not opcodes(done.stdout):
        why = (done.stderr.strip().splitlines() or ["no instructions in its output"])[0]
        return "", f"nvdisasm -b {arch} failed: {why}"
    return done.stdout, None


def decode_cache(folder, arch: str = "SM90", count: bool = True, since: dict[str, int] | None = None,
                 only: str | None = None) -> CacheDecode:
    """Every record of every .bin under `folder`, with the instruction mixes of its GPU code
    (`count=False` skips nvdisasm). `since` (a `sizes`) keeps the records written after it: the
    others are walked, not decompressed. `only`: the one .bin of that relative path."""
    folder = Path(folder)
    if not folder.is_dir():
        return CacheDecode([], [f"{folder}: not a folder"])
    bins = sorted(p for p in folder.rglob("*.bin") if p.is_file()
                  and (only is None or p.relative_to(folder).as_posix() == only))
    notes = [] if bins else [f"{folder}: no .bin file (was the driver's cache pointed here?)"]
    notes += [f"{p.relative_to(folder)}: no .bin beside it" for p in sorted(folder.rglob("*.toc"))
              if not p.with_suffix(".bin").is_file()]
    try:
        import zstandard
    except ImportError:
        return CacheDecode([], (notes + [NO_ZSTANDARD]) if bins else notes)
    entries = []
    for path in bins:
        name = str(path.relative_to(folder))
        entries += _decode_bin(path, name, zstandard, notes, (since or {}).get(name, 0))
    if count and any(e.code for e in entries):
        entries = _count(entries, arch, notes)
    return CacheDecode(entries, notes)


def sizes(folder) -> dict[str, int]:
    """The size of each .bin under `folder` (relative path: bytes), to take around a pipeline's
    creation."""
    folder = Path(folder)
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*.bin") if p.is_file()}


def between(entries: list[Entry], before: dict[str, int], after: dict[str, int]) -> list[Entry]:
    """The entries written between two `sizes`: those of the pipelines made in between."""
    return [e for e in entries if before.get(e.file, 0) <= e.offset < after.get(e.file, 0)]


def _count(entries: list[Entry], arch: str, notes: list[str]) -> list[Entry]:
    if not nvdisasm():
        notes.append(NO_NVDISASM)
        return entries
    out = []
    for e in entries:
        if e.code:
            listing, why = disassemble(e.code, arch)
            if why:
                notes.append(f"{e.file} record {e.index}: {why}")
            e = replace(e, arch=arch, listing=listing, mix=instruction_mix(listing, top=None),
                        loop_mix=instruction_mix(loop_body(listing), top=None))
        out.append(e)
    return out


def _decode_bin(path: Path, name: str, zstandard, notes: list[str], start: int = 0) -> list[Entry]:
    data = path.read_bytes()
    if data[:4] != FILE_MAGIC:
        notes.append(f"{name}: not an NVIDIA shader cache file (no {FILE_MAGIC.decode()} header)")
        return []
    if len(data) < HEADER.size:
        notes.append(f"{name}: header cut off ({len(data)} of {HEADER.size} bytes)")
        return []
    _, zero, version, _, _ = HEADER.unpack_from(data)
    if (zero, version) != (0, FILE_VERSION):
        notes.append(f"{name}: cache file version {zero}.{version}, this decoder knows 0.{FILE_VERSION}")
        return []
    records = _records(data, name, notes)
    _check_toc(path, name, data[:HEADER.size], records, notes)
    entries = []
    for index, (offset, key, payload) in enumerate(records):
        if offset < start:
            continue
        where = f"{name} record {index}"
        entry = Entry(index, name, offset, key.hex(), "unknown")
        raw, why = _inflate(payload, zstandard)
        if why:
            notes.append(f"{where}: {why}")
            entries.append(entry)
            continue
        entries.append(_classify(raw, entry, where, notes))
    return entries


def _records(data: bytes, name: str, notes: list[str]) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, payload) of each record, up to the first that is cut off or unrecognised."""
    found, pos = [], HEADER.size
    while pos < len(data):
        where = f"{name} record {len(found)} at byte {pos}"
        if len(data) - pos < RECORD.size:
            notes.append(f"{where}: header cut off ({len(data) - pos} of {RECORD.size} bytes)")
            break
        mark, key, _, size = RECORD.unpack_from(data, pos)
        if mark != RECORD_MARK:
            notes.append(f"{where}: no record mark (0x{mark:08x}, expected 0x{RECORD_MARK:08x}); "
                         f"the rest of the file is skipped")
            break
        end = pos + RECORD.size + size
        if end > len(data):
            notes.append(f"{where}: cut off ({size} payload bytes declared, {len(data) - pos - RECORD.size} left)")
            break
        found.append((pos, key, data[pos + RECORD.size:end]))
        pos = end
    return found


def _check_toc(path: Path, name: str, header: bytes, records, notes: list[str]) -> None:
    toc = path.with_suffix(".toc")
    if not toc.is_file():
        notes.append(f"{name}: no .toc beside it")
        return
    data = toc.read_bytes()
    if data[:HEADER.size] != header:
        notes.append(f"{toc.name}: its header differs from the .bin's")
        return
    body = len(data) - HEADER.size
    rows = [TOC_ROW.unpack_from(data, HEADER.size + i * TOC_ROW.size) for i in range(body // TOC_ROW.size)]
    have = [(key, offset, len(payload)) for offset, key, payload in records]
    if body % TOC_ROW.size:
        notes.append(f"{toc.name}: {body % TOC_ROW.size} bytes after its last whole row")
    if rows != have:
        first = next((i for i, (a, b) in enumerate(zip(rows, have)) if a != b), min(len(rows), len(have)))
        notes.append(f"{toc.name}: lists {len(rows)} records, the .bin holds {len(have)} whole ones; "
                     f"they differ from row {first} on")


def _inflate(payload: bytes, zstandard) -> tuple[bytes, str | None]:
    if len(payload) < 4:
        return b"", "payload shorter than its size word"
    size = int.from_bytes(payload[:4], "little")
    frame = payload[4:]
    try:
        declared = zstandard.frame_content_size(frame)
    except zstandard.ZstdError:
        return b"", "payload is not a zstd frame"
    if declared != size or size > MAX_PAYLOAD:
        return b"", f"zstd frame declares {declared} bytes, the record {size}"
    stream = zstandard.ZstdDecompressor().decompressobj()
    try:
        raw = stream.decompress(frame)
    except zstandard.ZstdError as e:
        return b"", f"zstd frame does not decompress: {e}"
    if not stream.eof or stream.unused_data or len(raw) != size:
        return b"", (f"zstd frame gave {len(raw)} of {size} bytes, complete: {stream.eof}, "
                     f"{len(stream.unused_data)} bytes after it")
    return raw, None


def _classify(raw: bytes, entry: Entry, where: str, notes: list[str]) -> Entry:
    if raw.startswith(CONTAINER_MAGIC):
        fields, why = _container(raw)
        if why:
            notes.append(f"{where}: NVVM container: {why}")
        return replace(entry, kind="nvvm", hints=_hints(raw), **fields)
    if raw[4:8] == b"\x7fELF" and int.from_bytes(raw[:4], "little") == len(raw) - 4:
        machine = int.from_bytes(raw[4 + 18:4 + 20], "little")
        if machine != 0x3E:     # EM_X86_64: the host stubs seen so far
            notes.append(f"{where}: ELF for machine 0x{machine:x}, not the x86-64 stub seen so far")
        symbols = tuple(dict.fromkeys(s.decode() for s in re.findall(rb"bind\w+?_[0-9A-F]+_\d+", raw)))
        return replace(entry, kind="elf", hints=symbols)
    notes.append(f"{where}: unrecognised content (starts {raw[:12].hex()})")
    return entry


def _container(raw: bytes) -> tuple[dict, str | None]:
    """The instruction stream and what describes it; a note when a field does not check out (the
    fields checked before it are kept)."""
    if len(raw) < 4 * CONTAINER_WORDS:
        return {}, f"{len(raw)} bytes, shorter than its header"
    w = struct.unpack_from(f"<{CONTAINER_WORDS}I", raw)
    if w[3] != CONTAINER_VERSION:
        return {}, f"version {w[3]}, this decoder knows {CONTAINER_VERSION}"
    head, size = w[12], w[19]
    start = head + CODE_HEADER
    if head < 4 * CONTAINER_WORDS or w[20] != head + 16:
        return {}, f"word 12 = {head:#x}, word 20 = {w[20]:#x}: not the code section's offset seen so far"
    if not size or size % INSTRUCTION_BYTES or start + size > len(raw):
        return {}, (f"instruction stream of {size} bytes at {start:#x} does not fit the container "
                    f"({len(raw)} bytes) in whole {INSTRUCTION_BYTES}-byte instructions")
    fields = {"code": raw[start:start + size], "registers": int.from_bytes(raw[head + 8:head + 12], "little")}
    func = w[8] - 8
    if not start + size <= func <= len(raw) - WORKGROUP_AT - 12:
        return fields, f"word 8 = {w[8]:#x}: no function record after the code"
    name = raw[func:func + FUNCTION_NAME_BYTES].split(b"\0", 1)[0]
    workgroup = struct.unpack_from("<3I", raw, func + WORKGROUP_AT)
    x, y, z = workgroup
    if not re.fullmatch(rb"[A-Za-z_]\w*", name) or not 0 < x * y * z <= 1024:
        return fields, f"function record at {func:#x}: name {name[:16]!r}, workgroup {workgroup}: not as seen so far"
    return {**fields, "entry_point": name.decode(), "workgroup": workgroup}, None


# In the NVVM module's string table: "nv.glv.accesschain._p1_v2f._p1In2" (block In of vec2 float),
# "llvm.nvvm.fma.ftz.f32", "nv.coopmat.muladd.v8f32.v8f16.v8f16.v8f32", "gl_SubgroupID".
_BLOCK = re.compile(rb"nv\.glv\.accesschain\._p\d+_(\w+?)\._p\d+([A-Z][A-Za-z0-9]*?)\d+(?=nv\.|llvm\.)")
_OP = re.compile(rb"((?:llvm\.nvvm|nv\.coopmat)\.[a-z0-9.]+?)(?=nv\.|llvm\.|\d+\.\d+\.\d+nvsass)")
_BUILTIN = re.compile(rb"gl_[A-Z][A-Za-z]*?(?=gl_|__)")


def _hints(raw: bytes) -> tuple[str, ...]:
    at = raw.find(b"BC\xc0\xde")     # the bitcode module; its string table is at its end
    if at < 0:
        return ()
    tail = raw[at:]
    found = [f"{m.group(2).decode()}:{m.group(1).decode()}" for m in _BLOCK.finditer(tail)]
    found += [m.group(1).decode() for m in _OP.finditer(tail) if b".read.sreg" not in m.group(1)]
    found += [m.group(0).decode() for m in _BUILTIN.finditer(tail)]
    return tuple(dict.fromkeys(found))


def describe(entry: Entry, top: int = 4) -> str:
    """One line per entry: where, what, and the main loop's most frequent opcodes."""
    loop = ", ".join(f"{n} {op}" for op, n in list(entry.loop_mix.items())[:top]) or "no loop counted"
    shape = f" wg {entry.workgroup[0]}x{entry.workgroup[1]}x{entry.workgroup[2]}" if entry.workgroup else ""
    regs = f" {entry.registers} regs" if entry.registers is not None else ""
    return (f"{entry.index:3d} {entry.kind:7s} {entry.key[:16]} {len(entry.code):6d} B{regs}{shape}  "
            f"loop: {loop}  [{' '.join(entry.hints)}]")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m peakbench.evidence.nvidia_cache CACHE_FOLDER", file=sys.stderr)
        return 2
    result = decode_cache(args[0])
    for e in result.entries:
        print(describe(e))
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0 if result.entries else 2


if __name__ == "__main__":
    sys.exit(main())

"""peakbench.cache: entries come back as stored; a truncated, corrupted or foreign entry is a miss
and is deleted with one note per folder; a cache that cannot be written means doing the work
again; two threads storing one key leave a valid entry. And the CUDA SASS listings cached on it:
a second disassembly of a cubin runs no tool, another cubin or another disassembler does."""
from __future__ import annotations

import os
import stat
import threading

import pytest

from peakbench import cache
from peakbench.evidence import sass


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if "cache entr" in line]


def test_an_entry_comes_back_as_stored(root):
    k = cache.key("source", b"\x00\x01", "options")
    assert cache.load("things", k) is None
    cache.store("things", k, b"payload \x00\xff")
    assert cache.load("things", k) == b"payload \x00\xff"
    assert cache.path("things", k).parent == root / "things"
    cache.store_json("things", k + "j", {"a": [1, 2]})
    assert cache.load_json("things", k + "j") == {"a": [1, 2]}
    cache.store_text("things", k + "t", "FFMA R1, R2, R3, R4 ;\n")
    assert cache.load_text("things", k + "t") == "FFMA R1, R2, R3, R4 ;\n"
    assert not list(root.rglob("*.tmp")), "no temporary file left"


def test_keys_join_their_parts_unambiguously():
    assert cache.key("ab", "c") != cache.key("a", "bc")
    assert cache.key("a", "") != cache.key("a")
    assert cache.key("x") == cache.key(b"x") and len(cache.key("x")) == 32


def test_remember_makes_once_then_reads(root):
    made = []

    def make():
        made.append(1)
        return [b"\x7fELF cubin", b"// ptx", b""]

    first, cached = cache.remember("cubin", "k" * 32, make, "alu")
    assert (first, cached, len(made)) == ([b"\x7fELF cubin", b"// ptx", b""], False, 1)
    again, cached = cache.remember("cubin", "k" * 32, make, "alu")
    assert (again, cached, len(made)) == (first, True, 1), "read, not made again"
    other, cached = cache.remember("cubin", "j" * 32, make, "alu")
    assert (cached, len(made)) == (False, 2), "another key is made"
    assert (root / "cubin" / f"alu-{'k' * 32}.bin").is_file()


def test_a_failed_make_is_not_cached(root):
    def fails():
        raise RuntimeError("compile error")

    with pytest.raises(RuntimeError):
        cache.remember("cubin", "e" * 32, fails)
    assert cache.load_parts("cubin", "e" * 32) is None


def _flip(data: bytes) -> bytes:
    return data[:-3] + bytes([data[-3] ^ 0x01]) + data[-2:]


@pytest.mark.parametrize("damage", [
    pytest.param(lambda data, other: data[:len(data) // 2], id="truncated"),
    pytest.param(lambda data, other: data[:10], id="shorter-than-the-header"),
    pytest.param(lambda data, other: _flip(data), id="flipped-byte"),
    pytest.param(lambda data, other: other, id="copied-from-another-key"),
    pytest.param(lambda data, other: b"", id="empty"),
])
def test_a_damaged_entry_is_a_miss_and_is_deleted_with_one_note(root, capsys, damage):
    keys = [cache.key(str(i)) for i in range(3)]
    for k in keys:
        cache.store("sass", k, f"listing {k}".encode() * 20)
    files = [cache.path("sass", k) for k in keys]
    entries = [f.read_bytes() for f in files]
    for i, f in enumerate(files[:2]):
        f.write_bytes(damage(entries[i], entries[2]))
    assert cache.load("sass", keys[0]) is None
    assert not files[0].exists() and not files[1].exists(), "both damaged entries deleted at the first"
    assert cache.load("sass", keys[1]) is None
    assert cache.load("sass", keys[2]) == f"listing {keys[2]}".encode() * 20, "the sound entry is kept"
    assert notes(capsys.readouterr().err) == [
        f"note: dropped 2 damaged or outdated cache entries in {root / 'sass'}; rebuilding as needed"]
    cache.store("sass", keys[0], b"again")
    assert cache.load("sass", keys[0]) == b"again"


def test_an_entry_failing_its_kinds_check_is_dropped(root, capsys):
    cache.store("spirv-census", "a" * 32, b"{not json")
    assert cache.load_json("spirv-census", "a" * 32) is None
    assert not cache.path("spirv-census", "a" * 32).exists()
    assert len(notes(capsys.readouterr().err)) == 1


@pytest.mark.parametrize("blocked", ["root-is-a-file", "kind-is-a-file", "read-only-folder", "rename-refused"])
def test_an_unusable_cache_means_doing_the_work_again(tmp_path, monkeypatch, capsys, blocked):
    root = tmp_path / "cache"
    if blocked == "root-is-a-file":
        root.write_text("a file\n")
    elif blocked == "kind-is-a-file":
        root.mkdir()
        (root / "cubin").write_text("a file\n")
    elif blocked == "read-only-folder":
        if os.geteuid() == 0:
            pytest.skip("root ignores file modes")
        (root / "cubin").mkdir(parents=True)
        (root / "cubin").chmod(stat.S_IRUSR | stat.S_IXUSR)
    else:
        def refused(*args):
            raise PermissionError(13, "Permission denied")
        monkeypatch.setattr(cache.os, "replace", refused)
    monkeypatch.setenv("PEAKBENCH_CACHE", str(root))
    made = []
    for _ in range(2):
        parts, cached = cache.remember("cubin", "c" * 32, lambda: made.append(1) or [b"cubin"])
        assert (parts, cached) == ([b"cubin"], False)
    assert len(made) == 2, "made each time"
    assert not list(tmp_path.rglob("*.tmp")) and not notes(capsys.readouterr().err)


def test_two_threads_storing_one_key_leave_a_valid_entry(root):
    data = [bytes([i]) * 200_000 for i in range(2)]
    start = threading.Barrier(2)

    def writer(i):
        start.wait()
        for _ in range(20):
            cache.store("sass", "t" * 32, data[i])

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.load("sass", "t" * 32) in data
    assert [p.name for p in (root / "sass").iterdir()] == [f"{'t' * 32}.bin"]


# -- CUDA: SASS listings --------------------------------------------------------------------

LISTING = "        /*0000*/                   FFMA R1, R2, R3, R4 ;\n"


@pytest.fixture
def disassembler(root, monkeypatch):
    """sass.tool finds one fake cuobjdump; its runs are counted (no toolkit needed)."""
    runs = []
    monkeypatch.setattr(sass, "tool", lambda name: "/opt/fake/cuobjdump" if name == "cuobjdump" else None)
    monkeypatch.setattr(sass, "run_on_file", lambda command, data, name: runs.append(command[0]) or LISTING)
    return runs


def test_a_second_disassembly_of_a_cubin_runs_no_tool(disassembler):
    assert sass.disassemble(b"\x7fELF one") == LISTING
    assert sass.disassemble(b"\x7fELF one") == LISTING
    assert disassembler == ["/opt/fake/cuobjdump"]
    assert sass.disassemble(b"\x7fELF two") == LISTING
    assert len(disassembler) == 2, "another cubin is disassembled"


def test_a_listing_from_another_disassembler_is_not_used(disassembler, monkeypatch):
    sass.disassemble(b"\x7fELF one")
    monkeypatch.setattr(sass, "tool", lambda name: "/opt/other/nvdisasm" if name == "nvdisasm" else None)
    assert sass.disassemble(b"\x7fELF one") == LISTING
    assert disassembler == ["/opt/fake/cuobjdump", "/opt/other/nvdisasm"]


def test_a_failed_disassembly_is_not_cached(root, monkeypatch):
    outputs = iter([None, LISTING])
    monkeypatch.setattr(sass, "tool", lambda name: "/opt/fake/cuobjdump" if name == "cuobjdump" else None)
    monkeypatch.setattr(sass, "run_on_file", lambda command, data, name: next(outputs))
    assert sass.disassemble(b"\x7fELF one") is None
    assert sass.disassemble(b"\x7fELF one") == LISTING, "tried again"
    assert sass.disassemble(b"\x7fELF one") == LISTING, "then read from the cache (a third run would raise)"


def test_the_tool_identity_holds_its_version(tmp_path):
    exe = tmp_path / "cuobjdump"
    version = "cuobjdump: NVIDIA (R) CUDA cuobjdump\nCuda compilation tools, release 13.0"
    exe.write_text(f"#!/bin/sh\necho '{version}'\n")
    exe.chmod(0o755)
    assert cache.tool_identity(str(exe)) == f"{exe}\n{version}", "the release, on its second line, is in"
    assert cache.tool_identity(str(tmp_path / "missing")) == str(tmp_path / "missing")


# -- CUDA: cubins, through a stand-in CuPy (the real one: tests/test_gpu_cache.py) -------------

@pytest.fixture
def cuda_runtime(root, monkeypatch):
    """peakbench.cuda.runtime on a stand-in cupy whose NVRTC counts its compiles and makes a
    'cubin' of the options (CuPy's getCUBIN cuts the last byte; whole_elf leaves a non-ELF alone)."""
    import sys
    import types
    compiles = []
    nvrtc = types.SimpleNamespace(
        NVRTCError=RuntimeError, getVersion=lambda: (12, 8),
        createProgram=lambda source, name, headers, names: {"source": source},
        compileProgram=lambda prog, options: compiles.append(options) or prog.update(options=options),
        getProgramLog=lambda prog: "a warning", getPTX=lambda prog: b".entry k",
        getCUBIN=lambda prog: ("cubin " + " ".join(prog["options"])).encode(), destroyProgram=lambda prog: None)
    loaded = []

    class Module:
        def load(self, binary):
            loaded.append(binary)

        def get_function(self, name):
            return name

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(nvrtc=nvrtc, get_cuda_path=lambda: None,
                                      function=types.SimpleNamespace(Module=Module))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cupy.cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nvrtc", nvrtc)
    monkeypatch.delitem(sys.modules, "peakbench.cuda.runtime", raising=False)
    import peakbench.cuda
    before = getattr(peakbench.cuda, "runtime", None)
    import peakbench.cuda.runtime as runtime
    rt = runtime.CudaRuntime.__new__(runtime.CudaRuntime)
    rt.arch, rt._modules = "sm_90a", []
    yield rt, compiles, loaded
    sys.modules.pop("peakbench.cuda.runtime", None)
    if before is None:
        del peakbench.cuda.runtime
    else:
        peakbench.cuda.runtime = before


def test_a_second_nvrtc_compile_of_the_same_source_loads_the_cached_cubin(cuda_runtime):
    rt, compiles, loaded = cuda_runtime
    first = rt.compile_text("source", {"ACC": 8}, "k", 256)
    again = rt.compile_text("source", {"ACC": 8}, "k", 256)
    assert len(compiles) == 1, "NVRTC ran once"
    assert loaded == [first.binary, first.binary] and again.binary == first.binary
    assert (again.log, again.extra["ptx"], again.block) == ("a warning", ".entry k", 256)
    assert "cached" not in first.extra and again.extra["cached"] is True
    assert "-DACC=8" in compiles[0] and "-arch=sm_90a" in compiles[0]
    rt.compile_text("source", {"ACC": 4}, "k", 256)
    rt.compile_text("source edited", {"ACC": 8}, "k", 256)
    rt.compile_text("source", {"ACC": 8}, "other", 256)
    assert len(compiles) == 4, "a changed define, source or kernel name compiles again"

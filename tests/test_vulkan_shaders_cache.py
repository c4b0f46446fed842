"""The SPIR-V cache checks every entry before use: a truncated, corrupted, foreign or outdated entry
is dropped and rebuilt with one note on stderr, never handed to the driver (lavapipe crashes on
a truncated module); an unusable cache folder means compiling every time."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from helpers import record_tool_runs, run_peakbench
from peakbench import cache as store

SHADERS = [("empty.comp", {}),
           ("mem_stream.comp", {"MODE": 3, "UNROLL": 2}),
           ("alu_dot4x8.spvasm", {"ACC": 2, "WIDTH": 1, "UNROLL": 2, "SEEDS": 256, "PARAMS_OFFSET": 256,
                                   "CONSTANTS": 2})]
PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452") + bytes(84)


@pytest.fixture(scope="module")
def sh(shaders):
    return shaders[0]


@pytest.fixture(scope="module")
def pristine(sh, tmp_path_factory):
    """A cache filled by compiling SHADERS into an empty folder, and the words of each."""
    root = tmp_path_factory.mktemp("pristine")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PEAKBENCH_CACHE", str(root))
        words = [sh.compile_shader(name, settings) for name, settings in SHADERS]
    assert len(list((root / "spirv").glob("*.spv"))) == len(SHADERS)
    return root / "spirv", words


@pytest.fixture
def cache(sh, pristine, tmp_path, monkeypatch):
    """A copy of the pristine cache, in use: its entries, sorted."""
    shutil.copytree(pristine[0], tmp_path / "spirv")
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path))
    assert sh.cache_dir() == tmp_path / "spirv"
    return sorted(sh.cache_dir().glob("*.spv"))


@pytest.fixture
def counted_compiles(sh, monkeypatch):
    """The tool processes started (spirv-val once per compile)."""
    return record_tool_runs(sh, monkeypatch)


def notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if "cache entr" in line]


def unpack_entry(sh, path, data: bytes) -> bytes | None:
    """The words of an entry as compile_shader would use them, or None."""
    code = store.unpack(path, data)
    return code if code is not None and sh.spirv_shaped(code) else None


def flip_middle(data: bytes) -> bytes:
    return data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0x40]) + data[len(data) // 2 + 1:]


def wrong_magic() -> bytes:
    return b"\x00\x11\x22\x33" + os.urandom(252)


def damaged(kind: str, entry: bytes, words: bytes, other_words: bytes, other_entry: bytes) -> bytes:
    return {"truncated-100": entry[:100],
            "zero-length": b"",
            "flipped-byte": flip_middle(entry),
            "png": PNG,
            "random-words": wrong_magic(),
            "other-shaders-words": other_words,         # valid SPIR-V, the wrong module
            "other-shaders-entry": other_entry,         # a well-formed entry made for another key
            "old-format": words,                        # bare words, as older versions cached them
            }[kind]


DAMAGE = ["truncated-100", "zero-length", "flipped-byte", "png", "random-words", "other-shaders-words",
          "other-shaders-entry", "old-format"]


@pytest.mark.parametrize("kind", DAMAGE)
def test_every_damaged_entry_is_dropped_and_rebuilt_with_one_note(sh, pristine, cache, capsys,
                                                                   counted_compiles, kind):
    _, words = pristine
    entries = [path.read_bytes() for path in cache]
    own = [unpack_entry(sh, path, data) for path, data in zip(cache, entries)]
    assert sorted(own) == sorted(words)
    for i, path in enumerate(cache):
        j = (i + 1) % len(cache)
        path.write_bytes(damaged(kind, entries[i], own[i], own[j], entries[j]))
        assert unpack_entry(sh, path, path.read_bytes()) is None, "the damage is seen"

    for (name, settings), want in zip(SHADERS, words):
        got = sh.compile_shader(name, settings)
        assert got == want
        sh.validate(got, name)
    err = capsys.readouterr().err
    assert notes(err) == [f"note: dropped {len(cache)} damaged or outdated cache entries in "
                          f"{sh.cache_dir()}; rebuilding as needed"]
    assert [unpack_entry(sh, path, path.read_bytes()) for path in cache] == own, "rebuilt and re-cached"
    before = len(counted_compiles)
    for name, settings in SHADERS:
        sh.compile_shader(name, settings)
    assert len(counted_compiles) == before, "the rebuilt entries are used"


@pytest.mark.parametrize("payload", [
    pytest.param(lambda code: bytes(4) + code[4:], id="wrong-magic"),
    pytest.param(lambda code: code[:16], id="shorter-than-the-spirv-header"),
    pytest.param(lambda code: code + b"\0", id="not-whole-words"),
])
def test_a_well_formed_entry_must_hold_spirv(sh, pristine, cache, capsys, payload):
    """The header and digest can be right about bytes that are not SPIR-V: the words are checked too."""
    _, words = pristine
    path = cache[0]
    code = unpack_entry(sh, path, path.read_bytes())
    path.write_bytes(store.pack(path, payload(code)))
    assert unpack_entry(sh, path, path.read_bytes()) is None
    assert sorted(sh.compile_shader(name, settings) for name, settings in SHADERS) == sorted(words)
    assert notes(capsys.readouterr().err) == [
        f"note: dropped 1 damaged or outdated cache entry in {sh.cache_dir()}; rebuilding as needed"]


def test_the_size_in_the_header_is_checked(sh, cache):
    path = cache[0]
    data = bytearray(path.read_bytes())
    data[8:16] = (len(data)).to_bytes(8, "little")          # the size field, wrong; digest still right
    assert unpack_entry(sh, path, bytes(data)) is None
    assert unpack_entry(sh, path, path.read_bytes()) is not None


def test_a_folder_in_place_of_an_entry_is_removed_and_the_entry_rebuilt_once(sh, pristine, cache, capsys):
    """A folder where an entry should be was not written by us: it is removed (never waited on),
    the module compiled and stored, and the next run reads it from the cache again."""
    _, words = pristine
    for path in cache:
        path.unlink()
        (path / "inside").mkdir(parents=True)
    for _ in range(2):
        assert [sh.compile_shader(name, settings) for name, settings in SHADERS] == words
    assert all(path.is_file() for path in cache)
    assert notes(capsys.readouterr().err) == []


@pytest.mark.parametrize("file", ["root", "spirv"])
def test_a_cache_root_that_is_a_file_means_compiling_each_time(sh, pristine, tmp_path, monkeypatch, capsys,
                                                               counted_compiles, file):
    _, words = pristine
    root = tmp_path / "cache"
    blocker = root if file == "root" else root / "spirv"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a folder\n")
    monkeypatch.setenv("PEAKBENCH_CACHE", str(root))
    for _ in range(2):
        assert [sh.compile_shader(name, settings) for name, settings in SHADERS] == words
    assert counted_compiles.count(sh.tool("spirv-val")) == 2 * len(SHADERS), "compiled each time"
    assert blocker.read_text() == "not a folder\n"
    assert not notes(capsys.readouterr().err)


def test_an_unwritable_cache_means_compiling_each_time(sh, pristine, tmp_path, monkeypatch, capsys,
                                                       counted_compiles):
    _, words = pristine
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path))

    def denied(*args):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", denied)       # root ignores file modes: refuse the write itself
    for _ in range(2):
        assert [sh.compile_shader(name, settings) for name, settings in SHADERS] == words
    assert counted_compiles.count(sh.tool("spirv-val")) == 2 * len(SHADERS)
    assert not list((tmp_path / "spirv").iterdir()), "no entry and no temporary file left"
    assert not notes(capsys.readouterr().err)


def test_peakbench_survives_a_truncated_cache(vulkan_backend, tmp_path):
    """A truncated cache crashed lavapipe (SIGSEGV) on every later run; now it is one note."""
    args = ["--backend", "vulkan", "--quick", "--tests", "compute.fp32,memory.read"]
    env = {"PEAKBENCH_CACHE": str(tmp_path / "cache")}

    def run(out: str) -> tuple[dict, str]:
        done = run_peakbench(*args, "--json", str(tmp_path / out), env=env)
        assert done.returncode == 0, done.stderr
        doc = json.loads((tmp_path / out).read_text())
        return {r["test"]: r["status"] for run in doc["runs"] for r in run["results"]}, done.stderr

    first, err = run("first.json")
    assert first == {"compute.fp32": "ok", "memory.read": "ok"} and not notes(err)
    entries = list((tmp_path / "cache" / "spirv").glob("*.spv"))
    assert entries
    for path in entries:
        with path.open("r+b") as f:
            f.truncate(100)
    second, err = run("second.json")
    assert second == first
    assert notes(err) == [f"note: dropped {len(entries)} damaged or outdated cache entries in "
                          f"{tmp_path / 'cache' / 'spirv'}; rebuilding as needed"]

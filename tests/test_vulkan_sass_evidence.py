"""SASS evidence in the Vulkan backend: the driver's cache pointed at a folder of ours (the user's
settings respected, the folder never left behind), each pipeline matched to the records its
creation wrote (here a fake driver appends the fixture's records, as NVIDIA's does), the mixes in
evidence, and one note instead of SASS wherever it cannot be had (lavapipe, a missing tool, a
cut or foreign file, a record the driver's statistics contradict)."""
from __future__ import annotations

import importlib.util
import json
import os
import struct
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from helpers import ROOT, run_peakbench
from peakbench.backend import DeviceInfo
from peakbench.catalog import default_catalog
from peakbench.vulkan import driver_cache as dc
from peakbench.vulkan import kept
from peakbench.evidence import nvidia_cache as ns
from peakbench.evidence.sass_rules import check

FIXTURE = Path(__file__).resolve().parent / "data" / "nvidia-580.159.04-h200-glcache"
BIN = next(FIXTURE.rglob("*.bin"))
H200 = DeviceInfo(0, "NVIDIA H200", 0x10DE, 0x2335, "580.159.04", "1.4.312", "164e300d-fd88-6df3-3f78-4bea0ecf771c",
                  extra={"driver_name": "NVIDIA"})
LAVAPIPE = DeviceInfo(0, "llvmpipe", 0x10005, 0, "Mesa 22.3.6", "1.3.230", "0" * 36, "cpu",
                      extra={"driver_name": "llvmpipe"})
STATS_FP32 = {"CS": {"Register Count": 20, "Binary Size": 10112, "Stack Size": 0}}

needs_zstd = pytest.mark.skipif(importlib.util.find_spec("zstandard") is None, reason="zstandard not installed")
needs_nvdisasm = pytest.mark.skipif(ns.nvdisasm() is None, reason="nvdisasm not installed")


class FakeDriver:
    """Appends the fixture's records (0 the ELF stub, 1 fp32, 2 fp16, 3 a 16x16x16 matrix) to a
    cache folder's .bin and .toc, as NVIDIA's driver does when it makes a pipeline."""

    def __init__(self, folder):
        data, toc = BIN.read_bytes(), BIN.with_suffix(".toc").read_bytes()
        self.header = data[:32]
        self.rows = [struct.unpack_from("<16sII", toc, at) for at in range(32, len(toc), 24)]
        self.records = [data[offset:offset + 32 + size] for _, offset, size in self.rows]
        self.bin = Path(folder) / BIN.relative_to(FIXTURE)

    def write(self, *indices: int, cut: bool = False) -> None:
        """Append these records; `cut`: the last one only half written."""
        self.bin.parent.mkdir(parents=True, exist_ok=True)
        for path in (self.bin, self.bin.with_suffix(".toc")):
            if not path.exists():
                path.write_bytes(self.header)
        for n, i in enumerate(indices):
            last = n == len(indices) - 1
            record = self.records[i][:len(self.records[i]) // 2] if cut and last else self.records[i]
            offset = self.bin.stat().st_size
            with self.bin.open("ab") as f:
                f.write(record)
            with self.bin.with_suffix(".toc").open("ab") as f:
                f.write(self.rows[i][0] + struct.pack("<II", offset, self.rows[i][2]))


@pytest.fixture
def temp(tmp_path, monkeypatch):
    """tempfile's folder (where DriverCache makes its own) moved to a fresh one, and a fresh
    peakbench cache (where a closed DriverCache keeps the driver's files for the next)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path / "cache"))
    return folder


@pytest.fixture
def nvidia(temp):
    """(PipelineCode of an H200, its fake driver); the cache's settings in a dict, not os.environ."""
    cache = dc.DriverCache(environ={})
    code = dc.PipelineCode(cache, H200, "NVIDIA 580.159.04")
    yield code, FakeDriver(cache.folder)
    code.close()
    cache.close()


def make(code: dc.PipelineCode, driver: FakeDriver, writes, name: str, local: int = 256, **kw) -> dc.Code:
    """A pipeline's creation: the cache's sizes before, the driver's writes, the attribution."""
    before = code.mark()
    driver.write(*writes, **kw)
    return code.created(before, dc.fingerprint(name.encode(), local, 2, 4, 0), local)


def alu_params(test: str, variant: str) -> dict:
    t = default_catalog().get(test)
    v = next(v for v in t.variants if v.name == variant)
    return {"unroll": v.unroll, "accumulators": t.accumulators, "width": v.width}


# -- the driver's cache settings -------------------------------------------------------------

def test_the_cache_is_a_fresh_folder_of_ours_for_the_backends_life(temp):
    env = {"HOME": "/home/u"}
    cache = dc.DriverCache(environ=env)
    folder = Path(cache.folder)
    assert folder.is_dir() and folder.parent == temp and folder.name.startswith(dc.PREFIX)
    assert env == {"HOME": "/home/u", "__GL_SHADER_DISK_CACHE": "1", "__GL_SHADER_DISK_CACHE_PATH": str(folder),
                   "__GL_SHADER_DISK_CACHE_SKIP_CLEANUP": "1"}
    (folder / "GLCache").mkdir()
    cache.close()
    assert not folder.exists() and env == {"HOME": "/home/u"}
    cache.close()                   # twice is harmless


@pytest.mark.parametrize("theirs", [{"__GL_SHADER_DISK_CACHE_PATH": "/home/u/.nvcache"},
                                    {"__GL_SHADER_DISK_CACHE": "0"},
                                    {"__GL_SHADER_DISK_CACHE_SIZE": "10000000000"}])
def test_the_users_own_cache_settings_stay_in_force(temp, theirs):
    env = dict(theirs)
    cache = dc.DriverCache(environ=env)
    assert cache.folder is None and env == theirs and list(temp.iterdir()) == []
    assert cache.off == f"SASS evidence is off: the user's shader cache settings are in force ({next(iter(theirs))})"
    code = dc.PipelineCode(cache, H200, "NVIDIA 580.159.04")
    assert code.note == cache.off and code.mark() is None
    assert code.evidence(code.created(None, b"", 256), {}) == {"sass_note": cache.off}
    cache.close()
    assert env == theirs


def test_settings_a_peakbench_above_made_are_taken_over(temp):
    parent = dc.DriverCache(environ={})
    child_env = dict(parent.environ)                # what a child process inherits
    child = dc.DriverCache(environ=child_env)
    assert child.off is None and child.folder != parent.folder
    assert child_env["__GL_SHADER_DISK_CACHE_PATH"] == child.folder
    child.close()
    parent.close()
    assert list(temp.iterdir()) == []


def test_a_folder_the_driver_makes_again_after_close_goes_at_exit(temp):
    cache = dc.DriverCache(environ={})
    cache.close()
    (Path(cache.folder) / "GLCache").mkdir(parents=True)     # the driver wrote after close
    dc._remove_all()
    assert list(temp.iterdir()) == []


def test_a_process_that_never_closes_its_cache_leaves_no_folder(tmp_path):
    script = ("from peakbench.vulkan.driver_cache import DriverCache\n"
              "cache = DriverCache()\n"
              "open(cache.folder + '/x.bin', 'wb').write(b'CDVN')\n"
              "print(cache.folder)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dc.ENV)}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**env, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).parent == tmp_path and list(tmp_path.iterdir()) == []


# -- attribution ---------------------------------------------------------------------------

@needs_zstd
def test_each_pipeline_takes_the_records_its_creation_wrote(nvidia):
    code, driver = nvidia
    fp32 = make(code, driver, [0, 1], "fp32")        # the ELF stub comes with a new layout's first
    fp16 = make(code, driver, [2], "fp16")
    again = make(code, driver, [], "fp32")           # made before: the driver writes nothing
    assert (fp32.entry.index, fp16.entry.index, again.entry.index) == (1, 2, 1)
    assert (fp32.note, fp16.note, again.note) == (None, None, None)
    assert "llvm.nvvm.fma.ftz.f32" in fp32.entry.hints and "llvm.nvvm.fma.v2f16" in fp16.entry.hints
    assert again.entry is fp32.entry
    unknown = make(code, driver, [], "never made")
    assert unknown.entry is None and unknown.note == "the driver wrote no machine code for this pipeline to its cache"
    wrong = make(code, driver, [3], "a 256-invocation matrix", local=256)     # the record is for 128
    assert wrong.entry is None
    assert wrong.note == f"record 3 of {fp32.entry.file} is for a workgroup of 128x1x1, not this pipeline's 256"


@needs_zstd
@needs_nvdisasm
def test_the_evidence_holds_the_loop_the_catalog_counts(nvidia):
    code, driver = nvidia
    fp32 = make(code, driver, [0, 1], "fp32")
    mma = make(code, driver, [3], "matrix", local=128)
    evidence = code.evidence(fp32, STATS_FP32)
    sass = evidence["sass"]
    assert list(evidence) == ["sass"] and sass["instruction_mix"] == {}      # filled by finish()
    listing = code.finish(fp32)
    assert ns.loop_body(listing).count("FFMA.FTZ") == 512
    assert sass["loop_mix"]["FFMA.FTZ"] == 512 and sass["instruction_mix"]["FFMA.FTZ"] == 512
    assert len(sass["instruction_mix"]) <= dc.TOP and "mma_instruction" not in sass
    assert (sass["registers"], sass["arch"]) == (20, "SM90")
    assert sass["source"] == "NVIDIA shader disk cache (driver 580.159.04)"
    assert sass["cache_record"] == f"{fp32.entry.file} #1"
    assert check("compute.fp32", alu_params("compute.fp32", "x1u64"), sass) == (
        True, "512 FFMA x 1 lanes in the loop; the catalog: 64 unroll x 8 accumulators x 1 lanes = 512")
    assert check("compute.fp32", alu_params("compute.fp32", "x2u32"), sass)[0] is True      # 32 x 8 x 2
    assert check("compute.fp32", {**alu_params("compute.fp32", "x1u64"), "accumulators": 4}, sass)[0] is False
    assert check("compute.fp16", alu_params("compute.fp16", "x2u64"), sass)[0] is False      # no HFMA2
    matrix = code.evidence(mma, {})["sass"]
    code.finish(mma)
    assert matrix["mma_instruction"] == "HMMA.16816.F32" and matrix["registers"] == 92
    tile = {"m": 16, "n": 16, "k": 16, "unroll": 4, "accumulators": 8, "scope": "subgroup", "workgroup_size": 128}
    assert check("matrix.fp16.fp32", tile, matrix) == (
        True, "64 HMMA.16816.F32 in the loop = 131072 multiply-adds a warp; the catalog: "
              "4 unroll x 8 accumulators x 16x16x16 = 131072")
    assert check("matrix.fp16.fp32", {**tile, "accumulators": 4}, matrix)[0] is False


def test_moves_and_addresses_are_not_counted_as_the_types_arithmetic():
    params = alu_params("compute.int32", "x1u64")
    loop = {"IMAD": 512, "IMAD.MOV.U32": 3, "IMAD.WIDE.U32": 1, "IADD3": 1}
    assert check("compute.int32", params, {"loop_mix": loop}) == (
        True, "512 IMAD x 1 lanes in the loop; the catalog: 64 unroll x 8 accumulators x 1 lanes = 512")
    assert check("compute.fp16", alu_params("compute.fp16", "x2u64"), {"loop_mix": {"HFMA2": 256, "HFMA2.MMA": 256}})[0]
    assert check("compute.int16", params, {"loop_mix": loop}) == (None, "no instruction rule for int16")
    assert check("memory.write", {}, {"loop_mix": loop})[0] is None
    assert check("compute.fp32", params, {"loop_mix": {}}) == (None, "no loop body in the SASS")


@needs_zstd
@needs_nvdisasm
def test_one_disassembly_for_each_machine_code(nvidia, monkeypatch, tmp_path):
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path / "cache"))      # listings are cached across runs
    code, driver = nvidia
    calls = []
    real = ns.disassemble
    monkeypatch.setattr(ns, "disassemble", lambda c, arch: calls.append(len(c)) or real(c, arch))
    first, again = make(code, driver, [0, 1], "fp32"), make(code, driver, [], "fp32")
    a, b = code.evidence(first, {})["sass"], code.evidence(again, {})["sass"]
    code.finish(first), code.finish(again), code.finish(first)
    assert calls == [10112] and a == b and a["loop_mix"]["FFMA.FTZ"] == 512


@needs_zstd
def test_a_record_the_drivers_statistics_contradict_is_not_used(nvidia):
    code, driver = nvidia
    fp32 = make(code, driver, [0, 1], "fp32")
    file = fp32.entry.file
    evidence = code.evidence(fp32, {"CS": {"Register Count": 32, "Binary Size": 10112}})
    assert evidence == {"sass_note": f"record 1 of {file} (20 registers, 10112 bytes) is not this pipeline's code: "
                                     "the driver's statistics say 32 registers, 10112 bytes"}
    assert code.finish(fp32) == ""


@needs_zstd
def test_the_statistics_count_at_least_16_registers(nvidia, monkeypatch):
    code, driver = nvidia
    fp32 = make(code, driver, [0, 1], "fp32")
    monkeypatch.setattr(fp32, "entry", replace(fp32.entry, registers=10))       # as the write shader's
    assert "sass" in code.evidence(fp32, {"CS": {"Register Count": 16, "Binary Size": 10112}})
    other = make(code, driver, [2], "fp16")
    monkeypatch.setattr(other, "entry", replace(other.entry, registers=10))
    assert "sass_note" in code.evidence(other, {"CS": {"Register Count": 24, "Binary Size": 10112}})


@needs_zstd
def test_a_cut_record_gives_a_note_and_no_sass(nvidia):
    code, driver = nvidia
    cut = make(code, driver, [0, 1], "fp32", cut=True)
    evidence = code.evidence(cut, STATS_FP32)
    assert cut.entry is None and list(evidence) == ["sass_note"]
    assert "cut off" in evidence["sass_note"] and "\n" not in evidence["sass_note"]


@needs_zstd
def test_a_foreign_cache_file_gives_a_note_and_no_sass(nvidia):
    code, driver = nvidia
    before = code.mark()
    driver.bin.parent.mkdir(parents=True)
    driver.bin.write_bytes(bytes.fromhex("89504e470d0a1a0a") + bytes(100))
    found = code.created(before, b"x", 256)
    assert found.entry is None and found.note.endswith("not an NVIDIA shader cache file (no CDVN header)")
    assert code.evidence(found, {}) == {"sass_note": found.note}


@pytest.mark.parametrize("missing, note", [("zstandard", ns.NO_ZSTANDARD), ("nvdisasm", ns.NO_NVDISASM)])
def test_without_a_tool_every_pipeline_gets_one_note(temp, monkeypatch, missing, note):
    if missing == "zstandard":
        monkeypatch.setitem(sys.modules, "zstandard", None)      # import zstandard raises ImportError
    else:
        monkeypatch.setattr(ns, "nvdisasm", lambda: None)
    cache = dc.DriverCache(environ={})
    code = dc.PipelineCode(cache, H200, "NVIDIA 580.159.04")
    assert code.note == note and code.mark() is None
    assert code.evidence(code.created(code.mark(), b"", 256), STATS_FP32) == {"sass_note": note}
    cache.close()


@pytest.mark.parametrize("info, note", [
    (LAVAPIPE, "machine code not available: llvmpipe Mesa 22.3.6 keeps no readable shader cache"),
    (DeviceInfo(0, "NVK GH100", 0x10DE, 0x2335, "Mesa 25.0", "1.4", "0" * 36, extra={"driver_name": "NVK"}),
     "machine code not available: NVK Mesa 25.0 keeps no readable shader cache"),
    (DeviceInfo(0, "NVIDIA ???", 0x10DE, 0x1234, "580.159.04", "1.4", "0" * 36, extra={"driver_name": "NVIDIA"}),
     "no SASS architecture known for NVIDIA device 0x1234: not disassembled"),
])
def test_other_drivers_and_devices_get_a_note(temp, info, note):
    cache = dc.DriverCache(environ={})
    code = dc.PipelineCode(cache, info, f"{info.extra['driver_name']} {info.driver}")
    assert code.note == note and code.mark() is None
    cache.close()


def test_the_architecture_comes_from_the_pci_device_id():
    ids = (0x2335, 0x2330, 0x2204, 0x2484, 0x20B0, 0x2684, 0x1E04, 0x2901, 0x2B85, 0x1000)
    assert [dc.sass_arch(i) for i in ids] == ["SM90", "SM90", "SM86", "SM86", "SM80", "SM89", "SM75", "SM100",
                                              "SM120", None]
    assert all(low <= high for low, high, _ in dc.ARCHES)
    spans = sorted((low, high) for low, high, _ in dc.ARCHES)
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:])), "no device ID in two ranges"


# -- the driver's cache kept between runs ------------------------------------------------------

def a_run() -> tuple[dc.DriverCache, dc.PipelineCode, FakeDriver]:
    """One process's cache (holding what the runs before it kept), pipeline code and fake driver."""
    cache = dc.DriverCache(environ={})
    return cache, dc.PipelineCode(cache, H200, "NVIDIA 580.159.04"), FakeDriver(cache.folder)


def closed(cache: dc.DriverCache, code: dc.PipelineCode) -> None:
    code.close()
    cache.close()


def test_a_closed_cache_keeps_the_drivers_files_for_the_next_run(temp):
    cache, code, driver = a_run()
    driver.write(0, 1)
    written = {name: (Path(cache.folder) / name).read_bytes() for name in kept.files(cache.folder)}
    assert len(written) == 2 and cache.restored == {}
    closed(cache, code)
    after, code, _ = a_run()
    assert after.restored == {name: len(data) for name, data in written.items()}
    assert {name: (Path(after.folder) / name).read_bytes() for name in after.restored} == written
    closed(after, code)
    assert list(temp.iterdir()) == []


def test_the_archive_is_written_only_when_the_run_added_records(temp):
    cache, code, driver = a_run()
    driver.write(0, 1)
    closed(cache, code)
    archive = kept.cache.path(kept.KIND, kept.ARCHIVE)
    stamp = archive.stat().st_ino, archive.stat().st_mtime_ns
    again, code, _ = a_run()                    # compiled nothing new
    closed(again, code)
    assert (archive.stat().st_ino, archive.stat().st_mtime_ns) == stamp
    more, code, driver = a_run()
    driver.write(2)
    name = driver.bin.relative_to(more.folder).as_posix()
    grown = kept.files(more.folder)[name]
    closed(more, code)
    last, code, _ = a_run()
    assert last.restored[name] == grown > again.restored[name]
    closed(last, code)


@needs_zstd
def test_a_pipeline_the_driver_found_in_a_kept_cache_gets_the_record_an_earlier_run_wrote(temp):
    cache, code, driver = a_run()
    first = make(code, driver, [0, 1], "fp32")
    closed(cache, code)
    cache, code, driver = a_run()
    again = make(code, driver, [], "fp32")            # the driver found it: no record written
    assert again.earlier_run and again.note is None
    assert (again.entry.index, again.entry.key, again.entry.code) == (1, first.entry.key, first.entry.code)
    remade = make(code, driver, [], "fp32")                  # once read, kept for the process
    assert remade.entry is again.entry and remade.earlier_run
    evidence = code.evidence(again, STATS_FP32)
    assert evidence["sass"]["cache_record"] == f"{first.entry.file} #1"
    never = make(code, driver, [], "fp16")            # no run kept a record for it
    assert never.entry is None and never.note == "the driver wrote no machine code for this pipeline to its cache"
    closed(cache, code)


@needs_zstd
@needs_nvdisasm
def test_the_evidence_of_an_earlier_runs_record_says_the_binary_was_cached(temp):
    cache, code, driver = a_run()
    make(code, driver, [0, 1], "fp32")
    closed(cache, code)
    cache, code, driver = a_run()
    again = make(code, driver, [], "fp32")
    sass = code.evidence(again, STATS_FP32)["sass"]
    code.finish(again)
    assert sass["cached"] == "binary" and sass["loop_mix"]["FFMA.FTZ"] == 512
    closed(cache, code)


@needs_zstd
def test_an_earlier_runs_record_is_checked_as_a_new_one_is(temp):
    cache, code, driver = a_run()
    make(code, driver, [0, 1], "fp32")
    make(code, driver, [3], "matrix", local=128)
    closed(cache, code)
    cache, code, driver = a_run()
    fp32 = make(code, driver, [], "fp32")
    file = fp32.entry.file
    assert code.evidence(fp32, {"CS": {"Register Count": 32, "Binary Size": 10112}})["sass_note"] == (
        f"record 1 of {file} (20 registers, 10112 bytes) is not this pipeline's code: "
        "the driver's statistics say 32 registers, 10112 bytes")
    matrix = make(code, driver, [], "matrix", local=128)
    kept.remember(dc.fingerprint(b"other", 256, 2, 4, 0), code.driver, file, matrix.entry.key)
    wrong = make(code, driver, [], "other", local=256)    # a map entry naming the 128-invocation matrix
    assert wrong.entry is None and wrong.note == (f"record 2 of {file}, an earlier run's, is for a "
                                                  "workgroup of 128x1x1, not this pipeline's 256")
    kept.remember(dc.fingerprint(b"lost", 256, 2, 4, 0), code.driver, file, "00" * 16)
    lost = make(code, driver, [], "lost")
    assert lost.entry is None and lost.note == (f"the driver compiled nothing new, and record {'00' * 16} of "
                                                f"{file}, an earlier run's, is not in its cache")
    closed(cache, code)


@needs_zstd
def test_another_drivers_records_are_not_taken(temp):
    cache, code, driver = a_run()
    make(code, driver, [0, 1], "fp32")
    closed(cache, code)
    cache = dc.DriverCache(environ={})
    other = dc.PipelineCode(cache, replace(H200, driver="590.44.01"), "NVIDIA 590.44.01")
    found = make(other, FakeDriver(cache.folder), [], "fp32")
    assert found.entry is None and not found.earlier_run
    closed(cache, other)


def test_a_damaged_or_hostile_archive_costs_only_compile_time(temp, capsys):
    cache, code, driver = a_run()
    driver.write(0, 1)
    closed(cache, code)
    archive = kept.cache.path(kept.KIND, kept.ARCHIVE)
    archive.write_bytes(archive.read_bytes()[:-100])          # cut short
    cache = dc.DriverCache(environ={})
    assert cache.restored == {} and not archive.exists()
    assert "dropped 1 damaged or outdated cache entry" in capsys.readouterr().err
    cache.close()
    import io
    import tarfile
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:") as tar:
        for name, data in (("../escaped.bin", b"x"), ("/abs.bin", b"y"), ("GLCache/a/b/c.bin", b"CDVN")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    kept.cache.store(kept.KIND, kept.ARCHIVE, buffer.getvalue())
    cache = dc.DriverCache(environ={})
    assert cache.restored == {"GLCache/a/b/c.bin": 4}
    assert not (temp / "escaped.bin").exists() and not Path("/abs.bin").exists()
    cache.close()


def test_past_the_limit_only_the_files_this_run_wrote_are_kept(temp, monkeypatch):
    monkeypatch.setattr(kept, "KEEP_AT_MOST", 20_000)
    cache, code, driver = a_run()
    old = Path(cache.folder) / "GLCache" / "an-older-driver" / "0" / "1.bin"
    old.parent.mkdir(parents=True)
    old.write_bytes(b"CDVN" + bytes(14_996))
    closed(cache, code)
    cache, code, driver = a_run()
    assert set(cache.restored) == {"GLCache/an-older-driver/0/1.bin"}
    driver.write(0, 1)                          # 10450 bytes: with the old file, past 20000
    closed(cache, code)
    cache, code, _ = a_run()
    assert sorted(cache.restored) == sorted(n for n in kept.files(cache.folder) if "older" not in n)
    assert len(cache.restored) == 2 and sum(cache.restored.values()) == 10_450
    closed(cache, code)


def test_the_users_own_settings_neither_take_nor_leave_a_kept_cache(temp, monkeypatch):
    cache, code, driver = a_run()
    driver.write(0, 1)
    closed(cache, code)
    theirs = dc.DriverCache(environ={"__GL_SHADER_DISK_CACHE_PATH": "/home/u/.nvcache"})
    assert theirs.folder is None and theirs.restored == {}
    theirs.close()


# -- the backend, for real on lavapipe -------------------------------------------------------

def test_the_backend_points_the_drivers_cache_at_its_folder_until_it_closes(vulkan_backend):
    if vulkan_backend.cache.folder is None:
        pytest.skip(vulkan_backend.cache.off)
    from peakbench.vulkan.instance import VulkanBackend
    backend = VulkanBackend()
    folder = backend.cache.folder
    assert os.environ["__GL_SHADER_DISK_CACHE_PATH"] == folder and Path(folder).is_dir()
    backend.close()
    assert not Path(folder).exists() and os.environ.get("__GL_SHADER_DISK_CACHE_PATH") == vulkan_backend.cache.folder


@needs_zstd
@needs_nvdisasm
def test_pipelines_made_through_the_device_are_matched_to_their_records(vulkan_backend, temp, tmp_path, monkeypatch):
    """The device's own pipeline() on lavapipe, posing as an H200 whose driver writes the
    fixture's records: attribution, the evidence completed at discard, the listing dumped."""
    import vulkan as vk
    from peakbench.vulkan.device import VulkanDevice
    from peakbench.vulkan.runtime import VulkanRuntime
    from peakbench.vulkan.shaders import compile_shader
    cache = dc.DriverCache(environ={})
    driver = FakeDriver(cache.folder)
    writes = [[0, 1], [], []]
    real = vk.vkCreateComputePipelines

    def create(*args):
        made = real(*args)
        driver.write(*writes.pop(0))
        return made

    monkeypatch.setattr(vk, "vkCreateComputePipelines", create)
    # A real driver's statistics would (rightly) contradict the fixture's records.
    monkeypatch.setattr(VulkanDevice, "_statistics", lambda self, handle, label: {})
    monkeypatch.setenv("PEAKBENCH_DUMP_DIR", str(tmp_path / "dump"))
    info, caps = vulkan_backend._probed[0]
    rt = VulkanRuntime(VulkanDevice(vulkan_backend._physical[0], H200, caps, cache))
    try:
        empty = compile_shader("empty.comp")
        first = rt.load(empty, 256, "", "compute.fp32-x1u64")
        evidence = rt.evidence(first)
        assert evidence["sass"]["instruction_mix"] == {}
        rt.discard(first)
        assert evidence["sass"]["loop_mix"]["FFMA.FTZ"] == 512
        assert "FFMA.FTZ" in (tmp_path / "dump" / "compute.fp32-x1u64-sass.txt").read_text()
        again = rt.load(empty, 256, "", "again")           # the same pipeline: no new record
        assert rt.disassemble(again).count("FFMA.FTZ") == 512
        other = rt.load(empty, 128, "", "other")           # another workgroup size, no record
        assert rt.evidence(other) == {"sass_note": "the driver wrote no machine code for this pipeline to its cache"}
    finally:
        rt.close()
        cache.close()


@needs_zstd
@needs_nvdisasm
def test_compiling_ahead_leaves_each_pipelines_listing_done_for_the_run(vulkan_backend, temp, monkeypatch, tmp_path):
    """prefetch() from several threads at once, posing as an H200 whose driver takes a while to
    write each pipeline's record: every pipeline is matched to its own one record, disassembled
    there, and the run's pipeline then finds its listing without another nvdisasm."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor
    import vulkan as vk
    from peakbench.vulkan.device import VulkanDevice
    from peakbench.vulkan.runtime import VulkanRuntime
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path / "cache"))      # no listing from an earlier run
    cache = dc.DriverCache(environ={})
    driver = FakeDriver(cache.folder)
    made, real = [], vk.vkCreateComputePipelines

    def create(*args):
        handle = real(*args)
        time.sleep(0.05)                           # another thread's creation would land in between
        driver.write(*([0, 1] if not made else [1]))
        made.append(threading.current_thread().name)
        return handle

    monkeypatch.setattr(vk, "vkCreateComputePipelines", create)
    monkeypatch.setattr(VulkanDevice, "_statistics", lambda self, handle, label: {})
    calls, disassemble = [], ns.disassemble
    monkeypatch.setattr(ns, "disassemble", lambda c, arch: calls.append(len(c)) or disassemble(c, arch))
    info, caps = vulkan_backend._probed[0]
    rt = VulkanRuntime(VulkanDevice(vulkan_backend._physical[0], H200, caps, cache))
    try:
        layouts = ("", "b", "bb", "bbu")           # one code, four pipelines to the driver
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda args: rt.prefetch("empty.comp", {}, block=256, args=args), layouts))
        assert len(made) == 4 and len(set(made)) > 1 and calls == [10112] * 4     # a record each
        kernel = rt.compile("empty.comp", {}, block=256, args="bb", label="compute.fp32-x1u64")
        evidence = rt.evidence(kernel)
        rt.discard(kernel)
        assert len(calls) == 4 and evidence["sass"]["loop_mix"]["FFMA.FTZ"] == 512
        assert "sass_note" not in evidence
    finally:
        rt.close()
        cache.close()


def test_on_other_drivers_compiling_ahead_makes_no_pipeline(vulkan_backend, monkeypatch):
    """Where no machine code can be read (lavapipe), prefetch() stops at the SPIR-V."""
    if vulkan_backend.devices()[0].vendor_id == dc.NVIDIA:
        pytest.skip("device 0 is NVIDIA's")
    import vulkan as vk
    from peakbench.vulkan.device import VulkanDevice
    from peakbench.vulkan.runtime import VulkanRuntime
    made = []
    monkeypatch.setattr(vk, "vkCreateComputePipelines", lambda *args: made.append(args))
    info, caps = vulkan_backend._probed[0]
    rt = VulkanRuntime(VulkanDevice(vulkan_backend._physical[0], info, caps))
    try:
        rt.prefetch("empty.comp", {}, block=256, args="bb")
        assert made == []
    finally:
        rt.close()


def test_lavapipe_results_carry_the_note_and_nothing_else_changes(vulkan_backend, tmp_path):
    if vulkan_backend.devices()[0].vendor_id == dc.NVIDIA:
        pytest.skip("device 0 is NVIDIA's")
    out, temp = tmp_path / "r.json", tmp_path / "tmp"
    temp.mkdir()
    done = run_peakbench("--backend", "vulkan", "--quick", "--tests", "compute.fp32", "--json", str(out),
                         env={"TMPDIR": str(temp)})
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())["runs"][0]["results"][0]
    assert result["status"] == "ok" and "sass" not in result["evidence"]
    assert result["evidence"]["sass_note"].startswith("machine code not available: ")
    assert result["evidence"]["sass_note"].endswith(" keeps no readable shader cache")
    assert list(temp.iterdir()) == []


# -- on NVIDIA's driver ----------------------------------------------------------------------

def nvidia_run(tmp_path, *tests: str, env: dict | None = None) -> tuple[list[dict], Path]:
    out, temp = tmp_path / "r.json", tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    done = run_peakbench("--backend", "vulkan", "--quick", "--tests", ",".join(tests), "--json", str(out),
                         env={"TMPDIR": str(temp), **(env or {})}, timeout=600)
    assert done.returncode == 0, done.stderr
    run = json.loads(out.read_text())["runs"][0]
    if run["device"]["vendor_id"] != "0x10de":
        pytest.skip(f"device 0 is not NVIDIA's ({run['device']['name']})")
    return run["results"], temp


@pytest.mark.gpu
@needs_zstd
@needs_nvdisasm
def test_on_nvidia_each_compute_and_matrix_result_holds_the_work_its_catalog_counts(tmp_path):
    results, temp = nvidia_run(tmp_path, "compute.*", "matrix.fp16.*", "matrix.bf16.fp32", "matrix.int8.int32")
    ran = [r for r in results if r["status"] == "ok"]
    assert len(ran) >= 8
    for r in ran:
        evidence, test = r["evidence"], r["test"]
        assert "sass_note" not in evidence, (test, evidence.get("sass_note"))
        sass = evidence["sass"]
        assert sass["registers"] == evidence["pipeline_statistics"]["CS"]["Register Count"], test
        matches, how = check(test, r["params"], sass)
        if test.split(".")[1] in ("fp32", "fp16", "int8") or test.startswith("matrix."):
            assert matches, (test, r["params"]["variant"], how)
        if test.startswith("matrix."):
            assert sass["mma_instruction"].split(".")[0] in ("HMMA", "IMMA", "HGMMA", "IGMMA"), test
    assert list(temp.iterdir()) == []


@pytest.mark.gpu
@needs_zstd
@needs_nvdisasm
def test_on_nvidia_a_second_run_finds_the_machine_code_the_first_kept(tmp_path):
    env = {"PEAKBENCH_CACHE": str(tmp_path / "cache")}
    tests = ("compute.fp32", "matrix.fp16.fp32")
    first, _ = nvidia_run(tmp_path, *tests, env=env)
    second, temp = nvidia_run(tmp_path, *tests, env=env)
    assert [r["status"] for r in first + second] == ["ok"] * 4
    for before, after in zip(first, second):
        assert "sass_note" not in after["evidence"], after["evidence"]["sass_note"]
        was, now = before["evidence"]["sass"], after["evidence"]["sass"]
        assert "cached" not in was and now["cached"] == "binary"
        assert (now["cache_record"], now["loop_mix"], now["registers"]) == (
            was["cache_record"], was["loop_mix"], was["registers"])
        assert check(after["test"], after["params"], now)[0], after["test"]
    assert list(temp.iterdir()) == []


@pytest.mark.gpu
def test_on_nvidia_the_users_cache_settings_stay_in_force(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()                  # the driver writes only into a folder that exists
    results, temp = nvidia_run(tmp_path, "compute.fp32",
                               env={"__GL_SHADER_DISK_CACHE": "1", "__GL_SHADER_DISK_CACHE_PATH": str(theirs)})
    evidence = results[0]["evidence"]
    assert results[0]["status"] == "ok" and "sass" not in evidence
    assert evidence["sass_note"].startswith("SASS evidence is off: the user's shader cache settings are in force")
    assert list(theirs.rglob("*.bin")), "the driver wrote to the user's cache"
    assert list(temp.iterdir()) == []


# -- the sass guard: the driver's SASS against the catalog -------------------------------------

def finished(code, driver, writes, name, local=256) -> dict:
    made = make(code, driver, writes, name, local)
    sass = code.evidence(made, {})["sass"]
    code.finish(made)
    return sass


def sass_guard(test_name: str, variant_name: str, params: dict, sass: dict):
    from peakbench.harness import guards
    from peakbench.catalog import matrix as matrix_catalog
    test = default_catalog().get(test_name)
    variant = (matrix_catalog.shape(params["m"], params["n"], params["k"]) if test.family == "matrix"
               else next(v for v in test.variants if v.name == variant_name))
    return guards.sass(test, variant, params, sass)


MATRIX_TILE = {"m": 16, "n": 16, "k": 16, "unroll": 4, "accumulators": 8, "scope": "subgroup", "workgroup_size": 128}


@needs_zstd
@needs_nvdisasm
def test_the_sass_guard_passes_the_fixtures_pipelines_under_their_own_labels(nvidia):
    code, driver = nvidia
    fp32, fp16 = finished(code, driver, [0, 1], "fp32"), finished(code, driver, [2], "fp16")
    mma = finished(code, driver, [3], "matrix", local=128)
    problem, evidence = sass_guard("compute.fp32", "x1u64", alu_params("compute.fp32", "x1u64"), fp32)
    assert problem is None and evidence["loop_body"] == {"FFMA.FTZ f32": 512}
    assert evidence["ops_counted"] == evidence["ops_claimed"] == 1024
    assert evidence["source"] == "SASS (NVIDIA Vulkan driver)"
    problem, evidence = sass_guard("compute.fp16", "x2u64", alu_params("compute.fp16", "x2u64"), fp16)
    assert problem is None and evidence["ops_counted"] == 2048, evidence
    problem, evidence = sass_guard("matrix.fp16.fp32", "", MATRIX_TILE, mma)
    assert problem is None and evidence["loop_body"] == {"HMMA.16816.F32 f16.f32": 64}
    assert evidence["ops_counted"] == 4 * 8 * 2 * 16 * 16 * 16


@needs_zstd
@needs_nvdisasm
def test_the_sass_guard_fails_a_planted_mismatch(nvidia):
    code, driver = nvidia
    fp32, fp16 = finished(code, driver, [0, 1], "fp32"), finished(code, driver, [2], "fp16")
    mma = finished(code, driver, [3], "matrix", local=128)
    # the FP16 pipeline's SASS under the FP32 label: its types
    problem, _ = sass_guard("compute.fp32", "x1u64", alu_params("compute.fp32", "x1u64"), fp16)
    assert problem == "module does f16x2 arithmetic; test compute.fp32 is fp32 (f32)"
    # the catalog claiming twice the accumulators the loop holds: its work
    problem, _ = sass_guard("compute.fp32", "x1u64", {**alu_params("compute.fp32", "x1u64"), "accumulators": 16}, fp32)
    assert problem.startswith("loop body has 512 FFMA.FTZ f32 = 1024 ops, the catalog claims 2048"), problem
    # an FP16 matrix pipeline under the BF16 label, and under a tile twice as deep
    problem, _ = sass_guard("matrix.bf16.fp32", "", MATRIX_TILE, mma)
    assert problem == "module does f16.f32 arithmetic; test matrix.bf16.fp32 is bf16.fp32 (bf16.f32)"
    problem, _ = sass_guard("matrix.fp16.fp32", "", {**MATRIX_TILE, "k": 32}, mma)
    assert problem and "the catalog claims 524288" in problem, problem


def test_the_sass_guard_reads_only_what_it_has_a_rule_for():
    loop = {"loop_mix": {"IMAD": 512, "PRMT": 520}}
    assert sass_guard("compute.bf16", "dot2u32", alu_params("compute.bf16", "dot2u32"), loop) == (
        None, "not checked: no SASS rule for compute.bf16")
    assert sass_guard("compute.fp32", "x1u64", alu_params("compute.fp32", "x1u64"), {"loop_mix": {}}) == (
        None, "not checked: no loop body in the SASS")
    assert sass_guard("compute.fp32", "x1u64", alu_params("compute.fp32", "x1u64"), {"note": "nvdisasm -b SM90 failed: x"}) == (
        None, "not checked: nvdisasm -b SM90 failed: x")
    # int16 runs as IMAD on 32-bit registers (H200: 512 IMAD + 520 PRMT for x1u64): no false alarm
    problem, evidence = sass_guard("compute.int16", "x1u64", alu_params("compute.int16", "x1u64"), loop)
    assert problem is None and evidence["ops_counted"] == 1024


@pytest.mark.parametrize("op, types", [("HMMA.16816.F32", "f16.f32"), ("HMMA.16816.F16", "f16.f16"),
                                       ("HMMA.16816.F32.BF16", "bf16.f32"), ("HMMA.1688.F32.TF32", "tf32.f32"),
                                       ("IMMA.16832.S8.S8", "i8.i32"), ("IMMA.16832.U8.U8", "i8.i32"),
                                       ("QGMMA.64x256x32.F32.E4M3.E4M3", "e4m3.f32"), ("DMMA.884", "f64.f64"),
                                       ("HGMMA.64x256x16.F32.BF16", "bf16.f32")])
def test_mma_opcodes_name_their_operand_types(op, types):
    from peakbench.evidence.sass_rules import mma_types
    assert mma_types(op) == types


@needs_zstd
@needs_nvdisasm
def test_through_the_device_a_planted_mismatch_fails_with_the_sass_guards_reason(vulkan_backend, monkeypatch):
    """A compute.fp32 pipeline made on lavapipe posing as an H200 whose driver writes the FP16
    record: the SPIR-V census passes (the module is fp32), the SASS does not."""
    import inspect

    import vulkan as vk
    from peakbench.harness import session
    from peakbench.harness.runner import Settings
    from peakbench.vulkan import capabilities
    from peakbench.vulkan.device import VulkanDevice
    from peakbench.vulkan.runtime import VulkanRuntime
    from peakbench.workloads import Device
    if "guards.sass" not in inspect.getsource(session.static_guards):
        pytest.skip("session.static_guards does not call guards.sass yet")
    cache = dc.DriverCache(environ={})
    driver = FakeDriver(cache.folder)
    writes = [[0, 2]]
    real = vk.vkCreateComputePipelines
    monkeypatch.setattr(vk, "vkCreateComputePipelines", lambda *a: (real(*a), driver.write(*(writes.pop(0) if writes else [])))[0])
    monkeypatch.setattr(VulkanDevice, "_statistics", lambda self, handle, label: {})
    info, caps = vulkan_backend._probed[0]
    device = Device(VulkanRuntime(VulkanDevice(vulkan_backend._physical[0], H200, caps, cache)), capabilities.TABLE)
    test = default_catalog().get("compute.fp32")
    monkeypatch.setattr(capabilities.TABLE, "variants", lambda t, rt: t.variants[:1])
    try:
        r = session.run_test(device, test, Settings.quick(), lambda line: None)
    finally:
        device.close()
        cache.close()
    assert r.status == "failed", r
    assert r.reason == ("guard sass: variant x1u64: module does f16x2 arithmetic; test compute.fp32 is fp32 (f32)"), r.reason
    assert r.evidence["guards"]["work"]["evidence"]["source"] == "SPIR-V"

"""NVIDIA's Vulkan shader cache, decoded: the instruction mixes a probe on an H200 (driver
580.159.04) saw come out of the cache it left (FFMA.FTZ for compute.fp32, HFMA2 and HFMA2.MMA for
compute.fp16, HMMA and no HGMMA for cooperative matrices), and every damaged, cut or foreign input,
or a missing tool, gives a note instead of an exception."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import struct
import sys
import tarfile
from pathlib import Path

import pytest

from helpers import fixture, fixture_absent

from peakbench.catalog import compute
from peakbench.evidence import nvidia_cache as ns

DATA = Path(__file__).resolve().parent / "data" / "nvidia-580.159.04-h200-glcache"
FIXTURE = fixture("nvidia-580.159.04-h200-glcache.tgz")
PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452") + bytes(84)

needs_zstd = pytest.mark.skipif(importlib.util.find_spec("zstandard") is None,
                                reason="zstandard not installed (pip install zstandard)")
needs_nvdisasm = pytest.mark.skipif(ns.nvdisasm() is None,
                                    reason="nvdisasm not installed (pip install nvidia-cuda-nvdisasm)")


def cache_bin(folder: Path) -> Path:
    return next(folder.rglob("*.bin"))


def toc_rows(folder: Path) -> list[tuple[bytes, int, int]]:
    """(key, record offset, payload size) per row, read here independently of the decoder."""
    data = cache_bin(folder).with_suffix(".toc").read_bytes()
    return [struct.unpack_from("<16sII", data, at) for at in range(32, len(data), 24)]


def copy_cache(tmp_path: Path) -> Path:
    shutil.copytree(DATA, tmp_path / "cache")
    return tmp_path / "cache"


def fma_width(entry) -> int:
    """The vector width its NVVM module names: llvm.nvvm.fma.ftz.v4f32 -> 4, ...f32 -> 1."""
    op = next(h for h in entry.hints if ".fma." in h)
    m = re.search(r"\.v(\d+)f\d+$", op)
    return int(m.group(1)) if m else 1


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    if fixture_absent(FIXTURE.name):
        pytest.skip(fixture_absent(FIXTURE.name))
    root = tmp_path_factory.mktemp("glcache")
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(root, filter="data")
    return ns.decode_cache(root)


@pytest.fixture(scope="module")
def small():
    return ns.decode_cache(DATA)


@needs_zstd
@needs_nvdisasm
def test_the_full_cache_shows_what_the_probe_saw(full):
    assert full.notes == []
    kinds = [e.kind for e in full.entries]
    assert kinds == ["elf"] + ["nvvm"] * 5 + ["elf"] + ["nvvm"] * 6
    assert all(e.mix for e in full.entries if e.kind == "nvvm"), "every pipeline disassembled"
    fp32 = [e for e in full.entries if e.loop_mix.get("FFMA.FTZ") == 512]
    assert len(fp32) == 3
    fp16 = [e for e in full.entries if e.mix.get("HFMA2") == 256 and e.mix.get("HFMA2.MMA") == 257]
    assert [e.index for e in fp16] == [4, 5]          # x2u64 and x4u32
    assert all(e.loop_mix["HFMA2"] == e.loop_mix["HFMA2.MMA"] == 256 for e in fp16)
    hmma = {e.index: next(iter(e.loop_mix.items())) for e in full.entries if "nv.coopmat" in " ".join(e.hints)}
    assert hmma == {7: ("HMMA.16816.F32", 64), 8: ("HMMA.16816.F32", 32), 9: ("HMMA.1688.F32", 32),
                    10: ("HMMA.16816.F32", 256), 11: ("HMMA.16816.F32", 128), 12: ("HMMA.16816.F32", 128)}
    assert not [op for e in full.entries for op in e.mix if op.startswith("HGMMA")]


@needs_zstd
@needs_nvdisasm
def test_each_fma_loop_holds_the_fmas_the_catalog_claims_for_its_variant(full):
    """Attribution by the module's own names: the intrinsic's vector width picks the catalog variant,
    whose unroll x accumulators x width lanes must be the loop's FMA lanes (FFMA 1, HFMA2 2)."""
    tests = {t.name: t for t in compute.TESTS}
    checked = 0
    for e in full.entries:
        fma = [h for h in e.hints if ".fma." in h]
        if not fma:
            continue
        test = tests["compute.fp16" if fma[0].endswith("f16") else "compute.fp32"]
        variant = next(v for v in test.variants if v.width == fma_width(e))
        lanes = e.loop_mix.get("FFMA.FTZ", 0) + 2 * (e.loop_mix.get("HFMA2", 0) + e.loop_mix.get("HFMA2.MMA", 0))
        assert lanes == variant.unroll * test.accumulators * variant.width, (e.index, variant.name)
        checked += 1
    assert checked == 5


@needs_zstd
def test_the_container_fields_tie_entries_to_their_pipelines(full):
    by_index = {e.index: e for e in full.entries}
    assert all(e.entry_point == "main_4" for e in full.entries if e.kind == "nvvm")
    # One SPIR-V module (64x64x32 workgroup scope) specialized for 128 and 256 invocations:
    assert by_index[10].module_hash == by_index[11].module_hash != by_index[12].module_hash
    assert (by_index[10].workgroup, by_index[11].workgroup) == ((128, 1, 1), (256, 1, 1))
    assert "gl_SubgroupID" in by_index[7].hints and "gl_SubgroupID" not in by_index[10].hints
    assert "In:v4f" in by_index[3].hints and "Operands:h" in by_index[7].hints
    assert by_index[0].hints == ("bindUBO_A67D1EB3D62F78EF_0",) and not by_index[0].code


@needs_zstd
@needs_nvdisasm
def test_the_small_cache_decodes_without_the_shared_fixture(small):
    assert small.notes == []
    assert [e.kind for e in small.entries] == ["elf", "nvvm", "nvvm", "nvvm"]
    fp32, fp16, mma = small.entries[1:]
    assert fp32.loop_mix["FFMA.FTZ"] == 512 and fp32.registers == 20 and fp32.workgroup == (256, 1, 1)
    assert (fp16.mix["HFMA2"], fp16.mix["HFMA2.MMA"]) == (256, 257)
    assert mma.loop_mix["HMMA.16816.F32"] == 64
    assert len(fp32.code) % 16 == 0 and fp32.arch == "SM90"


def test_the_loop_body_runs_from_a_backward_branch_target_to_the_branch():
    listing = "\n".join([
        "        /*0000*/                   MOV R0, RZ ;",
        "        /*0010*/                   FFMA R1, R1, R2, R3 ;",        # outer loop top
        "        /*0020*/                   HFMA2 R4, R4, R5, R6 ;",       # inner loop top
        "        /*0030*/                   HFMA2 R4, R4, R5, R6 ;",
        "        /*0040*/              @!P0 BRA 0x20 ;",
        "        /*0050*/                   FFMA R1, R1, R2, R3 ;",
        "        /*0060*/               @P1 BRA 0x10 ;",
        "        /*0070*/                   BRA 0x90 ;",                   # forward: no loop
        "        /*0080*/                   EXIT ;",
        "        /*0090*/                   BRA 0x90;",                    # the trap: no loop
    ])
    assert ns.loops(listing) == [(0x20, 0x40), (0x10, 0x60)]
    assert ns.instruction_mix(ns.loop_body(listing)) == {"HFMA2": 2, "BRA": 1}
    assert ns.loop_body(listing.replace("@!P0 BRA 0x20", "NOP")).count("FFMA") == 2
    assert ns.loop_body("        /*0000*/                   EXIT ;") == ""


@needs_zstd
@pytest.mark.parametrize("where", ["header", "record-header", "first-frame", "last-frame", "last-byte"])
def test_a_cut_bin_keeps_the_records_before_the_cut(tmp_path, where):
    folder = copy_cache(tmp_path)
    path = cache_bin(folder)
    data = path.read_bytes()
    rows = toc_rows(folder)
    cut, whole = {"header": (17, 0), "record-header": (rows[1][1] + 20, 1),
                  "first-frame": (rows[1][1] + 32 + rows[1][2] // 2, 1),
                  "last-frame": (rows[3][1] + 32 + rows[3][2] // 3, 3), "last-byte": (len(data) - 1, 3)}[where]
    path.write_bytes(data[:cut])
    result = ns.decode_cache(folder, count=False)
    assert [e.key for e in result.entries] == [r[0].hex() for r in rows[:whole]]
    assert [e.kind for e in result.entries] == ["elf", "nvvm", "nvvm", "nvvm"][:whole]
    assert any("cut off" in n for n in result.notes), result.notes
    assert all("\n" not in n for n in result.notes)
    if whole:
        assert any(f"lists 4 records, the .bin holds {whole} whole ones" in n for n in result.notes)


@needs_zstd
@needs_nvdisasm
def test_entries_before_a_cut_are_still_counted(tmp_path):
    folder = copy_cache(tmp_path)
    path = cache_bin(folder)
    rows = toc_rows(folder)
    path.write_bytes(path.read_bytes()[:rows[2][1] + 100])     # inside the fp16 record
    result = ns.decode_cache(folder)
    assert [e.kind for e in result.entries] == ["elf", "nvvm"]
    assert result.entries[1].loop_mix["FFMA.FTZ"] == 512


@needs_zstd
@pytest.mark.parametrize("content, says", [
    (os.urandom(4096), "no CDVN header"), (PNG, "no CDVN header"), (b"", "no CDVN header"),
    (b"CDVN\x00\x00\x04\x00" + bytes(24), "version 0.4"),
    (b"CDVN\x00\x00\x03\x00" + bytes(24) + os.urandom(200), "no record mark"),
])
def test_a_foreign_bin_gives_a_note(tmp_path, content, says):
    (tmp_path / "x.bin").write_bytes(content)
    result = ns.decode_cache(tmp_path)
    assert result.entries == [] and any(says in n for n in result.notes), result.notes


def test_a_folder_that_is_no_cache_gives_a_note(tmp_path):
    assert ns.decode_cache(tmp_path / "absent").notes == [f"{tmp_path / 'absent'}: not a folder"]
    (tmp_path / "a.toc").write_bytes(b"CDVN")
    notes = ns.decode_cache(tmp_path).notes
    assert any("no .bin file" in n for n in notes) and any("a.toc: no .bin beside it" in n for n in notes)


def rebuild(folder: Path, change) -> list[bytes]:
    """Rewrite the cache's records with change(index, decompressed) (None keeps a record as it
    was); the .toc is rebuilt to match, so only the planted fault differs."""
    import zstandard
    path = cache_bin(folder)
    data = path.read_bytes()
    binary, toc, raws = bytearray(data[:32]), bytearray(data[:32]), []
    for i, (key, offset, size) in enumerate(toc_rows(folder)):
        record = data[offset:offset + 32 + size]
        raw = zstandard.ZstdDecompressor().decompress(record[36:])
        new = change(i, raw)
        if new is not None:
            payload = struct.pack("<I", len(new)) + zstandard.ZstdCompressor().compress(new)
            record = record[:28] + struct.pack("<I", len(payload)) + payload
        raws.append(raw if new is None else new)
        toc += key + struct.pack("<II", len(binary), len(record) - 32)
        binary += record
    path.write_bytes(binary)
    path.with_suffix(".toc").write_bytes(toc)
    return raws


def set_word(raw: bytes, index: int, value: int) -> bytes:
    return raw[:4 * index] + struct.pack("<I", value) + raw[4 * index + 4:]


@needs_zstd
@pytest.mark.parametrize("fault, says", [
    (lambda raw: set_word(raw, 19, struct.unpack_from("<I", raw, 76)[0] + 8), "whole 16-byte instructions"),
    (lambda raw: set_word(raw, 19, len(raw)), "does not fit the container"),
    (lambda raw: set_word(raw, 3, 2), "version 2"),
    (lambda raw: set_word(raw, 12, 0x200), "word 12 = 0x200"),
    (lambda raw: raw[:60], "shorter than its header"),
    (lambda raw: set_word(raw, 8, 16), "no function record"),
])
def test_a_container_field_that_does_not_check_out_is_named(tmp_path, fault, says):
    folder = copy_cache(tmp_path)
    rebuild(folder, lambda i, raw: fault(raw) if i == 1 else None)
    result = ns.decode_cache(folder, count=False)
    assert [e.kind for e in result.entries] == ["elf", "nvvm", "nvvm", "nvvm"]
    assert [n for n in result.notes if says in n and "record 1" in n], result.notes
    assert len(result.notes) == 1 and all(e.code for e in result.entries[2:])
    if "function record" not in says:
        assert result.entries[1].code == b""


@needs_zstd
def test_unknown_content_and_a_wrong_toc_give_notes(tmp_path):
    folder = copy_cache(tmp_path)
    rebuild(folder, lambda i, raw: PNG if i == 2 else None)
    toc = cache_bin(folder).with_suffix(".toc")
    rows = bytearray(toc.read_bytes())
    rows[32 + 24 * 3 + 16] ^= 1                  # the last row's offset
    toc.write_bytes(bytes(rows))
    result = ns.decode_cache(folder, count=False)
    assert [e.kind for e in result.entries] == ["elf", "nvvm", "unknown", "nvvm"]
    assert any("record 2: unrecognised content (starts 89504e47" in n for n in result.notes)
    assert any("differ from row 3 on" in n for n in result.notes), result.notes


@needs_zstd
def test_a_payload_that_is_no_zstd_frame_is_named(tmp_path):
    folder = copy_cache(tmp_path)
    path = cache_bin(folder)
    data = bytearray(path.read_bytes())
    offset = toc_rows(folder)[1][1]
    data[offset + 36:offset + 40] = b"\x89PNG"   # the frame's magic
    path.write_bytes(bytes(data))
    result = ns.decode_cache(folder, count=False)
    assert [e.kind for e in result.entries] == ["elf", "unknown", "nvvm", "nvvm"]
    assert any("record 1: payload is not a zstd frame" in n for n in result.notes)


@needs_zstd
@pytest.mark.parametrize("fault, says", [
    (lambda payload: payload[:len(payload) // 2], "complete: False"),          # a whole record, a cut frame
    (lambda payload: struct.pack("<I", 1000) + payload[4:], "zstd frame declares"),   # its size word
])
def test_a_frame_that_does_not_match_its_record_is_named(tmp_path, fault, says):
    folder = copy_cache(tmp_path)
    path = cache_bin(folder)
    data = path.read_bytes()
    _, offset, size = toc_rows(folder)[1]
    payload = fault(data[offset + 32:offset + 32 + size])
    path.write_bytes(data[:offset + 28] + struct.pack("<I", len(payload)) + payload)
    result = ns.decode_cache(folder, count=False)
    assert [e.kind for e in result.entries] == ["elf", "unknown"]
    assert [n for n in result.notes if "record 1: " in n and says in n], result.notes


@needs_zstd
def test_without_nvdisasm_the_code_comes_out_uncounted_with_a_note(monkeypatch):
    monkeypatch.setattr(ns, "nvdisasm", lambda: None)
    result = ns.decode_cache(DATA)
    assert result.notes == [ns.NO_NVDISASM] and "pip install nvidia-cuda-nvdisasm" in ns.NO_NVDISASM
    assert all(e.code and not e.mix for e in result.entries if e.kind == "nvvm")


@needs_zstd
@needs_nvdisasm
def test_code_nvdisasm_rejects_gives_a_note():
    result = ns.decode_cache(DATA, arch="SM100")       # SM90 code is not valid SM100 code
    assert [n for n in result.notes if "nvdisasm -b SM100 failed: nvdisasm error" in n]
    assert len(result.entries) == 4


def test_without_zstandard_the_cache_gives_a_note(monkeypatch):
    monkeypatch.setitem(sys.modules, "zstandard", None)     # import zstandard raises ImportError
    result = ns.decode_cache(DATA)
    assert result.entries == [] and result.notes == [ns.NO_ZSTANDARD]
    assert "pip install zstandard" in ns.NO_ZSTANDARD


def test_nvdisasm_is_found_in_nvidias_wheel_then_on_path(tmp_path, monkeypatch):
    wheel = tmp_path / "site" / "nvidia" / "cu13" / "bin"
    wheel.mkdir(parents=True)
    (wheel / "nvdisasm").write_text("#!/bin/sh\n")
    (wheel / "nvdisasm").chmod(0o755)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")])
    assert ns.nvdisasm() == str(wheel / "nvdisasm")
    monkeypatch.setattr(sys, "path", [])
    monkeypatch.setenv("PATH", str(wheel))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    assert ns.nvdisasm() == str(wheel / "nvdisasm")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert ns.nvdisasm() is None


@needs_zstd
def test_the_command_prints_one_line_per_entry(capsys, monkeypatch):
    monkeypatch.setattr(ns, "nvdisasm", lambda: None)
    assert ns.main([str(DATA)]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 4 and "wg 256x1x1" in out and "nvdisasm not found" in err
    assert ns.main(["/nonexistent"]) == 2


@needs_zstd
def test_the_records_between_two_sizes_are_the_pipelines_made_in_between(small):
    name = small.entries[0].file
    rows = toc_rows(DATA)
    made = ns.between(small.entries, {name: rows[1][1]}, {name: rows[3][1]})
    assert [e.index for e in made] == [1, 2]
    assert ns.between(small.entries, {}, ns.sizes(DATA)) == small.entries
    assert ns.sizes(DATA) == {name: cache_bin(DATA).stat().st_size}


# On the GPU: the driver's cache in a fresh folder, in a process of its own (the driver reads the
# variables when it loads), each pipeline's records found between the .bin's sizes around its creation.
ATTRIBUTE = """
import json, sys
from peakbench.evidence import nvidia_cache as ns
from peakbench.vulkan.instance import VulkanBackend
from peakbench.vulkan.shaders import compile_shader
backend = VulkanBackend()
device = backend.open(0)
made = {"vendor": device.info.vendor_id, "pipelines": []}
for glsl_type in ("float", "f16vec2", "float"):
    code = compile_shader("alu_fma.comp", {"ACC": 8, "UNROLL": 64, "T": glsl_type, "IS_FLOAT": 1, "SEEDS": 256})
    before = ns.sizes(sys.argv[1])
    device.rt.dev.pipeline(code, 2, 256, label=glsl_type)
    made["pipelines"].append((glsl_type, before, ns.sizes(sys.argv[1])))
device.close()
backend.close()
print(json.dumps(made))
"""


@pytest.mark.gpu
@needs_zstd
@needs_nvdisasm
def test_on_an_nvidia_gpu_each_pipeline_is_found_by_the_records_its_creation_wrote(tmp_path):
    import json
    import subprocess
    cache = tmp_path / "nvc"
    cache.mkdir()
    env = {**os.environ, "__GL_SHADER_DISK_CACHE": "1", "__GL_SHADER_DISK_CACHE_PATH": str(cache),
           "__GL_SHADER_DISK_CACHE_SKIP_CLEANUP": "1"}
    done = subprocess.run([sys.executable, "-c", ATTRIBUTE, str(cache)], env=env, capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout.splitlines()[-1])
    if made["vendor"] != 0x10DE:
        pytest.skip(f"device 0 is not NVIDIA's (vendor 0x{made['vendor']:04x})")
    result = ns.decode_cache(cache)
    assert result.notes == []
    (t1, b1, a1), (t2, b2, a2), (t3, b3, a3) = made["pipelines"]
    fp32 = [e for e in ns.between(result.entries, b1, a1) if e.kind == "nvvm"]
    fp16 = [e for e in ns.between(result.entries, b2, a2) if e.kind == "nvvm"]
    assert len(fp32) == len(fp16) == 1
    assert fp32[0].loop_mix.get("FFMA.FTZ", 0) + fp32[0].loop_mix.get("FFMA", 0) == 512
    assert fp16[0].loop_mix.get("HFMA2", 0) + fp16[0].loop_mix.get("HFMA2.MMA", 0) == 512
    assert a3 == b3, "a pipeline the driver already holds writes no record"


@needs_zstd
@needs_nvdisasm
def test_a_pipelines_listing_is_read_from_the_cache_the_second_time(small, tmp_path, monkeypatch):
    """driver_cache disassembles each instruction stream once per machine, not once per run."""
    from peakbench.vulkan import driver_cache as dc
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path / "cache"))
    calls = []
    real = ns.disassemble
    monkeypatch.setattr(ns, "disassemble", lambda code, arch: calls.append(arch) or real(code, arch))
    code = next(e.code for e in small.entries if e.kind == "nvvm" and e.code)
    listing, why, cached = dc._listing(code, "SM90")
    assert (why, cached) == (None, False) and "FFMA.FTZ" in listing
    assert dc._listing(code, "SM90") == (listing, None, True)
    assert calls == ["SM90"]
    assert dc._listing(code[:-16] + bytes(16), "SM90")[2] is False, "another stream is disassembled"
    listing, why, cached = dc._listing(code, "SM100")         # SM90 code is not valid SM100 code
    assert why and not cached, "another architecture is disassembled"
    dc._listing(code, "SM100")
    assert calls == ["SM90"] * 2 + ["SM100"] * 2, "a failed disassembly is not cached"

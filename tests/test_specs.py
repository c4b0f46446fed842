"""Spec files checked field by field: a bad user file is one SpecError naming the file, the GPU and
the field, before any run; `--spec FILE` for a missing file says so; unknown fields warn."""
from __future__ import annotations

import re
import tomllib

import pytest

from peakbench import specs
from peakbench.harness.levels import documented_caches
from peakbench.specs import SpecError

BASE = 'name = "My GPU"\nboost_clock_mhz = 1500\n'
PEAKS = '[gpu.peaks]\n"compute.fp32" = 10.0\n'


def spec_file(tmp_path, body: str, tables: str = PEAKS, name: str = "mine.toml"):
    path = tmp_path / name
    path.write_text(f"[[gpu]]\n{body}{tables}")
    return path


@pytest.mark.parametrize("line, field", [
    ('vendor = 5\n', "vendor must be a string"),
    ('architecture = ["RDNA 3"]\n', "architecture must be a string"),
    ('unit_name = 1\n', "unit_name must be a string"),
    ('source = 1\n', "source must be a string"),
    ('match = "My GPU"\n', "match must be a list of strings"),
    ('match = ["My GPU", ""]\n', "match must be a list of strings"),       # "" would match every device
    ('match = ["My GPU", 3]\n', "match must be a list of strings"),
    ('pci_ids = ["10de:2335"]\n', 'pci_ids must be a list of "0xVVVV:0xDDDD" strings'),
    ('pci_ids = "0x10de:0x2335"\n', "pci_ids must be a list"),
    ('units = 0\n', "units must be a positive integer"),
    ('units = 13.5\n', "units must be a positive integer"),
    ('units = "132"\n', "units must be a positive integer"),
    ('boost_clock_mhz = -1\n', "boost_clock_mhz must be a positive number"),
    ('memory_gb = "80"\n', "memory_gb must be a positive number"),
    ('memory_bandwidth_gbs = 0\n', "memory_bandwidth_gbs must be a positive number"),
    ('memory_bandwidth_gbs = nan\n', "memory_bandwidth_gbs must be a positive number"),
    ('l1_kib_per_unit = "256"\n', "l1_kib_per_unit must be a positive number"),
    ('l1_kib_per_unit = -256\n', "l1_kib_per_unit must be a positive number"),
    ('l2_mib = "50"\n', "l2_mib must be a positive number"),
    ('l2_mib = 0\n', "l2_mib must be a positive number"),
    ('l2_mib = true\n', "l2_mib must be a positive number"),
    ('l3_mib = -1\n', "l3_mib must be a number, 0 or more"),
    ('l3_mib = inf\n', "l3_mib must be a number, 0 or more"),
    ('host_link = 5\n', "host_link must be a string"),
    ('host_link = " "\n', "host_link must be a string"),
    ('host_link_gbs = "64"\n', "host_link_gbs must be a positive number"),
    ('host_link_gbs = 0\n', "host_link_gbs must be a positive number"),
    ('gpu_link = 4\n', "gpu_link must be a string"),
    ('gpu_link = ""\n', "gpu_link must be a string"),
    ('gpu_link_gbs = "450"\n', "gpu_link_gbs must be a positive number"),
    ('gpu_link_gbs = -450\n', "gpu_link_gbs must be a positive number"),
])
def test_a_bad_field_is_one_line_naming_file_gpu_and_field(tmp_path, line, field):
    body = BASE.replace("boost_clock_mhz = 1500\n", "") + line if line.startswith("boost") else BASE + line
    path = spec_file(tmp_path, body)
    with pytest.raises(SpecError) as e:
        specs.load_file(path)
    message = str(e.value)
    assert message.startswith(f"{path}: gpu 'My GPU': {field}") and "\n" not in message


@pytest.mark.parametrize("tables, field", [
    ('[gpu.peaks]\n"compute.fp32" = "10"\n', "peaks must map test names to positive numbers: 'compute.fp32' is"),
    ('[gpu.peaks]\n"compute.fp32" = 0\n', "peaks must map test names to positive numbers: 'compute.fp32' is 0"),
    ('[gpu.peaks]\n"compute.fp32" = { value = 10 }\n', "peaks must map test names to positive numbers"),
    (PEAKS + '[gpu.peak_clock_mhz]\n"matrix.fp16.fp32" = "1830"\n',
     "peak_clock_mhz must map test names to positive numbers: 'matrix.fp16.fp32' is '1830'"),
    (PEAKS + '[gpu.rates]\n"compute.fp32" = -256\n', "rates must map test names to positive numbers"),
    (PEAKS + '[gpu.sources]\n"compute.fp32" = 42\n', "sources must map field or test names to strings"),
])
def test_a_bad_table_names_the_table_and_the_entry(tmp_path, tables, field):
    path = spec_file(tmp_path, BASE, tables)
    with pytest.raises(SpecError, match=f"^{re.escape(str(path))}: gpu 'My GPU': ") as e:
        specs.load_file(path)
    assert field in str(e.value)


@pytest.mark.parametrize("text, field", [
    ('peaks = 5\n', "peaks must map test names to positive numbers, not 5"),
    ('peak_clock_mhz = [1830]\n', "peak_clock_mhz must map test names to positive numbers, not [1830]"),
    ('rates = "fast"\n', "rates must map test names to positive numbers"),
    ('sources = ["x"]\n', "sources must map field or test names to strings"),
])
def test_a_table_that_is_not_a_table(tmp_path, text, field):
    tables = "" if text.startswith("peaks") else PEAKS
    path = tmp_path / "mine.toml"
    path.write_text(f"[[gpu]]\n{BASE}{text}{tables}")
    with pytest.raises(SpecError, match=re.escape(f"gpu 'My GPU': {field}")):
        specs.load_file(path)


def test_every_problem_of_an_entry_is_named_on_the_one_line(tmp_path):
    path = spec_file(tmp_path, BASE + 'l2_mib = "50"\nunits = 0\n')
    with pytest.raises(SpecError) as e:
        specs.load_file(path)
    assert "l2_mib must be a positive number" in str(e.value) and "units must be a positive integer" in str(e.value)
    assert "\n" not in str(e.value)


def test_missing_fields_and_bad_entries(tmp_path):
    path = spec_file(tmp_path, 'name = "My GPU"\n', tables="")
    with pytest.raises(SpecError, match=f"^{re.escape(str(path))}: gpu 'My GPU' lacks boost_clock_mhz, peaks$"):
        specs.load_file(path)
    path = spec_file(tmp_path, 'boost_clock_mhz = 1500\n', name="noname.toml")
    with pytest.raises(SpecError, match=f"^{re.escape(str(path))}: gpu entry 1 lacks name$"):
        specs.load_file(path)
    path = tmp_path / "list.json"
    path.write_text('{"gpu": [5]}')
    with pytest.raises(SpecError, match="gpu entry 1 is not a table"):
        specs.load_file(path)
    path.write_text('{"gpu": [{"name": "", "boost_clock_mhz": 1, "peaks": {}}]}')
    with pytest.raises(SpecError, match="gpu entry 1: name must be a string"):
        specs.load_file(path)


def test_json_files_get_the_same_checks(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text('{"gpu": [{"name": "J", "boost_clock_mhz": 1500, "peaks": {"compute.fp32": 1}, "l2_mib": null}]}')
    message = f"^{re.escape(str(path))}: gpu 'J': l2_mib must be a positive number, not null$"
    with pytest.raises(SpecError, match=message):
        specs.load_file(path)


def test_a_full_entry_loads_and_feeds_the_code_that_reads_it(tmp_path, capsys):
    path = spec_file(tmp_path, BASE + 'vendor = "AMD"\narchitecture = "RDNA 3"\nmatch = ["my gpu"]\n'
                     'pci_ids = ["0x1002:0x744C"]\nunits = 96\nunit_name = "CU"\nmemory_gb = 24\n'
                     'memory_bandwidth_gbs = 960.0\nl1_kib_per_unit = 32\nl2_mib = 6.0\nl3_mib = 0\n'
                     'source = "https://example.com"\n',
                     PEAKS + '[gpu.rates]\n"compute.fp32" = 256\n[gpu.peak_clock_mhz]\n"compute.fp32" = 1400\n'
                     '[gpu.sources]\n"l2_mib" = "a whitepaper"\n')
    (spec,) = specs.load_file(path)
    assert capsys.readouterr().err == ""
    assert spec.peak_clock_mhz("compute.fp32") == 1400.0 and spec.peak_clock_mhz("memory.read") == 1500.0
    assert documented_caches(spec) == {"l2": 6 << 20, "l0": 32 << 10}        # RDNA's per-CU cache is L0
    assert specs.match([spec], "Radeon", 0x1002, 0x744C) is spec


def test_unknown_fields_warn_with_a_suggestion_and_are_ignored(tmp_path, capsys):
    path = spec_file(tmp_path, BASE + "l2_mb = 50\nnotes = 'my own'\n")
    (spec,) = specs.load_file(path)
    err = capsys.readouterr().err.splitlines()
    assert err == [f"peakbench: warning: {path}: gpu 'My GPU': unknown field 'l2_mb' ignored (did you mean 'l2_mib'?)",
                   f"peakbench: warning: {path}: gpu 'My GPU': unknown field 'notes' ignored"]
    assert documented_caches(spec) is None


# Fields that no database entry uses yet (none: every field the loader checks is in use).
PENDING = set()


def test_the_database_uses_exactly_the_checked_fields_and_loads_without_warnings(capsys):
    with specs.DATABASE.open("rb") as f:
        used = {key for gpu in tomllib.load(f)["gpu"] for key in gpu}
    assert used <= set(specs.FIELDS) | set(specs.TABLES)
    assert (set(specs.FIELDS) | set(specs.TABLES)) - used <= PENDING
    assert len(specs.load_database()) >= 20
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("option", ["missing.toml", "MINE.JSON", "sub/gpus", "./H200"])
def test_spec_option_naming_a_missing_file_says_so(tmp_path, monkeypatch, option):
    monkeypatch.chdir(tmp_path)
    message = f"^spec file {re.escape(option)} does not exist$"
    with pytest.raises(SpecError, match=message):
        specs.resolve(option)
    with pytest.raises(SpecError, match=message):
        specs.load_database(option)


def test_spec_option_naming_a_gpu_or_a_file(tmp_path):
    with pytest.raises(SpecError, match="no GPU named 'Voodoo 5 6000'"):
        specs.resolve("Voodoo 5 6000")
    assert specs.resolve("H200 SXM")[1].name == "NVIDIA H200 SXM"
    path = spec_file(tmp_path, BASE)
    database, forced = specs.resolve(str(path))
    assert forced.name == "My GPU" and database[0] is forced and len(database) > 20


def test_a_user_file_warns_once_when_it_is_the_forced_spec(tmp_path, capsys):
    specs.resolve(str(spec_file(tmp_path, BASE + "l2_mb = 50\n")))
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_the_host_link_gives_the_transfer_peaks_per_direction_and_both(tmp_path, capsys):
    path = spec_file(tmp_path, BASE + 'host_link = "PCIe 5.0 x16"\nhost_link_gbs = 64\n')
    (spec,) = specs.load_file(path)
    assert capsys.readouterr().err == ""
    assert spec.peak("transfer.h2d") == spec.peak("transfer.d2h") == 64.0
    assert spec.peak("transfer.bidir") == 128.0
    assert spec.peak("memory.read") is None and spec.peak("compute.fp32") == 10.0


def test_a_transfer_peak_in_the_peaks_table_wins_and_without_a_link_there_is_none(tmp_path):
    path = spec_file(tmp_path, BASE + 'host_link_gbs = 64\n', PEAKS + '"transfer.bidir" = 100\n')
    (spec,) = specs.load_file(path)
    assert spec.peak("transfer.bidir") == 100 and spec.peak("transfer.h2d") == 64.0
    (bare,) = specs.load_file(spec_file(tmp_path, BASE, name="bare.toml"))
    assert bare.peak("transfer.h2d") is None and bare.peak("transfer.p2p") is None


def test_the_gpu_link_gives_the_p2p_peak_both_ways_and_the_peaks_table_wins(tmp_path, capsys):
    (spec,) = specs.load_file(spec_file(tmp_path, BASE + 'gpu_link = "NVLink 4, 18 links"\ngpu_link_gbs = 450\n'
                                                         'host_link_gbs = 64\n'))
    assert capsys.readouterr().err == ""
    assert spec.peak("transfer.p2p") == 900.0              # its value is a bidirectional variant's
    assert spec.peak("transfer.bidir") == 128.0            # the host link stays the host link's
    (own,) = specs.load_file(spec_file(tmp_path, BASE + 'gpu_link_gbs = 450\n', PEAKS + '"transfer.p2p" = 800\n',
                                       name="own.toml"))
    assert own.peak("transfer.p2p") == 800
    (host_only,) = specs.load_file(spec_file(tmp_path, BASE + 'host_link_gbs = 64\n', name="host.toml"))
    assert host_only.peak("transfer.p2p") is None and "transfer.p2p" not in host_only.peaks_of(["transfer.p2p"])


def test_a_transfer_result_shows_percent_of_the_link(tmp_path):
    from peakbench.harness.session import with_spec
    from peakbench.report.result import Result
    (spec,) = specs.load_file(spec_file(tmp_path, BASE + 'host_link_gbs = 64\n'))
    shown = with_spec(Result("transfer.bidir", "ok", "GB/s", value=110.0, clock_mhz=1980), spec)
    assert shown.spec_value == 128.0 and shown.pct_of_spec == 85.9
    assert shown.pct_of_clock_peak is None          # a link's rate does not scale with the core clock


def test_a_gemm_test_takes_the_matrix_peak_and_clock_of_its_types(tmp_path):
    tables = ('[gpu.peaks]\n"compute.fp32" = 10.0\n"matrix.bf16.fp32" = 900\n"matrix.fp64.fp64" = 60\n'
              '"gemm.fp64.fp64" = 50\n[gpu.peak_clock_mhz]\n"matrix.bf16.fp32" = 1400\n"matrix.fp64.fp64" = 1200\n')
    (spec,) = specs.load_file(spec_file(tmp_path, BASE, tables))
    assert spec.peak("gemm.bf16.fp32") == 900 and spec.peak_clock_mhz("gemm.bf16.fp32") == 1400
    # its own entry wins, at its own clock (boost_clock_mhz where it names none)
    assert spec.peak("gemm.fp64.fp64") == 50 and spec.peak_clock_mhz("gemm.fp64.fp64") == 1500
    assert spec.peak("gemm.int8.int32") is None and spec.peak_clock_mhz("gemm.int8.int32") == 1500
    assert spec.peak("bf16.fp32") is None and spec.peak("matrix.bf16.fp32.sparse") is None


def test_a_gemm_result_shows_percent_of_the_matrix_peak_at_its_clock(tmp_path):
    from peakbench.harness.session import with_spec
    from peakbench.report.result import Result
    tables = PEAKS + '"matrix.fp16.fp32" = 1000\n[gpu.peak_clock_mhz]\n"matrix.fp16.fp32" = 1250\n'
    (spec,) = specs.load_file(spec_file(tmp_path, BASE, tables))
    shown = with_spec(Result("gemm.fp16.fp32", "ok", "TFLOPS", value=700.0, clock_mhz=1000), spec)
    assert shown.spec_value == 1000 and shown.pct_of_spec == 70.0
    assert shown.pct_of_clock_peak == 87.5          # 1000 TFLOPS at 1250 MHz is 800 at 1000 MHz


def test_peaks_of_lists_own_and_derived_peaks(tmp_path):
    tables = PEAKS + '"matrix.bf16.fp32" = 900\n'
    (spec,) = specs.load_file(spec_file(tmp_path, BASE + 'host_link_gbs = 32\n', tables))
    tests = ["compute.fp32", "gemm.bf16.fp32", "gemm.fp16.fp32", "transfer.bidir", "latency.l2"]
    assert spec.peaks_of(tests) == {"compute.fp32": 10.0, "gemm.bf16.fp32": 900, "transfer.bidir": 64.0}

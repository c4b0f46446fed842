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


def test_the_database_uses_exactly_the_checked_fields_and_loads_without_warnings(capsys):
    with specs.DATABASE.open("rb") as f:
        used = {key for gpu in tomllib.load(f)["gpu"] for key in gpu}
    assert used == set(specs.FIELDS) | set(specs.TABLES)
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

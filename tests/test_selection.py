"""peakbench.selection and the run options checked before anything runs: a kernel folder that is not
there, --sequential without --device all, --quick with --plot, and --list-tests' width."""
from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path

import pytest

from peakbench import cache
from peakbench.backend import first_line
from peakbench.vulkan import driver_cache
from test_cli import assert_usage_error, cli_main, fake  # noqa: F401  (fake is a fixture)
from helpers import ROOT


def test_a_shaders_folder_that_is_not_there_is_one_usage_line(capsys, fake, monkeypatch):
    monkeypatch.setenv("PEAKBENCH_SHADERS", "/nonexistent")
    code, out, err = cli_main(capsys, "--backend", "vulkan", "--tests", "compute.fp32")
    assert_usage_error(code, out, err, "PEAKBENCH_SHADERS=/nonexistent: no such folder")
    assert fake.loaded == []


def test_sequential_without_device_all_is_a_usage_error(capsys, fake):
    code, out, err = cli_main(capsys, "--backend", "vulkan", "--sequential", "--tests", "compute.fp32")
    assert_usage_error(code, out, err, "--sequential needs --device all")


def test_quick_with_plot_says_no_chart_will_come(capsys, fake, tmp_path):
    pytest.importorskip("matplotlib")
    code, _, err = cli_main(capsys, "--backend", "vulkan", "--quick", "--tests", "compute.fp32",
                            "--plot", str(tmp_path / "charts"))
    assert code == 0
    assert "--quick takes no size sweeps" in err and f"plot: no chart in {tmp_path / 'charts'}" in err


def test_the_test_list_fits_100_columns(capsys):
    code, out, _ = cli_main(capsys, "--list-tests")
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 100


# -- the cache and the driver's folders never block or pile up --------------------------------

def test_a_fifo_or_a_folder_in_place_of_a_cache_entry_is_removed_not_waited_on(monkeypatch, tmp_path):
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path))
    fifo, folder = cache.path("spirv", "a" * 32), cache.path("spirv", "b" * 32)
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    folder.mkdir()
    assert cache.load("spirv", "a" * 32) is None and not fifo.exists()     # a blocking open would hang here
    assert cache.load("spirv", "b" * 32) is None and not folder.exists()
    cache.store("spirv", "b" * 32, b"module")
    assert stat.S_ISREG(os.lstat(folder).st_mode) and cache.load("spirv", "b" * 32) == b"module"


def test_folders_left_by_killed_processes_are_swept(tmp_path):
    dead = 2 ** 22 + 12345                          # past pid_max's default: no such process
    stale = tmp_path / f"{driver_cache.PREFIX}{dead}-abc"
    live = tmp_path / f"{driver_cache.PREFIX}{os.getpid()}-def"
    other = tmp_path / "someone-elses"
    for f in (stale, live, other):
        f.mkdir()
    driver_cache.sweep_stale(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


def test_a_bytes_value_in_a_wrappers_message_reads_as_text():
    assert first_line(RuntimeError("failed to dlopen 'b'libamdhip64.so''")) == "failed to dlopen 'libamdhip64.so'"


def test_no_script_pipes_into_grep_q_under_pipefail():
    """`cmd | grep -q` under pipefail fails when grep exits first (SIGPIPE): setup reinstalled packages."""
    for script in [*ROOT.glob("scripts/*.sh"), *ROOT.glob("examples/**/*.sh"), ROOT / ".ci" / "run"]:
        text = script.read_text()
        code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
        if "pipefail" in text:
            assert not [line for line in code if re.search(r"\|\s*grep\s+(-\w*q|--quiet)", line)], script

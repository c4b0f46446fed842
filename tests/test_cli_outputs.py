"""Output paths (--json, --csv, --markdown): a regular file is replaced atomically and keeps its
mode, a symlink stays a link and its target is written, a FIFO or a device is written in place,
`-` is standard output, and two outputs to one file are refused before any test runs. Most runs
use the fake driver in-process; one quick lavapipe run checks what a user sees."""
from __future__ import annotations

import csv
import io
import json
import os
import stat
import threading

import pytest

from fakes import FakeWorkload
from helpers import run_peakbench
from peakbench.report.result import load_json
from test_cli import assert_usage_error, cli_main, fake  # noqa: F401  (fake is a fixture)


def run(capsys, *args: str) -> tuple[int, str, str]:
    return cli_main(capsys, "--backend", "vulkan", "--quick", "--tests", "compute.fp32,compute.int32", *args)


def listing(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def assert_refused_before_any_test(fake, code, out, err, *names):
    assert_usage_error(code, out, err, *names)
    assert "[vulkan:" not in err and fake.loaded == [], "no backend is opened, no test runs"


# -- regular files and symlinks --------------------------------------------------------------

def test_a_rewritten_file_keeps_its_permission_bits(capsys, fake, tmp_path):
    path = tmp_path / "r.json"
    path.write_text("{}")
    path.chmod(0o640)
    code, _, _ = run(capsys, "--json", str(path))
    assert code == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert len(load_json(path)["runs"][0]["results"]) == 2 and listing(tmp_path) == ["r.json"]


def test_a_new_file_gets_0666_less_the_umask(capsys, fake, tmp_path):
    old = os.umask(0o027)
    try:
        code, _, _ = run(capsys, "--csv", str(tmp_path / "r.csv"))
    finally:
        os.umask(old)
    assert code == 0 and stat.S_IMODE((tmp_path / "r.csv").stat().st_mode) == 0o640


def test_a_symlink_stays_a_link_and_its_target_is_written(capsys, fake, tmp_path):
    (tmp_path / "data").mkdir()
    target = tmp_path / "data" / "r.json"
    target.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to("data/r.json")
    code, _, _ = run(capsys, "--json", str(link))
    assert code == 0
    assert link.is_symlink() and os.readlink(link) == "data/r.json"
    assert [r["test"] for r in load_json(target)["runs"][0]["results"]] == ["compute.fp32", "compute.int32"]
    assert listing(tmp_path) == ["data", "latest.json"] and listing(tmp_path / "data") == ["r.json"]


def test_a_dangling_symlink_gets_its_target_created(capsys, fake, tmp_path):
    link = tmp_path / "r.csv"
    link.symlink_to("made.csv")
    code, _, _ = run(capsys, "--csv", str(link))
    assert code == 0 and link.is_symlink()
    rows = list(csv.DictReader(io.StringIO((tmp_path / "made.csv").read_text())))
    assert [r["test"] for r in rows] == ["compute.fp32", "compute.int32"]


def test_a_dangling_symlink_into_a_missing_folder_fails_before_any_test(capsys, fake, tmp_path):
    link = tmp_path / "r.json"
    link.symlink_to("gone/r.json")
    code, out, err = run(capsys, "--json", str(link))
    assert_refused_before_any_test(fake, code, out, err, str(link), f"folder {tmp_path / 'gone'} does not exist")


def symlink_loop(folder) -> str:
    (folder / "loop").symlink_to("loop")
    return str(folder / "loop")


@pytest.mark.parametrize("make, problem", [
    (lambda d: str(d / "absent" / "r.json"), "does not exist"),
    (lambda d: str(d), "it is a folder"),
    (symlink_loop, "symbolic links"),
], ids=["missing-folder", "folder", "symlink-loop"])
def test_an_output_that_cannot_be_written_fails_before_any_test(capsys, fake, tmp_path, make, problem):
    path = make(tmp_path)
    code, out, err = run(capsys, "--csv", path)
    assert_refused_before_any_test(fake, code, out, err, path, problem)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_output_without_permission_fails_before_any_test(capsys, fake, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o500)
    code, out, err = run(capsys, "--markdown", str(folder / "r.md"))
    assert_refused_before_any_test(fake, code, out, err, "r.md", "ermission denied")


# -- FIFOs, devices and standard output ------------------------------------------------------

class FifoReader(threading.Thread):
    """Reads a FIFO again each time its writer closes it, until finished: every time peakbench
    opens and writes it is one entry of `texts`, so writing it twice fails a test, not hangs it."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path, self.texts, self.done = path, [], threading.Event()

    def run(self):
        while not self.done.is_set():
            with open(self.path) as f:
                text = f.read()
            if text:
                self.texts.append(text)

    def finish(self):
        self.done.set()
        for _ in range(50):        # a reader waiting in open() is released by a writer that opens
            try:
                os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:        # no reader waiting (yet)
                pass
            self.join(timeout=0.1)
            if not self.is_alive():
                return


def test_a_fifo_is_written_in_place_and_stays_a_fifo(capsys, fake, tmp_path):
    fifos = {kind: tmp_path / f"r.{kind}" for kind in ("csv", "json")}
    readers = {}
    for kind, path in fifos.items():
        os.mkfifo(path)
        readers[kind] = FifoReader(path)
        readers[kind].start()
    try:
        code, _, err = run(capsys, "--csv", str(fifos["csv"]), "--json", str(fifos["json"]))
    finally:
        for reader in readers.values():
            reader.finish()
    assert code == 0, err
    assert all(stat.S_ISFIFO(os.stat(p).st_mode) for p in fifos.values())
    (csv_text,) = readers["csv"].texts
    assert [r["test"] for r in csv.DictReader(io.StringIO(csv_text))] == ["compute.fp32", "compute.int32"]
    (json_text,) = readers["json"].texts       # a FIFO gets the JSON once, at the end
    assert len(json.loads(json_text)["runs"][0]["results"]) == 2
    assert listing(tmp_path) == ["r.csv", "r.json"]


def test_dev_null_stays_a_character_device(capsys, fake):
    before = os.lstat("/dev/null")
    code, _, err = run(capsys, "--json", "/dev/null")
    assert code == 0, err
    after = os.lstat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_rdev, after.st_mode) == (before.st_rdev, before.st_mode)


def test_json_to_stdout_is_the_only_thing_on_stdout(capsys, fake):
    code, out, err = run(capsys, "--json", "-")
    assert code == 0
    doc = json.loads(out)                  # the tables went to stderr
    assert [r["test"] for r in doc["runs"][0]["results"]] == ["compute.fp32", "compute.int32"]
    assert doc["options"]["json"] == "-" and doc["interrupted"] is False
    assert "compute.fp32" in err and "TFLOPS" in err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_an_output_that_fails_at_the_end_is_one_line_and_the_others_are_written(capsys, fake, tmp_path):
    code, out, err = run(capsys, "--csv", "/dev/full", "--json", str(tmp_path / "r.json"),
                         "--markdown", str(tmp_path / "r.md"))
    assert code == 1 and "Traceback" not in err
    assert "peakbench: error: cannot write /dev/full: No space left on device" in err.splitlines()
    assert len(load_json(tmp_path / "r.json")["runs"][0]["results"]) == 2
    assert "compute.int32" in (tmp_path / "r.md").read_text() and "compute.fp32" in out


def test_a_folder_removed_during_the_run_is_one_line(capsys, fake, tmp_path):
    (tmp_path / "sub").mkdir()

    def remove_folder(test, variant):
        os.rmdir(tmp_path / "sub")
        return FakeWorkload()

    fake.devices[0].plan["compute.int32"] = remove_folder
    code, _, err = run(capsys, "--csv", str(tmp_path / "sub" / "r.csv"), "--json", str(tmp_path / "r.json"))
    assert code == 1
    assert f"peakbench: error: cannot write {tmp_path / 'sub' / 'r.csv'}: No such file or directory" in err
    assert len(load_json(tmp_path / "r.json")["runs"][0]["results"]) == 2


# -- two outputs to one file -----------------------------------------------------------------

def test_two_outputs_to_one_path_are_refused_before_any_test(capsys, fake, tmp_path):
    path = str(tmp_path / "x")
    code, out, err = run(capsys, "--json", path, "--csv", path)
    assert_refused_before_any_test(fake, code, out, err, f"--json {path} and --csv {path} are the same file")
    assert listing(tmp_path) == []


def test_two_outputs_through_a_symlink_alias_are_refused(capsys, fake, tmp_path):
    (tmp_path / "x.json").write_text("{}")
    (tmp_path / "alias").symlink_to("x.json")
    code, out, err = run(capsys, "--json", str(tmp_path / "x.json"), "--markdown", str(tmp_path / "alias"))
    assert_refused_before_any_test(fake, code, out, err, "--markdown", "are the same file")
    code, out, err = run(capsys, "--json", "-", "--csv", "/dev/stdout")
    assert_refused_before_any_test(fake, code, out, err, "--json - and --csv /dev/stdout are the same file")


def test_a_symlink_alias_is_refused_by_the_command(tmp_path):
    (tmp_path / "alias.csv").symlink_to("r.json")     # dangling: both would create r.json
    p = run_peakbench("--backend", "vulkan", "--quick", "--tests", "compute.fp32",
                      "--json", str(tmp_path / "r.json"), "--csv", str(tmp_path / "alias.csv"))
    assert_usage_error(p.returncode, p.stdout, p.stderr, "are the same file")
    assert "[vulkan:0]" not in p.stderr and listing(tmp_path) == ["alias.csv"]


# -- what a user sees, on lavapipe -----------------------------------------------------------

def test_stdout_symlink_and_dangling_link_in_one_real_run(vulkan_backend, tmp_path):
    target = tmp_path / "kept.csv"
    target.write_text("old\n")
    target.chmod(0o640)
    (tmp_path / "r.csv").symlink_to("kept.csv")
    (tmp_path / "r.md").symlink_to("made.md")
    p = run_peakbench("--backend", "vulkan", "--quick", "--tests", "launch.overhead", "--json", "-",
                      "--csv", str(tmp_path / "r.csv"), "--markdown", str(tmp_path / "r.md"))
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["runs"][0]["results"][0]["test"] == "launch.overhead" and doc["options"]["json"] == "-"
    assert "launch.overhead" in p.stderr.split("[vulkan:0] launch.overhead ...")[1]    # the table, on stderr
    assert (tmp_path / "r.csv").is_symlink() and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert "launch.overhead" in target.read_text() and (tmp_path / "r.md").is_symlink()
    assert "launch.overhead" in (tmp_path / "made.md").read_text()
    assert listing(tmp_path) == ["kept.csv", "made.md", "r.csv", "r.md"]


def test_saves_during_a_run_are_compact_convert_each_result_once_and_the_last_is_indented(tmp_path, monkeypatch):
    from peakbench.harness.session import Session
    from peakbench.report import result as rr
    out = rr.check_writable(tmp_path / "r.json")
    session = Session(rr.new_document(), {"--json": out}, lambda line: None)
    run = rr.Run("vulkan", {"name": "Test GPU"}, None)
    session.runs.append(run)
    converted, real = [], rr.asdict
    monkeypatch.setattr(rr, "asdict", lambda obj: converted.append(obj.test) or real(obj))
    for i in range(3):
        v = float(i + 1)
        run.results.append(rr.Result(f"memory.t{i}", "ok", "GB/s", value=v,
                                     stats={"median": v, "min": v, "max": v, "samples": 1, "spread_pct": 0.0}))
        session.save()
        text = (tmp_path / "r.json").read_text()
        assert text.count("\n") == 1 and [r["value"] for r in json.loads(text)["runs"][0]["results"]] == \
            [float(k + 1) for k in range(i + 1)]
    session.write_outputs(io.StringIO(), None)
    text = (tmp_path / "r.json").read_text()
    assert text.count("\n") > 20 and load_json(tmp_path / "r.json")["runs"][0]["results"][2]["test"] == "memory.t2"
    assert converted == ["memory.t0", "memory.t1", "memory.t2"]          # each row once, however many saves


# -- paths that are not what they look like --------------------------------------------------

@pytest.mark.parametrize("name", ["newdir/", "keep.json/"])
def test_a_trailing_slash_names_a_folder_and_writes_no_file(capsys, fake, tmp_path, name):
    keep = tmp_path / "keep.json"
    keep.write_text("precious")
    code, out, err = run(capsys, "--json", f"{tmp_path}/{name}")
    assert_refused_before_any_test(fake, code, out, err, name, "no such folder")
    assert keep.read_text() == "precious" and listing(tmp_path) == ["keep.json"]


def test_a_trailing_slash_on_an_existing_folder_is_refused(capsys, fake, tmp_path):
    code, out, err = run(capsys, "--csv", f"{tmp_path}/")
    assert_refused_before_any_test(fake, code, out, err, "it is a folder")


def test_a_file_descriptor_past_any_limit_is_one_line(capsys, fake):
    code, out, err = run(capsys, "--json", "/dev/fd/99999999999999999999")
    assert_refused_before_any_test(fake, code, out, err, "is not open")


def test_an_output_may_not_replace_the_spec_file_it_reads(capsys, fake, tmp_path):
    spec = tmp_path / "mine.toml"
    spec.write_text('[[gpu]]\nname = "Mine"\nboost_clock_mhz = 1000\n[gpu.peaks]\n"compute.fp32" = 1\n')
    before = spec.read_text()
    code, out, err = run(capsys, "--spec", str(spec), "--json", str(spec))
    assert_refused_before_any_test(fake, code, out, err, "the --spec file", "may not replace an input")
    assert spec.read_text() == before


def test_a_fifo_without_a_reader_is_given_up_after_the_other_outputs(capsys, fake, tmp_path, monkeypatch):
    from peakbench.report import result
    monkeypatch.setattr(result, "FIFO_WAIT_S", 0.3)
    fifo, csv_path = tmp_path / "r.json", tmp_path / "r.csv"
    os.mkfifo(fifo)
    done = threading.Event()
    outcome = {}

    def go():
        outcome["run"] = run(capsys, "--json", str(fifo), "--csv", str(csv_path))
        done.set()
    worker = threading.Thread(target=go, daemon=True)
    worker.start()
    assert done.wait(30), "a FIFO with no reader must not hold the run"
    code, out, err = outcome["run"]
    assert code == 1
    assert [line for line in err.splitlines() if "error" in line] == [
        f"peakbench: error: cannot write {fifo}: no process read the FIFO within 0.3 s; gave it up"]
    assert [r["test"] for r in csv.DictReader(io.StringIO(csv_path.read_text()))] == ["compute.fp32", "compute.int32"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and "compute.fp32" in out


def test_a_value_json_cannot_hold_is_written_as_null(tmp_path):
    from peakbench.report.result import dumps
    text = dumps({"value": float("nan"), "stats": {"spread_pct": float("inf")}, "samples": [1.0, float("-inf")]})
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"value": None, "stats": {"spread_pct": None}, "samples": [1.0, None]}

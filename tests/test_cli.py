"""The command line: exit codes and one-line errors, the formats it writes, and a real quick run on
the Vulkan device (lavapipe here). Most runs use the fake driver through a patched backend loader,
so they take milliseconds; the subprocess runs check what a user actually sees."""
from __future__ import annotations

import csv
import io
import json
import re

import pytest

from fakes import FakeBackend, FakeDevice, FakeWorkload, fake_info
from helpers import run_peakbench
from peakbench import cli
from peakbench.backend import BackendUnavailable
from peakbench.harness import session
from peakbench.harness.runner import Settings
from peakbench.report.result import SCHEMA, ResultFileError, load_json, new_document, save_json, unfinished

RESULT_FIELDS = {"test", "status", "value", "unit", "spec_value", "pct_of_spec", "reason", "stats",
                 "clock_mhz", "params", "evidence", "series"}
STATS_FIELDS = {"median", "min", "max", "samples", "spread_pct"}
DEVICE_FIELDS = {"index", "name", "vendor_id", "device_id", "driver", "api", "uuid"}


def cli_main(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_usage_error(code: int, out: str, err: str, *names: str) -> None:
    assert code == 2
    assert "Traceback" not in err and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("peakbench: error: "), err
    for name in names:
        assert name in lines[0]


# -- the fake driver behind the CLI ----------------------------------------------------------

class TinySettings(Settings):
    @classmethod
    def quick(cls) -> Settings:
        return Settings(sample_s=1e-3, warmup_s=0.0, min_samples=3, max_samples=4, budget_s=0.5)


@pytest.fixture
def fake(monkeypatch):
    """Replace the backend loader: `fake.devices` are what `vulkan` opens; loading any other backend
    is unavailable. `fake.loaded` lists the backends asked for."""
    state = type("State", (), {})()
    state.devices = [FakeDevice(unsupported={"compute.int4": "[api] no 4-bit integer type"}, clock_mhz=1980.0)]
    state.loaded, state.backends = [], []

    def load(name):
        state.loaded.append(name)
        if name != "vulkan":
            raise BackendUnavailable(f"{name} backend: not installed here")
        backend = FakeBackend(state.devices)
        state.backends.append(backend)
        return backend

    monkeypatch.setattr(cli, "load", load)
    monkeypatch.setattr(cli, "Settings", TinySettings)
    return state


@pytest.fixture
def files(tmp_path):
    return {k: tmp_path / f"result.{k}" for k in ("json", "csv", "md")}


def run_fake(capsys, files, *args):
    return cli_main(capsys, "--backend", "vulkan", "--quick", "--json", str(files["json"]),
                    "--csv", str(files["csv"]), "--markdown", str(files["md"]), *args)


def test_fake_run_reports_ok_failed_and_unsupported(capsys, fake, files):
    fake.devices[0].plan["compute.int8"] = lambda t, v: FakeWorkload(problem="2 of 512 values differ")
    code, out, err = run_fake(capsys, files, "--tests", "compute.fp32,compute.int8,compute.int4",
                              "--spec", "NVIDIA H200 SXM")
    assert code == 1, "a failed test makes the exit status 1"
    doc = load_json(files["json"])
    (run,) = doc["runs"]
    by_test = {r["test"]: r for r in run["results"]}
    assert list(by_test) == ["compute.fp32", "compute.int8", "compute.int4"]      # catalog order
    fp32, int8, int4 = by_test.values()
    assert fp32["status"] == "ok" and fp32["value"] == pytest.approx(4.0)         # widest variant wins
    assert fp32["spec_value"] == 66.9 and fp32["pct_of_spec"] == round(400 / 66.9, 1)
    assert fp32["pct_of_clock_peak"] == fp32["pct_of_spec"]                       # measured at 1980 MHz
    assert int8["status"] == "failed" and int8["reason"] == "variant x1u64: 2 of 512 values differ"
    assert int4["status"] == "unsupported" and int4["reason"] == "[api] no 4-bit integer type"
    assert run["spec"]["name"] == "NVIDIA H200 SXM"
    # The same rows in every format.
    rows = list(csv.DictReader(io.StringIO(files["csv"].read_text())))
    assert [(r["test"], r["status"]) for r in rows] == [("compute.fp32", "ok"), ("compute.int8", "failed"),
                                                        ("compute.int4", "unsupported")]
    assert float(rows[0]["value"]) == fp32["value"] and rows[0]["device"] == "Fake GPU 9000"
    md = files["md"].read_text()
    assert "Fake GPU 9000" in md and re.search(r"\| compute\.int8 .*failed: variant x1u64", md)
    assert "compute.fp32" in out and "unsupported: [api] no 4-bit integer type" in out
    assert "compute.int8: failed: variant x1u64" in err
    assert fake.devices[0].closed and all(b.closed for b in fake.backends)


def test_json_is_written_after_each_test(capsys, fake, files):
    seen = []

    def snapshot(test, variant):
        seen.append(load_json(files["json"]))      # the file as it is while the second test starts
        return FakeWorkload()

    fake.devices[0].plan["compute.int32"] = snapshot
    code, _, _ = run_fake(capsys, files, "--tests", "compute.fp32,compute.int32")
    assert code == 0
    assert [r["test"] for r in seen[0]["runs"][0]["results"]] == ["compute.fp32"]
    assert [r["test"] for r in load_json(files["json"])["runs"][0]["results"]] == ["compute.fp32", "compute.int32"]
    assert sorted(p.name for p in files["json"].parent.iterdir()) == ["result.csv", "result.json", "result.md"]


def test_interrupt_keeps_what_was_measured(capsys, fake, files):
    def interrupt(test, variant):
        raise KeyboardInterrupt

    fake.devices[0].plan["compute.int32"] = interrupt
    code, out, err = run_fake(capsys, files, "--tests", "compute.fp32,compute.int32,compute.int16")
    assert code == 130 and "interrupted (SIGINT)" in err and "Traceback" not in err
    doc = load_json(files["json"])
    assert doc["interrupted"] is True
    assert [(r["test"], r["status"]) for r in doc["runs"][0]["results"]] == [("compute.fp32", "ok")]
    assert "compute.fp32" in out and "compute.fp32" in files["csv"].read_text()
    assert fake.devices[0].closed


def test_the_document_records_the_options_and_that_it_was_not_interrupted(capsys, fake, files):
    code, _, _ = run_fake(capsys, files, "--tests", "compute.fp32", "--spec", "NVIDIA H200 SXM")
    assert code == 0
    doc = load_json(files["json"])
    assert doc["options"] == {"backend": "vulkan", "device": "0", "sequential": False, "alone_first": False, "tests": "compute.fp32", "quick": True,
                              "profile": None, "duration": None,
                              "json": str(files["json"]), "csv": str(files["csv"]),
                              "markdown": str(files["md"]), "prometheus": None, "history": None, "plot": None, "html": None,
                              "spec": "NVIDIA H200 SXM"}
    assert doc["interrupted"] is False and doc["peakbench_version"]


def test_results_without_options_or_interrupted_still_load(tmp_path):
    doc = new_document()
    del doc["options"], doc["interrupted"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    assert load_json(path)["runs"] == []
    path.write_text(json.dumps({**doc, "interrupted": "yes"}))
    with pytest.raises(ResultFileError, match="'interrupted' must be true or false"):
        load_json(path)


def test_an_unexpected_error_mid_run_keeps_the_results(capsys, fake, files, monkeypatch):
    real_run_test = session.run_test

    def run_test(device, test, *args):
        if test.name == "compute.int32":
            raise RuntimeError("harness bug")     # escapes the harness, unlike a failed test
        return real_run_test(device, test, *args)

    monkeypatch.setattr(session, "run_test", run_test)
    code, out, err = run_fake(capsys, files, "--tests", "compute.fp32,compute.int32")
    assert code == 1 and "Traceback" not in err
    assert "peakbench: error: RuntimeError: harness bug" in err.splitlines()
    assert [r["test"] for r in load_json(files["json"])["runs"][0]["results"]] == ["compute.fp32"]
    assert "compute.fp32" in out and "compute.fp32" in files["md"].read_text()
    assert fake.devices[0].closed and all(b.closed for b in fake.backends)


def test_error_text_never_shows_python_bytes(capsys, fake, files, monkeypatch):
    from peakbench.backend import error_text

    def broken_open(self, index):
        raise RuntimeError(b"VK_ERROR_INITIALIZATION_FAILED: no queue")     # as a C library hands it over

    monkeypatch.setattr(FakeBackend, "open", broken_open)
    code, _, err = run_fake(capsys, files, "--tests", "compute.fp32")
    assert code == 1
    assert "cannot open the device: RuntimeError: VK_ERROR_INITIALIZATION_FAILED: no queue" in err
    assert "b'" not in err and "b'" not in files["json"].read_text()
    assert error_text(FileNotFoundError(2, "No such file or directory", b"/opt/rocm/lib/x.so")) == \
        "No such file or directory: /opt/rocm/lib/x.so"
    assert error_text(ValueError(b"\xffbad", 3)) == "\ufffdbad, 3"
    decode = UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
    assert error_text(decode) == str(decode)      # its own message names the byte, not b'...'


def test_all_devices_and_missing_backends_of_all(capsys, fake, files):
    fake.devices.append(FakeDevice(info=fake_info(1, "Fake GPU 2")))
    code, _, err = cli_main(capsys, "--backend", "all", "--device", "all", "--sequential", "--quick", "--tests", "compute.fp32",
                            "--json", str(files["json"]))
    assert code == 0
    assert fake.loaded == ["vulkan", "cuda", "rocm"]
    assert "note: cuda backend: not installed here" in err
    runs = load_json(files["json"])["runs"]
    assert [r["device"]["name"] for r in runs] == ["Fake GPU 9000", "Fake GPU 2"]
    assert set(runs[0]["device"]) >= DEVICE_FIELDS
    assert runs[0]["spec"] is None and runs[0]["results"][0]["pct_of_spec"] is None


# -- usage errors: exit 2, one line, no traceback --------------------------------------------

@pytest.fixture
def bad_files(tmp_path):
    (tmp_path / "bad.toml").write_text("[[gpu]\nname = 'unterminated\n")
    (tmp_path / "other.json").write_text(json.dumps({"schema": "someone.else/2", "runs": []}))
    (tmp_path / "garbage.json").write_text("{not json")
    return tmp_path


@pytest.mark.parametrize("args, names", [
    (["--backend", "nosuch"], ["nosuch"]),
    (["--backend", "vulkan,metal"], ["metal"]),
    (["--tests", "nomatch.*"], ["nomatch.*"]),
    (["--tests", "compute.fp32,nomatch*"], ["'nomatch*' matches no test"]),
    (["--tests", "zz*,compute.fp32,yy"], ["'zz*', 'yy' match no test"]),
    (["--json", "/nonexistent/dir/x.json"], ["/nonexistent/dir/x.json"]),
    (["--csv", "/nonexistent/dir/x.csv"], ["/nonexistent/dir/x.csv"]),
    (["--spec", "{dir}/bad.toml"], ["bad.toml"]),
    (["--spec", "Voodoo 5 6000"], ["Voodoo 5 6000"]),
    (["--no-such-option"], ["--no-such-option"]),
    (["compare", "{dir}/other.json"], ["other.json", "peakbench result"]),
    (["compare", "{dir}/garbage.json"], ["garbage.json"]),
    (["compare", "{dir}/absent.json"], ["absent.json"]),
    (["compare"], []),
    (["specs", "Voodoo"], ["Voodoo"]),
    (["specs", "H200"], ["ambiguous"]),
])
def test_usage_errors_before_any_device_work(capsys, fake, bad_files, args, names):
    args = [a.format(dir=bad_files) for a in args]
    code, out, err = cli_main(capsys, *args)
    assert_usage_error(code, out, err, *names)
    assert fake.loaded == [], "no backend is opened for a usage error"


def test_a_named_backend_that_is_unavailable_is_an_error(capsys, fake):
    code, out, err = cli_main(capsys, "--backend", "vulkan,cuda", "--tests", "compute.fp32")
    assert_usage_error(code, out, err, "cuda backend: not installed here")
    assert all(b.closed for b in fake.backends)


@pytest.mark.parametrize("device, names", [("99", ["no device 99", "vulkan"]), ("first", ["first"])])
def test_bad_device_is_an_error(capsys, fake, device, names):
    code, out, err = cli_main(capsys, "--backend", "vulkan", "--device", device, "--tests", "compute.fp32")
    assert_usage_error(code, out, err, *names)
    assert fake.devices[0].prepared == [] and all(b.closed for b in fake.backends)


def test_unknown_backend_in_a_subprocess():
    p = run_peakbench("--backend", "nosuch", "--tests", "compute.fp32")
    assert_usage_error(p.returncode, p.stdout, p.stderr, "nosuch")


def test_no_such_vulkan_device_in_a_subprocess(vulkan_backend):
    p = run_peakbench("--backend", "vulkan", "--device", "99", "--tests", "compute.fp32")
    assert_usage_error(p.returncode, p.stdout, p.stderr, "no device 99")


# -- listings --------------------------------------------------------------------------------

def test_list_tests(capsys):
    code, out, _ = cli_main(capsys, "--list-tests")
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()[2:] if line.strip()]
    assert names[:2] == ["compute.fp64", "compute.fp32"] and "compute.int4" in names
    assert re.search(r"^compute\.fp32\s+TFLOPS\s+x1u64", out, re.M)


def test_list_devices(capsys, vulkan_backend):
    code, out, _ = cli_main(capsys, "--list-devices", "--backend", "vulkan")
    assert code == 0 and out.startswith("vulkan:")
    assert vulkan_backend.devices()[0].name in out


def test_specs_lists_the_database(capsys):
    code, out, _ = cli_main(capsys, "specs")
    assert code == 0
    assert re.search(r"^NVIDIA H200 SXM\s+132\s+1980\s+66\.9\s+989\.4\s+4800", out, re.M)


def test_specs_shows_one_gpu(capsys):
    code, out, _ = cli_main(capsys, "specs", "H200 SXM")
    assert code == 0
    assert out.startswith("NVIDIA H200 SXM  (boost 1980 MHz)")
    assert re.search(r"^compute\.fp32\s+66\.9$", out, re.M)
    assert re.search(r"^matrix\.fp16\.fp32\s+989\.4$", out, re.M)
    assert "source: https://" in out


def test_specs_with_a_user_file(capsys, tmp_path):
    user = tmp_path / "mine.toml"
    user.write_text('[[gpu]]\nname = "My Test GPU"\nboost_clock_mhz = 1000\n[gpu.peaks]\n"compute.fp32" = 12.5\n')
    code, out, _ = cli_main(capsys, "specs", "--spec", str(user), "My Test GPU")
    assert code == 0 and re.search(r"^compute\.fp32\s+12\.5$", out, re.M)


# -- result files ----------------------------------------------------------------------------

def test_save_json_is_atomic_and_leaves_no_temporary_files(tmp_path):
    doc = new_document()
    path = tmp_path / "r.json"
    save_json(path, doc)
    doc["runs"] = [{"backend": "vulkan", "device": {"name": "Test GPU"}, "spec": None, "results": []}]
    save_json(path, doc)
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    assert load_json(path) == doc


def test_save_json_failure_cleans_up(tmp_path):
    (tmp_path / "taken").mkdir()                  # a folder where the file should go: rename fails
    with pytest.raises(ResultFileError, match="cannot write"):
        save_json(tmp_path / "taken", new_document())
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]


def test_new_document_header():
    doc = new_document()
    assert doc["schema"] == SCHEMA == "peakbench.result/1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["created"])
    assert set(doc["host"]) == {"hostname", "os", "python"} and doc["runs"] == []


# -- a real quick run on the Vulkan device ---------------------------------------------------

@pytest.fixture(scope="module")
def quick_run(vulkan_backend, tmp_path_factory):
    folder = tmp_path_factory.mktemp("quick")
    paths = {k: folder / f"r.{k}" for k in ("json", "csv", "md")}
    p = run_peakbench("--backend", "vulkan", "--quick", "--tests", "compute.fp32,compute.int4",
                      "--json", str(paths["json"]), "--csv", str(paths["csv"]), "--markdown", str(paths["md"]))
    return p, paths


def test_quick_run_exits_0_and_writes_the_design_json(quick_run):
    p, paths = quick_run
    assert p.returncode == 0, p.stderr
    doc = load_json(paths["json"])
    assert doc["schema"] == "peakbench.result/1" and doc["peakbench_version"]
    assert (doc["complete"], doc["interrupted"]) == (True, False)
    (run,) = doc["runs"]
    assert run["backend"] == "vulkan" and set(run["device"]) >= DEVICE_FIELDS
    fp32, int4 = run["results"]
    for r in (fp32, int4):
        assert set(r) >= RESULT_FIELDS
    assert (fp32["test"], fp32["status"], fp32["unit"], fp32["reason"]) == ("compute.fp32", "ok", "TFLOPS", None)
    assert fp32["value"] > 0 and set(fp32["stats"]) == STATS_FIELDS
    s = fp32["stats"]
    assert s["min"] <= s["median"] <= s["max"] and s["samples"] >= Settings.quick().min_samples
    # value is rounded to 4 decimals, the stats to 4 significant digits (lavapipe: ~0.05 TFLOPS)
    assert fp32["value"] == pytest.approx(s["median"], rel=1e-3, abs=5e-5)
    assert fp32["params"]["variant"] in fp32["params"]["variants"] and fp32["params"]["size"] >= 1
    assert (int4["test"], int4["status"], int4["value"]) == ("compute.int4", "unsupported", None)
    assert int4["reason"].startswith("[api] ")
    assert sorted(p.name for p in paths["json"].parent.iterdir()) == ["r.csv", "r.json", "r.md"]


def test_quick_run_tables(quick_run):
    p, paths = quick_run
    assert "compute.fp32" in p.stdout and "unsupported: [api]" in p.stdout and "Traceback" not in p.stderr
    assert "[vulkan:0] compute.fp32 ..." in p.stderr          # progress goes to stderr
    rows = list(csv.DictReader(io.StringIO(paths["csv"].read_text())))
    assert [r["test"] for r in rows] == ["compute.fp32", "compute.int4"]
    assert "| compute.fp32" in paths["md"].read_text()


def test_compare_fails_a_record_that_did_not_finish(quick_run, capsys, tmp_path):
    _, paths = quick_run
    doc = json.loads(paths["json"].read_text())
    doc["complete"] = False                          # as a killed run leaves it
    cut = tmp_path / "killed.json"
    cut.write_text(json.dumps(doc))
    code, out, err = cli_main(capsys, "compare", str(paths["json"]), str(cut))
    assert code == 1 and "compute.fp32" in out
    assert err.strip() == f"peakbench compare: {cut}: failed: {unfinished(doc)}"


def test_compare_refuses_a_path_with_a_trailing_slash(quick_run, capsys):
    _, paths = quick_run
    code, out, err = cli_main(capsys, "compare", str(paths["json"]), f"{paths['json']}/")
    assert_usage_error(code, out, err, "names a folder")


def test_compare_a_result_with_itself(quick_run, capsys):
    _, paths = quick_run
    code, out, _ = cli_main(capsys, "compare", str(paths["json"]), str(paths["json"]))
    assert code == 0
    fp32 = next(line for line in out.splitlines() if line.startswith("compute.fp32"))
    int4 = next(line for line in out.splitlines() if line.startswith("compute.int4"))
    assert fp32.rstrip().endswith("1.00x same")
    assert "unsupported" in int4 and "x" not in int4.split("unsupported")[-1]


def test_plot_writes_latency_and_bandwidth_charts(tmp_path):
    pytest.importorskip("matplotlib")
    from peakbench.report import plots
    series = {"working_set_bytes": [4096, 8192, 16384], "ns": [20.0, 20.5, 300.0], "GB/s": [900.0, 850.0, 40.0]}
    run = {"backend": "vulkan", "device": {"name": "Test GPU", "driver": "1.0"}, "results": [
        {"test": "memory.read", "status": "ok", "value": 40.0, "series": series},
        {"test": "latency.l1", "status": "ok", "value": 20.2, "series": series},
        {"test": "latency.dram", "status": "ok", "value": 300.0, "series": series}]}
    files = plots.write([run], tmp_path / "charts")
    assert sorted(f.name for f in files) == ["vulkan0-test-gpu-bandwidth.png", "vulkan0-test-gpu-latency.png"]
    assert all(f.read_bytes().startswith(b"\x89PNG") and f.stat().st_size > 5000 for f in files)


def test_each_latency_level_gets_the_read_rate_over_its_working_sets():
    from peakbench.report import plots
    sweep = {"working_set_bytes": [4096 << i for i in range(6)], "GB/s": [900.0, 910.0, 300.0, 120.0, 100.0, 90.0]}
    by_test = {"memory.read": {"status": "ok", "series": sweep},
               "latency.l1": {"status": "ok", "params": {"working_sets_bytes": [4096, 8192]}},
               "latency.l2": {"status": "unsupported", "params": {}},
               "latency.dram": {"status": "ok", "params": {"working_sets_bytes": [32768, 131072]}}}
    assert plots.level_bandwidths(by_test) == [("L1", 4096, 8192, 905.0), ("DRAM", 32768, 131072, 100.0)]
    assert plots.level_bandwidths({"latency.l1": by_test["latency.l1"]}) == []     # no read sweep


@pytest.fixture
def plots_here(monkeypatch):
    """Plotting available whether or not matplotlib is installed; `calls` lists write's folders."""
    from peakbench.report import plots
    calls = []
    monkeypatch.setattr(plots, "available", lambda: None)
    monkeypatch.setattr(plots, "write", lambda runs, folder: calls.append(folder) or [])
    return calls


@pytest.mark.parametrize("make", [lambda d: d / "file", lambda d: d / "file" / "charts"])
def test_a_plot_folder_that_cannot_be_made_fails_before_any_test(tmp_path, capsys, fake, plots_here, make):
    (tmp_path / "file").write_text("x")
    folder = str(make(tmp_path))
    code, out, err = cli_main(capsys, "--backend", "vulkan", "--tests", "compute.fp32", "--plot", folder)
    assert_usage_error(code, out, err, f"--plot {folder}: cannot write there")
    assert fake.loaded == [] and plots_here == []


def test_the_plot_folder_is_made_before_the_first_test(tmp_path, capsys, fake, plots_here):
    folder = tmp_path / "new" / "charts"
    existed = []
    fake.devices[0].plan["compute.fp32"] = lambda t, v: existed.append(folder.is_dir()) or FakeWorkload()
    code, _, _ = cli_main(capsys, "--backend", "vulkan", "--quick", "--tests", "compute.fp32", "--plot", str(folder))
    assert code == 0 and existed[0] and plots_here == [str(folder)]
    assert list(folder.iterdir()) == [], "the probe file is gone"


def test_a_plot_that_fails_at_the_end_is_one_line(tmp_path, capsys, fake, plots_here, monkeypatch, files):
    from peakbench.report import plots

    def full(runs, folder):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(plots, "write", full)
    code, out, err = run_fake(capsys, files, "--tests", "compute.fp32", "--plot", str(tmp_path / "charts"))
    assert code == 1 and "Traceback" not in err
    assert f"peakbench: error: --plot {tmp_path / 'charts'}: OSError: No space left on device" in err.splitlines()
    assert load_json(files["json"])["runs"][0]["results"][0]["status"] == "ok"
    assert "compute.fp32" in out and "compute.fp32" in files["md"].read_text()


@pytest.mark.parametrize("run, problem", [
    ({"device": {"name": "x"}, "results": []}, "no backend"),
    ({"backend": "vulkan", "device": {"name": "x"}, "results": [{"test": "compute.fp32", "status": "ok"}]},
     "a result without test, status and unit"),
    ({"backend": "vulkan", "device": {"name": "x"},
      "results": [{"test": "compute.fp32", "status": "ok", "unit": "TFLOPS", "value": "fast"}]},
     "compute.fp32: value is not a number"),
])
def test_compare_rejects_results_it_could_not_render(tmp_path, capsys, run, problem):
    doc = new_document()
    doc["runs"] = [run]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["compare", str(path), str(path)]) == 2
    err = capsys.readouterr().err
    assert problem in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("entry, problem", [
    ({"name": "X", "boost_clock_mhz": 1000, "peaks": ["a"]}, "peaks must map test names to positive numbers"),
    ({"name": "X", "boost_clock_mhz": 0, "peaks": {}}, "boost_clock_mhz must be a positive number"),
    ({"name": "X", "boost_clock_mhz": True, "peaks": {}}, "boost_clock_mhz must be a positive number"),
    ({"name": "X", "boost_clock_mhz": 1000, "peaks": {}, "match": "X"}, "match must be a list of strings"),
    ({"name": "X", "boost_clock_mhz": 1000, "peaks": {}, "peak_clock_mhz": 5}, "peak_clock_mhz must map"),
    ({"name": 5, "boost_clock_mhz": 1000, "peaks": {}}, "name must be a string"),
])
def test_spec_files_with_wrong_types_are_one_line_errors(tmp_path, capsys, entry, problem):
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps({"gpu": [entry]}))
    assert cli.main(["specs", "--spec", str(path)]) == 2
    err = capsys.readouterr().err
    assert problem in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args, problem", [
    (["--tests", ""], "--tests is empty"),
    (["--json", ""], "--json needs a file name"),
    (["--spec", ""], "--spec needs a file name"),
])
def test_empty_option_values_are_usage_errors(capsys, args, problem):
    assert cli.main(["--backend", "vulkan", *args]) == 2
    assert problem in capsys.readouterr().err


def test_two_backends_on_one_gpu_are_shown_side_by_side(capsys, monkeypatch, files):
    """`--backend vulkan,cuda` on one GPU (one UUID): a table per backend, then both columns with
    their ratio, in the terminal and in the Markdown file."""
    fast = FakeDevice(plan={"compute.fp32": lambda t, v: FakeWorkload(0.5e-6, 1e6 / t.per_item(v), name=v.name)})
    slow = FakeDevice(plan={"compute.fp32": lambda t, v: FakeWorkload(1e-6, 1e6 / t.per_item(v), name=v.name)})
    backends = {"vulkan": FakeBackend([slow]), "cuda": FakeBackend([fast])}
    backends["cuda"].name = "cuda"
    monkeypatch.setattr(cli, "load", lambda name: backends[name])
    monkeypatch.setattr(cli, "Settings", TinySettings)
    code, out, _ = cli_main(capsys, "--backend", "vulkan,cuda", "--quick", "--tests", "compute.fp32",
                            "--markdown", str(files["md"]), "--json", str(files["json"]))
    assert code == 0
    assert "Fake GPU 9000: vulkan vs cuda (ratio = column / vulkan)" in out
    row = next(line for line in out.splitlines()[::-1] if line.startswith("compute.fp32 "))
    assert row.split() == ["compute.fp32", "TFLOPS", "1.000", "2.000", "2.00x", "faster"]
    md = files["md"].read_text()
    assert "### Fake GPU 9000: vulkan vs cuda" in md and re.search(r"\| compute\.fp32 .*\| 2\.00x faster", md)
    # the slower backend's path is the ceiling where nothing else explains it (a planted slow kernel)
    assert "compute.fp32: cuda faster than vulkan (2.00x)" in out
    runs = {r["backend"]: r for r in json.loads(files["json"].read_text())["runs"]}
    slow_limit = runs["vulkan"]["results"][0]["limit"]
    assert slow_limit["by"] == "kernel" and slow_limit["why"].startswith("cuda reads 2.0 TFLOPS on this GPU (0.50x) with no machine code")
    assert runs["cuda"]["results"][0]["limit"]["by"] != "kernel"


def test_runs_on_different_gpus_are_not_paired(capsys, monkeypatch):
    other = FakeDevice(info=fake_info(name="Other GPU"))
    object.__setattr__(other.info, "uuid", "11111111-0000-0000-0000-000000000000")
    backends = {"vulkan": FakeBackend([FakeDevice()]), "cuda": FakeBackend([other])}
    backends["cuda"].name = "cuda"
    monkeypatch.setattr(cli, "load", lambda name: backends[name])
    monkeypatch.setattr(cli, "Settings", TinySettings)
    code, out, _ = cli_main(capsys, "--backend", "vulkan,cuda", "--quick", "--tests", "compute.fp32")
    assert code == 0 and "ratio = column" not in out
    # A backend that cannot read the UUID reports zeros: that names no GPU, so no pairing either.
    for device in (backends["vulkan"]._devices[0], other):
        object.__setattr__(device.info, "uuid", "00000000-0000-0000-0000-000000000000")
    code, out, _ = cli_main(capsys, "--backend", "vulkan,cuda", "--quick", "--tests", "compute.fp32")
    assert code == 0 and "ratio = column" not in out


def test_a_device_that_fails_to_close_fails_the_run_but_keeps_the_results(capsys, fake, files):
    def broken_close():
        raise RuntimeError("an illegal memory access was encountered")
    fake.devices[0].close = broken_close
    code, out, err = run_fake(capsys, files, "--tests", "compute.fp32")
    assert code == 1
    assert "closing the device failed: RuntimeError: an illegal memory access" in err
    assert "compute.fp32" in out and "Traceback" not in err
    assert load_json(files["json"])["runs"][0]["results"][0]["status"] == "ok"
    assert "compute.fp32" in files["md"].read_text()


def test_explain_prints_each_chain_with_its_limit(quick_run, capsys):
    _, paths = quick_run
    code, out, _ = cli_main(capsys, "explain", str(paths["json"]), "compute.*")
    assert code == 0
    blocks = out.strip().split("\n\n")
    assert [b.splitlines()[0].split(" (")[0] for b in blocks] == ["compute.fp32", "compute.int4"]
    fp32, int4 = blocks
    assert "  guard work: passed: " in fp32 and fp32.splitlines()[-1].startswith("  limit: unknown: no spec entry")
    assert int4.splitlines()[1].startswith("  reason: [")                 # unsupported: its category and why
    code, out, _ = cli_main(capsys, "explain", str(paths["json"]), "nothing.*")
    assert code == 0 and out.strip() == "no result matches nothing.*"


def test_explain_of_a_missing_file_is_a_usage_error(tmp_path, capsys):
    code, out, err = cli_main(capsys, "explain", str(tmp_path / "none.json"))
    assert code == 2 and "none.json" in err and err.count("\n") == 1

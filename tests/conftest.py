"""Shared fixtures: a private shader cache, the Vulkan device (lavapipe here, a GPU there), and the
`gpu` marker.

GPU tests (marked `gpu`) run only where a real, non-CPU device is present: lavapipe counts as no
GPU. On the GPU machine run `pytest --gpu` (or `pytest -m gpu`): then a missing GPU fails those
tests instead of skipping them, so a broken driver install cannot pass as "all skipped".

Every result document the suite writes through `peakbench.report.result.save_json` is checked
against docs/result.schema.json; a document that breaks it fails the test that wrote it.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import warnings
from pathlib import Path

import pytest

from helpers import gpu_required

RESULT_SCHEMA = Path(__file__).resolve().parents[1] / "docs" / "result.schema.json"


def pytest_addoption(parser):
    parser.addoption("--gpu", action="store_true",
                     help="run the tests marked gpu and fail them when no real GPU is present")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a real GPU; run on the H200 (pytest --gpu or -m gpu)")


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject.toml): a worker per core, up to 4, and none where GPU tests run, whose
    timings another worker would share the host with."""
    if config.getoption("gpu") or "gpu" in (config.getoption("markexpr") or ""):
        return 0
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


@functools.cache
def real_gpu() -> str | None:
    """The name of the first non-CPU device of any backend, or None (lavapipe is not a GPU)."""
    from peakbench.backend import load
    for name in ("vulkan", "cuda", "rocm"):
        try:
            backend = load(name)
        except Exception:   # unavailable, not built yet, or broken: none of them is a GPU here
            continue
        try:
            gpus = [d.name for d in backend.devices() if d.kind != "cpu"]
        finally:
            backend.close()
        if gpus:
            return f"{name}: {gpus[0]}"
    return None


def pytest_sessionfinish(session):
    """PEAKBENCH_ISA_CACHE_PACK=1: the ISA census's committed archive becomes what this run used."""
    if "isa_cache" in sys.modules:
        done = sys.modules["isa_cache"].pack_if_asked()
        if done:
            print(f"\n{done}")


def pytest_terminal_summary(terminalreporter):
    """What did not run and why, in one line per reason, above pytest's closing line: a missing
    tool or fixture must not pass as a quiet row of s's."""
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
            reason = str(report.longrepr[2]).removeprefix("Skipped: ")
            reasons[reason] = reasons.get(reason, 0) + 1
    if not reasons:
        return
    terminalreporter.section("tests that did not run")
    for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{count:5d}  {reason}")


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items or gpu_required(config) or real_gpu():
        return
    skip = pytest.mark.skip(reason="needs a real (non-CPU) Vulkan, CUDA or ROCm device; run with --gpu on a GPU")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """Compiled shaders go to a per-session folder, never to ~/.cache; subprocesses inherit it."""
    folder = tmp_path_factory.mktemp("peakbench-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PEAKBENCH_CACHE", str(folder))
        yield folder


@pytest.fixture(scope="session")
def vulkan_backend():
    """The Vulkan backend, or skip: no `vulkan` package, no loader, no driver or no device."""
    from peakbench.backend import BackendUnavailable
    try:
        import peakbench.vulkan
        backend = peakbench.vulkan.create()
    except BackendUnavailable as e:
        pytest.skip(str(e))
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def vulkan_device(vulkan_backend):
    """Device 0, opened once for the session (lavapipe on this machine)."""
    device = vulkan_backend.open(0)
    yield device
    device.close()


@pytest.fixture(scope="module")
def cuda_device(request):
    """Device 0 of the CUDA backend; without one, skipped (failed under --gpu)."""
    from peakbench.backend import BackendUnavailable, load
    try:
        backend = load("cuda")
    except BackendUnavailable as e:
        (pytest.fail if gpu_required(request.config) else pytest.skip)(str(e))
    device = backend.open(0)
    yield device
    device.close()
    backend.close()


@pytest.fixture(scope="session")
def shaders():
    """peakbench.vulkan.shaders and workloads; they import the `vulkan` package, which raises
    OSError at import when no Vulkan loader is installed."""
    try:
        from peakbench.vulkan import capabilities as workloads, shaders
    except (ImportError, OSError) as e:
        pytest.skip(f"vulkan package unusable: {e}")
    return shaders, workloads


# -- every written result document against the schema ---------------------------------------

@functools.cache
def result_validator():
    """The schema's validator; None where jsonschema is not installed (the lent GPU machine has
    none, and its compiled dependency no wheel to carry there): the documents written then go
    unchecked, and each test that wrote one says so in a warning, which pytest's summary counts."""
    try:
        import jsonschema
    except ImportError:
        return None
    return jsonschema.Draft202012Validator(json.loads(RESULT_SCHEMA.read_text()))


UNCHECKED = "a result document was written but not checked against docs/result.schema.json: jsonschema is not installed"


def schema_problems(doc) -> list[str]:
    """Every way `doc` breaks docs/result.schema.json, as 'json/path: message'; [] when it is valid."""
    if result_validator() is None:
        warnings.warn(UNCHECKED, pytest.PytestWarning, stacklevel=2)
        return []
    errors = sorted(result_validator().iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    return [f"{'/'.join(map(str, e.absolute_path)) or '(document)'}: {e.message}" for e in errors]


_schema_violations: list[str] = []


@pytest.fixture(scope="session", autouse=True)
def _result_documents_checked():
    """Wrap save_json (the original still writes): the wrapper checks the document as it will be
    written, the JSON round trip of what it was handed. Modules that imported the function before
    this ran (the CLI and the test modules, at collection) get the wrapper too; later imports find
    it in place."""
    from peakbench.report import result
    original = result.save_json

    @functools.wraps(original)
    def save_json(*args, **kwargs):
        path = kwargs.get("path", args[0] if args else None)
        path = getattr(path, "name", path)       # an Output names the file as given
        doc = kwargs.get("doc", args[1] if len(args) > 1 else None)
        try:
            written = json.loads(json.dumps(doc))
        except (TypeError, ValueError):
            pass                     # not serialisable: the original raises that itself
        else:
            problems = schema_problems(written) if isinstance(written, dict) else ["not a JSON object"]
            _schema_violations.extend(f"{path}: {p}" for p in problems)
            _schema_violations.extend(f"{path}: {r['test']}: {p}" for r in results_of(written)
                                      if (p := result.sample_problem(r)))
        return original(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        for module in list(sys.modules.values()):
            for name, value in list(getattr(module, "__dict__", {}).items()):
                if value is original:           # `save_json` or an alias of it
                    mp.setattr(module, name, save_json)
        yield


def results_of(doc) -> list[dict]:
    """Every result of a document, for the checks every reader makes (its samples' statistics)."""
    runs = doc.get("runs") if isinstance(doc, dict) else None
    return [r for run in runs if isinstance(run, dict) for r in run.get("results", []) if isinstance(r, dict)] \
        if isinstance(runs, list) else []


@pytest.fixture(autouse=True)
def _no_schema_violation():
    """Fail the test during which (or during whose fixtures) a document broke the schema."""
    yield
    if _schema_violations:
        found = list(_schema_violations)
        _schema_violations.clear()
        pytest.fail("a result document does not match docs/result.schema.json:\n  " + "\n  ".join(found[:10]))

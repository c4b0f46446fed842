"""Helpers shared by the test modules (the fake driver lives in fakes.py)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from peakbench.catalog import default_catalog

ROOT = Path(__file__).resolve().parents[1]

# Test inputs made outside the project: the shared folder beside the clone has them, and the
# repository keeps the same files (tests/data/fixtures/README.md says where they come from), so a
# clone without ../shared runs every test too.
FIXTURE_FOLDERS = (ROOT.parent / "shared" / "fixtures", ROOT / "tests" / "data" / "fixtures")
FIXTURE_ABSENT = "fixture absent"     # how a skip for a missing fixture begins (conftest counts them)


def fixture(name: str) -> Path:
    """A fixture file: from ../shared/fixtures where it is there, else from tests/data/fixtures.
    The path returned may not exist: fixture_absent() says so, for a skip."""
    return next((folder / name for folder in FIXTURE_FOLDERS if (folder / name).is_file()),
                FIXTURE_FOLDERS[-1] / name)


def fixture_absent(name: str) -> str | None:
    """The skip reason when a fixture is in neither folder, else None."""
    if fixture(name).is_file():
        return None
    return f"{FIXTURE_ABSENT}: {name} is in neither {' nor '.join(str(f) for f in FIXTURE_FOLDERS)}"


def run_peakbench(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m peakbench ARGS` in a subprocess from the repository root (the package need not
    be installed)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "peakbench", *args], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": path, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def clang_tidy() -> str | None:
    """clang's front end (the clang-tidy wheel, or one on PATH): HIP sources are type-checked for
    AMD targets with it, without ROCm."""
    found = shutil.which("clang-tidy")
    if found:
        return found
    try:
        import clang_tidy as package
    except ImportError:
        return None
    exe = Path(package.__file__).parent / "data" / "bin" / "clang-tidy"
    return str(exe) if exe.exists() else None


def gpu_required(config) -> bool:
    """`pytest --gpu` or `pytest -m gpu`: the GPU tests must run, so a missing GPU fails them."""
    return bool(config.getoption("--gpu") or (config.option.markexpr or "").strip() == "gpu")


def cuda_and_vulkan_runs(request, tmp_path_factory, tests: str, timeout: float = 600):
    """`peakbench --backend cuda,vulkan --tests TESTS --json` once for a GPU test module:
    (the process, {backend: {test: result}}). Without CUDA the module skips, or fails under --gpu."""
    from peakbench.backend import BackendUnavailable, load
    from peakbench.report.result import load_json
    try:
        load("cuda").close()
    except BackendUnavailable as e:
        (pytest.fail if gpu_required(request.config) else pytest.skip)(str(e))
    path = tmp_path_factory.mktemp("runs") / "runs.json"
    p = run_peakbench("--backend", "cuda,vulkan", "--tests", tests, "--json", str(path), timeout=timeout)
    assert path.exists(), p.stderr
    return p, {r["backend"]: {x["test"]: x for x in r["results"]} for r in load_json(path)["runs"]}


def alu_params(keep=lambda test, variant: True, marks=lambda test, variant: ()) -> list:
    """pytest params (test, variant), id "test-variant", for every vector-ALU kernel of the catalog."""
    return [pytest.param(t, v, id=f"{t.name}-{v.name}", marks=marks(t, v))
            for t in default_catalog().tests if t.family == "compute" and t.kernel
            for v in t.variants if keep(t, v)]


def record_tool_runs(sh, monkeypatch) -> list:
    """The compiler processes peakbench.vulkan.shaders starts from now on (their binaries, in
    order); the tool versions are read first, so that their own runs are not counted."""
    sh.tool_versions()
    calls = []
    real = sh.run_tool

    def run(args, what=""):
        calls.append(args[0])
        return real(args, what)

    from peakbench import spirv_tools
    monkeypatch.setattr(sh, "run_tool", run)
    monkeypatch.setattr(spirv_tools, "run_tool", run)     # validate, assemble, disassemble
    return calls

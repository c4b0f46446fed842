"""The package as a user gets it: a wheel and an sdist built from the committed files, the wheel
installed into a fresh virtual environment, and peakbench run from a folder outside the repository.

This is the path `pip install` takes; an editable install hides a kernel source the build forgot,
so the whole Vulkan suite runs here from the installed wheel, on lavapipe."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

import peakbench
from helpers import ROOT

pytestmark = pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                                reason="needs a git checkout to build from its committed files")

# Vector-ALU tests lavapipe runs natively; the others must be `unsupported` with a category.
LAVAPIPE_NATIVE = ("compute.fp64", "compute.fp32", "compute.fp16", "compute.int32", "compute.int16",
                   "compute.int8")


def _committed_tree(dest: Path) -> Path:
    """The repository's tracked files as they are on disk now (a clean checkout, plus edits not
    yet committed), without build outputs, virtual environments or caches."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    tree = _committed_tree(tmp_path_factory.mktemp("tree"))
    out = tmp_path_factory.mktemp("dist")
    build = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(tree)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def installed(dist, tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel (and its dependencies) installed; its bin folder."""
    env = tmp_path_factory.mktemp("venv")
    venv.create(env, with_pip=True, clear=True)
    wheel = next(dist.glob("peakbench-*.whl"))
    pip = subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
                         capture_output=True, text=True)
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    return env / "bin"


def _kernel_sources() -> list[str]:
    return sorted(p.name for p in (ROOT / "shaders").iterdir() if p.is_file())


def test_the_wheel_carries_every_kernel_source_the_spec_database_and_the_license(dist):
    wheel = next(dist.glob("peakbench-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [s for s in _kernel_sources() if f"peakbench/shaders/{s}" not in names]
    assert not missing, f"kernel sources not in the wheel: {missing}"
    assert "peakbench/specs/gpus.toml" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


def test_the_wheel_holds_every_subpackage(dist):
    """pyproject.toml lists the packages by hand (shaders/ is mapped in): a new subpackage must be added there."""
    names = set(zipfile.ZipFile(next(dist.glob("peakbench-*.whl"))).namelist())
    packages = sorted(str(p.parent.relative_to(ROOT)) for p in (ROOT / "peakbench").rglob("__init__.py"))
    missing = [p for p in packages if f"{p}/__init__.py" not in names]
    assert not missing, f"subpackages not in the wheel (add them to pyproject.toml): {missing}"


def test_the_sdist_carries_the_kernel_sources_and_the_license(dist):
    sdist = next(dist.glob("peakbench-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert not [s for s in _kernel_sources() if f"shaders/{s}" not in names]
    assert {"LICENSE", "README.md", "pyproject.toml"} <= names


def test_the_wheel_metadata_names_license_python_and_urls(dist):
    wheel = zipfile.ZipFile(next(dist.glob("peakbench-*.whl")))
    metadata = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert f"Version: {peakbench.__version__}" in metadata
    assert "License-Expression: MIT" in metadata
    assert "Requires-Python: >=3.11" in metadata
    assert "Project-URL: " in metadata and "Classifier: " in metadata
    for extra in ("cuda", "cuda13", "rocm", "plot", "nvml", "sass", "test"):
        assert f"Provides-Extra: {extra}" in metadata


def test_the_installed_wheel_runs_the_vulkan_suite_outside_the_repository(installed, tmp_path):
    """From an empty folder, with a fresh shader cache: --version, then the quick suite on lavapipe."""
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PEAKBENCH_CACHE"] = str(tmp_path / "cache")
    version = subprocess.run([str(installed / "peakbench"), "--version"], cwd=work, env=env,
                             capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.strip() == f"peakbench {peakbench.__version__}"

    where = subprocess.run([str(installed / "python"), "-c", "import peakbench.sources as s; print(s.SHADERS)"],
                           cwd=work, env=env, capture_output=True, text=True)
    assert Path(where.stdout.strip()).is_relative_to(installed.parent), where.stdout + where.stderr

    run = subprocess.run([str(installed / "peakbench"), "--backend", "vulkan", "--quick", "--json", "r.json"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    doc = json.loads((work / "r.json").read_text())
    assert doc["peakbench_version"] == peakbench.__version__
    results = {r["test"]: r for run_ in doc["runs"] for r in run_["results"]}
    assert not [t for t, r in results.items() if r["status"] == "failed"]
    assert all(results[t]["status"] == "ok" and results[t]["value"] > 0 for t in LAVAPIPE_NATIVE)
    assert all(r["status"] == "ok" or r["reason"].startswith("[")
               for t, r in results.items() if t.startswith("compute."))
    ok = {t for t, r in results.items() if r["status"] == "ok"}
    assert {"memory.read", "launch.overhead"} <= ok
    # the sweep ran and named levels; which of a CPU's caches show as plateaus depends on how busy
    # the host is (a loaded 2-core machine merged L1 into the next level once in five suites)
    assert ok & {"latency.l1", "latency.l2", "latency.l3", "latency.dram"}
    assert all(r["reason"].startswith("[hardware] the latency sweep found no")
               for t, r in results.items() if t.startswith("latency.l") and t not in ok)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.loads((ROOT / "docs" / "result.schema.json").read_text()))

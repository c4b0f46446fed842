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
    real = sh._run

    def run(args, what=""):
        calls.append(args[0])
        return real(args, what)

    monkeypatch.setattr(sh, "_run", run)
    return calls

"""Where the kernel sources are: the top-level `shaders/` folder of the repository, which the build
installs as the package `peakbench.shaders` (pyproject.toml maps it), so a checkout, an editable
install and a wheel all find them through the same import."""
from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def _folder() -> Path:
    try:
        found = Path(str(files("peakbench.shaders")))
    except ModuleNotFoundError:     # running from a checkout that was never installed
        found = Path(__file__).resolve().parents[1] / "shaders"
    return found


SHADERS = _folder()

"""Where the kernel sources are: the top-level `shaders/` folder of the repository, which the build
installs as `peakbench/shaders` (pyproject.toml maps it), so a checkout, an editable install and a
wheel all find them through the same import. PEAKBENCH_SHADERS=DIR points the lookup at another
folder, for kernel developers (and the planted-fault tests) running edited kernels."""
from __future__ import annotations

import os
from importlib.util import find_spec
from pathlib import Path


def _folder() -> Path:
    # A folder of data files is a namespace package: its location, not a module file, is the answer.
    spec = find_spec("peakbench.shaders")
    if spec and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parents[1] / "shaders"    # a checkout that was never installed


SHADERS = Path(os.environ["PEAKBENCH_SHADERS"]) if os.environ.get("PEAKBENCH_SHADERS") else _folder()

"""What a command line asks to run, checked before anything runs: the backends (`--backend`), the
catalog's tests (`--tests`), the kernel folder (PEAKBENCH_SHADERS). `peakbench` and `peakbench ray`
check their run options here, so a bad one is one usage line from either, never a failed GPU."""
from __future__ import annotations

import os

from peakbench.backend import BACKENDS
from peakbench.catalog import default_catalog


class UsageError(Exception):
    """A command line that cannot run: the message names the option and the problem."""


def parse_backends(text: str) -> tuple[list[str], bool]:
    """The backends asked for, and whether missing ones may be skipped (only for `all`)."""
    if text == "all":
        return list(BACKENDS), True
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in BACKENDS]
    if unknown or not names:
        raise UsageError(f"unknown backend '{','.join(unknown) or text}' (choose from {', '.join(BACKENDS)}, all)")
    return names, False


def select_tests(text: str | None) -> list:
    catalog = default_catalog()
    if text is None:
        return catalog.select(None)
    patterns = [p.strip() for p in text.split(",") if p.strip()]
    if not patterns:
        raise UsageError("--tests is empty (see --list-tests)")
    unmatched = catalog.unmatched(patterns)
    if unmatched:
        names = ", ".join(f"'{p}'" for p in unmatched)
        raise UsageError(f"--tests {names} {'matches' if len(unmatched) == 1 else 'match'} no test (see --list-tests)")
    return catalog.select(patterns)


def check_shaders() -> None:
    """A PEAKBENCH_SHADERS that names no folder of kernel sources would fail every test: say so once."""
    folder = os.environ.get("PEAKBENCH_SHADERS")
    if folder and not os.path.isdir(folder):
        raise UsageError(f"PEAKBENCH_SHADERS={folder}: no such folder (it names the kernel sources' folder; "
                         "unset it to use the installed ones)")

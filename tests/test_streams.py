"""peakbench.streams: a reader that goes away ends the output quietly with the command's own status,
and a stream that cannot encode a character gets an ASCII stand-in; both through real pipes."""
from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from helpers import ROOT
from peakbench import streams

RESULT = ROOT / "results" / "nvidia-h200" / "cuda-0.1.0.json"


def piped_into_head(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`peakbench ARGS | head -1` under pipefail: the exit status is peakbench's."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    command = " ".join([sys.executable, "-m", "peakbench", *map(str, args)]) + " | head -c 1 >/dev/null"
    return subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": path, **(env or {})}, timeout=120)


@pytest.mark.parametrize("args, status", [
    (("--list-tests",), 0),
    (("specs",), 0),
    (("compare", RESULT, RESULT), 1),       # the committed record predates `complete`: failed, said on stderr
    (("fleet", RESULT), 1),
])
def test_a_closed_pipe_ends_quietly_with_the_commands_own_status(args, status):
    p = piped_into_head(*args)
    assert p.returncode == status, p.stderr
    assert "BrokenPipe" not in p.stderr and "Traceback" not in p.stderr and "Exception ignored" not in p.stderr


def test_an_ascii_stream_gets_stand_ins_not_an_error():
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    before = sys.stdout
    sys.stdout = stream
    try:
        with streams.guarded():
            print("reason cut… [1] × 2 µs")
    finally:
        sys.stdout = before
    stream.flush()
    assert raw.getvalue().decode() == "reason cut... [1] x 2 us\n"


def test_a_table_in_an_ascii_locale_keeps_its_rows(vulkan_backend):
    """A reason too long for its cell is cut with an ellipsis: under PYTHONIOENCODING=ascii it is '...'."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    p = subprocess.run([sys.executable, "-m", "peakbench", "--backend", "vulkan", "--quick", "--tests",
                        "compute.int4,compute.fp8_e4m3,compute.fp4"], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": path, "PYTHONIOENCODING": "ascii"}, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "UnicodeEncodeError" not in p.stderr and "compute.int4" in p.stdout
    assert "\u2026" not in p.stdout and "..." in p.stdout

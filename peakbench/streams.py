"""Standard output and error as a command line tool's should behave: a reader that goes away
(`peakbench --list-tests | head -1`) ends the output quietly, and the command still exits with the
status its work earned; a stream that cannot encode a character (an ASCII locale,
PYTHONIOENCODING=ascii) gets an ASCII stand-in for it instead of an error that loses the table."""
from __future__ import annotations

import codecs
import contextlib
import io
import os
import sys

ERRORS = "peakbench-ascii"

# What the tables and messages use beyond ASCII, and what stands for each where it cannot be shown.
ASCII = {"\u2026": "...", "\u00d7": "x", "\u00b5": "u", "\u03bc": "u", "\u2014": "-", "\u2013": "-",
         "\u2212": "-", "\u00b0": " deg", "\u2264": "<=", "\u2265": ">=", "\u2248": "~", "\u00b1": "+/-",
         "\u2192": "->", "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00a0": " "}


def _ascii(error: UnicodeError):
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start:error.end]
    return "".join(ASCII.get(c, "?") for c in text), error.end


codecs.register_error(ERRORS, _ascii)


class Guarded(io.TextIOBase):
    """A text stream whose closed pipe is taken as the reader's wish: from then on what is written
    goes nowhere (the descriptor is pointed at /dev/null, so the interpreter's last flush is
    quiet too)."""

    def __init__(self, stream):
        self.stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                self.stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        self.reader_gone = True
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self.stream.fileno())
            os.close(null)

    def fileno(self) -> int:
        return self.stream.fileno()

    def isatty(self) -> bool:
        return self.stream.isatty()

    @property
    def encoding(self):
        return getattr(self.stream, "encoding", "utf-8")

    def writable(self) -> bool:
        return True


@contextlib.contextmanager
def guarded():
    """sys.stdout and sys.stderr guarded (see Guarded) and encoding with ASCII stand-ins, for the
    duration; both are put back as they were after."""
    before = sys.stdout, sys.stderr
    for stream in before:
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            with contextlib.suppress(ValueError, io.UnsupportedOperation):
                stream.reconfigure(errors=ERRORS)
    sys.stdout, sys.stderr = (s if isinstance(s, Guarded) else Guarded(s) for s in before)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        sys.stdout, sys.stderr = before

"""The kernel's own count of its launches, for the tests whose every launch leaves the same output
(the ALU's chains, a special function's, a cache or shared-memory read's, an atomic test's words,
a matrix tile's): their checks read one launch's output, so a launch lost, or cut short of its
workgroups, would leave nothing else to see. Each such kernel takes one more buffer, a 32-bit
word the first invocation of every workgroup adds one to as its last act; the host counts the
workgroups it launched, and the `launches` guard (harness/session.py) holds the two equal after
the timed launches: every workgroup launched was dispatched and its first invocation ran to the
end. One atomic add a workgroup, after the loop: nothing the timing can see."""
from __future__ import annotations

from typing import Sequence

import numpy as np

WORD = 1 << 32      # the count wraps as a 32-bit word does


class Witness:
    """The word a kernel counts its workgroups in, and the host's count of those it launched."""

    def __init__(self, rt):
        self.rt = rt
        self.buffer = rt.alloc(4)
        try:
            rt.fill(self.buffer, 0)
        except BaseException:
            self.close()
            raise
        self.groups = 0         # workgroups launched since the word was cleared
        self.launches = 0

    def launch(self, kernel, groups: int, buffers: Sequence, scalars: Sequence = (), repeat: int = 1) -> float:
        """rt.launch with the word as the last buffer (the binding or parameter after `buffers`)."""
        seconds = self.rt.launch(kernel, groups, [*buffers, self.buffer, *scalars], repeat=repeat)
        self.groups += groups * repeat
        self.launches += repeat
        return seconds

    def counted(self) -> int:
        return int(np.frombuffer(self.rt.download(self.buffer, 4), np.uint32)[0])

    def check(self) -> tuple[str | None, str]:
        """(problem, evidence): every workgroup launched since the word was cleared was dispatched,
        and its first invocation reached the kernel's end."""
        got, want = self.counted(), self.groups % WORD
        said = f"{self.launches} launches of {self.groups} workgroups"
        if got == want:
            return None, f"the kernel counted all {said}"
        why = ("launches lost or cut short, their time not the kernel's" if got < want else
               "more than one count a workgroup: the kernel's count is not the launches'")
        return f"the kernel counted {got} workgroups of the {said}: {why}", f"{got} of {self.groups} workgroups counted"

    def close(self) -> None:
        if self.buffer is not None:
            buffer, self.buffer = self.buffer, None
            self.rt.free(buffer)

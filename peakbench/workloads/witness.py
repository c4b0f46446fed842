"""The kernel's own count of its launches, for the tests whose every launch leaves the same output
(the ALU's chains, a special function's, a cache or shared-memory read's, an atomic test's words,
a matrix tile's): their checks read one launch's output, so a launch lost, or cut short of its
workgroups, would leave nothing else to see. Each such kernel takes one more buffer, a 32-bit
word the first invocation of every workgroup adds one to as its last act; the host counts the
workgroups it launched, and the `launches` guard (harness/session.py) holds the two equal after
the timed launches: every workgroup launched was dispatched and its first invocation ran to the
end. One atomic add a workgroup, after the loop: nothing the timing can see. The guard holds one
more count: the runs the harness timed against the launches made here for them, so a workload's
run that launched nothing and reported a time (above the runtime, where the word cannot see it)
fails too.

A kernel whose workgroups run about 10^9 a second (a stream's 4 KiB tiles at HBM rates) would
queue every add on one word; it counts workgroup w in slot w % slots instead, each slot the first
word of its own 128-byte line (slot_defines), and the host adds the slots up. The streams count
as each workgroup's first act, where the add waits behind none of the tile's traffic: a launch lost
is still a count short."""
from __future__ import annotations

from typing import Sequence

import numpy as np

WORD = 1 << 32      # the count wraps as a 32-bit word does
SLOT_WORDS = 32     # a slot's stride in words: one 128-byte cache line each


def slot_defines(slots: int) -> dict[str, int]:
    """The kernel's defines for a count in `slots` slots (shaders/mem_stream.comp, mem.cu)."""
    return {"WITNESS_SLOTS": slots, "WITNESS_STRIDE": SLOT_WORDS}


class Witness:
    """The word (or slots) a kernel counts its workgroups in, and the host's count of those it
    launched."""

    def __init__(self, rt, slots: int = 1):
        self.rt, self.slots = rt, slots
        self.buffer = rt.alloc(self.nbytes)
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

    @property
    def nbytes(self) -> int:
        return ((self.slots - 1) * SLOT_WORDS + 1) * 4

    def counted(self) -> int:
        words = np.frombuffer(self.rt.download(self.buffer, self.nbytes), np.uint32)
        return int(words[::SLOT_WORDS].sum(dtype=np.uint64) % WORD)

    def check(self, asked: int = 0, since: int = 0) -> tuple[str | None, str]:
        """(problem, evidence): every workgroup launched since the word was cleared was dispatched,
        and its first invocation reached the kernel's end; and of the `asked` runs the harness
        timed after `since` launches, each launched here (a workload's run launches once or more),
        so a run that skipped the launch and reported a time is not counted as work."""
        if self.launches - since < asked:
            return (f"{asked} runs timed, {self.launches - since} launches made for them: runs that launched"
                    f" nothing, their time not the kernel's"), f"{self.launches - since} launches for {asked} runs"
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

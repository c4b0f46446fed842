"""The CUDA and HIP runtimes' shared prefetch (peakbench/runtime.py CompiledModules): the code
object is made on the caller's thread, its listing on a disassembler thread of the runtime's own
that prefetch does not wait for, and a later listing() waits for that one rather than disassemble
again."""
from __future__ import annotations

import threading
import time

from peakbench.runtime import CompiledModules


class SlowListings(CompiledModules):
    """A code object per (source, defines); each listing takes 0.2 s and is counted."""

    def __init__(self):
        self.made, self.listed = [], []
        self.release = threading.Event()

    def code_object(self, source: str, defines: dict, kernel: str):
        binary = f"{kernel}:{sorted(defines.items())}".encode()
        self.made.append(binary)
        return [binary, b"", b""], False

    def listing_of(self, binary: bytes) -> str | None:
        self.release.wait(5)
        self.listed.append((binary, threading.current_thread().name))
        return f"listing of {binary.decode()}"


def test_prefetch_leaves_the_listing_to_a_thread_and_listing_waits_for_it():
    rt = SlowListings()
    t0 = time.perf_counter()
    rt.prefetch("alu.cu", {"A": 1}, "k")
    rt.prefetch("alu.cu", {"A": 1}, "k")            # the same code object: one listing
    rt.prefetch("alu.cu", {"A": 2}, "k")
    assert time.perf_counter() - t0 < 0.5 and rt.listed == []      # not waited for
    rt.release.set()
    assert rt.listing(rt.made[0]) == "listing of k:[('A', 1)]"
    rt.stop_listings()
    assert sorted(b for b, _ in rt.listed) == [rt.made[0], rt.made[2]]
    assert all(name.startswith("disassemble") for _, name in rt.listed)
    assert rt.listing(b"never prefetched") == "listing of never prefetched"     # made on the spot
    assert rt.listed[-1][1] == threading.current_thread().name


def test_a_runtime_with_no_listings_starts_no_thread():
    class NoListings(SlowListings):
        listing_of = CompiledModules.listing_of
    rt = NoListings()
    rt.prefetch("alu.cu", {}, "k")
    assert rt._disassemblers is None and rt.listing(rt.made[0]) is None
    rt.stop_listings()

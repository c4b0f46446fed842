"""workloads/witness.py on lavapipe: each kernel that carries the launch witness counts exactly the
workgroups launched (repeat launches and the checks' launches included); a launch the runtime
dropped, or cut short of a workgroup, leaves the count short and the check names it; the word
wraps as a 32-bit one."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from peakbench.catalog import default_catalog
from peakbench.workloads.witness import Witness

CATALOG = default_catalog()
# One test of each family whose kernel counts itself, the workload's own launches in run().
WITNESSED = ("compute.fp32", "compute.int8", "sfu.rcp", "memory.l2", "memory.shared", "atomic.shared_add",
             "atomic.global_add")


def prepared(device, name: str):
    test = CATALOG.get(name)
    assert device.support(test) is None
    w = device.prepare(test, device.variants(test)[0])
    axis = w.axis()
    if axis is not None:
        w.at(axis.points[0])
    return w


@pytest.mark.parametrize("name", WITNESSED)
def test_the_kernel_counts_every_workgroup_launched(vulkan_device, name):
    w = prepared(vulkan_device, name)
    try:
        assert w.witness is not None
        assert w.verify() is None
        for size in (1, 3, 1 << 12):
            w.run(size)
        problem, evidence = w.witness.check()
        assert problem is None, problem
        assert w.witness.counted() == w.witness.groups > 0
        assert f"all {w.witness.launches} launches of {w.witness.groups} workgroups" in evidence
    finally:
        w.close()


@pytest.mark.parametrize("name", ["memory.l2", "memory.shared"])
def test_a_launch_split_into_repeats_counts_each(vulkan_device, name):
    w = prepared(vulkan_device, name)
    try:
        w.spec = replace(w.spec, max_loop=2)           # 8 passes: launches of 2 at most, one submission
        w.run(8)
        assert w.witness.launches >= 4 and w.witness.groups == w.witness.launches * w.groups
        assert w.witness.check()[0] is None and w.witness.counted() == w.witness.groups
    finally:
        w.close()


def test_a_launch_the_runtime_dropped_is_missing_from_the_count(vulkan_device, monkeypatch):
    w = prepared(vulkan_device, "sfu.rcp")
    try:
        w.run(1)
        monkeypatch.setattr(w.rt, "launch", lambda kernel, grid, args, repeat=1: 0.001)   # a time, no launch
        w.run(4)
        monkeypatch.undo()
        problem, evidence = w.witness.check()
        groups = w.witness.groups
        assert problem == (f"the kernel counted {groups // 2} workgroups of the 2 launches of {groups} workgroups:"
                           f" launches lost or cut short, their time not the kernel's")
        assert evidence == f"{groups // 2} of {groups} workgroups counted"
    finally:
        w.close()


def test_a_launch_one_workgroup_short_is_caught(vulkan_device, monkeypatch):
    w = prepared(vulkan_device, "compute.fp32")
    try:
        real = w.rt.launch
        monkeypatch.setattr(w.rt, "launch", lambda kernel, grid, args, repeat=1: real(kernel, grid - 1, args, repeat))
        w.run(1)
        monkeypatch.undo()
        problem, _ = w.witness.check()
        assert problem and problem.startswith(f"the kernel counted {w.witness.groups - 1} workgroups of the 1 launches")
    finally:
        w.close()


class WordOnly:
    """A runtime of one word: launches add their workgroups to the last buffer, as the kernels do."""

    def __init__(self):
        self.words = {}

    def alloc(self, nbytes):
        key = len(self.words)
        self.words[key] = np.zeros(1, np.uint32)
        return key

    def fill(self, buf, byte):
        self.words[buf][:] = np.uint32(int.from_bytes(bytes([byte]) * 4, "little"))

    def launch(self, kernel, grid, args, repeat=1):
        word = self.words[[a for a in args if isinstance(a, int)][-1]]
        word[0] = (int(word[0]) + grid * repeat) % (1 << 32)
        return 0.001

    def download(self, buf, nbytes=None):
        return memoryview(self.words[buf].tobytes())

    def free(self, buf):
        del self.words[buf]


def test_the_count_wraps_as_a_32_bit_word():
    rt = WordOnly()
    witness = Witness(rt)
    for _ in range(5):
        witness.launch(None, 1 << 30, [], [np.uint32(1)])
    assert witness.groups == 5 << 30 and witness.counted() == 1 << 30
    assert witness.check()[0] is None
    witness.close()
    assert rt.words == {} and witness.buffer is None
    witness.close()                                     # twice: nothing left to free

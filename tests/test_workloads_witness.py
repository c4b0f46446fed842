"""workloads/witness.py on lavapipe: each kernel that carries the launch witness counts exactly the
workgroups launched (repeat launches and the checks' launches included); a launch the runtime
dropped, or cut short of a workgroup, leaves the count short and the check names it; the word
wraps as a 32-bit one."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from peakbench.catalog import default_catalog
from peakbench.workloads import stream
from peakbench.workloads.witness import SLOT_WORDS, Witness

CATALOG = default_catalog()
# One test of each family whose kernel counts itself and lavapipe runs, through the workload's own
# launches (lavapipe has no cooperative matrix: the matrix kernels' count runs on a GPU, and their
# position among the arguments is held to the source below).
WITNESSED = ("compute.fp32", "compute.int8", "sfu.rcp", "memory.l2", "memory.shared", "atomic.shared_add",
             "atomic.global_add")


def prepared(device, name: str, layout: str | None = None):
    """The test's first variant, or the one named `layout`, at its axis's first point."""
    test = CATALOG.get(name)
    assert device.support(test) is None
    variants = device.variants(test)
    w = device.prepare(test, next(v for v in variants if v.name == layout) if layout else variants[0])
    axis = w.axis()
    if axis is not None:
        w.at(axis.points[0])
    return w


def assert_counted_every_workgroup(witness: Witness) -> None:
    problem, evidence = witness.check()
    assert problem is None, problem
    assert witness.counted() == witness.groups > 0
    assert f"all {witness.launches} launches of {witness.groups} workgroups" in evidence


@pytest.mark.parametrize("name", WITNESSED)
def test_the_kernel_counts_every_workgroup_launched(vulkan_device, name):
    w = prepared(vulkan_device, name)
    try:
        assert w.witness is not None
        assert w.verify() is None
        for size in (1, 3, 1 << 12):
            w.run(size)
        assert_counted_every_workgroup(w.witness)
    finally:
        w.close()


# The streams: every layout of the read, and each writing mode (one pass a launch for the update).
STREAMS = [("memory.read", "rows"), ("memory.read", "chunk"), ("memory.read", "stride"), ("memory.write", "tile"),
           ("memory.copy", "tile"), ("memory.update", "tile")]


@pytest.mark.parametrize("name, layout", STREAMS)
def test_the_stream_kernels_count_every_workgroup_launched(vulkan_device, name, layout):
    w = prepared(vulkan_device, name, layout)
    try:
        assert w.witness is not None and w.witness.slots == stream.COUNT_SLOTS
        assert w.check_first() is None                  # the checks' launches of the measured kernel count too
        for size in (1, 2):
            w.run(size)
        assert_counted_every_workgroup(w.witness)
    finally:
        w.close()


def test_a_write_counts_its_tiles_in_slots_a_line_apart(vulkan_device):
    """Workgroup w adds to slot w % COUNT_SLOTS: each slot the first word of its 128-byte line holds a
    count, the words between stay zero, and the counts differ by one at most."""
    w = prepared(vulkan_device, "memory.write", "tile")
    try:
        w.run(1)
        words = np.frombuffer(w.rt.download(w.witness.buffer, w.witness.nbytes), np.uint32)
        assert words.size == (stream.COUNT_SLOTS - 1) * SLOT_WORDS + 1
        slots = words[::SLOT_WORDS]
        assert slots.size == stream.COUNT_SLOTS and slots.min() > 0 and slots.max() - slots.min() <= 1
        assert not np.delete(words, np.arange(0, words.size, SLOT_WORDS)).any()
        assert int(slots.sum()) == w.witness.groups
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


@pytest.mark.parametrize("name, layout, then", [("sfu.rcp", None, 4), ("memory.copy", "tile", 3)])
def test_a_launch_the_runtime_dropped_is_missing_from_the_count(vulkan_device, monkeypatch, name, layout, then):
    w = prepared(vulkan_device, name, layout)
    try:
        w.run(1)
        kept = w.witness.groups
        monkeypatch.setattr(w.rt, "launch", lambda kernel, grid, args, repeat=1: 0.001)   # a time, no launch
        w.run(then)
        monkeypatch.undo()
        problem, evidence = w.witness.check()
        groups, launches = w.witness.groups, w.witness.launches
        assert groups > kept and launches > 1
        assert problem == (f"the kernel counted {kept} workgroups of the {launches} launches of {groups} workgroups:"
                           f" launches lost or cut short, their time not the kernel's")
        assert evidence == f"{kept} of {groups} workgroups counted"
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


# Each CUDA/HIP kernel with the count: (source, entry point) -> the workload's buffers before the word.
CUDA_KERNELS = {("alu.cu", "alu"): 2, ("sfu.cu", "sfu"): 2, ("atomic.cu", "atomic"): 1, ("onchip.cu", "l2_read"): 2,
                ("onchip.cu", "shared_read"): 2, ("tensor_mma.cu", "mma_peak"): 3, ("tensor_wgmma.cu", "wgmma_peak"): 3,
                ("matrix_amd.cu", "mma_peak"): 3}


@pytest.mark.parametrize("source, entry", sorted(CUDA_KERNELS))
def test_the_count_is_the_parameter_after_the_buffers_in_every_cuda_and_hip_kernel(source, entry):
    import re

    import fake_hip
    from peakbench.sources import SHADERS
    text = (SHADERS / source).read_text()
    signature = re.search(rf"\b{entry}\(([^)]*)\)\s*{{", text, re.S)
    assert signature, f"no {entry}( in {source}"
    params = [p.strip() for p in signature.group(1).split(",")]
    at = CUDA_KERNELS[(source, entry)]
    assert all("*" in p for p in params[:at]) and "workgroups_done" in params[at], params
    assert all("*" not in p for p in params[at + 1:]), params          # the scalars follow it
    if source != "tensor_wgmma.cu":                                    # fake HIP plays what HIP runs
        assert fake_hip.WITNESS_ARG[entry] == at
    body = text[signature.end():text.index("\n}", signature.end()) + 2]          # up to the kernel's closing brace
    assert re.search(r"if \(threadIdx\.x == 0\) atomicAdd\(workgroups_done, 1u\);\s*//[^\n]*\n}$", body), \
        "the count is the kernel's last statement"


def test_the_measured_stream_kernel_counts_through_the_parameter_after_dst():
    """mem.cu's stream takes the count after dst only where it is built with WITNESS_SLOTS (the
    fill and the checks' reads keep their signature), adds to its block's slot as its first act,
    before any of the tile's traffic, and fake_hip counts the same argument."""
    import re

    import fake_hip
    from peakbench.sources import SHADERS
    text = (SHADERS / "mem.cu").read_text()
    assert re.search(r"#ifdef WITNESS_SLOTS\n#define WITNESS_PARAM , unsigned\* __restrict__ workgroups_done\n"
                     r"#else\n#define WITNESS_PARAM\n#endif", text)
    signature = re.search(r"\bstream\(([^)]*)\)\s*{", text, re.S)
    params = [p.strip() for p in signature.group(1).split(",")]
    assert params[1].endswith("dst WITNESS_PARAM") and all("*" not in p for p in params[2:]), params
    assert fake_hip.WITNESS_ARG["stream"] == 2 and fake_hip.COUNTS_ONLY_WITH["stream"] == "WITNESS_SLOTS"
    body = text[signature.end():text.index("\n}", signature.end()) + 2]
    assert re.match(r"\n#ifdef WITNESS_SLOTS\n    if \(threadIdx\.x == 0\) atomicAdd\(workgroups_done \+ \(blockIdx\.x %"
                    r" WITNESS_SLOTS\) \* WITNESS_STRIDE, 1u\);\n#endif\n", body), "the count is the kernel's first act"


def test_the_measured_vulkan_stream_counts_as_each_workgroups_first_act():
    """mem_stream.comp's count comes before the mode's loads and stores, as mem.cu's does."""
    import re

    from peakbench.sources import SHADERS
    text = (SHADERS / "mem_stream.comp").read_text()
    body = text[text.index("void main() {"):]
    assert re.match(r"void main\(\) {\n    uint tid = gl_GlobalInvocationID\.x;\n#ifdef WITNESS_SLOTS\n"
                    r"    if \(gl_LocalInvocationIndex == 0\)\n        atomicAdd\(workgroups_done\[\(gl_WorkGroupID\.x %"
                    r" WITNESS_SLOTS\) \* WITNESS_STRIDE\], 1u\);\n#endif\n", body), "the count is the kernel's first act"


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


def test_a_kernel_that_counts_each_invocation_is_told_from_lost_launches():
    rt = WordOnly()
    witness = Witness(rt)
    witness.launch(None, 4, [], [np.uint32(1)])
    rt.words[witness.buffer][0] = 4 * 256                # every invocation added one, not the first alone
    assert witness.check()[0] == ("the kernel counted 1024 workgroups of the 1 launches of 4 workgroups: more than one"
                                  " count a workgroup: the kernel's count is not the launches'")
    witness.close()


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

"""The workloads CUDA and ROCm share (peakbench/simt), driven end to end through the ROCm runtime
on the fake HIP runtime: numpy players stand in for shaders/alu.cu and shaders/mem.cu, written
from the kernels' own comments, so a wrong layout, a lost step or a wrong byte count on the host
side fails here, in CI, without a GPU."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import fake_hip
from peakbench.catalog import Variant, default_catalog
from peakbench.catalog import alu_reference as ref
from peakbench import kernels
from peakbench.workloads import alu, chase, launch, stream

CATALOG = default_catalog()
MIB = 1 << 20


@pytest.fixture
def rt(monkeypatch):
    """A small fake GPU: 2 CUs of 256 resident threads, 64 MiB free (a 16 MiB stream buffer)."""
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    gpu = fake_hip.mi300x(multiProcessorCount=2, maxThreadsPerMultiProcessor=256, totalGlobalMem=(1 << 30) + 64 * MIB)
    hip, rtc = fake_hip.pair([gpu])
    fake_hip.install(monkeypatch, hip, rtc)
    import peakbench.rocm
    device = peakbench.rocm.create().open(0)
    device.rt.fake = hip
    yield device.rt
    device.close()


def args(launch):
    return launch["extra"]


def words(fake, arg) -> np.ndarray:
    return np.frombuffer(fake.buffer(arg), np.uint32).reshape(-1, 4)


def lowbias32(x):
    x = x.astype(np.uint64) & 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    x ^= x >> 16
    return x.astype(np.uint32)


def stream_player(bug: str = ""):
    """shaders/mem.cu `stream`, by its comment: fill, read (chunk, stride or rows), write/copy tiles."""
    def play(fake, launch):
        d = fake_hip.defines(launch["options"])
        mode, unroll, layout = int(d["MODE"]), int(d.get("UNROLL", 4)), int(d.get("LAYOUT", 0))
        src_arg, dst_arg, *scalars = args(launch)
        passes, n, mask, shift = (fake_hip.scalar(x) for x in scalars)
        src, dst = words(fake, src_arg), words(fake, dst_arg)
        blocks, block = launch["grid"][0], launch["block"][0]
        tid = np.arange(blocks * block)
        if mode == 3:
            i = np.arange(n, dtype=np.uint64)
            dst[:n] = np.stack([lowbias32(4 * i + k) for k in range(4)], axis=1)
        elif mode == 0 and layout == 2:       # unroll rows; block b sums column b % columns of each
            row = n // unroll
            columns = row // block
            for b in range(blocks):
                c = b if bug == "wrap" else (b + (1 if bug == "layout" else 0)) % columns
                at = c * block + np.arange(block)
                total = sum(src[u * row + at].astype(np.uint64).sum(axis=0) for u in range(unroll))
                dst[c if bug == "wrap" else b % columns] = (total % (1 << 32)).astype(np.uint32)
        elif mode == 0:
            chunk = layout == 0 and bug != "layout"
            span, lane = (n // blocks, block) if chunk else (n, blocks * block)
            acc = np.zeros((len(tid), 4), np.uint64)
            for p in range(passes):
                # chunk: block b's slice b + p * shift, wrapped at mask; stride: the whole grid
                base = ((tid // block + p * shift) * span + tid % block) & 0xFFFFFFFF if chunk else tid
                for i in range(0, span - (lane * unroll if bug == "short" else 0), lane * unroll):
                    for u in range(unroll):
                        acc += src[(base + i + u * lane) & (mask if chunk else 0xFFFFFFFF)]
            dst[:len(tid)] = (acc % (1 << 32)).astype(np.uint32)
        else:                                   # block b on tile b % tiles (b, without the wrap)
            tiles = n // (block * unroll)
            tile = tid // block if bug == "wrap" else (tid // block) % tiles
            if bug == "short":                  # every block's last thread stores nothing
                tile, tid = tile[tid % block != block - 1], tid[tid % block != block - 1]
            j = (tile * block * unroll + tid % block)[:, None] + np.arange(unroll) * block
            j = j.ravel().astype(np.uint32)
            dst[j] = src[j] if mode == 2 else np.stack([j, j ^ np.uint32(0x5BD1E995), ~j, j * np.uint32(2654435761)], 1)
    return play


@pytest.mark.parametrize("test, layout", [("memory.read", "chunk"), ("memory.read", "stride"), ("memory.read", "rows"),
                                          ("memory.write", "tile"), ("memory.copy", "tile")])
def test_streams_verify_and_count_their_bytes(rt, test, layout):
    rt.fake.kernels["stream"] = stream_player()
    spec = CATALOG.get(test)
    variant = next(v for v in spec.variants if v.name == layout)
    w = stream.StreamWorkload(spec, variant, rt, kernels.STREAM)
    try:
        assert w.verify() is None
        assert w.params["buffer_bytes"] == 16 * MIB and w.n_vec % w.step == 0
        launches = len(rt.fake.launches)
        w.run(3)
        runs = rt.fake.launches[launches:]
        if layout == "rows":          # one launch of 3 passes' columns, taken in order
            assert len(runs) == 1 and runs[0]["grid"][0] == 3 * w.n_vec // (w.block * variant.unroll)
            assert runs[0]["block"][0] == w.block == 1024
        elif layout == "tile":        # one launch of 3 passes' tiles, one block per tile
            assert len(runs) == 1 and runs[0]["grid"][0] == 3 * w.n_vec // (256 * variant.unroll)
        else:                         # a resident grid (2 blocks per CU), the passes inside
            assert len(runs) == 1 and runs[0]["grid"][0] == 4 and fake_hip.scalar(args(runs[0])[2]) == 3
        assert w.items(3) == 3_145_728          # 3 passes over the 16 MiB buffer's 1 Mi vectors
    finally:
        w.close()


@pytest.mark.parametrize("test, layout, bug", [("memory.read", "chunk", "layout"), ("memory.read", "stride", "short"),
                                               ("memory.read", "rows", "layout"), ("memory.read", "rows", "wrap"),
                                               ("memory.write", "tile", "short"), ("memory.write", "tile", "wrap"),
                                               ("memory.copy", "tile", "short"), ("memory.copy", "tile", "wrap")])
def test_a_kernel_that_reads_or_writes_the_wrong_vectors_fails(rt, test, layout, bug):
    rt.fake.kernels["stream"] = stream_player(bug)
    spec = CATALOG.get(test)
    w = stream.StreamWorkload(spec, next(v for v in spec.variants if v.name == layout), rt, kernels.STREAM)
    try:
        assert ("did not wrap" if bug == "wrap" else "differ from the host reference") in w.verify()
    finally:
        w.close()


ELEMENT_DTYPE = {"double": "fp64", "float": "fp32", "__half2": "fp16", "bfloat162": "bf16", "short": "int16"}


def alu_player(lost_step: bool = False):
    """shaders/alu.cu `alu`: decode the seeds and parameters from the input buffer, take
    iterations * UNROLL steps per accumulator, store every accumulator of every thread."""
    def play(fake, launch):
        d = fake_hip.defines(launch["options"])
        dot = d["STEP_DOT4X8"] == "1"
        dtype = "int8" if dot else ("int32" if d["E"] == "int" else ELEMENT_DTYPE[d["E"]])
        kernel = "dot4x8" if dot else "fma"
        lanes = 2 if d["E"] in ("__half2", "bfloat162") else 1
        width, acc, unroll = int(d["VEC"]) * lanes, int(d["ACC"]), int(d["UNROLL"])
        out_arg, in_arg, iterations = args(launch)
        raw = bytes(fake.buffer(in_arg))
        if dtype == "bf16":
            values = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            values = np.frombuffer(raw, ref.DTYPES[dtype])
        seeds = values[:256 * width].reshape(256, width)
        params = values[256 * width:].reshape(-1, width)
        threads = launch["grid"][0] * launch["block"][0]
        steps = fake_hip.scalar(iterations) * unroll - (1 if lost_step else 0)
        got = ref.reference(kernel, dtype, ref.AluInputs(seeds, params), acc, steps, np.arange(threads))
        if dtype == "bf16":
            data = (got.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
        else:
            data = got.astype(ref.DTYPES[dtype]).tobytes()
        fake.buffer(out_arg)[:] = data
    return play


@pytest.mark.parametrize("test", ["compute.fp32", "compute.fp16", "compute.bf16", "compute.int16", "compute.int8"])
def test_alu_workloads_verify_through_the_runtime(rt, test):
    rt.fake.kernels["alu"] = alu_player()
    spec = CATALOG.get(test)
    variant = kernels.variants(spec)[-1]
    w = alu.AluWorkload(spec, variant, rt, kernels.alu_kernel(spec, variant, rt))
    try:
        assert w.verify() is None
        # 2 CUs x 256 threads x 4 waves; ops = threads * iterations * unroll * accumulators * ops/step
        assert w.threads == 2048
        assert w.items(5) == 2048 * 5 * variant.unroll * spec.accumulators     # steps of every chain
        options = fake_hip.defines(rt.fake.launches[-1]["options"])
        assert options["VEC"] == str(variant.width // (2 if test in ("compute.fp16", "compute.bf16") else 1))
    finally:
        w.close()
    rt.fake.kernels["alu"] = alu_player(lost_step=True)
    w = alu.AluWorkload(spec, variant, rt, kernels.alu_kernel(spec, variant, rt))
    try:
        assert "differ from the host reference" in w.verify()
    finally:
        w.close()


def test_bf16_runs_the_fma_family_with_packed_pairs():
    bf16 = CATALOG.get("compute.bf16")
    assert kernels.alu_kernel(bf16, kernels.variants(bf16)[0], None).family == "fma"
    assert [v.width for v in kernels.variants(bf16)] == [2, 4]
    assert kernels.variants(CATALOG.get("compute.fp32")) == CATALOG.get("compute.fp32").variants


def chase_player(off_by_one: bool = False):
    """shaders/mem.cu `chase`: follow next[] rounds * 256 times from start, store where it ends."""
    def play(fake, launch):
        nxt_arg, out_arg, rounds, start = args(launch)
        nxt = np.frombuffer(fake.buffer(nxt_arg), np.uint32)
        cycle, i = [], fake_hip.scalar(start)
        while not cycle or i != cycle[0]:
            cycle.append(i)
            i = int(nxt[i])
        end = cycle[(fake_hip.scalar(rounds) * 256 + (1 if off_by_one else 0)) % len(cycle)]
        np.frombuffer(fake.buffer(out_arg), np.uint32)[0] = end
    return play


def chase_time(launch) -> float:
    """100 ns a load (ms for the fake's events)."""
    return fake_hip.scalar(args(launch)[2]) * 256 * 1e-4 if launch["function"] == "chase" else 2.5


def test_the_chase_sweep_walks_every_working_set_and_checks_where_it_ends(rt):
    rt.fake.kernels["chase"] = chase_player()
    rt.fake.elapsed_ms = lambda launch: chase_time(launch)
    sweep = chase.ChaseSweep(chase.Chaser(rt, kernels.chase_kernel(rt)), 256 * 1024, first_level=1)
    assert sweep.problem is None
    assert sweep.sizes == [4096 << i for i in range(7)]
    assert sweep.latencies == pytest.approx([100.0] * 7)
    assert sweep.cycles == []                 # HIP: no cycle counter is trusted
    rt.fake.kernels["chase"] = chase_player(off_by_one=True)
    broken = chase.ChaseSweep(chase.Chaser(rt, kernels.chase_kernel(rt)), 8192, first_level=1)
    assert "the chase ended at" in broken.problem


def test_the_device_routes_each_family_and_shares_one_sweep(rt, monkeypatch):
    import peakbench.rocm
    device = peakbench.rocm.create().open(0)
    try:
        assert device.support(CATALOG.get("compute.fp4")).startswith("[")
        assert device.support(CATALOG.get("memory.read")) is None
        assert device.variants(CATALOG.get("compute.bf16")) == kernels.FAMILIES["bf16dot"][1]
        made = []
        monkeypatch.setattr(chase, "sweep", lambda rt, kernel, max_bytes: made.append(rt) or "the sweep")
        for name in ("latency.l1", "latency.dram"):
            w = device.prepare(CATALOG.get(name), Variant("chase"))
            assert w.sweep == "the sweep" and "VGPR" in w.params["path"]
        assert len(made) == 1
        assert isinstance(device.prepare(CATALOG.get("launch.overhead"), Variant("empty")), launch.LaunchWorkload)
    finally:
        device.close()


def test_a_workload_that_fails_part_way_frees_what_it_allocated(rt):
    """The fill launch fails after both 16 MiB buffers exist: the error goes on, the buffers go."""
    rt.fake.fail["hipModuleLaunchKernel"] = fake_hip.hipError_t.hipErrorLaunchFailure
    spec = CATALOG.get("memory.copy")
    before = len(rt.fake.memory)
    with pytest.raises(Exception, match="hipModuleLaunchKernel"):
        stream.StreamWorkload(spec, spec.variants[0], rt, kernels.STREAM)
    assert rt.fake.names().count("hipFree") == 2
    assert len(rt.fake.memory) == before

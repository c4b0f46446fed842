"""peakbench.workloads.stream: the stream kernels' data contract (hash, sums, checks that name the
first wrong word), the sweep's slices, the workload driven through the ROCm runtime on the fake HIP
runtime (a player of shaders/mem.cu `stream`, written from its comments), and the Vulkan memory
tests on a real device (lavapipe here), each with a planted fault."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import fake_hip
from peakbench import kernels
from peakbench.catalog import default_catalog
from peakbench.harness import runner
from peakbench.workloads import stream
from test_workloads import args, rt, words  # noqa: F401  (rt is a fixture)

CATALOG = default_catalog()
KIB, MIB = 1024, 1 << 20


def test_stream_host_reference():
    mem = stream
    # lowbias32 is a bijection: no two indices get the same word, so no compressible runs.
    h = mem.hash32(np.arange(1 << 16, dtype=np.uint32))
    assert len(np.unique(h)) == 1 << 16
    assert mem.hash32(np.array([0, 1], np.uint32)).tolist() == [0, 1753845952]
    w = mem.written(np.array([3]))
    assert w.tolist() == [[3, 3 ^ 0x5BD1E995, 0xFFFFFFFC, (3 * 2654435761) % 2**32]]


def test_stream_check_names_the_first_wrong_word():
    blocks, block, n = 2, 2, 8                       # a chunk of 4 vectors per block
    good = stream.filled(n)
    assert stream.check_stream("copy", good.copy(), n, blocks, block) is None
    bad = good.copy()
    bad[5, 2] ^= 1
    assert "1 of 32 words" in stream.check_stream("copy", bad, n, blocks, block)
    assert "(first at (5, 2))" in stream.check_stream("copy", bad, n, blocks, block)
    # Thread x of block b sums vectors b*4 + x and b*4 + x + 2 (its block's chunk, block-strided).
    sums = np.array([good[b * 4 + x].astype(np.uint64) + good[b * 4 + x + 2] for b in range(2) for x in range(2)])
    assert stream.check_stream("read", (sums % (1 << 32)).astype(np.uint32), n, blocks, block) is None
    grid_stride = good.reshape(2, 4, 4).astype(np.uint64).sum(axis=0) % (1 << 32)
    assert stream.check_stream("read", grid_stride.astype(np.uint32), n, blocks, block) is not None
    # Stride layout: thread t of the 4 sums vectors t and t + 4.
    strided = np.array([good[t].astype(np.uint64) + good[t + 4] for t in range(4)]) % (1 << 32)
    assert stream.check_stream("read", strided.astype(np.uint32), n, blocks, block, "stride") is None
    assert stream.check_stream("read", (sums % (1 << 32)).astype(np.uint32), n, blocks, block, "stride") is not None


def test_the_rows_read_checks_each_columns_total():
    # 16 vectors as 2 rows of 2 columns of 4 (the workgroup size): column c is vectors
    # 4c..4c+3 of row 0 and 8+4c..8+4c+3 of row 1.
    v = stream.filled(16).astype(np.uint64)
    want = np.array([v[0:4].sum(axis=0) + v[8:12].sum(axis=0), v[4:8].sum(axis=0) + v[12:16].sum(axis=0)])
    want = (want % (1 << 32)).astype(np.uint32)
    assert (stream.read_sums(16, 2, 4, "rows", rows=2) == want).all()
    assert stream.check_stream("read", want.copy(), 16, 2, 4, "rows", rows=2) is None
    tiles = (v.reshape(2, 8, 4).sum(axis=1) % (1 << 32)).astype(np.uint32)   # contiguous tiles instead
    assert "differ from the host reference" in stream.check_stream("read", tiles, 16, 2, 4, "rows", rows=2)


def test_passes_split_into_as_few_dispatches_as_the_grid_limit_allows():
    assert stream.pass_dispatches(64, 1024, 65535) == (32, 2)
    assert stream.pass_dispatches(1, 1024, 65535) == (1, 1)
    assert stream.pass_dispatches(48, 1024, (1 << 31) - 1) == (48, 1)
    assert stream.pass_dispatches(6, 1024, 4096) == (3, 2)      # a divisor, so passes stay exact
    with pytest.raises(ValueError, match="do not fit"):       # not even one pass fits the grid
        stream.pass_dispatches(4, 1 << 20, 65535)


def test_the_two_pass_check_catches_a_second_pass_that_did_not_wrap():
    n, block, rows = 16, 4, 2                          # 2 columns, checked over 2 passes
    want = stream.read_sums(n, 2, block, "rows", rows=rows)
    got = np.full((4, 4), 0xFFFFFFFF, np.uint32)
    got[:2] = want
    assert stream.check_wrapped("read", got.ravel(), n, block, rows, "rows") is None
    got[3] = want[1]                                   # workgroup 3 wrote column 3, not 1
    assert "did not wrap" in stream.check_wrapped("read", got.ravel(), n, block, rows, "rows")
    written = np.full((2 * n, 4), 0xFFFFFFFF, np.uint32)   # the write: n vectors a pass
    written[:n] = stream.written(np.arange(n))
    assert stream.check_wrapped("write", written.ravel(), n, block, 1, "tile") is None
    written[n] = stream.written(np.arange(n, n + 1))[0]
    assert "did not wrap" in stream.check_wrapped("write", written.ravel(), n, block, 1, "tile")
    copied = np.full((2 * n, 4), 0xFFFFFFFF, np.uint32)    # the copy: the filled data, n a pass
    copied[:n] = stream.filled(n)
    assert stream.check_wrapped("copy", copied.ravel(), n, block, 1, "tile") is None
    copied[n:] = stream.filled(2 * n)[n:]
    assert "did not wrap" in stream.check_wrapped("copy", copied.ravel(), n, block, 1, "tile")
    with pytest.raises(ValueError, match="two passes"):      # a short download cannot pass
        stream.check_wrapped("copy", copied.ravel()[:n * 4], n, block, 1, "tile")


def test_read_sums_follow_the_rotating_slices():
    # 2 blocks of 2 threads, 8 vectors: slices of 4. Pass 0: block b reads slice b; pass 1 (shift 1,
    # wrapped at 8 vectors): block 0 reads slice 1, block 1 slice 2 = slice 0.
    v = stream.filled(8).astype(np.uint64)
    want = [v[b * 4 + x] + v[b * 4 + x + 2] + v[(1 - b) * 4 + x] + v[(1 - b) * 4 + x + 2]
            for b in range(2) for x in range(2)]
    got = stream.read_sums(8, 2, 2, passes=2, shift=1, mask=7)
    assert (got == np.array(want) % (1 << 32)).all()
    assert (stream.read_sums(8, 2, 2, passes=2, shift=0, mask=7) != got).any()


def test_sweep_slices_never_share_a_pass_once_the_working_set_is_large():
    blocks, tile = 264, 4096                         # the H200: 132 SMs x 2, 256 threads x 16
    for ws in (4 * KIB, 64 * KIB, MIB, 16 * MIB, 64 * MIB, 512 * MIB):
        span = stream.sweep_span(ws, blocks, tile)
        assert span % tile == 0 and span & (span - 1) == 0
        if ws // 16 >= blocks * tile:                # each workgroup its own slice, half the set or more
            assert ws // 32 < blocks * span <= ws // 16
        else:                                        # small sets: one tile each, read several times
            assert span == tile
    shift = stream.sweep_shift(blocks)
    for slices in (1 << k for k in range(11)):       # a workgroup visits every slice, not its L1's few
        assert all(len({(g + p * shift) % slices for p in range(slices)}) == slices for g in (0, 1, 131))
    for slices in (512, 1024, 4096):                 # and a slice comes back about a ring later
        assert median_reuse(slices, blocks, shift) >= 0.9 * slices
        assert median_reuse(slices, blocks, 1) < 0.6 * slices       # one slice a pass: half a ring
        assert median_reuse(slices, blocks, 0) < 0.6 * slices       # no move: the grid's width


def median_reuse(slices: int, blocks: int, shift: int) -> float:
    """Median count of slice reads between two reads of one slice, blocks in order each pass."""
    last, gaps, i = {}, [], 0
    for p in range(4 * slices // blocks + 4):
        for g in range(blocks):
            s = (g + p * shift) % slices
            if s in last:
                gaps.append(i - last[s])
            last[s], i = i, i + 1
    return float(np.median(gaps))


def test_the_bandwidth_sweep_counts_what_its_launches_read():
    calls = []

    def run(passes, n, mask, shift):
        calls.append((passes, n, mask))
        assert shift == (0 if mask == 0xFFFFFFFF else 5)   # 4 workgroups: an odd step of a whole window
        return passes * n * 16 / 1e12                # 1 TB/s whatever the size
    s = runner.sweep(stream.BandwidthSweep(run, blocks=4, tile=64, max_bytes=2 * MIB, sample_s=1e-6)).series()
    assert s["working_set_bytes"] == [4 * KIB << i for i in range(10)]
    assert s["GB/s"] == pytest.approx([1000.0] * 10)
    # Rotating slices wrapped at the working set up to 4 x 256 KiB; private slices (no wrap) from there.
    assert {mask + 1 for _, _, mask in calls} == {ws // 16 for ws in s["working_set_bytes"][:-2]} | {1 << 32}
    assert all(n % (4 * 64) == 0 for _, n, _ in calls)


def test_large_working_sets_give_each_workgroup_a_private_slice():
    blocks, tile = 264, 4096                         # the H200
    for ws in (4 * KIB, 16 * MIB, 64 * MIB):         # rotating slices, wrapped at the working set
        n, mask, shift = stream.sweep_point(ws, blocks, tile)
        assert mask == ws // 16 - 1 and shift == 265
    for ws in (128 * MIB, 512 * MIB):                # each workgroup its own 256 KiB or more
        n, mask, shift = stream.sweep_point(ws, blocks, tile)
        assert (mask, shift) == (0xFFFFFFFF, 0) and 0.9 * ws <= n * 16 <= ws and n // blocks * 16 >= stream.PRIVATE_SLICE


# -- on a real Vulkan device ---------------------------------------------------------------------

STREAMS = [t for t in CATALOG.tests if t.kernel == "stream"]


@pytest.mark.parametrize("test", STREAMS, ids=[t.name for t in STREAMS])
def test_stream_kernels_verify_and_a_planted_fault_is_caught(vulkan_device, test):
    w = vulkan_device.prepare(test, test.variants[0])
    try:
        assert w.verify() is None
        assert w.params["buffer_bytes"] <= 256 * MIB or vulkan_device.info.kind != "cpu"
        assert w.items(2) == 2 * w.items(1) > 0
        if test.dtype != "write":       # read and copy check the filled data: spoil it
            vulkan_device.rt.fill(w.src, 0x01)
            assert "differ from the host reference" in (w.verify() or "")
    finally:
        w.close()


READS = CATALOG.get("memory.read").variants


@pytest.mark.parametrize("variant", READS, ids=[v.name for v in READS])
def test_every_read_layout_verifies_and_a_planted_fault_is_caught(vulkan_device, variant):
    if variant not in vulkan_device.variants(CATALOG.get("memory.read")):
        pytest.skip(f"this device does not offer the {variant.name} read")
    w = vulkan_device.prepare(CATALOG.get("memory.read"), variant)
    try:
        assert w.verify() is None
        assert w.items(3) * 16 == 3 * w.params["buffer_bytes"]
        vulkan_device.rt.fill(w.src, 0x01)
        assert "differ from the host reference" in (w.verify() or "")
    finally:
        w.close()


@contextlib.contextmanager
def recorded_dispatches(device, max_workgroups: int | None = None):
    """The (workgroups, repeat) of each dispatch made inside, under a grid limit if given."""
    device = device.rt.dev
    seen, dispatch, limit = [], device.dispatch, device.caps.max_workgroups

    def recorded(p, groups, push, **kw):
        seen.append((groups, kw.get("repeat", 1)))
        return dispatch(p, groups, push, **kw)
    device.dispatch = recorded
    device.caps.max_workgroups = max_workgroups or limit
    try:
        yield seen
    finally:
        device.dispatch, device.caps.max_workgroups = dispatch, limit


def test_the_rows_read_dispatches_passes_times_columns_workgroups(vulkan_device):
    test = CATALOG.get("memory.read")
    w = vulkan_device.prepare(test, next(v for v in test.variants if v.name == "rows"))
    try:
        columns = w.n_vec // w.tile
        with recorded_dispatches(vulkan_device) as seen:
            w.run(2)
        with recorded_dispatches(vulkan_device, columns) as limited:   # a grid limit that fits one pass
            w.run(2)
        assert seen == [(2 * columns, 1)] and limited == [(columns, 2)]
        assert w.params["workgroups"] == columns
    finally:
        w.close()


@pytest.mark.parametrize("test", ["memory.write", "memory.copy"])
def test_write_and_copy_dispatch_passes_times_tiles(vulkan_device, test):
    spec = CATALOG.get(test)
    w = vulkan_device.prepare(spec, spec.variants[0])
    try:
        tiles = w.n_vec // w.tile
        with recorded_dispatches(vulkan_device, 2 * tiles) as seen:     # two passes fit a dispatch
            w.run(4)
            w.run(3)                                                   # 3 is odd: one pass a dispatch
        assert seen == [(2 * tiles, 2), (tiles, 3)]
        assert w.items(4) == 4 * w.n_vec
    finally:
        w.close()


SEAMS = {"memory.write": "uint tile = gl_WorkGroupID.x % (push.n_vec / (gl_WorkGroupSize.x * UNROLL));",
         "memory.copy": "uint tile = gl_WorkGroupID.x % (push.n_vec / (gl_WorkGroupSize.x * UNROLL));",
         "memory.read": "column = gl_WorkGroupID.x % (row / gl_WorkGroupSize.x);"}


@pytest.mark.parametrize("test", sorted(SEAMS))
def test_a_shader_that_does_not_wrap_fails_verification(vulkan_device, shaders, tmp_path, monkeypatch, test):
    """The shipped shader with its `% count` taken out: the second pass runs past the first's
    work, and verify() says so."""
    module, _ = shaders
    text = (module.SHADERS / "mem_stream.comp").read_text()
    assert SEAMS[test] in text
    (tmp_path / "mem_stream.comp").write_text(text.replace(SEAMS[test], SEAMS[test].split(" %")[0] + ";"))
    monkeypatch.setattr(module, "SHADERS", tmp_path)
    spec = CATALOG.get(test)
    w = vulkan_device.prepare(spec, spec.variants[0])          # rows for the read
    try:
        assert "did not wrap" in (w.verify() or "")
    finally:
        w.close()


def test_the_sweep_kernel_reads_the_rotating_slices_the_host_expects(vulkan_device):
    test = CATALOG.get("memory.read")
    chunk = next(v for v in test.variants if v.name == "chunk")
    w = vulkan_device.prepare(test, chunk)
    try:
        ws = 1 << (w.n_vec.bit_length() - 2)             # a working set below the buffer
        n = w.resident * stream.sweep_span(ws * 16, w.resident, w.tile)
        vulkan_device.rt.fill(w.dst, 0xFF)
        shift = stream.sweep_shift(w.resident)
        w.run(3, n, ws - 1, shift)
        got = np.frombuffer(vulkan_device.rt.download(w.dst, w.threads * 16), np.uint32)
        assert stream.check_stream("read", got, n, w.resident, w.params["workgroup_size"], "chunk",
                                   passes=3, shift=shift, mask=ws - 1) is None
        assert stream.check_stream("read", got, n, w.resident, w.params["workgroup_size"], "chunk",
                                   passes=3, shift=0, mask=ws - 1) is not None
    finally:
        w.close()


def test_read_sweep_covers_each_working_set(vulkan_device):
    test = CATALOG.get("memory.read")
    w = vulkan_device.prepare(test, next(v for v in test.variants if v.name == "chunk"))
    try:
        s = runner.sweep(w.sweep_of(0.001)).series()
    finally:
        w.close()
    sizes = s["working_set_bytes"]
    assert sizes[0] == 4096 and sizes[-1] <= w.params["buffer_bytes"] < 2 * sizes[-1]
    assert len(s["GB/s"]) == len(s["working_set_bytes"]) and min(s["GB/s"]) > 0



# -- through the ROCm runtime, on the fake HIP runtime -------------------------------------------

def lowbias32(x):
    x = x.astype(np.uint64) & 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    x ^= x >> 16
    return x.astype(np.uint32)


def stream_args(launch) -> list:
    """A stream launch's arguments less the count (the measured kernel's parameter after dst)."""
    given = list(args(launch))
    if "WITNESS_SLOTS" in fake_hip.defines(launch["options"]):
        del given[2]
    return given


def stream_player(bug: str = ""):
    """shaders/mem.cu `stream`, by its comment: fill, read (chunk, stride or rows), write/copy/update tiles."""
    def play(fake, launch):
        d = fake_hip.defines(launch["options"])
        mode, unroll, layout = int(d["MODE"]), int(d.get("UNROLL", 4)), int(d.get("LAYOUT", 0))
        src_arg, dst_arg, *scalars = stream_args(launch)
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
            if mode == 4:
                np.add.at(dst, j, src[j])       # once per pass that reaches j; uint32 wraps, as the kernel's adds do
            else:
                dst[j] = src[j] if mode == 2 else np.stack([j, j ^ np.uint32(0x5BD1E995), ~j, j * np.uint32(2654435761)], 1)
    return play


@pytest.mark.parametrize("test, layout", [("memory.read", "chunk"), ("memory.read", "stride"), ("memory.read", "rows"),
                                          ("memory.write", "tile"), ("memory.copy", "tile"), ("memory.update", "tile")])
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
        if layout == "rows":          # one launch of 3 passes' columns: 3 * 1 Mi vectors / (1024 threads * 32)
            assert len(runs) == 1 and runs[0]["grid"][0] == 96
            assert runs[0]["block"][0] == w.block == 1024
        elif test == "memory.update":  # a launch a pass (adds to one vector must not race): 1 Mi / 256 tiles each
            assert [r["grid"][0] for r in runs] == [4096] * 3
        elif layout == "tile":        # one launch of 3 passes' tiles, one block per tile: 3 * 1 Mi / (256 * 1)
            assert len(runs) == 1 and runs[0]["grid"][0] == 12_288
        else:                         # a resident grid (2 blocks per CU), the passes inside
            assert len(runs) == 1 and runs[0]["grid"][0] == 4 and fake_hip.scalar(stream_args(runs[0])[2]) == 3
        assert w.items(3) == 3_145_728          # 3 passes over the 16 MiB buffer's 1 Mi vectors
    finally:
        w.close()


@pytest.mark.parametrize("test, layout, bug", [("memory.read", "chunk", "layout"), ("memory.read", "stride", "short"),
                                               ("memory.read", "rows", "layout"), ("memory.read", "rows", "wrap"),
                                               ("memory.write", "tile", "short"), ("memory.write", "tile", "wrap"),
                                               ("memory.copy", "tile", "short"), ("memory.copy", "tile", "wrap"),
                                               ("memory.update", "tile", "short")])   # update: no wrap, a launch a pass
def test_a_kernel_that_reads_or_writes_the_wrong_vectors_fails(rt, test, layout, bug):
    rt.fake.kernels["stream"] = stream_player(bug)
    spec = CATALOG.get(test)
    w = stream.StreamWorkload(spec, next(v for v in spec.variants if v.name == layout), rt, kernels.STREAM)
    try:
        assert ("did not wrap" if bug == "wrap" else "differ from the host reference") in w.verify()
    finally:
        w.close()


# -- the coverage guard: the whole buffer, as the measurement runs it ----------------------------

def far_player(mode_bug: str):
    """The stream player with a fault only a full-size launch shows: past the first few vectors a
    thread reads ("read") or a workgroup's tile ("write"), nothing more is read or written."""
    play = stream_player()

    def short(fake, launch):
        d = fake_hip.defines(launch["options"])
        mode, unroll = int(d["MODE"]), int(d.get("UNROLL", 4))
        src_arg, dst_arg, passes, n, mask, shift = stream_args(launch)
        n = fake_hip.scalar(n)
        blocks, block = launch["grid"][0], launch["block"][0]
        if mode == 0 and mode_bug == "read" and int(d.get("LAYOUT", 0)) == 0:
            # each thread stops after 2 rounds of `unroll` loads a pass (the check's own n needs 2)
            src, dst = words(fake, src_arg), words(fake, dst_arg)
            tid = np.arange(blocks * block)
            span, acc = n // blocks, np.zeros((blocks * block, 4), np.uint64)
            for p in range(fake_hip.scalar(passes)):
                base = (tid // block) * span + tid % block
                for i in range(0, min(span, 2 * block * unroll), block * unroll):
                    for u in range(unroll):
                        acc += src[base + i + u * block]
            dst[:len(tid)] = (acc % (1 << 32)).astype(np.uint32)
        elif (mode, mode_bug) in ((1, "write"), (4, "update")):
            tiles = n // (block * unroll)
            dst = words(fake, dst_arg)
            keep = dst.copy()
            play(fake, launch)
            far = np.arange(n).reshape(tiles, -1)[16:].ravel()    # tiles past the 16th keep what they held
            dst[far] = keep[far]
        else:
            play(fake, launch)
    return short


def test_an_update_that_copies_past_the_checked_vectors_fails_the_coverage_guard(rt):
    """An update that stops reading its destination past the first 16 tiles (a copy's traffic
    there): the first vectors check right, the whole destination over 0xFF bytes does not."""
    play = stream_player()

    def copy_far(fake, launch):
        d = fake_hip.defines(launch["options"])
        if int(d["MODE"]) != 4:
            return play(fake, launch)
        src_arg, dst_arg, *_ = stream_args(launch)
        before = words(fake, dst_arg).copy()
        play(fake, launch)
        dst, src = words(fake, dst_arg), words(fake, src_arg)
        far = np.flatnonzero((dst != before).any(axis=1))
        far = far[far >= 16 * launch["block"][0]]
        dst[far] = src[far]
    rt.fake.kernels["stream"] = copy_far
    spec = CATALOG.get("memory.update")
    w = stream.StreamWorkload(spec, spec.variants[0], rt, kernels.STREAM)
    try:
        assert w.check_first() is None
        problem = w.verify()
        # every thread's slice has vectors past the first 16 tiles: all 1024 sums are off
        assert problem == ("guard coverage: after one pass over known contents, the sums of 1024 of 1024 reading"
                           " threads differ from the host's (the first in vectors 0 to 262143)")
    finally:
        w.close()


def test_an_updates_destination_sums_follow_from_the_sources():
    # 3 passes over 0xFF bytes, 16 vectors read by 2 workgroups of 2 threads (4 vectors a thread):
    # the chunk sums of what the host stores equal update_sums of the source's chunk sums
    n, blocks, block, passes = 16, 2, 2, 3
    src_sums = stream.read_sums(n, blocks, block)
    after = stream.stored("update", n, 0xFF, passes).reshape(blocks, -1, block, 4)
    want = after.sum(axis=1, dtype=np.uint32).reshape(-1, 4)
    assert (stream.update_sums(src_sums, n // (blocks * block), 0xFF, passes) == want).all()
    assert not (stream.update_sums(src_sums, n // (blocks * block), 0xFF, passes - 1) == want).any()


def test_an_update_wrong_in_one_far_word_is_caught_and_its_slice_named(rt):
    play = stream_player()

    def one_word_off(fake, launch):
        play(fake, launch)
        if int(fake_hip.defines(launch["options"])["MODE"]) == 4:
            words(fake, args(launch)[1])[700_000, 2] ^= np.uint32(1)
    rt.fake.kernels["stream"] = one_word_off
    spec = CATALOG.get("memory.update")
    w = stream.StreamWorkload(spec, spec.variants[0], rt, kernels.STREAM)
    try:
        assert w.check_first() is None
        # 4 workgroups over 1 Mi vectors: vector 700000 is in the third's slice
        assert w.verify() == ("guard coverage: after one pass over known contents, the sums of 1 of 1024 reading"
                              " threads differ from the host's (the first in vectors 524288 to 786431)")
        rt.fake.kernels["stream"] = play
        assert w.verify() is None
        w.run(2)
        w.run(3)
        problem, why = w.after_timing(3)
        assert problem is None and why.startswith("the destination holds all 6 passes since the check")
        w.passes_kept += 1                          # a pass the host counted that the GPU never ran
        problem, _ = w.after_timing(3)
        assert problem == ("after the timed launches (7 passes since the check), vector 0 of 1048576"
                           " (and 4095 more of vectors 0 to 4095) differs from the host's")
    finally:
        w.close()


def test_an_update_checked_against_a_source_the_fill_got_wrong_fails(rt):
    # the whole-buffer check reads the source the kernel read: that source must be the host's fill
    spec = CATALOG.get("memory.update")
    w = stream.StreamWorkload(spec, spec.variants[0], rt, kernels.STREAM)
    try:
        rt.upload(w.src, np.zeros(64, np.uint32))
        assert w.coverage() == "guard coverage: the source does not hold the host's fill (vectors 0 to 4095)"
    finally:
        w.close()


@pytest.mark.parametrize("test, layout", [("memory.read", "chunk"), ("memory.write", "tile"), ("memory.update", "tile")])
def test_a_kernel_that_skips_the_far_part_of_the_buffer_fails_the_coverage_guard(rt, test, layout):
    rt.fake.kernels["stream"] = far_player(test.split(".")[1])
    spec = CATALOG.get(test)
    w = stream.StreamWorkload(spec, next(v for v in spec.variants if v.name == layout), rt, kernels.STREAM)
    try:
        assert w.check_first() is None                 # the first vectors of each thread are right
        problem = w.verify()
        assert problem.startswith("guard coverage: "), problem
        if test == "memory.read":                     # 4 blocks of 256 threads over 1 Mi vectors, one pass
            assert "1024 of 1024 threads did not read their share" in problem
            assert "read 32 vectors, not 1024" in problem
        elif test == "memory.write":
            assert "left vectors of the 1048576-vector buffer unwritten" in problem
        else:                                         # 16 tiles of 256 vectors are updated, vector 4096 is not
            assert "the sums of 1024 of 1024 reading threads differ from the host's" in problem
        rt.fake.kernels["stream"] = stream_player()
        assert w.verify() is None                     # and the source is refilled after the count
        assert w.evidence["guards"]["coverage"]["why"].startswith("all 1048576 vectors" if layout == "tile" else "one pass")
    finally:
        w.close()


def test_the_read_count_passes_a_good_kernel_and_refills_the_source(rt):
    rt.fake.kernels["stream"] = stream_player()
    spec = CATALOG.get("memory.read")
    w = stream.StreamWorkload(spec, next(v for v in spec.variants if v.name == "chunk"), rt, kernels.STREAM)
    try:
        assert w.verify() is None
        assert w.evidence["guards"]["coverage"]["why"] == "one pass over all 1048576 vectors counted"
        got = np.frombuffer(rt.download(w.src, 64), np.uint32).reshape(4, 4)
        assert (got == stream.filled(4)).all()                           # refilled for the measurement
    finally:
        w.close()


FAR_FAULTS = {   # an edit of mem_stream.comp that leaves the first vectors of each thread right
    "memory.read": ("for (uint i = 0; i < span; i += lane * UNROLL)",
                    "for (uint i = 0; i < min(span, 16384u); i += lane * UNROLL)", "variant chunk", "did not read"),
    "memory.write": ("dst[j] = uvec4(j, j ^ 0x5bd1e995U, ~j, j * 2654435761U);",
                     "if (tile < 4096u) dst[j] = uvec4(j, j ^ 0x5bd1e995U, ~j, j * 2654435761U);",
                     "variant tile", "unwritten"),
    "memory.update": ("dst[j] += src[j];", "if (tile < 4096u) dst[j] += src[j];", "variant tile",
                      "after one pass over known contents", "reading threads differ from the host's"),
}


@pytest.mark.usefixtures("vulkan_backend")
@pytest.mark.parametrize("test", sorted(FAR_FAULTS))
def test_a_shader_skipping_the_far_end_is_failed_by_the_run(tmp_path, test):
    """A plain `peakbench --backend vulkan` run on a shader that reads or writes only the near part
    of its buffer: the result is failed by the coverage guard (the read's fault is in its chunk
    variant, which the screening profile does not run)."""
    from test_guards_planted import assert_caught, run_edited
    old, new, *words_ = FAR_FAULTS[test]
    r = run_edited(tmp_path, "mem_stream.comp", old, new, test, profile=() if test == "memory.read" else ("--quick",))
    assert_caught(r[test], "coverage", *words_)


@pytest.mark.parametrize("n,blocks,block,passes,shift,mask", [
    (64, 4, 4, 3, 3, 63), (128, 8, 4, 2, 5, 127), (64, 4, 4, 1, 0, 0xFFFFFFFF),    # whole spans: rolled
    (96, 4, 4, 2, 1, 127), (48, 3, 4, 2, 1, 63)])                                  # a ring of another size
def test_chunk_sums_match_the_kernels_indexing_loop_by_loop(n, blocks, block, passes, shift, mask):
    """The chunk layout's sums against the kernels' indexing written out element by element."""
    src = stream.filled(n if mask == 0xFFFFFFFF else mask + 1).astype(np.uint64)
    span, want = n // blocks, np.zeros((blocks * block, 4), np.uint64)
    for p in range(passes):
        for b in range(blocks):
            for x in range(block):
                for j in range(span // block):
                    want[b * block + x] += src[((b + p * shift) * span + x + j * block) & mask]
    got = stream.read_sums(n, blocks, block, "chunk", passes, shift, mask)
    assert (got == (want % (1 << 32)).astype(np.uint32)).all()


def test_the_cache_flush_reads_all_of_its_own_hash_filled_buffer(vulkan_device):
    """stream.CacheFlush (the chase's screening sweep reads it in place of a partial walk): one
    pass of the chunk read over the bytes asked in whole steps, every thread's sums the host's."""
    from peakbench.vulkan.kernels import STREAM
    rt = vulkan_device.rt
    flush = stream.CacheFlush(rt, STREAM, 1 << 20)
    try:
        step = flush.groups * stream.STREAM_BLOCK * 8 * 16
        assert (1 << 20) - step < flush.nbytes <= max(1 << 20, step) and flush() > 0
        got = np.frombuffer(rt.download(flush.dst, flush.groups * stream.STREAM_BLOCK * 16), np.uint32)
        want = stream.read_sums(flush.n_vec, flush.groups, stream.STREAM_BLOCK, "chunk")
        assert np.array_equal(got.reshape(want.shape), want)
    finally:
        flush.close()
    assert flush.src is None and flush.reader is None

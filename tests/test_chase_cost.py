"""What the latency sweep spends, and that it still measures what it did: the untimed walk covers
the whole cycle up to twice the last cache's lines (a fake chaser behind a cache the upload fills,
whose lines read fast ahead of the chase, reads DRAM past the cache only if the walk pushed them
out), one chain buffer for the whole sweep (counted on the fake HIP runtime and on lavapipe; one
more where a screening sweep goes on), the launch length predicted from the last point and
corrected at a new level, and the screening sweep's shorter launches."""
from __future__ import annotations

from collections import OrderedDict
from types import SimpleNamespace

import numpy as np
import pytest

import fake_hip
from peakbench.harness import runner
from peakbench.workloads import chase, stream
from test_workloads import args, rt  # noqa: F401  (rt is a fixture)
from test_workloads_chase import INDEX, POINTER, chase_player, chase_time, link_player

KIB, MIB = 1024, 1 << 20
HIT_NS, DRAM_NS = 2.0, 20.0
LAST = 1 * MIB                   # the last cache the sweep is told of
WALK = 2 * LAST // chase.LINE    # the bound on the walk it implies, past WARM_LOADS (made small here)


class UploadCachedChaser:
    """A chase behind an LRU cache of `cache_bytes` of lines that the upload fills: it writes the
    chain's lines in address order, as the upload and the link kernel do, so the last cache_bytes
    of them are cached ahead of the chase. A load whose line is cached costs HIT_NS, any other
    DRAM_NS. Records every point's launches (rounds, seconds)."""
    clocked, max_rounds = False, 1 << 24

    def __init__(self, cache_bytes: int):
        self.lines, self.points, self.reserved = cache_bytes // chase.LINE, [], []

    def reserve(self, nbytes):
        self.reserved.append(nbytes)

    def load(self, nxt):
        assert nxt.nbytes <= self.reserved[-1], "a chain larger than the reserved buffer"
        order, i = [], 0
        while not order or i != 0:
            order.append(i)
            i = int(nxt[i])
        self.order, self.at, self.hits = np.array(order) // (chase.LINE // 4), 0, None
        self.points.append([])

    def _first(self, start: int) -> None:
        """The chase's loads from `start` on: whether its p-th load hits, for p < min(n, lines);
        past that, a chain that fits hits and one that does not misses every load (a lap of it
        cycles an LRU cache out)."""
        n = len(self.order)
        self.order = np.roll(self.order, -int(np.flatnonzero(self.order == start // (chase.LINE // 4))[0]))
        cache = OrderedDict.fromkeys(range(max(0, n - self.lines), n))
        self.hits = np.zeros(min(n, self.lines), bool)
        for p in range(len(self.hits)):
            line = int(self.order[p])
            self.hits[p] = line in cache
            cache[line] = None
            cache.move_to_end(line)
            if len(cache) > self.lines:
                cache.popitem(last=False)
        self.fits = n <= self.lines

    def launch(self, rounds, start):
        if self.hits is None:
            self._first(start)
        n, loads = len(self.order), rounds * chase.ROUND
        assert start == int(self.order[self.at % n]) * (chase.LINE // 4), "not where the last launch stopped"
        known = self.hits[min(self.at, len(self.hits)):min(self.at + loads, len(self.hits))]
        hits = int(known.sum()) + (loads - len(known) if self.fits else 0)
        self.at += loads
        seconds = (hits * HIT_NS + (loads - hits) * DRAM_NS) * 1e-9
        self.points[-1].append((rounds, seconds))
        return seconds

    def readout(self):
        return int(self.order[self.at % len(self.order)]) * (chase.LINE // 4), None

    def release(self):
        pass


@pytest.fixture
def small_warm_loads(monkeypatch):
    """WARM_LOADS below the bound the last cache sets, so that bound is what the walks follow."""
    monkeypatch.setattr(chase, "WARM_LOADS", WALK // 16)


def cached_sweep(cache_bytes=2 * LAST, top=16 * MIB, sample_s=40e-6):
    """A sweep told of a last cache of LAST behind a cache of twice that: the margin the bound
    keeps (the H200's L2 is 50 MiB in its spec, 60 MiB to CUDA, and not LRU)."""
    chaser = UploadCachedChaser(cache_bytes)
    return chaser, runner.sweep(chase.ChaseSweep(chaser, top, first_level=1, sample_s=sample_s, last_cache=LAST))


def test_the_walk_covers_the_cycle_up_to_twice_the_last_cache_and_then_reads_dram(small_warm_loads):
    chaser, sweep = cached_sweep()
    assert sweep.problem is None
    # Past the cache a point reads DRAM_NS only if the walk pushed out every line the upload left.
    assert sweep.latencies == pytest.approx([HIT_NS if ws <= 2 * LAST else DRAM_NS for ws in sweep.sizes])
    for ws, launches in zip(sweep.sizes, chaser.points):
        walked = launches[0][0] * chase.ROUND        # the walk: one launch, as max_rounds allows
        want = min(ws // chase.LINE, WALK)
        assert want <= walked < want + chase.ROUND, f"{ws} B: a walk of {walked} loads, not {want}"


@pytest.mark.parametrize("short", [lambda ws, last: min(ws // chase.LINE, WALK * 15 // 16),
                                   lambda ws, last: min(ws // chase.LINE, WALK // 2),
                                   lambda ws, last: min(ws // chase.LINE, 16 * -(-ws // (64 * KIB)))],
                         ids=["15/16-of-the-bound", "half-the-bound", "16-loads-a-64-KiB-page"])
def test_a_walk_short_of_the_bound_leaves_the_uploaded_lines_to_the_timed_loads(small_warm_loads, monkeypatch,
                                                                                short):
    # One round a launch, so the launches after the walk push few lines out themselves (on the
    # H200 a timed launch of 4 ms is 12K loads, its L2 480K lines).
    _, sweep = cached_sweep(sample_s=1e-9)
    assert sweep.latencies[-1] == pytest.approx(DRAM_NS)
    monkeypatch.setattr(chase, "warm_loads", short)
    _, sweep = cached_sweep(sample_s=1e-9)
    assert sweep.problem is None
    past = [t for ws, t in zip(sweep.sizes, sweep.latencies) if ws > 2 * LAST]
    assert min(past) < 0.97 * DRAM_NS, past


def test_the_walk_bound():
    assert chase.warm_loads(512 * MIB, 50 * MIB) == chase.WARM_LOADS == 1 << 20     # the H200, by its spec
    assert chase.warm_loads(512 * MIB, 60 * MIB) == 1 << 20                         # and to CUDA: 983040 < 1M
    assert chase.warm_loads(512 * MIB, 256 * MIB) == 4 << 20                        # a 256 MiB last cache
    assert chase.warm_loads(100 * MIB, 50 * MIB) == 100 * MIB // chase.LINE         # the whole cycle
    assert chase.warm_loads(8 * KIB, 4 * KIB) == 8 * KIB // chase.LINE              # never past the cycle
    assert chase.warm_loads(512 * MIB, None) == chase.WARM_LOADS                    # unknown
    assert chase.warm_loads(64 * MIB, None) == 64 * MIB // chase.LINE


def test_one_launch_confirms_the_predicted_length_and_a_new_level_corrects_it(small_warm_loads):
    chaser, sweep = cached_sweep()
    for ws, launches in zip(sweep.sizes[1:], chaser.points[1:]):
        walk = 1                                     # one walk launch: max_rounds covers it
        timed = launches[walk:]
        rounds = timed[-1][0]
        # The smallest power of two of at least sample_s, every timed launch that long.
        assert all(r == rounds and s >= sweep.sample_s for r, s in timed[-3:]), (ws, timed)
        assert rounds == 1 or timed[-1][1] / 2 < sweep.sample_s
        new_level = ws == next(w for w in sweep.sizes if w > 2 * LAST)
        assert len(timed) == (5 if new_level else 4), (ws, timed)      # + the correction
        assert timed[-4][0] == rounds                # the untimed launch at the final length


def test_one_chain_buffer_serves_the_whole_sweep_on_the_fake_hip_runtime(rt):
    rt.fake.kernels["chase"] = chase_player(pointer=True)
    rt.fake.kernels["chase_link"] = link_player
    rt.fake.elapsed_ms = lambda launch: chase_time(launch)
    before = {name: rt.fake.names().count(name) for name in ("hipMalloc", "hipFree")}
    sweep = runner.sweep(chase.ChaseSweep(chase.Chaser(rt, POINTER), 256 * KIB, first_level=1))
    assert sweep.problem is None and len(sweep.sizes) == 25
    names = rt.fake.names()
    assert names.count("hipMalloc") - before["hipMalloc"] == 2         # the output and one chain buffer
    assert names.count("hipFree") - before["hipFree"] == 2
    links = [launch for launch in rt.fake.launches if launch["function"] == "chase_link"]
    assert len(links) == len(sweep.sizes)                               # each chain linked in the one buffer
    assert len({args(launch)[0].value for launch in links}) == 1


def test_a_screening_sweep_that_goes_on_reserves_one_more_buffer_on_the_fake_hip_runtime(rt):
    rt.fake.kernels["chase"] = chase_player(pointer=True)
    rt.fake.kernels["chase_link"] = link_player
    rt.fake.elapsed_ms = lambda launch: chase_time(launch)             # 100 ns a load: one level
    before = {name: rt.fake.names().count(name) for name in ("hipMalloc", "hipFree")}
    # One plateau, so no far L2 partition: incomplete where the L2 is partitioned.
    sweep = runner.sweep(chase.ChaseSweep(chase.Chaser(rt, POINTER), 256 * KIB, first_level=1, partitioned_l2=True,
                                          screen=chase.Screen(64 * KIB)), screening=True)
    assert sweep.problem is None and sweep.sizes == chase.working_sets(256 * KIB)
    assert sweep.evidence["sweep"] == "screening sweep extended to 256 KiB: its levels were incomplete at 64 KiB"
    names = rt.fake.names()
    assert names.count("hipMalloc") - before["hipMalloc"] == 3         # the output and two chain buffers
    assert names.count("hipFree") - before["hipFree"] == 3


def test_a_screening_sweep_launches_half_as_long(rt):
    rt.fake.kernels["chase"] = chase_player()
    rt.fake.elapsed_ms = lambda launch: chase_time(launch)             # 100 ns a load

    def timed_rounds(screening: bool) -> int:
        rt.fake.launches.clear()
        sweep = runner.sweep(chase.sweep(rt, INDEX, 64 * KIB), screening=screening)
        assert sweep.problem is None
        return fake_hip.scalar(args(rt.fake.launches[-1])[2])

    assert timed_rounds(False) == 256        # 4 ms: 156 rounds of 25.6 us, to a power of two
    assert timed_rounds(True) == 128         # 2 ms


class Counting:
    """A real runtime, counting its buffer allocations and address reads."""

    def __init__(self, rt):
        self.rt, self.allocs, self.addresses = rt, [], 0

    def __getattr__(self, name):
        return getattr(self.rt, name)

    def alloc(self, nbytes):
        self.allocs.append(nbytes)
        return self.rt.alloc(nbytes)

    def address(self, buf):
        self.addresses += 1
        return self.rt.address(buf)


@pytest.mark.parametrize("pointer", [False, True], ids=["index", "pointer"])
def test_one_chain_buffer_and_one_address_serve_a_sweep_on_this_device(vulkan_device, pointer):
    rt = vulkan_device.rt
    if pointer and not (rt.caps.has("bufferDeviceAddress") and hasattr(rt, "address")):
        pytest.skip("the Vulkan device was created without bufferDeviceAddress")
    kernel = chase.ChaseKernel("mem_chase.comp", "main", clock_word=1, path="p", max_rounds=rt.max_rounds,
                               pointer=pointer)
    counting = Counting(rt)
    # A last cache of 256 KiB: the walks stay whole cycles (WARM_LOADS is the larger bound), in one
    # buffer, and every point ends where the host's permutation says.
    sweep = runner.sweep(chase.ChaseSweep(chase.Chaser(counting, kernel), 4 * MIB, first_level=1, sample_s=0.0005,
                                          last_cache=256 * KIB))
    assert sweep.problem is None, sweep.problem
    assert sweep.sizes == chase.working_sets(4 * MIB) and all(t > 0 for t in sweep.latencies)
    assert counting.allocs == [32, 4 * MIB]
    assert counting.addresses == (1 if pointer else 0)


def test_the_device_sweep_passes_the_last_cache_the_caches_and_the_screen(vulkan_device, monkeypatch):
    made = []

    def record(chaser, max_bytes, first_level, sample_s, partitioned_l2, last_cache, caches, screen, flush):
        chaser.release()
        made.append((max_bytes, sample_s, last_cache, caches, screen))
        flushes.append(flush)
    flushes = []
    monkeypatch.setattr(chase, "ChaseSweep", record)
    rt = vulkan_device.rt
    kernel = chase.ChaseKernel("mem_chase.comp", "main", clock_word=1, path="p")
    top = min(chase.CHASE_MAX, stream.working_bytes(rt))
    full, l3 = {"l2": 8 * MIB, "l1": 64 * KIB}, {"l3": 32 * MIB}
    chase.sweep(rt, kernel, stream.working_bytes(rt), caches=full)
    chase.sweep(rt, kernel, stream.working_bytes(rt), caches=l3, flush=lambda nbytes: nbytes)
    chase.sweep(rt, kernel, stream.working_bytes(rt), sample_s=0.001, caches=l3)
    # The screen a screening run takes (runner.sweep(..., screening=True)); the full suite's ignores it.
    assert made[0] == (top, chase.SWEEP_SAMPLE_S, 8 * MIB, full, chase.Screen(min(top, 128 * MIB)))
    # A screening sweep's own points launch SCREEN_SAMPLE_S, any it goes on to SWEEP_SAMPLE_S.
    assert made[1] == (top, chase.SWEEP_SAMPLE_S, 32 * MIB, l3, chase.Screen(min(top, 128 * MIB), chase.SCREEN_SAMPLE_S))
    assert made[2] == (top, 0.001, 32 * MIB, l3, chase.Screen(min(top, 128 * MIB), 0.001))
    assert top <= 128 * MIB and flushes == [None] * 3    # a CPU driver's sweep is walked in full: no flush


def test_a_flush_of_four_last_caches_only_where_a_screening_sweep_has_points_to_flush(monkeypatch):
    # The H200: 50 MiB of L2 in its spec, 60 MiB to CUDA; the walk covers the cycle to 128 MiB.
    made = []
    monkeypatch.setattr(chase, "Chaser", lambda rt, kernel: SimpleNamespace(release=lambda: None))
    monkeypatch.setattr(chase, "ChaseSweep", lambda *args: made.append((args[-2].flush_from,
                                                                        args[-1]() if args[-1] else None)))
    kernel = chase.ChaseKernel("mem.cu", "chase", clock_word=2, path="p")
    flush = lambda nbytes: nbytes

    def gpu(vendor_id, l2_bytes):
        return SimpleNamespace(info=SimpleNamespace(vendor_id=vendor_id, name="a GPU", kind="gpu"),
                               limits=SimpleNamespace(l2_bytes=l2_bytes))
    h200 = gpu(0x10DE, 60 * MIB)
    chase.sweep(h200, kernel, 512 * MIB, caches={"l2": 50 * MIB}, flush=flush)   # 240 MiB
    chase.sweep(h200, kernel, 512 * MIB, flush=flush)                           # the API's alone
    chase.sweep(h200, kernel, 128 * MIB, caches={"l2": 50 * MIB}, flush=flush)  # 240 MiB do not fit
    chase.sweep(h200, kernel, 200 * MIB, caches={"l2": 50 * MIB}, flush=flush)  # nor here
    chase.sweep(h200, kernel, 512 * MIB, flush=None)
    assert made == [(90 * MIB, 240 * MIB), (90 * MIB, 240 * MIB), (90 * MIB, None), (90 * MIB, None), (90 * MIB, None)]
    # A 20 MiB L2: the screen ends at 128 MiB, walked in full, so only NVIDIA's flush from 30 MiB flushes.
    made.clear()
    chase.sweep(gpu(0x10DE, 20 * MIB), kernel, 512 * MIB, flush=flush)
    chase.sweep(gpu(0x1002, 20 * MIB), kernel, 512 * MIB, caches={"l2": 20 * MIB}, flush=flush)
    assert made == [(30 * MIB, 80 * MIB), (None, None)]


def test_a_screen_flushes_past_its_walk_and_from_its_flush_from():
    walk_end = chase.WARM_LOADS * chase.LINE                      # 128 MiB: the last cache is smaller
    assert chase.walked_in_full(walk_end, 50 * MIB) and not chase.walked_in_full(walk_end + chase.LINE, 50 * MIB)
    plain, from_90 = chase.Screen(200 * MIB), chase.Screen(200 * MIB, flush_from=90 * MIB)
    assert [plain.flushes(ws, 50 * MIB) for ws in (89 * MIB, 90 * MIB, walk_end, walk_end + chase.LINE)] == \
        [False, False, False, True]
    assert [from_90.flushes(ws, 50 * MIB) for ws in (89 * MIB, 90 * MIB, walk_end, walk_end + chase.LINE)] == \
        [False, True, True, True]


def test_a_flush_that_cannot_be_made_releases_the_chaser(monkeypatch):
    released = []
    monkeypatch.setattr(chase, "Chaser", lambda rt, kernel: SimpleNamespace(release=lambda: released.append(1),
                                                                            max_rounds=1 << 24))
    rt = SimpleNamespace(info=SimpleNamespace(vendor_id=0x10DE, name="NVIDIA H200", kind="gpu"),
                         limits=SimpleNamespace(l2_bytes=60 * MIB))

    def broken(nbytes):
        raise MemoryError("out of device memory")
    sweep = chase.sweep(rt, chase.ChaseKernel("mem.cu", "chase", clock_word=2, path="p"), 512 * MIB, flush=broken)
    with pytest.raises(MemoryError):
        runner.sweep(sweep, screening=True)
    assert released == [1] and sweep.taken and "MemoryError: out of device memory" in sweep.problem

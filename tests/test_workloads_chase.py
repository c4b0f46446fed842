"""peakbench.workloads.chase: the chain (one cycle through every line) and its pointer form, the
2^(1/4) working-set grid, the sweep timed only after a whole walk, driven through the ROCm runtime
on the fake HIP runtime (a player of shaders/mem.cu `chase` and `chase_link`, as an index and as
a pointer chase), a level the sweep did not find reported unsupported with its reason, a
screening sweep that goes on to the full range where its levels are incomplete (the recorded H200
sweep of tests/data/) and stops where they are complete, and the latency levels on a real Vulkan device (lavapipe here), as an index chase and, where the device
has buffer device addresses, as a pointer chase."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import fake_hip
from peakbench import kernels
from peakbench.backend import Unsupported
from peakbench.catalog import default_catalog
from peakbench.harness import runner
from peakbench.workloads import chase, stream
from test_workloads import args, rt  # noqa: F401  (rt is a fixture)

CATALOG = default_catalog()
KIB, MIB = 1024, 1 << 20
STRIDE = chase.LINE // 4
H200_SWEEP = json.loads((Path(__file__).parent / "data" / "h200-cuda-chase-sweep.json").read_text())["sweeps"][0]
H200_CACHES = {"l1": 256 * KIB, "l2": 50 * MIB}


class CachedChaser:
    """A chase over a cache as big as every chain: a line's first touch costs 10 ns, a revisit 1 ns."""
    clocked, max_rounds = False, 4

    def reserve(self, nbytes):
        pass

    def load(self, nxt):
        order, i = [], 0
        while not order or i != 0:
            order.append(i)
            i = int(nxt[i])
        self.order, self.index = np.array(order), {v: k for k, v in enumerate(order)}
        self.touched, self.end = np.zeros(len(order), bool), 0

    def launch(self, rounds, start):
        at = (self.index[start] + np.arange(rounds * chase.ROUND)) % len(self.order)
        first = len(np.unique(at[~self.touched[at]]))
        self.touched[at] = True
        self.end = int(self.order[(at[-1] + 1) % len(self.order)])
        return (first * 10 + (len(at) - first)) * 1e-9

    def readout(self):
        return self.end, None

    def release(self):
        pass


def test_the_chase_is_timed_only_after_a_whole_walk_of_the_cycle():
    sweep = runner.sweep(chase.ChaseSweep(CachedChaser(), 256 * KIB, first_level=1, sample_s=1e-6))
    assert sweep.problem is None
    assert sweep.latencies == pytest.approx([1.0] * len(sweep.sizes))   # no first touch was timed


class ClockedChaser(CachedChaser):
    """CachedChaser with a cycle counter at 2 GHz, which moves back `back_at` readouts in."""
    clocked = True

    def __init__(self, back_at=None):
        self.readouts, self.back_at, self.gpu_s = 0, back_at, 0.0

    def launch(self, rounds, start):
        self.gpu_s = super().launch(rounds, start)
        return self.gpu_s

    def readout(self):
        self.readouts += 1
        cycles = round(self.gpu_s * 2e9)
        return self.end, (-cycles if self.readouts == self.back_at else cycles)


def test_a_counter_that_goes_back_reports_no_cycles_and_says_why():
    good = runner.sweep(chase.ChaseSweep(ClockedChaser(), 256 * KIB, first_level=1, sample_s=1e-6))
    assert len(good.series()["cycles"]) == len(good.sizes) and set(good.series()["clock_mhz"]) == {2000}
    assert "counter" not in good.evidence
    bad = runner.sweep(chase.ChaseSweep(ClockedChaser(back_at=3), 256 * KIB, first_level=1, sample_s=1e-6))
    assert bad.cycles == [] and "cycles" not in bad.series()
    assert bad.evidence["counter"].endswith("no cycles reported") and "the core's counter moved -" in bad.evidence["counter"]


def test_a_screening_sweep_stops_at_four_last_caches_and_runs_the_full_range_where_unknown():
    nvidia, amd = SimpleNamespace(vendor_id=0x10DE), SimpleNamespace(vendor_id=0x1002)
    assert chase.screening_max(nvidia, 50 << 20) == 200 << 20          # the H200's 50 MiB L2
    assert chase.screening_max(nvidia, 4 << 20) == chase.SCREEN_MIN
    assert chase.screening_max(nvidia, 0) == chase.SCREEN_UNKNOWN       # Vulkan gives no L2 size...
    assert chase.screening_max(nvidia, 0, {"l2": 50 << 20}) == 200 << 20    # ...the spec does
    assert chase.screening_max(amd, 4 << 20) == chase.CHASE_MAX         # Infinity Cache is not in the L2
    assert chase.screening_max(amd, 4 << 20, {"l2": 4 << 20, "l3": 64 << 20}) == 256 << 20   # the spec's L3
    assert chase.screening_max(amd, 4 << 20, {"l2": 6 << 20, "l3": 256 << 20}) == chase.CHASE_MAX


def test_the_working_sets_are_a_quarter_octave_apart_in_whole_nodes():
    sizes = chase.working_sets(512 * MIB)
    assert sizes[0] == 4 * KIB and sizes[-1] == 512 * MIB and len(sizes) == 17 * 4 + 1
    assert all(ws % chase.LINE == 0 for ws in sizes)
    steps = [b / a for a, b in zip(sizes, sizes[1:])]
    assert max(steps) <= 1.2 and min(steps) > 1.18                   # 2^(1/4) = 1.189, to whole nodes
    assert max(steps[24:]) < 1.1895                                  # from 256 KiB on: the ratio to 0.1%
    assert [ws for ws in sizes if ws & (ws - 1) == 0] == [4 * KIB << k for k in range(18)]


def test_chase_chain_is_one_cycle_through_every_line():
    order, nxt = chase.chase_chain(64 * chase.LINE, np.random.default_rng(1))
    i, seen = 0, set()
    for _ in range(64):
        seen.add(i)
        i = int(nxt[i])
        assert i % STRIDE == 0
    assert i == 0 and len(seen) == 64


def test_the_pointer_chain_holds_each_next_address_at_the_node():
    base = 0x7F12_3456_0000
    _, nxt = chase.chase_chain(64 * chase.LINE, np.random.default_rng(2))
    words = chase.pointer_chain(nxt, base)
    at, seen = base, set()
    for _ in range(64):
        seen.add(at)
        w = (at - base) // 4
        at = int(words[w]) | int(words[w + 1]) << 32                 # low word first
        assert at - base == 4 * int(nxt[w])
    assert at == base and len(seen) == 64


# -- through the ROCm runtime, on the fake HIP runtime -------------------------------------------

def chase_player(off_by_one: bool = False, pointer: bool = False):
    """shaders/mem.cu `chase`: follow next[] (word indices, or with POINTER the addresses
    chase_link wrote) rounds * 256 times from word `start`, store the word index it ends at."""
    def play(fake, launch):
        nxt_arg, out_arg, rounds, start = args(launch)
        memory, base = fake.buffer(nxt_arg), nxt_arg.value
        words = np.frombuffer(memory, np.uint32)

        def follow(i: int) -> int:
            if not pointer:
                return int(words[i])
            address = int(np.frombuffer(memory, np.uint64, 1, 4 * i)[0])
            assert (address - base) % 4 == 0 and 0 <= address - base < len(memory), "not an address of the chain"
            return (address - base) // 4
        cycle, i = [], fake_hip.scalar(start)
        while not cycle or i != cycle[0]:
            cycle.append(i)
            i = follow(i)
        end = cycle[(fake_hip.scalar(rounds) * 256 + (1 if off_by_one else 0)) % len(cycle)]
        np.frombuffer(fake.buffer(out_arg), np.uint32)[0] = end
    return play


def link_player(fake, launch):
    """shaders/mem.cu `chase_link`: each thread k < nodes turns node k's word index into the
    address of that word, in place."""
    buf, nodes, stride = args(launch)
    memory, base = fake.buffer(buf), buf.value
    words = np.frombuffer(memory, np.uint32)
    for k in range(min(fake_hip.scalar(nodes), launch["grid"][0] * launch["block"][0])):
        w = k * fake_hip.scalar(stride)
        np.frombuffer(memory, np.uint64, 1, 4 * w)[0] = base + 4 * int(words[w])


def chase_time(launch) -> float:
    """100 ns a load (ms for the fake's events)."""
    return fake_hip.scalar(args(launch)[2]) * 256 * 1e-4 if launch["function"] == "chase" else 2.5


INDEX = chase.ChaseKernel("mem.cu", "chase", clock_word=2, path="index")
POINTER = chase.ChaseKernel("mem.cu", "chase", clock_word=2, path="pointer", pointer=True, link="chase_link")


def test_the_chase_sweep_walks_every_working_set_and_checks_where_it_ends(rt):
    rt.fake.kernels["chase"] = chase_player()
    rt.fake.elapsed_ms = lambda launch: chase_time(launch)
    sweep = runner.sweep(chase.ChaseSweep(chase.Chaser(rt, INDEX), 256 * 1024, first_level=1))
    assert sweep.problem is None and sweep.evidence["chase"] == "index"
    assert sweep.sizes == chase.working_sets(256 * KIB)
    assert sweep.latencies == pytest.approx([100.0] * len(sweep.sizes))
    assert sweep.cycles == []                 # HIP: no cycle counter is trusted
    rt.fake.kernels["chase"] = chase_player(off_by_one=True)
    broken = runner.sweep(chase.ChaseSweep(chase.Chaser(rt, INDEX), 8192, first_level=1))
    assert "the chase ended at" in broken.problem


def test_the_pointer_chase_follows_the_addresses_the_link_kernel_wrote(rt):
    rt.fake.kernels["chase"] = chase_player(pointer=True)
    rt.fake.kernels["chase_link"] = link_player
    rt.fake.elapsed_ms = lambda launch: chase_time(launch)
    sweep = runner.sweep(chase.ChaseSweep(chase.Chaser(rt, POINTER), 64 * KIB, first_level=1))
    assert sweep.problem is None and sweep.evidence["chase"] == "pointer"
    chases = [launch for launch in rt.fake.launches if launch["function"] == "chase"]
    assert chases and all("-DPOINTER=1" in launch["options"] for launch in chases)
    # Without the link kernel the buffer holds word indices, not addresses: the chase goes wrong.
    rt.fake.kernels["chase_link"] = lambda fake, launch: None
    with pytest.raises(Exception, match="not an address"):          # the runtime reports the launch failed
        runner.sweep(chase.ChaseSweep(chase.Chaser(rt, POINTER), 8192, first_level=1))


def test_the_table_of_cuda_and_hip_runs_the_pointer_chase_once_it_names_its_link(rt):
    kernel = kernels.chase_kernel(rt)
    if not kernel.pointer:
        pytest.skip("peakbench/kernels chase_kernel() still names the index chase")
    assert kernel.link == "chase_link"


# -- a level the sweep did not find ---------------------------------------------------------------

def test_a_level_the_sweep_did_not_find_is_unsupported_with_the_plateaus_in_words():
    sizes = chase.working_sets(512 * MIB)
    ns = [20.0 if ws <= 128 * KIB else 146.0 if ws <= 16 * MIB else 338.0 for ws in sizes]
    sweep = SimpleNamespace(sizes=sizes, latencies=ns, cycles=[], mhz=[], timing=[[]] * len(sizes),
                            evidence={"chase": "pointer"}, problem=None, first_level=1, partitioned_l2=True)
    sweep.found = lambda: chase.ChaseSweep.found(sweep)
    sweep.levels = lambda spec=None: chase.ChaseSweep.levels(sweep, spec)
    variant = CATALOG.get("latency.l2_far").variants[0]
    with pytest.raises(Unsupported, match=r"^\[hardware\] the latency sweep found no far L2 partition level "
                                          r"\(plateaus: 20 ns at 4 KiB-128 KiB, 146 ns at .*-16 MiB, 338 ns at .*\)"):
        chase.LatencyWorkload(CATALOG.get("latency.l2_far"), variant, sweep, "p").from_sweep()
    l2 = chase.LatencyWorkload(CATALOG.get("latency.l2"), variant, sweep, "p").from_sweep()
    assert l2.params["working_sets_bytes"][1] == 16 * MIB and l2.evidence["chase"] == "pointer"


# -- a screening sweep that stops short -----------------------------------------------------------

class PlayedChaser:
    """A chase whose loads take `ns[ws]` at working set ws, over the chains chase_chain made
    (`chains`, filled by the `chains` fixture). Each launch must start where the last stopped; it
    records every point's launches (rounds, start) and the buffers reserved."""
    clocked, max_rounds = False, 1 << 24

    def __init__(self, ns: dict, chains: list):
        self.ns, self.chains, self.points, self.reserved = ns, chains, {}, []

    def reserve(self, nbytes):
        self.reserved.append(nbytes)

    def load(self, nxt):
        assert nxt.nbytes <= self.reserved[-1]
        self.ws, self.order, self.at = nxt.nbytes, self.chains[-1], 0
        assert len(self.order) == self.ws // chase.LINE
        self.points[self.ws] = []

    def launch(self, rounds, start):
        assert start == int(self.order[self.at % len(self.order)]) * STRIDE, "not where the last launch stopped"
        self.points[self.ws].append((rounds, start))
        self.at += rounds * chase.ROUND
        return rounds * chase.ROUND * self.ns[self.ws] * 1e-9

    def readout(self):
        return int(self.order[self.at % len(self.order)]) * STRIDE, None

    def release(self):
        pass


@pytest.fixture
def chains(monkeypatch):
    """The chains the sweep makes, as it makes them; past 1 MiB a cycle in address order (the
    fake's latencies do not depend on the order, and a random 512 MiB one takes seconds)."""
    made, real = [], chase.chase_chain

    def chain(ws, rng, out=None):
        if ws <= MIB:
            order, nxt = real(ws, rng, out)
        else:
            order, nxt = np.arange(ws // chase.LINE, dtype=np.uint32), out[:ws // 4]
            rng.permutation(8)           # the random stream still moves on at every point
        made.append(order)
        return order, nxt
    monkeypatch.setattr(chase, "chase_chain", chain)
    return made


def h200_sweep(chains, ns: list[float], screen: int | None):
    """The recorded sweep's grid replayed with latencies `ns`, as chase.sweep sets a CUDA sweep on
    the H200 up (its spec's caches; a screening sweep stops at 4 x its 50 MiB L2)."""
    chaser = PlayedChaser(dict(zip(H200_SWEEP["working_set_bytes"], ns)), chains)
    sweep = runner.sweep(chase.ChaseSweep(chaser, 512 * MIB, 1, chase.SWEEP_SAMPLE_S, True, 50 * MIB, H200_CACHES,
                                          chase.Screen(screen) if screen else None), screening=bool(screen))
    assert sweep.problem is None and sweep.sizes == H200_SWEEP["working_set_bytes"][:len(sweep.sizes)]
    return chaser, sweep


def summary(levels: dict) -> dict:
    return {k: (p.first_bytes, p.last_bytes, round(p.latency_ns, 1)) for k, p in levels.items()}


def test_the_screening_sweep_of_the_recorded_h200_goes_on_and_names_what_the_full_sweep_does(chains):
    screen = chase.screening_max(SimpleNamespace(vendor_id=0x10DE), 60 * MIB, H200_CACHES)
    assert screen == 200 * MIB
    full_chaser, full = h200_sweep(chains, H200_SWEEP["ns"], None)
    chaser, screened = h200_sweep(chains, H200_SWEEP["ns"], screen)
    assert screened.evidence["sweep"] == "screening sweep extended to 512 MiB: its levels were incomplete at 181 MiB"
    assert "sweep" not in full.evidence
    assert sorted(screened.levels()) == ["dram", "l1", "l2", "l2_far"]
    assert summary(screened.levels(SimpleNamespace(data={"l2_mib": 50, "l1_kib_per_unit": 256}))) == \
        summary(full.levels(SimpleNamespace(data={"l2_mib": 50, "l1_kib_per_unit": 256})))
    # Its own points launch 2 ms, those it goes on to as the full sweep's: the same launches, from
    # the same chains (its random stream continued), in a buffer reserved for the rest.
    past = [ws for ws in screened.sizes if ws > screen]
    assert past and all(chaser.points[ws] == full_chaser.points[ws] for ws in past)
    assert all(chaser.points[ws][-1][0] < full_chaser.points[ws][-1][0] for ws in screened.sizes if ws <= screen)
    assert chaser.reserved == [max(ws for ws in screened.sizes if ws <= screen), 512 * MIB]
    assert [len(order) for order in chains[len(full.sizes):]] == [ws // chase.LINE for ws in screened.sizes]
    assert all((a == b).all() for a, b in zip(chains[:len(full.sizes)], chains[len(full.sizes):]))
    # Every latency.* result carries what the sweep did.
    variant = CATALOG.get("latency.dram").variants[0]
    dram = chase.LatencyWorkload(CATALOG.get("latency.dram"), variant, screened, "p").from_sweep()
    assert dram.evidence["sweep"] == screened.evidence["sweep"]


def test_a_screening_sweep_whose_levels_are_complete_stops_at_its_end(chains):
    # The recorded points up to 100 MiB (each walked in full) and past them the 335 ns that walks
    # of 1M loads read at 128-512 MiB on the same board: the far L2 and DRAM stand apart by 181 MiB.
    ns = [t if ws <= 100 * MIB else 335.0 for ws, t in zip(H200_SWEEP["working_set_bytes"], H200_SWEEP["ns"])]
    chaser, sweep = h200_sweep(chains, ns, 200 * MIB)
    assert sweep.sizes[-1] == 189812480 and sweep.complete()
    assert sweep.evidence["sweep"] == "screening sweep to 181 MiB, where its levels were complete"
    assert chaser.reserved == [189812480]
    assert sorted(sweep.levels()) == ["dram", "l1", "l2", "l2_far"]


class CountingFlush:
    nbytes = 200 * MIB

    def __init__(self, chaser):
        self.chaser, self.at, self.closed = chaser, [], False

    def __call__(self):
        self.at.append(self.chaser.ws)          # the chain loaded when the flush ran

    def close(self):
        self.closed = True


@pytest.mark.parametrize("flush_from, first", [(None, "152 MiB"), (90 * MIB, "90.5 MiB")],
                         ids=["past its walk", "from flush_from"])
def test_a_screening_sweep_flushes_the_caches_in_place_of_the_walk(chains, flush_from, first):
    # The walk's bound, 2^20 loads (over twice the 50 MiB L2's lines), covers the cycle up to 128 MiB;
    # on NVIDIA a screening sweep flushes from 1.5x the larger L2 too (CUDA's 60 MiB): 90 MiB and up.
    ns = [t if ws <= 100 * MIB else 335.0 for ws, t in zip(H200_SWEEP["working_set_bytes"], H200_SWEEP["ns"])]
    walked_chaser, walked = h200_sweep(chains, ns, 200 * MIB)
    chaser = PlayedChaser(dict(zip(H200_SWEEP["working_set_bytes"], ns)), chains)
    flush = CountingFlush(chaser)
    sweep = runner.sweep(chase.ChaseSweep(chaser, 512 * MIB, 1, chase.SWEEP_SAMPLE_S, True, 50 * MIB, H200_CACHES,
                                          chase.Screen(200 * MIB, flush_from=flush_from), lambda: flush), screening=True)
    expected = [ws for ws in sweep.sizes if ws > 128 * MIB or (flush_from and ws >= flush_from)]
    assert sweep.sizes == walked.sizes and expected and flush.at == expected == sweep.flushed and flush.closed
    assert sweep.evidence["flush"] == (f"{first}-181 MiB: a read of 200 MiB of other data through the caches"
                                       " in place of the untimed walk")
    for ws in sweep.sizes:
        if ws in expected:  # no walk: a launch the last point's round time predicts, then the 3 timed
            assert walked_chaser.points[ws][0][0] == -(-chase.warm_loads(ws, 50 * MIB) // chase.ROUND)   # the walk
            assert [r for r, _ in chaser.points[ws]] == [r for r, _ in walked_chaser.points[ws][1:]]
            assert chaser.points[ws][0][1] == 0             # from the chain's first node: nothing walked
        else:
            assert chaser.points[ws] == walked_chaser.points[ws]
    assert sweep.latencies == pytest.approx(walked.latencies) and sweep.complete()


def test_an_extended_screening_sweep_walks_the_points_past_its_screen(chains):
    chaser = PlayedChaser(dict(zip(H200_SWEEP["working_set_bytes"], H200_SWEEP["ns"])), chains)
    flush = CountingFlush(chaser)
    sweep = runner.sweep(chase.ChaseSweep(chaser, 512 * MIB, 1, chase.SWEEP_SAMPLE_S, True, 50 * MIB, H200_CACHES,
                                          chase.Screen(200 * MIB), lambda: flush), screening=True)
    assert sweep.evidence["sweep"].startswith("screening sweep extended to 512 MiB")
    assert flush.closed and flush.at == sweep.flushed and max(sweep.flushed) <= 200 * MIB
    assert all(chaser.points[ws][0][0] == chase.WARM_LOADS // chase.ROUND for ws in sweep.sizes if ws > 200 * MIB)


def test_a_full_sweep_never_flushes(chains):
    chaser = PlayedChaser(dict(zip(H200_SWEEP["working_set_bytes"], H200_SWEEP["ns"])), chains)
    flush, made = CountingFlush(chaser), []
    sweep = chase.ChaseSweep(chaser, 512 * MIB, 1, chase.SWEEP_SAMPLE_S, True, 50 * MIB, H200_CACHES,
                             chase.Screen(200 * MIB), lambda: made.append(flush) or flush)
    runner.sweep(sweep)                     # the full suite's: the screen and its flush are not taken
    assert flush.at == [] and made == [] and sweep.sizes == chase.working_sets(512 * MIB)


def test_the_next_chain_is_made_before_a_points_timed_launches(chains, monkeypatch):
    """The chain thread is idle while launches are timed: a point's three timed launches (its last
    three) begin only once the next point's chain is made."""
    made, real = [], chase.chase_chain
    monkeypatch.setattr(chase, "chase_chain", lambda ws, rng, out=None: made.append(ws) or real(ws, rng, out))
    seen = []

    class Watching(PlayedChaser):
        def launch(self, rounds, start):
            seen.append((self.ws, len(made)))
            return super().launch(rounds, start)
    chaser = Watching({ws: 100.0 for ws in chase.working_sets(MIB)}, chains)
    sweep = runner.sweep(chase.ChaseSweep(chaser, MIB, 1, chase.SWEEP_SAMPLE_S))
    assert made == sweep.sizes and sweep.problem is None
    for i, ws in enumerate(sweep.sizes):
        timed = [count for at, count in seen if at == ws][-3:]
        assert timed == [min(i + 2, len(sweep.sizes))] * 3, (ws, timed)


def test_a_screening_sweep_without_a_far_l2_is_complete_where_the_l2_is_not_partitioned(chains):
    # The same merged curve on a GPU with no far partition to find: DRAM by plateau order suffices.
    ns = H200_SWEEP["ns"]
    chaser = PlayedChaser(dict(zip(H200_SWEEP["working_set_bytes"], ns)), chains)
    sweep = runner.sweep(chase.ChaseSweep(chaser, 512 * MIB, 1, chase.SWEEP_SAMPLE_S, False, 50 * MIB, None,
                                          chase.Screen(200 * MIB)), screening=True)
    assert sweep.sizes[-1] == 189812480 and "dram" in sweep.levels()
    assert sweep.evidence["sweep"].startswith("screening sweep to 181 MiB")


# -- on a real Vulkan device ---------------------------------------------------------------------

def vulkan_sweep(rt, pointer: bool):
    kernel = chase.ChaseKernel("mem_chase.comp", "main", clock_word=1, path="p", max_rounds=rt.max_rounds,
                               pointer=pointer)
    return runner.sweep(chase.sweep(rt, kernel, stream.working_bytes(rt), sample_s=0.001))


@pytest.mark.parametrize("pointer", [False, True], ids=["index", "pointer"])
def test_latency_levels_on_this_device(vulkan_device, pointer):
    rt = vulkan_device.rt
    if pointer and not (rt.caps.has("bufferDeviceAddress") and hasattr(rt, "address")):
        pytest.skip("the Vulkan device was created without bufferDeviceAddress")
    # A CPU device shares the host's cores: under load one sweep in a dozen smears L1 into the next
    # level (tests/data/lavapipe-chase-sweeps.json has such a one), so a second sweep may be taken.
    for attempt in range(2):
        sweep = vulkan_sweep(rt, pointer)
        assert sweep.problem is None, sweep.problem            # every chase ended where the host said
        assert sweep.evidence["chase"] == ("pointer" if pointer else "index")
        assert sweep.sizes == chase.working_sets(stream.working_bytes(rt)) and all(t > 0 for t in sweep.latencies)
        levels = sweep.levels()
        assert "dram" in levels
        if len(levels) >= 2:
            break
    assert len(levels) >= 2, f"two sweeps found only {sorted(levels)}"
    # Cycles from the shader's own counter. A CPU device's counter can stand still or go back when the
    # host moves its thread (seen under load): then the sweep says so and reports no cycles.
    if rt.caps.has("shaderSubgroupClock") and "counter" not in sweep.evidence:
        series = sweep.series()
        assert len(series["cycles"]) == len(series["clock_mhz"]) == len(sweep.sizes)
        assert all(c > 0 for c in series["cycles"]) and all(m > 0 for m in series["clock_mhz"])
    elif rt.caps.has("shaderSubgroupClock"):
        assert "cycles" not in sweep.series() and "no cycles reported" in sweep.evidence["counter"]
    assert levels["dram"].latency_ns > min(p.latency_ns for p in levels.values())


def test_the_vulkan_table_chases_pointers_where_the_device_has_addresses(vulkan_device):
    from peakbench.vulkan import capabilities
    rt = vulkan_device.rt
    kernel = capabilities.chase_kernel(rt)
    if not rt.caps.has("bufferDeviceAddress"):
        pytest.skip("the Vulkan device was created without bufferDeviceAddress")
    assert kernel.pointer and kernel.link is None


def test_a_pointer_chain_that_skips_a_node_is_caught_on_this_device(vulkan_device):
    rt = vulkan_device.rt
    if not (rt.caps.has("bufferDeviceAddress") and hasattr(rt, "address")):
        pytest.skip("the Vulkan device was created without bufferDeviceAddress")
    kernel = chase.ChaseKernel("mem_chase.comp", "main", clock_word=1, path="p", max_rounds=rt.max_rounds,
                               pointer=True)
    chaser = chase.Chaser(rt, kernel)
    try:
        order, nxt = chase.chase_chain(64 * chase.LINE, np.random.default_rng(3))
        chaser.load(nxt)
        chaser.launch(1, int(order[0]) * STRIDE)                          # 256 loads: 4 laps of 64
        assert chaser.readout()[0] == int(order[0]) * STRIDE
        a, b, c = (int(order[k]) * STRIDE for k in range(3))
        nxt[a] = c                                                       # a -> c: b is skipped, 63 nodes
        chaser.load(nxt)
        chaser.launch(1, a)
        assert chaser.readout()[0] != a                                  # 256 = 4 x 64, not a multiple of 63
    finally:
        chaser.release()

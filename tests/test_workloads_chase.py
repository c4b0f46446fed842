"""peakbench.workloads.chase: the chain (one cycle through every line), the sweep timed only after
a whole walk, driven through the ROCm runtime on the fake HIP runtime (a player of shaders/mem.cu
`chase`), and the latency levels on a real Vulkan device (lavapipe here)."""
from __future__ import annotations

import numpy as np
import pytest

import fake_hip
from peakbench import kernels
from peakbench.catalog import default_catalog
from peakbench.workloads import chase, stream
from test_workloads import args, rt  # noqa: F401  (rt is a fixture)

CATALOG = default_catalog()
KIB, MIB = 1024, 1 << 20


class CachedChaser:
    """A chase over a cache as big as every chain: a line's first touch costs 10 ns, a revisit 1 ns."""
    clocked, max_rounds = False, 4

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
    sweep = chase.ChaseSweep(CachedChaser(), 256 * KIB, first_level=1, sample_s=1e-6)
    assert sweep.problem is None
    assert sweep.latencies == pytest.approx([1.0] * len(sweep.sizes))   # no first touch was timed


def test_chase_chain_is_one_cycle_through_every_line():
    order, nxt = chase.chase_chain(64 * chase.LINE, np.random.default_rng(1))
    stride, i, seen = chase.LINE // 4, 0, set()
    for _ in range(64):
        seen.add(i)
        i = int(nxt[i])
        assert i % stride == 0
    assert i == 0 and len(seen) == 64


# -- on a real Vulkan device ---------------------------------------------------------------------

def test_latency_levels_on_this_device(vulkan_device):
    from peakbench.vulkan import capabilities
    rt = vulkan_device.rt
    sweep = chase.sweep(rt, capabilities.chase_kernel(rt), stream.working_bytes(rt), sample_s=0.001)
    assert sweep.problem is None, sweep.problem            # every chase ended where the host said
    assert sweep.sizes[0] == 4096 and all(t > 0 for t in sweep.latencies)
    levels = sweep.levels()
    assert "dram" in levels and len(levels) >= 2
    if rt.caps.has("shaderSubgroupClock"):     # cycles from the shader's own counter
        series = sweep.series()
        assert len(series["cycles"]) == len(series["clock_mhz"]) == len(sweep.sizes)
        assert all(c > 0 for c in series["cycles"]) and all(m > 0 for m in series["clock_mhz"])
    assert levels["dram"].latency_ns > min(p.latency_ns for p in levels.values())


# -- through the ROCm runtime, on the fake HIP runtime -------------------------------------------

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

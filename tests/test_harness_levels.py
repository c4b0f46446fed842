"""peakbench.harness.levels: plateaus of a latency curve (pure) on the sweep's 2^(1/4) grid, read
through noise (spikes, bursts, ramps with flat stretches, the recorded lavapipe sweeps of
tests/data/), and their names by order and by the cache sizes a spec documents, the far L2
partition included; the H200's recorded sweep, whose far L2 partition and DRAM merge where
the sweep stops short."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from peakbench.harness.levels import Plateau, documented_caches, envelope, name_levels, plateaus, running_median
from peakbench.specs import find, load_database
from peakbench.workloads.chase import working_sets

KIB, MIB = 1024, 1 << 20
GRID = working_sets(512 * MIB)
H200_CACHES = {"l1": 256 * KIB, "l2": 50 * MIB}
RECORDED = json.loads((Path(__file__).parent / "data" / "lavapipe-chase-sweeps.json").read_text())
H200_SWEEP = json.loads((Path(__file__).parent / "data" / "h200-cuda-chase-sweep.json").read_text())["sweeps"][0]


def curve(levels: list[tuple[int, float]], sizes: list[int] = GRID, noise: float = 0.01) -> list[float]:
    """Latencies on `sizes`: each (last working set, ns) level up to its size, the working sets
    past it the next level's, but the first point past each edge halfway (spilling out of the
    cache)."""
    out, rng, last = [], np.random.default_rng(7), 0
    for ws in sizes:
        i = next((k for k, (limit, _) in enumerate(levels) if ws <= limit), len(levels) - 1)
        ns = levels[i][1] if i == last else (levels[last][1] + levels[i][1]) / 2
        last = i
        out.append(ns * (1 + noise * rng.uniform(-1, 1)))
    return out


def found(sizes, ns, **kw) -> list[tuple[int, int, float]]:
    return [(p.first_bytes, p.last_bytes, round(p.latency_ns)) for p in plateaus(sizes, ns, **kw)]


def test_plateaus_of_a_three_level_curve():
    ns = curve([(128 * KIB, 30.0), (16 * MIB, 250.0), (512 * MIB, 600.0)])
    got = plateaus(GRID, ns)
    assert [p.latency_ns for p in got] == pytest.approx([30, 250, 600], rel=0.02)
    assert (got[0].first_bytes, got[0].last_bytes) == (4 * KIB, 128 * KIB)
    assert got[1].first_bytes == GRID[GRID.index(128 * KIB) + 2] and got[1].last_bytes == 16 * MIB
    assert got[2].last_bytes == 512 * MIB
    assert sum(p.points for p in got) == len(GRID) - 2               # the two edge points belong to none


def test_spikes_and_bursts_leave_the_levels_where_they_were():
    ns = curve([(128 * KIB, 30.0), (16 * MIB, 250.0), (512 * MIB, 600.0)])
    clean = found(GRID, ns)
    spoiled = list(ns)
    for at, width, factor in ((3, 1, 8.0), (10, 2, 3.0), (30, 3, 2.5), (55, 6, 1.8), (len(ns) - 1, 1, 4.0)):
        for i in range(at, min(at + width, len(ns))):
            spoiled[i] *= factor                # another process on the cores: slower, never faster
    assert [(a, b) for a, b, _ in found(GRID, spoiled)] == [(a, b) for a, b, _ in clean]
    assert [ns_ for *_, ns_ in found(GRID, spoiled)] == pytest.approx([ns_ for *_, ns_ in clean], rel=0.05)


def test_a_flat_stretch_on_a_ramp_is_not_a_level_unless_short_levels_are_expected():
    # 30 ns to 128 KiB, then a ramp of 12% a point to DRAM at 600 ns, flat for four points midway.
    l1 = GRID.index(128 * KIB) + 1
    ramp = [40 * 1.12 ** k for k in range(26)]
    ramp[10:14] = [ramp[10]] * 4
    ns = [30.0] * l1 + ramp + [600.0] * (len(GRID) - l1 - len(ramp))
    assert [round(p.latency_ns) for p in plateaus(GRID, ns)] == [30, 600]
    assert [round(p.latency_ns) for p in plateaus(GRID, ns, min_points=3)] == [30, round(ramp[10]), 600]


def test_a_slow_drift_is_one_level_and_a_step_is_two():
    drift = [100 * 1.01 ** k for k in range(30)]                     # 1% a point: 34% in all
    assert found(GRID[:30], drift) == [(GRID[0], GRID[29], round(float(np.median(drift))))]
    step = [100.0] * 15 + [130.0] * 15
    assert [round(p.latency_ns) for p in plateaus(GRID[:30], step)] == [100, 130]


def test_the_filters():
    rising = [1, 2, 2, 3, 9, 9, 9, 20, 20]
    assert running_median(rising) == rising                          # edges stay where they are
    assert running_median([1, 2, 2, 3, 9, 9, 9, 20])[-1] == 9        # but a last point alone goes
    assert running_median([5, 5, 50, 60, 5, 5, 1, 5]) == [5, 5, 5, 5, 5, 5, 5, 5]
    assert envelope([3, 1, 4, 1, 5]) == [1, 1, 1, 1, 5]


# -- an H200-like curve, with and without a far L2 partition --------------------------------------

def h200(far: bool) -> list[float]:
    """Cycles at 1.98 GHz as ns: L1 35 to 256 KiB, L2 260 to 25 MiB, (far L2 480 to 50 MiB,)
    DRAM 820."""
    ns = lambda cycles: cycles / 1.98                                # noqa: E731
    levels = [(256 * KIB, ns(35)), (25 * MIB, ns(260))] + ([(50 * MIB, ns(480))] if far else [])
    return curve(levels + [(512 * MIB, ns(820))])


@pytest.mark.parametrize("caches", [H200_CACHES, None], ids=["spec-sizes", "plateau-order"])
def test_the_far_l2_partition_is_its_own_level_never_dram(caches):
    named = name_levels(plateaus(GRID, h200(far=True), min_points=3), 1, caches, partitioned_l2=True)
    assert {k: round(v.latency_ns * 1.98) for k, v in named.items()} == \
        pytest.approx({"l1": 35, "l2": 260, "l2_far": 480, "dram": 820}, rel=0.02)
    far = named["l2_far"]
    assert 25 * MIB < far.first_bytes <= 32 * MIB and 40 * MIB < far.last_bytes <= 50 * MIB and far.points >= 3
    assert named["dram"].first_bytes > 50 * MIB


def test_without_a_far_plateau_there_is_no_l2_far():
    named = name_levels(plateaus(GRID, h200(far=False), min_points=3), 1, H200_CACHES, partitioned_l2=True)
    assert sorted(named) == ["dram", "l1", "l2"]


def test_naming_by_order_and_by_documented_sizes():
    p = [Plateau(4 * KIB, 128 * KIB, 30, 6), Plateau(512 * KIB, 16 * MIB, 250, 6),
         Plateau(32 * MIB, 40 * MIB, 400, 2), Plateau(64 * MIB, 512 * MIB, 600, 4)]
    by_order = name_levels(p, first_level=1)
    assert {k: v.latency_ns for k, v in by_order.items()} == {"l1": 30, "l2": 250, "l3": 400, "dram": 600}
    assert "l0" in name_levels(p, first_level=0)
    # NVIDIA has no L3: the level between its L2 and DRAM is the far L2 partition.
    assert {k: v.latency_ns for k, v in name_levels(p, 1, partitioned_l2=True).items()} == \
        {"l1": 30, "l2": 250, "l2_far": 400, "dram": 600}
    # With the H200's documented caches, the 400 ns plateau (32-40 MiB) starts inside the 50 MiB
    # L2 after the near one: the far partition; DRAM starts past 50 MiB.
    caches = documented_caches(find(load_database(), "NVIDIA H200 SXM"))
    assert caches == H200_CACHES
    by_size = name_levels(p, 1, caches)
    assert {k: v.latency_ns for k, v in by_size.items()} == {"l1": 30, "l2": 250, "l2_far": 400, "dram": 600}


def test_a_plateau_running_past_the_last_cache_is_dram():
    # The H200 through CUDA (ld.global.ca): 20 ns in the L1, 146 ns in the L2, then one flat
    # 338 ns plateau from 16 MiB to 512 MiB, which starts inside the 50 MiB L2.
    ns = curve([(256 * KIB, 20.0), (12 * MIB, 146.0), (512 * MIB, 338.0)])
    named = name_levels(plateaus(GRID, ns, min_points=3), 1, H200_CACHES)
    assert {k: round(v.latency_ns) for k, v in named.items()} == {"l1": 20, "l2": 146, "dram": 338}
    assert 12 * MIB < named["dram"].first_bytes <= 16 * MIB


# -- the recorded lavapipe sweeps ---------------------------------------------------------------

@pytest.mark.parametrize("sweep", RECORDED["sweeps"], ids=[f"{s['chase']}-{i}" for i, s in enumerate(RECORDED["sweeps"])])
def test_every_recorded_lavapipe_sweep_gives_l1_l2_and_dram(sweep):
    named = name_levels(plateaus(sweep["working_set_bytes"], sweep["ns"]), 1)
    ns = {k: v.latency_ns for k, v in named.items()}
    l1 = [t for ws, t in zip(sweep["working_set_bytes"], sweep["ns"]) if ws <= 32 * KIB]
    if float(np.median(l1)) > 9:
        # The one sweep recorded under the heaviest load: its L1 points read 9.4 ns (the others
        # 6.3-8.4) and its L2 ones as low as 9.4, so the two cannot be told apart; it still
        # shows no level that is not there.
        assert sorted(ns) == ["dram", "l1"] and 150 < ns["dram"] < 200, ns
        return
    assert sorted(ns) == ["dram", "l1", "l2"], ns
    assert 6 < ns["l1"] < 9 and 8.5 < ns["l2"] < 12 and ns["l2"] > 1.2 * ns["l1"] and 150 < ns["dram"] < 280, ns
    assert named["l1"].last_bytes <= 38 * KIB and named["l2"].first_bytes >= 32 * KIB


def test_the_recording_is_noisy_enough_to_matter():
    """Each recorded sweep, read as before (runs within 10%, two points make a level), would not
    have given the three levels: the finder's robustness is what the test above checks."""
    def naive(sizes, ns):
        groups, levels = [], []
        for i, t in enumerate(ns):
            if groups and max(ns[j] for j in groups[-1] + [i]) <= 1.1 * min(ns[j] for j in groups[-1] + [i]):
                groups[-1].append(i)
            else:
                groups.append([i])
        levels = [g for g in groups if len(g) >= 2]
        return len(levels)
    counts = [naive(s["working_set_bytes"], s["ns"]) for s in RECORDED["sweeps"]]
    assert len(RECORDED["sweeps"]) >= 10 and min(counts) > 3, counts


# -- the recorded H200 sweep ----------------------------------------------------------------------

def h200_levels(top: int) -> tuple[list[Plateau], dict]:
    """The recorded H200 sweep up to `top`, read as a CUDA sweep on NVIDIA is (3 points a level)."""
    sizes = [ws for ws in H200_SWEEP["working_set_bytes"] if ws <= top]
    found_ = plateaus(sizes, H200_SWEEP["ns"][:len(sizes)], min_points=3)
    return found_, name_levels(found_, 1, H200_CACHES, partitioned_l2=True)


def test_the_whole_recorded_h200_sweep_gives_every_level():
    found_, named = h200_levels(512 * MIB)
    assert {k: round(v.latency_ns) for k, v in named.items()} == {"l1": 17, "l2": 143, "l2_far": 266, "dram": 319}
    assert 36 * MIB < named["l2_far"].first_bytes and named["l2_far"].last_bytes < 64 * MIB <= named["dram"].first_bytes


@pytest.mark.parametrize("top_mib", [128, 200, 215, 256, 362])
def test_the_recorded_h200_sweep_stopped_short_merges_the_far_l2_and_dram(top_mib):
    # 200 MiB: the screening sweep's end (4 x the 50 MiB L2), whose last point is 181 MiB.
    found_, named = h200_levels(top_mib * MIB)
    assert len(found_) == 3 and 36 * MIB < found_[-1].first_bytes < 40 * MIB, found_
    assert not {"dram", "l2_far"} <= set(named)
    if top_mib <= 215:     # the merged plateau starts inside the L2 and ends short of 4 x its size
        far = h200_levels(512 * MIB)[1]["l2_far"].latency_ns
        assert sorted(named) == ["l1", "l2", "l2_far"] and named["l2_far"].latency_ns > 1.1 * far

"""peakbench.harness.levels: plateaus of a latency curve (pure), and their names by order and by
the cache sizes a spec documents."""
from __future__ import annotations

import pytest

from peakbench.harness.levels import Plateau, documented_caches, name_levels, plateaus
from peakbench.specs import find, load_database

KIB, MIB = 1024, 1 << 20


def curve(levels: list[tuple[int, float]], top: int) -> tuple[list[int], list[float]]:
    """A latency curve with a plateau per (last working set, ns) and one transition point between."""
    sizes, lat, ws = [], [], 4 * KIB
    for i, (limit, ns) in enumerate(levels):
        while ws <= limit:
            sizes.append(ws)
            lat.append(ns * (1 + 0.01 * (len(sizes) % 3)))     # a little noise
            ws *= 2
        if i + 1 < len(levels):
            sizes.append(ws)
            lat.append((ns + levels[i + 1][1]) / 2)             # spilling out of the level
            ws *= 2
    while ws <= top:
        sizes.append(ws)
        lat.append(levels[-1][1])
        ws *= 2
    return sizes, lat


def test_plateaus_of_a_three_level_curve():
    sizes, lat = curve([(128 * KIB, 30.0), (16 * MIB, 250.0), (512 * MIB, 600.0)], 512 * MIB)
    found = plateaus(sizes, lat)
    assert [p.latency_ns for p in found] == pytest.approx([30, 250, 600], rel=0.02)
    assert found[0].first_bytes == 4 * KIB and found[0].last_bytes == 128 * KIB
    assert found[1].first_bytes == 512 * KIB and found[2].last_bytes == 512 * MIB


def test_close_plateaus_merge_and_transitions_belong_to_none():
    sizes = [4096 << i for i in range(8)]
    lat = [10, 10.5, 11, 11.4, 40, 80, 81, 80]
    found = plateaus(sizes, lat)
    assert [(p.first_bytes, p.last_bytes) for p in found] == [(4096, 4096 << 3), (4096 << 5, 4096 << 7)]


def test_naming_by_order_and_by_documented_sizes():
    p = [Plateau(4 * KIB, 128 * KIB, 30, 6), Plateau(512 * KIB, 16 * MIB, 250, 6),
         Plateau(32 * MIB, 40 * MIB, 400, 2), Plateau(64 * MIB, 512 * MIB, 600, 4)]
    by_order = name_levels(p, first_level=1)
    assert {k: v.latency_ns for k, v in by_order.items()} == {"l1": 30, "l2": 250, "l3": 400, "dram": 600}
    assert "l0" in name_levels(p, first_level=0)
    # With the H200's documented caches, the 400 ns plateau (32-40 MiB) is the L2's far
    # partition, not an L3: the level keeps the nearest plateau, and DRAM starts past 50 MiB.
    caches = documented_caches(find(load_database(), "NVIDIA H200 SXM"))
    assert caches == {"l2": 50 * MIB, "l1": 256 * KIB}
    by_size = name_levels(p, 1, caches)
    assert {k: v.latency_ns for k, v in by_size.items()} == {"l1": 30, "l2": 250, "dram": 600}


def test_a_plateau_running_past_the_last_cache_is_dram():
    # The H200 through CUDA (ld.global.ca): 20 ns to 128 KiB, 146 ns from 512 KiB, then one flat
    # 338 ns plateau from 16 MiB to 512 MiB, which starts inside the 50 MiB L2.
    sizes = [4 * KIB << i for i in range(18)]
    ns = [20] * 6 + [92] + [146] * 4 + [191] + [338] * 6
    caches = {"l1": 256 * KIB, "l2": 50 * MIB}
    named = name_levels(plateaus(sizes, ns), 1, caches)
    assert {k: v.latency_ns for k, v in named.items()} == {"l1": 20, "l2": 146, "dram": 338}
    assert named["dram"].first_bytes == 16 * MIB


def test_a_far_partition_before_dram_is_not_dram():
    # 260 ns from 32 to 128 MiB (a far L2 partition, ending before 4x the 50 MiB L2), then DRAM.
    sizes = [4 * KIB << i for i in range(18)]
    ns = [20] * 6 + [90] + [150] * 6 + [260] * 3 + [600] * 2
    caches = {"l1": 256 * KIB, "l2": 50 * MIB}
    named = name_levels(plateaus(sizes, ns), 1, caches)
    assert {k: v.latency_ns for k, v in named.items()} == {"l1": 20, "l2": 150, "dram": 600}

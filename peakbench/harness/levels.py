"""Cache levels from a latency-vs-working-set curve: pure functions, no GPU.

A level is a plateau: a run of consecutive working sets whose latencies stay within `flat` of
each other. Points between plateaus (where the working set spills out of a cache) belong to
none. The curve is read robustly, because a CPU driver's chase (lavapipe) shares its cores with
everything else on the machine, which slows some of its points severalfold, a few in a row:
  1. each point becomes the median of the 5 around it (a dip or spike of up to 2 points goes; a
     rising curve passes unchanged), then the least of itself and every later point (latency
     never falls as the working set grows: what stands above a later point, a burst of any
     length, was slowed by something else);
  2. a run of that curve counts from `min_points` points (6: 1.25 octaves at the sweep's
     2^(1/4) steps; 3 where a short level is expected, NVIDIA's far L2 partition), if at least
     `support` of its own measured points, and 2/3 of `min_points`, read its level (not only a
     later point's dip carried back by the envelope);
  3. consecutive runs merge where the curve climbs from one to the next by steps of at most
     `flat` (a slow drift), or where their levels are within `merge` of each other;
  4. a short run that ends the sweep is still the largest level where it stands `rise` above
     the last one (a sweep that stops soon after reaching DRAM).
Of the lavapipe sweeps recorded in tests/data/, 12 of 13 give L1, L2 and DRAM through this; the
13th, whose L1 points read as slow as its L2 ones, gives L1 and DRAM.
"""
from __future__ import annotations

from dataclasses import dataclass

from peakbench.harness.stats import median


@dataclass(frozen=True)
class Plateau:
    first_bytes: int      # smallest working set on the plateau
    last_bytes: int       # largest working set on the plateau
    latency_ns: float     # median latency of its points
    points: int


def running_median(values: list[float], window: int = 5) -> list[float]:
    """The median of the `window` points centred on each (narrower at the start, so the first
    point stays; cut short at the end, so a last point alone above the others goes). It leaves a
    rising curve unchanged, edges included, but for its last point, and removes a dip or a spike
    of up to window // 2 points."""
    half, out = window // 2, []
    for i in range(len(values)):
        near = values[i - half:i + half + 1] if i >= half else values[:2 * i + 1]
        out.append(median(near[len(near) % 2 == 0:]))       # an odd count: a value of the curve
    return out


def envelope(values: list[float]) -> list[float]:
    """Each value lowered to the least of itself and every later one: the highest
    non-decreasing curve under the values."""
    out = list(values)
    for i in range(len(out) - 2, -1, -1):
        out[i] = min(out[i], out[i + 1])
    return out


def runs(values: list[float], flat: float) -> list[list[int]]:
    """Maximal runs of consecutive indices whose values stay within `flat` of each other."""
    out: list[list[int]] = []
    for i, v in enumerate(values):
        if out and max(v, *(values[j] for j in out[-1])) <= (1 + flat) * min(v, *(values[j] for j in out[-1])):
            out[-1].append(i)
        else:
            out.append([i])
    return out


def plateaus(sizes: list[int], latencies: list[float], flat: float = 0.10, merge: float = 0.15,
             min_points: int = 6, support: float = 0.3, rise: float = 2.0) -> list[Plateau]:
    if not latencies:
        return []
    z = envelope(running_median(latencies))
    groups = runs(z, flat)

    def level(g: list[int]) -> float:
        return median([z[i] for i in g])

    def held(g: list[int]) -> bool:
        read = sum(level(g) / (1 + flat) <= latencies[i] <= level(g) * (1 + flat) for i in g)
        return read >= support * len(g) and read >= 2 * min_points / 3

    kept = [g for g in groups if len(g) >= min_points and held(g)]
    if groups[-1] not in kept and (not kept or z[groups[-1][0]] > rise * z[kept[-1][-1]]):
        kept.append(groups[-1])
    merged: list[list[int]] = []
    for g in kept:
        if merged:
            prev = merged[-1]
            drift = all(z[i + 1] <= (1 + flat) * z[i] for i in range(prev[-1], g[0]))
            if drift or abs(level(g) / level(prev) - 1) <= merge:
                merged[-1] = list(range(prev[0], g[-1] + 1))
                continue
        merged.append(g)
    return [Plateau(sizes[g[0]], sizes[g[-1]], median([latencies[i] for i in g]), len(g)) for g in merged]


def name_levels(found: list[Plateau], first_level: int, caches: dict | None = None,
                partitioned_l2: bool = False) -> dict[str, Plateau]:
    """Level names for the plateaus.

    With the device's documented cache sizes (`caches`: level name -> bytes), a plateau belongs to
    the smallest cache not yet named that holds its first working set, and to dram past them
    all. A further plateau that starts inside the named L2 is its far partition, l2_far
    (NVIDIA's L2 is two partitions: what an SM reads from the far one takes longer), unless it
    runs on to 4x the last cache's size: then it is dram (a chase can reach DRAM latency before a
    cache's nominal size).
    Without sizes, names run from the nearest plateau out, l<first_level>, l<first+1>, ..., and
    the last plateau is dram (a GPU with an L0 data cache, AMD RDNA, starts at 0); on a GPU whose
    L2 is partitioned and which has no L3 (`partitioned_l2`: NVIDIA), a plateau between the L2
    and DRAM is l2_far."""
    if not found:
        return {}
    names: dict[str, Plateau] = {}
    if caches:
        ordered = sorted((size, name) for name, size in caches.items() if size)
        for p in found:
            holding = [name for size, name in ordered if p.first_bytes <= size]     # nearest first
            level = next((name for name in holding if name not in names), None)
            if p.last_bytes >= 4 * ordered[-1][0] and holding:
                level = "dram"
            elif level is None:
                level = "l2_far" if "l2" in holding else "dram"
            names.setdefault(level, p)
        return names
    names["dram"] = found[-1]
    for i, p in enumerate(found[:-1]):
        level = first_level + i
        if partitioned_l2 and level == 3 and "l2" in names:
            names["l2_far"] = p
        elif level <= 3:
            names[f"l{level}"] = p
    return names


def documented_caches(spec) -> dict | None:
    """Cache sizes from a spec database entry (per-unit L1, L2, L3), or None without one."""
    if spec is None or "l2_mib" not in spec.data:
        return None
    data = spec.data
    caches = {"l2": int(data["l2_mib"] * (1 << 20))}
    if data.get("l1_kib_per_unit"):
        # The per-unit cache is AMD RDNA's L0 (its L1 is shared by a shader array).
        rdna = data.get("vendor") == "AMD" and str(data.get("architecture", "")).upper().startswith("RDNA")
        caches["l0" if rdna else "l1"] = int(data["l1_kib_per_unit"] * 1024)
    if data.get("l3_mib"):
        caches["l3"] = int(data["l3_mib"] * (1 << 20))
    return caches

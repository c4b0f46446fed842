"""Cache levels from a latency-vs-working-set curve: pure functions, no GPU.

A level is a plateau: a run of consecutive working sets whose latencies stay within `flat` of
each other. Points between plateaus (where the working set spills out of a cache) belong to
none. Adjacent plateaus closer than `merge` are one level.
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


def plateaus(sizes: list[int], latencies: list[float], flat: float = 0.10, merge: float = 0.15,
             min_points: int = 2) -> list[Plateau]:
    groups: list[list[int]] = []
    for i, t in enumerate(latencies):
        if groups and abs(t / latencies[groups[-1][0]] - 1) <= flat and abs(t / latencies[groups[-1][-1]] - 1) <= flat:
            groups[-1].append(i)
        else:
            groups.append([i])
    found = [g for g in groups if len(g) >= min_points]
    # A last point alone at the end of the sweep is still the largest level (often DRAM).
    if groups and len(groups[-1]) < min_points and (not found or found[-1] is not groups[-1]):
        found.append(groups[-1])
    out: list[Plateau] = []
    for g in found:
        p = Plateau(sizes[g[0]], sizes[g[-1]], median([latencies[i] for i in g]), len(g))
        if out and abs(p.latency_ns / out[-1].latency_ns - 1) <= merge:
            prev = out.pop()
            members = prev.points + p.points
            p = Plateau(prev.first_bytes, p.last_bytes,
                        (prev.latency_ns * prev.points + p.latency_ns * p.points) / members, members)
        out.append(p)
    return out


def name_levels(found: list[Plateau], first_level: int, caches: dict | None = None) -> dict[str, Plateau]:
    """Level names for the plateaus.

    With the device's documented cache sizes (`caches`: level name -> bytes), a plateau belongs to
    the smallest cache that holds its first working set, and to dram past them all; where several
    plateaus fall in one cache (the near and far partitions of NVIDIA's L2, say) the level is the
    nearest, unless the later one runs on to 4x the last cache's size: then it is dram (a chase
    can reach DRAM latency before a cache's nominal size). Without sizes, names run from the nearest plateau out, l<first_level>, l<first+1>,
    ..., and the last plateau is dram (a GPU with an L0 data cache, AMD RDNA, starts at 0)."""
    if not found:
        return {}
    names: dict[str, Plateau] = {}
    if caches:
        ordered = sorted((size, name) for name, size in caches.items() if size)
        for p in found:
            level = next((name for size, name in ordered if p.first_bytes <= size), "dram")
            # A plateau that stays flat from inside the last cache to well past its size (4x) is
            # DRAM: the cache stopped serving this access pattern before its nominal size. (One
            # that ends sooner is a far cache partition, with DRAM still to come.)
            if p.last_bytes >= 4 * ordered[-1][0] and level != "dram" and level in names:
                level = "dram"
            names.setdefault(level, p)
        return names
    names["dram"] = found[-1]
    for i, p in enumerate(found[:-1]):
        if first_level + i <= 3:
            names[f"l{first_level + i}"] = p
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

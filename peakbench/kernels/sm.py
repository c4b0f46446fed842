"""Per-SM maps on CUDA and HIP (shaders/sm.cu): the unit from %smid (CUDA) or __smid() (HIP), its
cycle counter from clock64() (workloads/sm.py runs them)."""
from __future__ import annotations

from peakbench.workloads.sm import SmKernel, SmWorkload

UNIT_ID = {"cuda": "%smid (the SM a block runs on)", "hip": "__smid() (the hardware id of the CU a block runs on)"}


def support(test, rt) -> str | None:
    """Every CUDA and HIP target names its units and counts their cycles."""
    return None


def workload(test, variant, rt) -> SmWorkload:
    return SmWorkload(test, variant, rt, SmKernel("sm.cu", "sm_map", UNIT_ID[rt.dialect], "clock64()"))

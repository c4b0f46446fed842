"""The on-chip kernels of CUDA and HIP (shaders/onchip.cu): shared-memory read and chase, and the
L2 read, whose loads skip the L1 (workloads/onchip.py runs them)."""
from __future__ import annotations

from peakbench.workloads import onchip
from peakbench.workloads.chase import ChaseKernel

SHARED_PATH = {"cuda": "LDS.128 (ld.shared.v4.u32)", "hip": "ds_read_b128"}
CHASE_PATH = {"cuda": "ld.shared.u32 of the loaded shared-window address (LDS R, [R]), one thread",
              "hip": "ds_read_b32 of the loaded byte offset, one lane"}
L2_PATH = {"cuda": "ld.global.cg.v4.u32 (LDG.E.128.STRONG.GPU: cached in the L2 only, L1 bypassed)",
           "hip": "global_load_dwordx4 with the nontemporal bit (__builtin_nontemporal_load: nt on gfx94x, slc on gfx90a)"}


def support(test, rt) -> str | None:
    """Every device: shared memory and L1-bypassing loads are in every CUDA and HIP target."""
    return None


def workload(test, variant, rt):
    d = rt.dialect
    return onchip.workload(test, variant, rt,
                           onchip.OnchipKernel("onchip.cu", "shared_read", SHARED_PATH[d]),
                           ChaseKernel("onchip.cu", "shared_chase", clock_word=2, path=CHASE_PATH[d], pointer=True),
                           onchip.OnchipKernel("onchip.cu", "l2_read", L2_PATH[d]))

"""Vulkan's on-chip kernels (shaders/onchip_shared.comp, onchip_l2.comp): shared-memory read and
chase, and the L2 read through coherent storage-buffer loads (workloads/onchip.py runs them)."""
from __future__ import annotations

from peakbench.workloads import onchip
from peakbench.workloads.chase import ROUND, ChaseKernel

SHARED_PATH = "shared uvec4 loads, 32 consecutive invocations on 32 consecutive vectors"
CHASE_PATH = "shared uint loads, the loaded word the next index, one invocation"
L2_PATH = ("coherent storage-buffer loads (SPIR-V Coherent, to be served by the L2; the SASS, where"
           " shown, says whether the driver bypassed the L1), slices rotating so no workgroup rereads its own")


def support(test, rt) -> str | None:
    """Every device: shared memory and storage buffers are core Vulkan; without the subgroup
    clock the chase is timed by the GPU (the workload's params say which)."""
    return None


def workload(test, variant, rt):
    loops = rt.max_rounds * ROUND        # the loop iterations a dispatch may run on this driver
    return onchip.workload(test, variant, rt,
                           onchip.OnchipKernel("onchip_shared.comp", "main", SHARED_PATH, loops),
                           ChaseKernel("onchip_shared.comp", "main", clock_word=1, path=CHASE_PATH,
                                       max_rounds=rt.max_rounds),
                           onchip.OnchipKernel("onchip_l2.comp", "main", L2_PATH, loops))

"""Per-SM maps on Vulkan (shaders/sm.comp): the SM a workgroup runs on from gl_SMIDNV, which only
NVIDIA's VK_NV_shader_sm_builtins gives, and its clock from VK_KHR_shader_clock's subgroup
clock (workloads/sm.py runs them)."""
from __future__ import annotations

from peakbench.vulkan.probe import EXT_SHADER_CLOCK, EXT_SM_BUILTINS
from peakbench.workloads.sm import SmKernel, SmWorkload

KERNEL = SmKernel("sm.comp", "main", unit_id="gl_SMIDNV (VK_NV_shader_sm_builtins)",
                  clock="clock2x32ARB (VK_KHR_shader_clock, subgroup scope: the SM's counter)")


def support(test, rt) -> str | None:
    """Where the driver names each workgroup's SM and lets it read the SM's clock."""
    driver = rt.dev.driver_label
    if not rt.caps.has("shaderSMBuiltins"):
        return (f"[driver] {EXT_SM_BUILTINS} (gl_SMIDNV) not exposed by {driver}: Vulkan names the unit a"
                " workgroup runs on through this NVIDIA extension alone")
    if not rt.caps.has("shaderSubgroupClock"):
        return f"[driver] {EXT_SHADER_CLOCK} subgroup clock not exposed by {driver}: no unit's cycle counter"
    return None


def workload(test, variant, rt) -> SmWorkload:
    return SmWorkload(test, variant, rt, KERNEL)

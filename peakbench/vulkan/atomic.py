"""Atomic adds on Vulkan: shaders/atomic.comp, u32 on every device, f32 where the driver offers
VK_EXT_shader_atomic_float's float32 add for the test's memory (storage buffers or shared)."""
from __future__ import annotations

from peakbench.workloads.atomic import AtomicKernel, AtomicWorkload

EXT_ATOMIC_FLOAT = "VK_EXT_shader_atomic_float"
FLOAT_FEATURE = {"global": "shaderBufferFloat32AtomicAdd", "shared": "shaderSharedFloat32AtomicAdd"}


def support(test, rt) -> str | None:
    return None


def missing(test, rt) -> dict[str, str]:
    """The catalog's variants this device cannot run, with their reasons."""
    feature, caps, driver = FLOAT_FEATURE[test.space], rt.caps, rt.driver_label
    if caps.has(feature):
        return {}
    if EXT_ATOMIC_FLOAT not in caps.extensions:
        why = f"[driver] {EXT_ATOMIC_FLOAT} not exposed by {driver}"
    elif feature not in caps.features:
        why = (f"[toolchain] peakbench's Vulkan device does not probe and enable {feature} of "
               f"{EXT_ATOMIC_FLOAT} (exposed by {driver})")
    else:
        why = f"[driver] {driver} does not support {feature} ({EXT_ATOMIC_FLOAT})"
    return {"f32": why}


def variants(test, rt) -> tuple:
    gone = missing(test, rt)
    return tuple(v for v in test.variants if v.name not in gone)


def workload(test, variant, rt) -> AtomicWorkload:
    kernel = AtomicKernel("atomic.comp", "main", {}, params={"shader": "atomic.comp"}, missing=missing(test, rt))
    return AtomicWorkload(test, variant, rt, kernel)

"""peakbench.vulkan.capabilities: the variants a Vulkan device offers."""
from __future__ import annotations

from peakbench.catalog import default_catalog

CATALOG = default_catalog()


def test_the_rows_read_is_offered_only_with_subgroup_arithmetic(shaders):
    from types import SimpleNamespace
    _, workloads = shaders
    test = CATALOG.get("memory.read")
    without = SimpleNamespace(caps=SimpleNamespace(subgroup_arithmetic=False))
    assert [v.name for v in workloads.TABLE.variants(test, without)] == ["chunk", "stride"]
    with_it = SimpleNamespace(caps=SimpleNamespace(subgroup_arithmetic=True))
    assert [v.name for v in workloads.TABLE.variants(test, with_it)] == ["rows", "chunk", "stride"]


def test_int64_needs_shader_int64_and_runs_the_fma_shader_on_int64_t(shaders):
    from types import SimpleNamespace
    _, workloads = shaders
    test = CATALOG.get("compute.int64")
    caps = SimpleNamespace(extensions=set(), has=lambda f: f != "shaderInt64")
    reason = workloads.TABLE.support(test, SimpleNamespace(caps=caps, driver_label="Mesa X"))
    assert reason == "[driver] Mesa X does not support shaderInt64"
    shader, settings = workloads.kernel_source(test, test.variants[1])
    assert shader == "alu_fma.comp" and settings["T"] == "i64vec2" and settings["IS_FLOAT"] == 0


def test_float_atomics_say_why_they_are_missing(shaders):
    from types import SimpleNamespace
    from peakbench.vulkan import atomic
    test = CATALOG.get("atomic.shared_add")

    def rt(extensions, features):
        caps = SimpleNamespace(extensions=extensions, features=features, has=lambda f: bool(features.get(f)))
        return SimpleNamespace(caps=caps, driver_label="Mesa X")
    assert atomic.missing(test, rt(set(), {}))["f32"] == "[driver] VK_EXT_shader_atomic_float not exposed by Mesa X"
    assert atomic.missing(test, rt({atomic.EXT_ATOMIC_FLOAT}, {}))["f32"].startswith("[toolchain]")
    off = rt({atomic.EXT_ATOMIC_FLOAT}, {"shaderSharedFloat32AtomicAdd": False})
    assert atomic.missing(test, off)["f32"].startswith("[driver] Mesa X does not support shaderSharedFloat32AtomicAdd")
    on = rt({atomic.EXT_ATOMIC_FLOAT}, {"shaderSharedFloat32AtomicAdd": True})
    assert atomic.missing(test, on) == {} and [v.name for v in atomic.variants(test, on)] == ["u32", "f32"]
    assert [v.name for v in workloads_variants(shaders, test, off)] == ["u32"]


def workloads_variants(shaders, test, rt):
    _, workloads = shaders
    return workloads.TABLE.variants(test, rt)

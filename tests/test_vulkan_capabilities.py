"""peakbench.vulkan.capabilities: the variants a Vulkan device offers."""
from __future__ import annotations

from peakbench.catalog import default_catalog

CATALOG = default_catalog()


def test_the_rows_read_is_offered_only_with_subgroup_arithmetic(shaders):
    from types import SimpleNamespace
    _, workloads = shaders
    test = CATALOG.get("memory.read")
    without = SimpleNamespace(caps=SimpleNamespace(subgroup_arithmetic=False))
    assert [v.name for v in workloads.variants(test, without)] == ["chunk", "stride"]
    with_it = SimpleNamespace(caps=SimpleNamespace(subgroup_arithmetic=True))
    assert [v.name for v in workloads.variants(test, with_it)] == ["rows", "chunk", "stride"]

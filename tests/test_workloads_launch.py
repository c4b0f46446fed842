"""peakbench.workloads.launch: launch overhead on a real Vulkan device (lavapipe here)."""
from __future__ import annotations

from peakbench.catalog import default_catalog

CATALOG = default_catalog()


def test_launch_overhead_is_measured(vulkan_device):
    from peakbench.harness.runner import Settings
    test = CATALOG.get("launch.overhead")
    w = vulkan_device.prepare(test, test.variants[0])
    try:
        v = w.measure(Settings.quick(), lambda: None)
    finally:
        w.close()
    assert v.summary.samples == 50 and 0 < v.summary.median < 1e6

"""peakbench.workloads.launch: launch overhead on a real Vulkan device (lavapipe here)."""
from __future__ import annotations

from peakbench.catalog import default_catalog

CATALOG = default_catalog()


def test_launch_overhead_is_measured(vulkan_device):
    from peakbench.harness import runner
    from peakbench.harness.runner import Load, Settings
    test = CATALOG.get("launch.overhead")
    w = vulkan_device.prepare(test, test.variants[0])
    try:
        v = runner.take(w, test, test.variants[0], Settings.quick(), lambda: None, Load())
    finally:
        w.close()
    assert v.summary.samples == 50 and 0 < v.summary.median < 1e6

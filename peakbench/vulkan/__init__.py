"""Vulkan backend (the `vulkan` cffi package): probe devices, compile, allocate, launch, time."""
from __future__ import annotations

from peakbench.backend import BackendUnavailable


def create():
    try:
        import vulkan  # noqa: F401  (raises OSError when no Vulkan loader is installed)
    except ImportError:
        raise BackendUnavailable("vulkan backend: Python package 'vulkan' is not installed "
                                 "(pip install vulkan)") from None
    except OSError:
        raise BackendUnavailable("vulkan backend: the Vulkan loader libvulkan.so.1 is not installed "
                                 "(Debian/Ubuntu: apt-get install libvulkan1 mesa-vulkan-drivers)") from None
    from peakbench.vulkan.instance import VulkanBackend
    return VulkanBackend()

"""The Vulkan backend's entry: the instance, its physical devices (probe.py reads what each can do)
and a Device per opened GPU."""
from __future__ import annotations

import vulkan as vk

from peakbench.backend import BackendUnavailable, DeviceInfo
from peakbench.vulkan.driver_cache import DriverCache
from peakbench.vulkan.probe import _version, probe


class VulkanBackend:
    name = "vulkan"

    def __init__(self):
        # Before the instance: NVIDIA's driver reads its cache settings at vkCreateInstance.
        self.cache = DriverCache()
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        try:
            version = vk.vkEnumerateInstanceVersion()
        except Exception:
            version = vk.VK_API_VERSION_1_0
        if version < vk.VK_MAKE_VERSION(1, 3, 0):
            raise BackendUnavailable(f"vulkan backend: the Vulkan loader is {_version(version)}; "
                                     "peakbench needs Vulkan 1.3 (update libvulkan1)")
        app = vk.VkApplicationInfo(pApplicationName="peakbench", applicationVersion=1,
                                   pEngineName="peakbench", engineVersion=1,
                                   apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))
        try:
            self.instance = vk.vkCreateInstance(vk.VkInstanceCreateInfo(pApplicationInfo=app), None)
        except vk.VkError as e:
            raise BackendUnavailable(f"vulkan backend: vkCreateInstance failed ({type(e).__name__}); "
                                     "is a Vulkan driver installed? (mesa-vulkan-drivers gives a CPU one)") from None
        try:
            self._physical = list(vk.vkEnumeratePhysicalDevices(self.instance))
        except vk.VkError:
            self._physical = []
        if not self._physical:
            raise BackendUnavailable("vulkan backend: no Vulkan device found (install your GPU's Vulkan "
                                     "driver, or mesa-vulkan-drivers for the lavapipe CPU driver)")
        self._probed = [probe(self.instance, pd, i) for i, pd in enumerate(self._physical)]

    def devices(self) -> list[DeviceInfo]:
        return [info for info, _ in self._probed]

    def open(self, index: int):
        from peakbench.vulkan import capabilities
        from peakbench.vulkan.device import VulkanDevice
        from peakbench.vulkan.runtime import VulkanRuntime
        from peakbench.workloads import Device
        info, caps = self._probed[index]
        return Device(VulkanRuntime(VulkanDevice(self._physical[index], info, caps, self.cache)), capabilities.TABLE)

    def close(self) -> None:
        if getattr(self, "instance", None) is not None:
            vk.vkDestroyInstance(self.instance, None)
            self.instance = None
        self.cache.close()

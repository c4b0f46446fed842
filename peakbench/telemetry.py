"""Clock readings during a test, through the vendor's management library where it is installed.

NVIDIA: NVML (nvidia-ml-py). A device is found by its UUID, which Vulkan, CUDA and NVML share;
with no UUID match and exactly one NVIDIA GPU, that one. Anything missing means no reading, never
an error: a clock is evidence, not a requirement.
"""
from __future__ import annotations

NVIDIA = 0x10DE


class ClockReader:
    def __init__(self, nvml, handle):
        self._nvml, self._handle = nvml, handle

    @classmethod
    def for_device(cls, info) -> "ClockReader | None":
        if info.vendor_id != NVIDIA:
            return None
        try:
            import pynvml as nvml
            nvml.nvmlInit()
        except Exception:
            return None
        try:
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
            uuids = [nvml.nvmlDeviceGetUUID(h) for h in handles]
            want = info.uuid.lower()
            match = [h for h, u in zip(handles, uuids) if str(u).lower().removeprefix("gpu-") == want]
            if not match and len(handles) == 1:
                match = handles
            if match:
                return cls(nvml, match[0])
        except Exception:
            pass
        nvml.nvmlShutdown()
        return None

    def sm_mhz(self) -> float | None:
        try:
            return float(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))
        except Exception:
            return None

    def throttle_reasons(self) -> int | None:
        try:
            return int(self._nvml.nvmlDeviceGetCurrentClocksThrottleReasons(self._handle))
        except Exception:
            return None

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass

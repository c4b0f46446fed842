"""CUDA devices: enumeration from the runtime's properties (and NVML for the driver version and
PCI ID), and opening one as a runtime with CUDA's capability table."""
from __future__ import annotations

import cupy as cp

from peakbench.backend import DeviceInfo, Enumerated
from peakbench.cuda import capabilities
from peakbench.cuda.identity import nvml_facts, uuid_text
from peakbench.cuda.runtime import CudaRuntime, arch_of
from peakbench.workloads import Device
from peakbench.telemetry import NVIDIA, ClockReader


def _version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


class CudaBackend(Enumerated):
    name = "cuda"

    def __init__(self, count: int):
        self._props = [cp.cuda.runtime.getDeviceProperties(i) for i in range(count)]
        buses = [cp.cuda.Device(i).pci_bus_id for i in range(count)]
        nvml = nvml_facts(buses)
        driver = nvml.get("driver") or f"CUDA driver {_version(cp.cuda.runtime.driverGetVersion())}"
        runtime = _version(cp.cuda.runtime.runtimeGetVersion())
        self._infos = []
        for i, p in enumerate(self._props):
            uuid, device_id = nvml.get(buses[i], (uuid_text(p.get("uuid")), 0))
            name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
            cc = (p["major"], p["minor"])
            self._infos.append(DeviceInfo(
                index=i, name=name, vendor_id=NVIDIA, device_id=device_id,
                driver=f"NVIDIA {driver}" if nvml.get("driver") else driver,
                api=f"CUDA {runtime} (CuPy {cp.__version__})", uuid=uuid,
                kind="integrated" if p.get("integrated") else "gpu", units=p["multiProcessorCount"],
                extra={"compute_capability": f"{cc[0]}.{cc[1]}", "arch": arch_of(*cc), "pci_bus_id": buses[i],
                       "l2_bytes": p["l2CacheSize"], "memory_bytes": p["totalGlobalMem"],
                       "max_clock_mhz": p["clockRate"] // 1000}))

    def open(self, index: int) -> Device:
        info = self._infos[index]
        return Device(CudaRuntime(index, info, self._props[index], ClockReader.for_device(info)), capabilities.TABLE)

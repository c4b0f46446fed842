"""The scheduler's GPU assignment, applied to Vulkan.

CUDA_VISIBLE_DEVICES limits what CUDA sees, ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES what ROCm
sees; the Vulkan loader reads none of them. Where one is set, the Vulkan backend offers only the
devices of that vendor whose UUID is a visible one, numbered from 0 in Vulkan's order, as CUDA
numbers its visible devices. Entries are indices (NVML's order, the PCI bus order CUDA also uses
where the GPUs are of one model) or UUIDs (`GPU-...`, a unique prefix is enough, as CUDA takes it).
Devices of other vendors (lavapipe, say) are not the scheduler's and stay.
"""
from __future__ import annotations

import os
from dataclasses import replace

from peakbench.backend import BackendUnavailable
from peakbench.telemetry import AMD, NVIDIA, nvml_uuid

VARIABLES = {NVIDIA: ("CUDA_VISIBLE_DEVICES",), AMD: ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")}


def _entries(text: str) -> list[str]:
    return [e.strip() for e in text.split(",") if e.strip()]


def nvml_uuids() -> list[str] | None:
    """Every NVIDIA GPU's UUID in NVML's order, or None without NVML."""
    try:
        import pynvml as nvml
        nvml.nvmlInit()
    except Exception:
        return None
    try:
        return [nvml_uuid(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)))
                for i in range(nvml.nvmlDeviceGetCount())]
    except Exception:
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def amdsmi_uuids() -> list[str] | None:
    """Every AMD GPU's UUID in amdsmi's order, or None without amdsmi."""
    try:
        import amdsmi as smi
        smi.amdsmi_init()
    except Exception:
        return None
    try:
        return [nvml_uuid(smi.amdsmi_get_gpu_device_uuid(h)) for h in smi.amdsmi_get_processor_handles()]
    except Exception:
        return None
    finally:
        try:
            smi.amdsmi_shut_down()
        except Exception:
            pass


def resolve(variable: str, text: str, known) -> list[str]:
    """The UUIDs that `variable`=`text` makes visible; `known()` lists every GPU's UUID in the
    management library's order (None where it is not installed). As CUDA does, the list ends at
    the first entry that names no GPU."""
    uuids, listed = [], None
    for entry in _entries(text):
        if entry.isdigit():
            listed = listed if listed is not None else known()
            if listed is None:
                raise BackendUnavailable(
                    f"vulkan backend: {variable}={text} names GPUs by index, and without the management "
                    f"library (nvidia-ml-py / amdsmi) their UUIDs are unknown, so Vulkan cannot honour it: "
                    f"install it, or name the GPUs by UUID")
            if int(entry) >= len(listed):
                break
            uuids.append(listed[int(entry)])
            continue
        want = nvml_uuid(entry)
        listed = listed if listed is not None else (known() or [])
        found = [u for u in listed if u.startswith(want)]
        if len(found) == 1 or not listed:
            uuids.append(found[0] if found else want)
        else:
            break
    return uuids


def visible(vendor: int, env=os.environ) -> list[str] | None:
    """The visible UUIDs of one vendor's GPUs, or None where no variable limits them."""
    found = None
    for variable in VARIABLES.get(vendor, ()):
        if variable in env:
            # HIP_VISIBLE_DEVICES numbers what ROCR_VISIBLE_DEVICES left visible.
            known = (lambda f=found: f) if found is not None else nvml_uuids if vendor == NVIDIA else amdsmi_uuids
            found = resolve(variable, env[variable], known)
    return found


class VisibleDevices:
    """A Vulkan backend that offers only the visible devices, renumbered (see the module)."""

    def __init__(self, backend, env=os.environ):
        self._backend, self.name = backend, backend.name
        infos = backend.devices()
        limits = {vendor: visible(vendor, env) for vendor in VARIABLES if any(i.vendor_id == vendor for i in infos)}
        kept = [i for i in infos if limits.get(i.vendor_id) is None or i.uuid.lower() in limits[i.vendor_id]]
        self._raw = [i.index for i in kept]
        self._infos = [i if n == i.index else replace(i, index=n, extra={**i.extra, "vulkan_index": i.index})
                       for n, i in enumerate(kept)]

    def devices(self):
        return list(self._infos)

    def open(self, index: int):
        return self._backend.open(self._raw[index])

    def close(self) -> None:
        self._backend.close()


def limited(backend, env=os.environ):
    """The backend, with the visibility variables applied where it is Vulkan and one is set."""
    if backend.name != "vulkan" or not any(v in env for vs in VARIABLES.values() for v in vs):
        return backend
    return VisibleDevices(backend, env)

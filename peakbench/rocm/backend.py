"""AMD devices: enumeration from hipGetDeviceProperties (the PCI device ID from sysfs), the core
clock from amdsmi where it is installed, and opening one as a runtime with the capability table
(targets.py)."""
from __future__ import annotations

from pathlib import Path

from peakbench.backend import DeviceInfo, Enumerated
from peakbench.rocm import capabilities, targets
from peakbench.rocm.runtime import HipApi, HipRuntime, hip_version
from peakbench.workloads import Device

AMD = 0x1002
SYSFS_PCI = Path("/sys/bus/pci/devices")
AMDGPU_VERSION = Path("/sys/module/amdgpu/version")     # the DKMS kernel driver's; absent in-tree
PROPS = ("name", "gcnArchName", "multiProcessorCount", "clockRate", "memoryClockRate", "memoryBusWidth",
         "totalGlobalMem", "l2CacheSize", "maxThreadsPerMultiProcessor", "maxThreadsPerBlock", "warpSize",
         "sharedMemPerBlock", "integrated", "uuid", "pciDomainID", "pciBusID", "pciDeviceID")


def _text(value) -> str:
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).split(b"\0", 1)[0].decode(errors="replace")
    return str(value or "").strip()


def _uuid(raw) -> str:
    """hipUUID (a struct with `bytes`, or the bytes themselves) as 8-4-4-4-12 hex."""
    raw = getattr(raw, "bytes", raw)
    try:
        data = bytes(raw)[:16]
    except (TypeError, ValueError):
        data = b""
    h = data.hex().ljust(32, "0")
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def properties(api: HipApi, index: int) -> dict:
    props = api.hip.hipDeviceProp_t()
    api.call(api.hip.hipGetDeviceProperties, props, index)
    out = {k: getattr(props, k, None) for k in PROPS}
    out["name"], out["gcnArchName"] = _text(out["name"]), _text(out["gcnArchName"])
    return out


def bdf(props: dict) -> str | None:
    """The PCI address, 0000:c1:00.0, where the runtime reports it."""
    if props.get("pciBusID") is None:
        return None
    return f"{props.get('pciDomainID') or 0:04x}:{props['pciBusID']:02x}:{props.get('pciDeviceID') or 0:02x}.0"


def pci_device_id(address: str | None, root: Path) -> int:
    """The PCI device (product) ID from sysfs, e.g. 0x74a1 for an MI300X; 0 where unreadable."""
    if not address:
        return 0
    try:
        return int((root / address / "device").read_text().strip(), 16)
    except (OSError, ValueError):
        return 0


def kernel_driver(path: Path = AMDGPU_VERSION) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def hip_python_version(hip) -> str | None:
    found = getattr(hip, "__version__", None)
    if found:
        return str(found)
    try:
        from importlib.metadata import version
        return version("hip-python")
    except Exception:
        return None


class AmdSmiClock:
    """The GFX clock of one GPU through amdsmi (found by PCI address; with one GPU, that one)."""

    def __init__(self, smi, handle):
        self._smi, self._handle = smi, handle

    @classmethod
    def for_device(cls, address: str | None) -> "AmdSmiClock | None":
        try:
            import amdsmi as smi
            smi.amdsmi_init()
        except Exception:          # not installed, or no driver: no clock readings, not an error
            return None
        try:
            handles = list(smi.amdsmi_get_processor_handles())
            match = [h for h in handles if address and str(smi.amdsmi_get_gpu_device_bdf(h)).lower() == address]
            if not match and len(handles) == 1:
                match = handles
            if match:
                return cls(smi, match[0])
        except Exception:
            pass
        cls._shut_down(smi)
        return None

    def gfx_mhz(self) -> float | None:
        try:
            info = self._smi.amdsmi_get_clock_info(self._handle, self._smi.AmdSmiClkType.GFX)
            return float(info["clk"])
        except Exception:          # "N/A", a partition without clocks, a driver hiccup
            return None

    def close(self) -> None:
        self._shut_down(self._smi)

    @staticmethod
    def _shut_down(smi) -> None:
        try:
            smi.amdsmi_shut_down()
        except Exception:
            pass


class RocmBackend(Enumerated):
    name = "rocm"

    def __init__(self, hip, hiprtc, count: int, sysfs: Path | None = None, amdgpu: Path | None = None):
        self.api = HipApi(hip, hiprtc)
        hip_driver = hip_version(self.api.call(hip.hipDriverGetVersion))
        kernel = kernel_driver(amdgpu or AMDGPU_VERSION)
        driver = f"amdgpu {kernel}, HIP {hip_driver}" if kernel else f"HIP {hip_driver}"
        runtime = hip_version(self.api.call(hip.hipRuntimeGetVersion))
        binding = hip_python_version(hip)
        api_text = f"HIP {runtime}" + (f" (hip-python {binding})" if binding else " (hip-python)")
        self._props, self._infos = [], []
        for i in range(count):
            p = properties(self.api, i)
            fam = targets.family(p["gcnArchName"])
            address = bdf(p)
            self._props.append(p)
            self._infos.append(DeviceInfo(
                index=i, name=p["name"] or f"AMD GPU {i}", vendor_id=AMD,
                device_id=pci_device_id(address, sysfs or SYSFS_PCI), driver=driver, api=api_text,
                uuid=_uuid(p["uuid"]), kind="integrated" if p.get("integrated") else "gpu",
                units=p["multiProcessorCount"],
                extra={"arch": targets.base_target(p["gcnArchName"]), "target_id": p["gcnArchName"],
                       "isa_family": fam.name if fam else None, "pci_address": address,
                       "l2_bytes": p["l2CacheSize"], "memory_bytes": p["totalGlobalMem"],
                       "max_clock_mhz": (p["clockRate"] or 0) // 1000, "wave_size": p["warpSize"]}))

    def open(self, index: int) -> Device:
        info = self._infos[index]
        rt = HipRuntime(self.api, index, info, self._props[index], AmdSmiClock.for_device(info.extra["pci_address"]))
        return Device(rt, capabilities.TABLE)

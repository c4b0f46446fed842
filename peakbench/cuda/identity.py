"""Who a CUDA device is: its UUID (which Vulkan and NVML share, so runs of one GPU through
several backends pair up), PCI device ID and driver version, from NVML where it is installed."""
from __future__ import annotations


def uuid_text(raw) -> str:
    h = (bytes(raw or b"") + bytes(16))[:16].hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def bus_key(bus_id: str) -> tuple:
    """'0000:19:00.0' and NVML's '00000000:19:00.0' name the same slot."""
    try:
        domain, bus, rest = bus_id.strip().split(":")
        device, function = rest.split(".")
        return tuple(int(x, 16) for x in (domain, bus, device, function))
    except ValueError:
        return (bus_id,)


def nvml_facts(bus_ids: list[str]) -> dict:
    """Driver version, and per PCI bus ID the UUID and PCI device ID, where nvidia-ml-py is
    installed. CuPy's properties give the UUID as a C string, cut at its first zero byte, so
    NVML's is the one to trust (the Vulkan and NVML UUIDs must match it to pair runs up)."""
    try:
        import pynvml as nvml
        nvml.nvmlInit()
    except Exception:
        return {}
    try:
        facts = {"driver": _text(nvml.nvmlSystemGetDriverVersion())}
        wanted = {bus_key(b): b for b in bus_ids}
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            pci = nvml.nvmlDeviceGetPciInfo(h)
            bus = wanted.get(bus_key(_text(pci.busId)))
            if bus:
                uuid = _text(nvml.nvmlDeviceGetUUID(h)).lower().removeprefix("gpu-")
                facts[bus] = (uuid, pci.pciDeviceId >> 16)
        return facts
    except Exception:
        return {}
    finally:
        nvml.nvmlShutdown()

"""Readings of the board during a test, through the vendor's management library where it is installed.

NVIDIA: NVML (nvidia-ml-py). AMD: amdsmi (it comes with ROCm). Anything else: no readings. A
device is found by its UUID, which Vulkan, CUDA and NVML share (AMD: its PCI address); with no
match and exactly one GPU of the vendor, that one. Anything missing means no reading, never an
error: telemetry is evidence, not a requirement.

A Sampler reads the SM and memory clocks, board power, temperature and the throttle reasons in a
thread every INTERVAL_S while a test runs; summarize() turns the samples of a time window into the
result's `telemetry` (min/mean/max per quantity, the throttle reasons seen), `energy_j` (mean power
x the window's duration) and efficiency() gives the value per watt.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

NVIDIA, AMD = 0x10DE, 0x1002
INTERVAL_S = 0.05

# NVML's clocks-event (throttle) reason bits (nvml.h, nvmlClocksEventReason*). GPU idle (0x1) and
# the applications-clocks setting (0x2) say where the clock was asked to be, not that it was held
# down: they are no throttle.
THROTTLES = ((0x4, "sw_power_cap"), (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal"),
             (0x40, "hw_thermal"), (0x80, "hw_power_brake"), (0x100, "display_clock"))
NOT_THROTTLES = 0x1 | 0x2
# How the table names a throttle's cause.
CAUSES = {"sw_power_cap": "power", "hw_power_brake": "power", "sw_thermal": "thermal", "hw_thermal": "thermal"}

EFFICIENCY_UNITS = {"TFLOPS": "TFLOPS/W", "TOPS": "TOPS/W", "GOPS": "GOPS/W", "GB/s": "GB/s/W"}


def throttle_names(mask: int) -> list[str]:
    """The throttle reasons set in NVML's bitmask; unknown bits as `bit_0x...`."""
    names = [name for bit, name in THROTTLES if mask & bit]
    known = NOT_THROTTLES | sum(bit for bit, _ in THROTTLES)
    names += [f"bit_{1 << i:#x}" for i in range(64) if mask & ~known & (1 << i)]
    return names


def _match(handles: list, keys: list[str], want: str):
    """The handle whose key is `want`; with no match and exactly one handle, that one."""
    match = [h for h, k in zip(handles, keys) if want and k == want]
    if not match and len(handles) == 1:
        return handles[0]
    return match[0] if match else None


def nvml_uuid(raw) -> str:
    """NVML's `GPU-xxxxxxxx-...` as the backends spell a UUID: lower case, no prefix."""
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return text.strip().lower().removeprefix("gpu-")


def _nvml():
    """pynvml, initialized; None where it is not installed or finds no driver."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def _shut_down(nvml) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:
        pass


def _nvml_handle(nvml, info):
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    return _match(handles, [nvml_uuid(nvml.nvmlDeviceGetUUID(h)) for h in handles], info.uuid.lower())


def _nvml_open(cls, info):
    """cls(nvml, handle) for the device NVML knows by the info's UUID, or None (NVML shut down)."""
    if (nvml := _nvml()) is None:
        return None
    try:
        handle = _nvml_handle(nvml, info)
        if handle is not None:
            return cls(nvml, handle)
    except Exception:
        pass
    _shut_down(nvml)
    return None


class ClockReader:
    """The SM clock alone, for a backend that reads it with each sample."""

    def __init__(self, nvml, handle):
        self._nvml, self._handle = nvml, handle

    @classmethod
    def for_device(cls, info) -> "ClockReader | None":
        return _nvml_open(cls, info) if info.vendor_id == NVIDIA else None

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
        _shut_down(self._nvml)


@dataclass(frozen=True)
class Sample:
    t: float                        # time.perf_counter()
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    throttle_reasons: tuple | None = None     # names; None where not read
    power_source: str | None = None           # what power_w is: "instant", or the library's average

    QUANTITIES = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c")


def _read(fn):
    try:
        return fn()
    except Exception:                 # not supported on this board, or a driver hiccup
        return None


class NvmlSource:
    """NVML's readings. Board power is the instantaneous field (NVML_FI_DEV_POWER_INSTANT) where
    the driver has it: nvmlDeviceGetPowerUsage averages over one second on Ampere and later, too
    long for tests of a second or less; else that average."""

    def __init__(self, nvml, handle):
        self.nvml, self.handle = nvml, handle
        self.instant = getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", None)
        if self.instant is not None and self._instant_mw() is None:
            self.instant = None
        self.power_source = "instant" if self.instant is not None else "nvmlDeviceGetPowerUsage (1 s average)"

    def _instant_mw(self) -> float | None:
        try:
            v = self.nvml.nvmlDeviceGetFieldValues(self.handle, [self.instant])[0]
        except Exception:
            return None
        if getattr(v, "nvmlReturn", 1) != 0:
            return None
        return float(v.value.uiVal)

    def _power_mw(self) -> float | None:
        if self.instant is not None:
            found = self._instant_mw()
            if found is not None:
                return found
        return float(self.nvml.nvmlDeviceGetPowerUsage(self.handle))

    @classmethod
    def for_device(cls, info) -> "NvmlSource | None":
        return _nvml_open(cls, info)

    def _reasons(self):
        n, h = self.nvml, self.handle
        get = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or n.nvmlDeviceGetCurrentClocksThrottleReasons
        return tuple(throttle_names(int(get(h))))

    def read(self) -> Sample:
        n, h = self.nvml, self.handle
        power = _read(self._power_mw)
        return Sample(time.perf_counter(), _read(lambda: float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))),
                      _read(lambda: float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM))),
                      None if power is None else power / 1000.0,
                      _read(lambda: float(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))),
                      _read(self._reasons), self.power_source)

    def close(self) -> None:
        _shut_down(self.nvml)


class AmdSmiSource:
    """amdsmi: GFX and memory clocks, socket power, hotspot temperature; no throttle reasons (its
    throttle bits differ per ASIC)."""

    def __init__(self, smi, handle):
        self.smi, self.handle = smi, handle

    @classmethod
    def for_device(cls, info) -> "AmdSmiSource | None":
        try:
            import amdsmi as smi
            smi.amdsmi_init()
        except Exception:
            return None
        try:
            handles = list(smi.amdsmi_get_processor_handles())
            address = str(info.extra.get("pci_address") or "").lower()
            handle = _match(handles, [str(smi.amdsmi_get_gpu_device_bdf(h)).lower() for h in handles], address)
            if handle is not None:
                return cls(smi, handle)
        except Exception:
            pass
        _read(smi.amdsmi_shut_down)
        return None

    def _clock(self, kind) -> float:
        return float(self.smi.amdsmi_get_clock_info(self.handle, kind)["clk"])

    def _power(self) -> float:
        info = self.smi.amdsmi_get_power_info(self.handle)
        value = info.get("current_socket_power")
        return float(value if isinstance(value, (int, float)) else info["average_socket_power"])

    def read(self) -> Sample:
        s, h = self.smi, self.handle
        return Sample(time.perf_counter(), _read(lambda: self._clock(s.AmdSmiClkType.GFX)),
                      _read(lambda: self._clock(s.AmdSmiClkType.MEM)), _read(self._power),
                      _read(lambda: float(s.amdsmi_get_temp_metric(h, s.AmdSmiTemperatureType.HOTSPOT,
                                                                   s.AmdSmiTemperatureMetric.CURRENT))))

    def close(self) -> None:
        _read(self.smi.amdsmi_shut_down)


def source_for(info):
    """The management library's view of this device, or None."""
    if info.vendor_id == NVIDIA:
        return NvmlSource.for_device(info)
    if info.vendor_id == AMD:
        return AmdSmiSource.for_device(info)
    return None


class Sampler:
    """Reads `source` every `interval` s in a thread between start() and stop()."""

    def __init__(self, source, interval: float = INTERVAL_S):
        self.source, self.interval = source, interval
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def for_device(cls, info) -> "Sampler | None":
        source = source_for(info)
        return cls(source) if source is not None else None

    def _loop(self) -> None:
        while True:
            sample = _read(self.source.read)
            if sample is not None:
                self.samples.append(sample)
            if self._stop.wait(self.interval):
                return

    def start(self) -> None:
        self.samples = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="peakbench-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> list[Sample]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            last = _read(self.source.read)          # one reading at the end, however short the test
            if last is not None:
                self.samples.append(last)
        return list(self.samples)

    def close(self) -> None:
        self.stop()
        _read(self.source.close)


def summarize(samples: list[Sample], window: tuple[float, float] | None = None,
              interval: float = INTERVAL_S) -> tuple[dict | None, float | None]:
    """The result's `telemetry` and `energy_j` from the samples taken in `window` (perf_counter
    start, end: the timed samples of the best variant), or from all of them without one. A window
    shorter than the sampling interval takes the readings within one interval of it."""
    if window is not None:
        inside = [s for s in samples if window[0] <= s.t <= window[1]]
        samples = inside or [s for s in samples if window[0] - interval <= s.t <= window[1] + interval]
    if not samples:
        return None, None
    telemetry: dict = {}
    for q in Sample.QUANTITIES:
        values = [getattr(s, q) for s in samples if getattr(s, q) is not None]
        telemetry[q] = ({"min": round(min(values), 1), "mean": round(sum(values) / len(values), 1),
                         "max": round(max(values), 1)} if values else None)
    sources = [s.power_source for s in samples if s.power_source and s.power_w is not None]
    if sources:
        telemetry["power_source"] = sources[-1]
    read = [s.throttle_reasons for s in samples if s.throttle_reasons is not None]
    seen = dict.fromkeys(name for names in read for name in names)
    telemetry["throttle_reasons"] = list(seen) if read else None
    if not any(v is not None for v in telemetry.values()):
        return None, None
    power = telemetry["power_w"]
    span = (window[1] - window[0]) if window else (samples[-1].t - samples[0].t)
    energy = round(power["mean"] * span, 3) if power and span > 0 else None
    return telemetry, energy


def efficiency(value: float | None, unit: str, telemetry: dict | None) -> dict | None:
    """The value per watt of mean board power (TFLOPS/W, GB/s/W, ...); None for times (ns, us)."""
    power = (telemetry or {}).get("power_w")
    if value is None or unit not in EFFICIENCY_UNITS or not power or not power["mean"] > 0:
        return None
    ratio = value / power["mean"]
    return {"value": float(f"{ratio:.4g}"), "unit": EFFICIENCY_UNITS[unit]}     # 4 significant digits


def throttle_cause(reasons: list[str] | None) -> str | None:
    """'power', 'thermal', 'power, thermal' or 'clock' for the reasons seen; None when none."""
    if not reasons:
        return None
    causes = dict.fromkeys(CAUSES.get(r, "clock") for r in reasons)
    return ", ".join(causes)


def health(info) -> dict | None:
    """What a link or power verdict and a fleet report need beside the numbers, read once per
    device from NVML by its UUID (NVIDIA: CUDA and Vulkan alike): the PCIe link's current and
    maximum generation and width, volatile ECC error counts, retired pages and remapped rows.
    None where NVML cannot see the device; a field the board does not report is left out."""
    if info.vendor_id != NVIDIA:
        return None
    return _nvml_open(_health_of, info)


def _health_of(nvml, handle) -> dict:
    n, h = nvml, handle
    try:
        found = {
            "pcie_generation": _read(lambda: int(n.nvmlDeviceGetCurrPcieLinkGeneration(h))),
            "pcie_generation_max": _read(lambda: int(n.nvmlDeviceGetMaxPcieLinkGeneration(h))),
            "pcie_width": _read(lambda: int(n.nvmlDeviceGetCurrPcieLinkWidth(h))),
            "pcie_width_max": _read(lambda: int(n.nvmlDeviceGetMaxPcieLinkWidth(h))),
            "ecc_uncorrected": _read(lambda: int(n.nvmlDeviceGetTotalEccErrors(
                h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC))),
            "ecc_corrected": _read(lambda: int(n.nvmlDeviceGetTotalEccErrors(
                h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC))),
            "power_limit_w": _read(lambda: round(n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0, 1)),
            "retired_pages": _read(lambda: sum(len(n.nvmlDeviceGetRetiredPages(h, cause)) for cause in (
                n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERRORS))),
        }
        rows = _read(lambda: n.nvmlDeviceGetRemappedRows(h))      # (corrected, uncorrected, pending, failed)
        if rows is not None:
            found.update(remapped_rows_corrected=int(rows[0]), remapped_rows_uncorrected=int(rows[1]),
                         remapping_pending=bool(rows[2]), remapping_failed=bool(rows[3]))
        return {k: v for k, v in found.items() if v is not None}
    finally:
        _shut_down(nvml)


def link_below_max(health: dict | None) -> str | None:
    """'Gen3 x16, its maximum Gen5 x16' where the link trained below its maximum, else None."""
    h = health or {}
    gen, gen_max, width, width_max = (h.get(k) for k in ("pcie_generation", "pcie_generation_max",
                                                          "pcie_width", "pcie_width_max"))
    if None in (gen, gen_max, width, width_max) or (gen >= gen_max and width >= width_max):
        return None
    return f"Gen{gen} x{width}, its maximum Gen{gen_max} x{width_max}"

"""Vendor theoretical peaks per GPU, matched to a device by PCI ID or name.

The database is `gpus.toml` beside this file (a source for every number); a user file in the
same format (TOML or JSON, a list of `gpu` tables) adds GPUs or replaces same-named ones.
"""
from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

DATABASE = Path(__file__).with_name("gpus.toml")
REQUIRED = ("name", "boost_clock_mhz", "peaks")


class SpecError(Exception):
    """A spec file or name that cannot be used; the message names the problem."""


@dataclass(frozen=True)
class GpuSpec:
    name: str
    boost_clock_mhz: float
    peaks: dict
    match: tuple = ()
    pci_ids: tuple = ()
    source: str = ""
    data: dict = field(default_factory=dict, compare=False, repr=False)

    def peak(self, test: str) -> float | None:
        return self.peaks.get(test)

    def peak_clock_mhz(self, test: str) -> float:
        """The clock a test's peak assumes (some vendors quote tensor peaks at a lower clock)."""
        return float(self.data.get("peak_clock_mhz", {}).get(test, self.boost_clock_mhz))

    def as_json(self) -> dict:
        return {"name": self.name, "boost_clock_mhz": self.boost_clock_mhz, "source": self.source}


def _parse(entries, origin: str) -> list[GpuSpec]:
    if not isinstance(entries, list):
        raise SpecError(f"{origin}: expected a list of [[gpu]] tables")
    specs = []
    for n, e in enumerate(entries, 1):
        missing = [k for k in REQUIRED if not isinstance(e, dict) or k not in e]
        if missing:
            raise SpecError(f"{origin}: gpu entry {n} lacks {', '.join(missing)}")
        bad = [k for k, v in e["peaks"].items() if not isinstance(v, (int, float)) or v <= 0]
        if bad or not isinstance(e["boost_clock_mhz"], (int, float)):
            raise SpecError(f"{origin}: gpu '{e['name']}' has a non-numeric or non-positive value"
                            f" ({', '.join(bad) or 'boost_clock_mhz'})")
        specs.append(GpuSpec(e["name"], float(e["boost_clock_mhz"]), dict(e["peaks"]),
                             tuple(m.lower() for m in e.get("match", [e["name"]])),
                             tuple(p.lower() for p in e.get("pci_ids", [])),
                             e.get("source", ""), e))
    return specs


def load_file(path: str | Path) -> list[GpuSpec]:
    path = Path(path)
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except OSError as e:
        raise SpecError(f"cannot read spec file {path}: {e.strerror}") from None
    except (ValueError, tomllib.TOMLDecodeError) as e:
        raise SpecError(f"spec file {path} is malformed: {e}") from None
    if not isinstance(data, dict) or "gpu" not in data:
        raise SpecError(f"spec file {path} has no 'gpu' list")
    return _parse(data["gpu"], str(path))


def load_database(extra: str | Path | None = None) -> list[GpuSpec]:
    specs = load_file(DATABASE)
    if extra is not None:
        added = load_file(extra)
        names = {s.name.lower() for s in added}
        specs = added + [s for s in specs if s.name.lower() not in names]
    return specs


def find(specs: list[GpuSpec], name: str) -> GpuSpec:
    """A spec by its exact name (case-insensitive), else the only one containing `name`."""
    key = name.lower()
    exact = [s for s in specs if s.name.lower() == key]
    if exact:
        return exact[0]
    partial = [s for s in specs if key in s.name.lower()]
    if len(partial) == 1:
        return partial[0]
    if not partial:
        raise SpecError(f"no GPU named '{name}' in the spec database (see `peakbench specs`)")
    raise SpecError(f"'{name}' is ambiguous: {', '.join(s.name for s in partial)}")


def match(specs: list[GpuSpec], device_name: str, vendor_id: int, device_id: int) -> GpuSpec | None:
    """The spec for a device: its PCI ID first, then the longest name substring that matches."""
    pci = f"0x{vendor_id:04x}:0x{device_id:04x}"
    for s in specs:
        if pci in s.pci_ids:
            return s
    name = device_name.lower()
    best = max(((len(m), s) for s in specs for m in s.match if m in name),
               key=lambda t: t[0], default=None)
    return best[1] if best else None


def resolve(option: str | None) -> tuple[list[GpuSpec], GpuSpec | None]:
    """The database and the forced spec for `--spec NAME|FILE` (a file adds GPUs, forces none
    unless it holds exactly one)."""
    if option is None:
        return load_database(), None
    if Path(option).exists():
        added = load_file(option)
        return load_database(option), added[0] if len(added) == 1 else None
    specs = load_database()
    return specs, find(specs, option)

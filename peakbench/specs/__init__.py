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


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def _strings(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _check(e, origin: str, n: int) -> None:
    """One-line errors for entries the lookup and the % columns could not use."""
    if not isinstance(e, dict):
        raise SpecError(f"{origin}: gpu entry {n} is not a table")
    missing = [k for k in REQUIRED if k not in e]
    if missing:
        raise SpecError(f"{origin}: gpu entry {n} lacks {', '.join(missing)}")
    name = e["name"]
    problems = []
    if not isinstance(name, str) or not name:
        problems.append("name must be a string")
    if not _number(e["boost_clock_mhz"]):
        problems.append("boost_clock_mhz must be a positive number")
    for table in ("peaks", "peak_clock_mhz"):
        if table in e and not (isinstance(e[table], dict) and all(_number(v) for v in e[table].values())):
            problems.append(f"{table} must map test names to positive numbers")
    for key in ("match", "pci_ids"):
        if key in e and not _strings(e[key]):
            problems.append(f"{key} must be a list of strings")
    if problems:
        raise SpecError(f"{origin}: gpu '{name}': {'; '.join(problems)}")


def _parse(entries, origin: str) -> list[GpuSpec]:
    if not isinstance(entries, list):
        raise SpecError(f"{origin}: expected a list of [[gpu]] tables")
    specs = []
    for n, e in enumerate(entries, 1):
        _check(e, origin, n)
        specs.append(GpuSpec(e["name"], float(e["boost_clock_mhz"]), dict(e["peaks"]),
                             tuple(m.lower() for m in e.get("match", [e["name"]])),
                             tuple(p.lower() for p in e.get("pci_ids", [])),
                             str(e.get("source", "")), e))
    return specs


def load_file(path: str | Path) -> list[GpuSpec]:
    path = Path(path)
    if not str(path).strip():
        raise SpecError("--spec needs a GPU name or a file")
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
    """The database and the forced spec for `--spec NAME|FILE`: a file adds its GPUs to the
    database, and one that holds exactly one GPU is also used for every device."""
    if option is None:
        return load_database(), None
    if Path(option).exists():
        added = load_file(option)
        return load_database(option), added[0] if len(added) == 1 else None
    specs = load_database()
    return specs, find(specs, option)

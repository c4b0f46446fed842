"""Vendor theoretical peaks per GPU, matched to a device by PCI ID or name.

The database is `gpus.toml` beside this file (a source for every number); a user file in the
same format (TOML or JSON, a list of `gpu` tables) adds GPUs or replaces same-named ones.
"""
from __future__ import annotations

import difflib
import functools
import json
import math
import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

DATABASE = Path(__file__).with_name("gpus.toml")
REQUIRED = ("name", "boost_clock_mhz", "peaks")
# The host link's tests, by how many of its directions they use: a transfer test's peak is the
# link's theoretical rate per direction (host_link_gbs) times that, unless [gpu.peaks] names one.
LINK_TESTS = {"transfer.h2d": 1, "transfer.d2h": 1, "transfer.bidir": 2}
# The GPU link's (NVLink, xGMI) the same way, from gpu_link_gbs: transfer.p2p's value is its best
# variant, which is a bidirectional one wherever the link carries both ways at once.
GPU_LINK_TESTS = {"transfer.p2p": 2}


@functools.cache
def peak_from(test: str) -> str:
    """The spec field a catalog test's peak is derived from where its entry names none (the
    descriptor's peak_from: memory.* streams from memory_bandwidth_gbs), else ""."""
    from peakbench.catalog import default_catalog
    found = next((t for t in default_catalog().tests if t.name == test), None)
    return found.peak_from if found else ""


def bound_from(test: str) -> tuple:
    """The descriptor's bound_from of a catalog test: (test, factor, why), or ()."""
    from peakbench.catalog import default_catalog
    found = next((t for t in default_catalog().tests if t.name == test), None)
    return found.bound_from if found else ()


def matrix_of(test: str) -> str:
    """The matrix-unit test whose peak a vendor GEMM test is set beside (gemm.X -> matrix.X)."""
    return "matrix." + test.split(".", 1)[1]


def _borrows(test: str) -> bool:
    """A gemm.* test runs on the matrix units: without its own peak it takes matrix.*'s."""
    return test.startswith("gemm.")


class SpecError(Exception):
    """A spec file or name that cannot be used; the message names the problem."""


# How far a peak may stand from its per-clock rate x units x clock and still be that product
# rounded (GpuSpec.exact_peak): a datasheet's 66.9 or 67 for 66.9.
EXACT_PEAK = 0.002


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
        if test in self.peaks:
            return self.peaks[test]
        figure = peak_from(test)
        if figure and _number(self.data.get(figure)):
            return float(self.data[figure])
        if _borrows(test):
            return self.peak(matrix_of(test))
        if test in GPU_LINK_TESTS:
            link = self.data.get("gpu_link_gbs")
            return float(link * GPU_LINK_TESTS[test]) if link else None
        link = self.data.get("host_link_gbs")
        return float(link * LINK_TESTS[test]) if link and test in LINK_TESTS else None

    def ceiling(self, test: str) -> tuple[float, float, str] | None:
        """The most a test can read on this GPU: (value, the clock it assumes, where it comes
        from), from the test's own peak or, where the vendor gives none, the peak of the test
        its descriptor says bounds it (bound_from) times its factor; None where neither is known."""
        peak = self.peak(test)
        if peak is not None:
            return peak, self.peak_clock_mhz(test), f"spec {self.name}"
        other, factor, why = bound_from(test) or (None, 0, "")
        base = self.peak(other) if other else None
        if base is None:
            return None
        return base * factor, self.peak_clock_mhz(other), f"{factor:g} x {other}'s peak of spec {self.name}: {why}"

    def exact_peak(self, test: str) -> bool:
        """Whether the test's own peak is its per-clock rate (`rates`, per unit) times the units
        times the clock the peak assumes, within EXACT_PEAK: then it is the hardware's bound, not
        a vendor's round figure (an H100's FP64 tensor peak, 66.9 TFLOPS = 256 x 132 x 1.98 GHz)."""
        rate, units, peak = (self.data.get("rates") or {}).get(test), self.data.get("units"), self.peaks.get(test)
        if not (_is_number(rate) and _is_number(units) and _is_number(peak)) or peak <= 0:
            return False
        derived = rate * units * self.peak_clock_mhz(test) / 1e6        # ops a clock x units x MHz: T a second
        return abs(derived - peak) <= EXACT_PEAK * peak

    def peak_clock_mhz(self, test: str) -> float:
        """The clock a test's peak assumes (some vendors quote tensor peaks at a lower clock)."""
        clocks = self.data.get("peak_clock_mhz", {})
        if _borrows(test) and test not in self.peaks and test not in clocks:
            test = matrix_of(test)
        return float(clocks.get(test, self.boost_clock_mhz))

    def peaks_of(self, tests) -> dict:
        """The peak of each of `tests` that has one: its own, or derived (gemm.* from matrix.*,
        transfer.* from the host link, transfer.p2p from the GPU link)."""
        return {t: p for t in tests if (p := self.peak(t)) is not None}

    def as_json(self) -> dict:
        return {"name": self.name, "boost_clock_mhz": self.boost_clock_mhz, "source": self.source}


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _number(v) -> bool:
    return _is_number(v) and v > 0


def _string(v) -> bool:
    return isinstance(v, str)


def _strings(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) and x.strip() for x in v)


PCI_ID = re.compile(r"0x[0-9a-f]{4}:0x[0-9a-f]{4}", re.I)

# Every field an entry may have, with its check and what the check asks for. The lookup reads
# name, match and pci_ids; a run reads peaks, boost_clock_mhz and peak_clock_mhz; the latency
# sweep reads the cache sizes, vendor and architecture; the transfer tests read host_link_gbs,
# transfer.p2p gpu_link_gbs; `peakbench specs` shows the rest.
FIELDS = {
    "name": (lambda v: _string(v) and bool(v.strip()), "must be a string"),
    "vendor": (_string, "must be a string"),
    "architecture": (_string, "must be a string"),
    "unit_name": (_string, "must be a string"),
    "source": (_string, "must be a string"),
    # an empty match string would match every device
    "match": (_strings, "must be a list of strings (none empty)"),
    "pci_ids": (lambda v: _strings(v) and all(PCI_ID.fullmatch(x) for x in v),
                'must be a list of "0xVVVV:0xDDDD" strings'),
    "units": (lambda v: isinstance(v, int) and _number(v), "must be a positive integer"),
    "boost_clock_mhz": (_number, "must be a positive number"),
    "memory_gb": (_number, "must be a positive number"),
    "memory_bandwidth_gbs": (_number, "must be a positive number"),
    "l1_kib_per_unit": (_number, "must be a positive number"),
    "l2_mib": (_number, "must be a positive number"),
    "l3_mib": (lambda v: _is_number(v) and v >= 0, "must be a number, 0 or more (0: no L3)"),
    # the host link as the vendor names it ("PCIe 5.0 x16", "NVLink-C2C"), and its theoretical
    # rate in one direction, GB/s
    "host_link": (lambda v: _string(v) and bool(v.strip()), "must be a string"),
    "host_link_gbs": (_number, "must be a positive number"),
    # the GPU-to-GPU link ("NVLink 4, 18 links"), and its theoretical rate per GPU in one
    # direction, GB/s (all of a GPU's links together)
    "gpu_link": (lambda v: _string(v) and bool(v.strip()), "must be a string"),
    "gpu_link_gbs": (_number, "must be a positive number"),
}
# Tables: the check of each value in them.
TABLES = {
    "peaks": (_number, "must map test names to positive numbers"),
    "peak_clock_mhz": (_number, "must map test names to positive numbers"),
    "rates": (_number, "must map test names to positive numbers"),
    "sources": (_string, "must map field or test names to strings"),
}


def _shown(v) -> str:
    text = repr(v) if isinstance(v, str) else json.dumps(v, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _problem(key: str, v) -> str | None:
    """Why `v` cannot be the value of field `key`, or None."""
    if key in TABLES:
        check, wants = TABLES[key]
        if not isinstance(v, dict):
            return f"{key} {wants}, not {_shown(v)}"
        bad = next((k for k, x in v.items() if not check(x)), None)
        return None if bad is None else f"{key} {wants}: '{bad}' is {_shown(v[bad])}"
    check, wants = FIELDS[key]
    return None if check(v) else f"{key} {wants}, not {_shown(v)}"


def _check(e, origin: str, n: int) -> None:
    """One-line errors, naming the file, the GPU and the field, for an entry that the lookup, a run
    or the spec listing could not use; a warning for a field no code reads (likely a typo)."""
    if not isinstance(e, dict):
        raise SpecError(f"{origin}: gpu entry {n} is not a table")
    gpu = f"gpu '{e['name']}'" if isinstance(e.get("name"), str) and e["name"].strip() else f"gpu entry {n}"
    missing = [k for k in REQUIRED if k not in e]
    if missing:
        raise SpecError(f"{origin}: {gpu} lacks {', '.join(missing)}")
    problems = [p for p in (_problem(k, v) for k, v in e.items() if k in FIELDS or k in TABLES) if p]
    if problems:
        raise SpecError(f"{origin}: {gpu}: {'; '.join(problems)}")
    for key in sorted(set(e) - set(FIELDS) - set(TABLES)):
        near = difflib.get_close_matches(key, [*FIELDS, *TABLES], n=1, cutoff=0.75)
        hint = f" (did you mean '{near[0]}'?)" if near else ""
        print(f"peakbench: warning: {origin}: {gpu}: unknown field '{key}' ignored{hint}", file=sys.stderr)


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
    shown = str(path)                    # as the user wrote it
    path = Path(path)
    if not shown.strip():
        raise SpecError("--spec needs a GPU name or a file")
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    except FileNotFoundError:
        raise SpecError(f"spec file {shown} does not exist") from None
    except OSError as e:
        raise SpecError(f"cannot read spec file {shown}: {e.strerror}") from None
    except (ValueError, tomllib.TOMLDecodeError) as e:
        raise SpecError(f"spec file {shown} is malformed: {e}") from None
    if not isinstance(data, dict) or "gpu" not in data:
        raise SpecError(f"spec file {shown} has no 'gpu' list")
    return _parse(data["gpu"], shown)


def load_database(extra: str | Path | None = None) -> list[GpuSpec]:
    return _with(load_file(extra)) if extra is not None else load_file(DATABASE)


def _with(added: list[GpuSpec]) -> list[GpuSpec]:
    """The database with `added`: a GPU of the same name replaces the database's."""
    names = {s.name.lower() for s in added}
    return added + [s for s in load_file(DATABASE) if s.name.lower() not in names]


def looks_like_file(option: str) -> bool:
    """Whether `--spec` names a file rather than a GPU (no GPU of the database is named like that)."""
    return option.lower().endswith((".toml", ".json")) or "/" in option or os.sep in option


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
    if Path(option).exists() or looks_like_file(option):
        added = load_file(option)
        return _with(added), added[0] if len(added) == 1 else None
    specs = load_database()
    return specs, find(specs, option)

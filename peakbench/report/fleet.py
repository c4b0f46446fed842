"""`peakbench fleet RESULT.json...`: which of many GPUs is slow, throttling or broken.

Every run of every result document is one GPU through one backend. A GPU is keyed by (host, UUID,
backend), or by (host, device index, backend) where the UUID is empty or all zeros. When several
documents hold the same GPU (a re-run), the one `created` last is taken (on a tie, the later file
on the command line) and a note says so. Where one backend names a GPU's PCI bus and another does
not, the GPU's other runs on that host (same UUID) lend it.

GPUs are grouped by model (the spec entry's name, else the device name), backend, driver and
power limit (Gpu.setting); per group and test, the median and the MAD (median absolute deviation,
unscaled) of the `ok` values are taken, and of % at the measured clock: a slow GPU that keeps pace
at its own clock, its limit power, thermal or clock, is reported as held down (held_down).
A GPU is flagged for a test when
- its value is worse than the median by more than max(THRESHOLD% of the median, MADS x MAD),
  defaults 5% and 3 (worse is lower; for times, ns, us and the like, worse is higher), or
- its % of spec is under the floor for that test (below), or
- the test failed, or the GPU's record has no result for a test others of its group measured, or
  the record did not finish (interrupted, `complete` false or absent: report.result.unfinished):
  the GPU's verdict is then `failed`;
and whatever its speed for its health and burn-in (health_flags), each with an action: `drain`,
`reset` or `watch` (a slow test is `watch`, a failed one `drain`).
GPUs are compared with their peers only for a test that at least MIN_PEERS (3) GPUs of the group
measured: two cannot tell which of them is the slow one. Such tests, and groups of one or two, are
judged by the floors, by failed tests, and against the baseline where one is given.

Floors, `--floor FILE`: TOML, or JSON when the name ends in `.json`; numbers are % of spec:

    [floor]                     # every model; keys are globs on test names
    "compute.*" = 80
    "latency.*" = 0             # 0: no floor

    [model."NVIDIA H200 SXM"]   # one model, named as the report names it (the spec entry's name)
    "memory.read" = 95

    JSON: {"floor": {"compute.*": 80}, "model": {"NVIDIA H200 SXM": {"memory.read": 95}}}

A test's floor comes from the first of these with a key that matches it: the model's table, the
file's [floor], DEFAULT_FLOORS; within one, the exact test name wins over globs and a longer glob
over a shorter one. A result without % of spec (no spec entry, latency) has no floor to miss.

Baseline, `--baseline F`: an earlier `peakbench fleet --json` report. For a group of the same model
and backend in both:
- where at least 3 GPUs of the group measured a test, a group median worse than the baseline's by
  more than THRESHOLD% is a fleet-wide regression (a driver update, a changed power limit): it is
  reported and the exit status is 1;
- where fewer than 3 did, each GPU is judged against the baseline's median and MAD for that test
  (the same rule as against its peers) instead.

Exit status: 0 no GPU flagged; 1 a GPU flagged or failed, or a fleet-wide regression; 2 bad input
(no files, a file that is not a peakbench result, a bad floor or baseline file, an output that
cannot be written).

The table on stdout lists the flagged and failed GPUs, a row per flagged test, then the regressions,
the notes and a summary line (on stderr instead when `--json` is standard output). `--json F`
writes the report, through the same output handling as the main CLI's files:

    {"schema": "peakbench.fleet/1", "created": "...", "threshold_pct": 5, "mads": 3,
     "groups": [{"model", "backend", "gpus": N, "tests": {TEST: {"median", "mad", "floor", "unit",
                 "gpus"}}}],
     "gpus": [{"host", "uuid", "index", "pci_bus", "model", "backend", "source",
               "flagged": [{"test", "value", "median", "ratio", "reason"}],
               "verdict": "pass" | "flagged" | "failed", "action": "ok" | "watch" | "reset" | "drain",
               "health": {...}, "unverified": [TEST]}],
     "regressions": [{"model", "backend", "test", "median", "baseline_median", "ratio", "reason"}],
     "notes": ["..."]}
"""
from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import json
import statistics
import sys
import textwrap
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tabulate import tabulate

from peakbench.report.compare import LOWER_IS_BETTER
from peakbench.report.result import ResultFileError, check_writable, dumps, load_json, refuse_inputs, strict_loads, unfinished

SCHEMA = "peakbench.fleet/1"
THRESHOLD_PCT = 5.0
MADS = 3.0
MIN_PEERS = 3
WIDTH = 120
EXIT_OK, EXIT_FLAGGED, EXIT_USAGE = 0, 1, 2

# % of spec under which a healthy GPU does not fall, from the measured results
# (PERFORMANCE_ANALYSIS.md, "Current results (peakbench 0.1.0)"):
# - compute: the vector ALU runs at 97.5-99.7% of spec through Vulkan and CUDA (fp16 lowest), so 85
#   leaves 12 points for other boards and models;
# - matrix: Vulkan's cooperative matrices stop at 65.7-66.1% of the dense spec on a healthy board
#   (the warp-level MMA's rate), CUDA's wgmma at 88-99%; one floor for both backends must pass 66;
# - memory: read 98.3-98.6%, write 91.5-98.2%, copy 88.6-89.6%, and boards differ by up to 3%:
#   85 passes the copy on each of them;
# - latency and launch have no spec; the other families have no measured reference yet: no floor.
DEFAULT_FLOORS = {"compute.*": 85.0, "matrix.*": 50.0, "memory.*": 85.0}

BUS_FIELDS = ("pci_bus", "pci_bus_id", "bus_id")


class FleetError(Exception):
    """Bad input: the message names the file or option and the problem."""


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so an error stays one line."""

    def error(self, message):
        raise FleetError(message)


# -- statistics ------------------------------------------------------------------------------

def median(values: list[float]) -> float:
    return float(statistics.median(values))


def mad(values: list[float]) -> float:
    """Median absolute deviation from the median (unscaled)."""
    centre = median(values)
    return median([abs(v - centre) for v in values])


# -- GPUs ------------------------------------------------------------------------------------

@dataclass
class Gpu:
    host: str
    uuid: str                 # "" where the backend reports none (or all zeros)
    index: int | None
    pci_bus: str | None
    model: str
    backend: str
    source: str               # the file it was read from
    created: str
    results: dict[str, dict]
    flagged: list[dict] = field(default_factory=list)
    failed: bool = False
    unfinished: str | None = None    # why its record is not a finished run (report.result.unfinished)
    health: dict = field(default_factory=dict)     # the run's device.health (NVML: link, ECC, rows)
    driver: str = ""                                # the run's device.driver (a fleet-wide step names its change)

    @property
    def verdict(self) -> str:
        return "failed" if self.failed else "flagged" if self.flagged else "pass"

    @property
    def setting(self) -> str:
        """What GPUs of one model must share to be compared: the driver and the power limit."""
        limit = _number(self.health.get("power_limit_w"))
        return ", ".join(p for p in (f"driver {self.driver}" if self.driver else "",
                                     f"{limit:.0f} W" if limit else "") if p)

    @property
    def action(self) -> str:
        """What to do with it: the strongest of its flags' actions (a slow test: watch; a failed
        one: drain), ok where none."""
        if self.failed:
            return "drain"
        found = [f.get("action", "watch") for f in self.flagged]
        return max(found, key=ACTIONS.index) if found else "ok"

    def fail(self, test: str, reason: str) -> None:
        self.failed = True
        self.flagged.append({"test": test, "value": None, "median": None, "ratio": None, "reason": reason})

    @property
    def short_id(self) -> str:
        return self.uuid[:8] if self.uuid else ("-" if self.index is None else f"#{self.index}")

    @property
    def label(self) -> str:
        return f"{self.host} {self.short_id} ({self.model}, {self.backend})"


def gpus_of(docs: list[tuple[str, dict]]) -> tuple[list[Gpu], list[str]]:
    """One Gpu per (host, UUID or index, backend) from (file name, loaded document) pairs: the
    latest by `created` where several hold it; and the notes that say which were set aside."""
    found: dict[tuple, list[tuple[tuple, Gpu]]] = {}
    buses: dict[tuple[str, str], str] = {}
    for order, (source, doc) in enumerate(docs):
        host = _text((doc.get("host") if isinstance(doc.get("host"), dict) else {}).get("hostname")) or "?"
        created = _text(doc.get("created"))
        for i, run in enumerate(doc["runs"]):
            device = run["device"]
            uuid = _uuid(device.get("uuid"))
            index = device.get("index") if type(device.get("index")) is int else None
            spec = run.get("spec") if isinstance(run.get("spec"), dict) else {}
            bus = next((device[k] for k in BUS_FIELDS if _text(device.get(k))), None)
            if bus and uuid:
                buses.setdefault((host, uuid), bus)
            ident = uuid or (f"index {index}" if index is not None else f"{source} run {i}")
            gpu = Gpu(host, uuid, index, bus, _text(spec.get("name")) or device["name"], run["backend"],
                      source, created, {r["test"]: r for r in run["results"]}, unfinished=unfinished(doc),
                      health=device.get("health") if isinstance(device.get("health"), dict) else {},
                      driver=_text(device.get("driver")))
            found.setdefault((host, ident, run["backend"]), []).append(((_moment(created), order, i), gpu))
    gpus, notes = [], []
    for entries in found.values():
        entries.sort(key=lambda e: e[0])
        gpu = entries[-1][1]
        if len(entries) > 1:
            older = ", ".join(f"{g.source} ({g.created or 'no date'})" for _, g in entries[:-1])
            notes.append(f"{gpu.label}: {len(entries)} results; took the latest, {gpu.source} "
                         f"({gpu.created or 'no date'}), over {older}")
        if gpu.pci_bus is None and gpu.uuid:
            gpu.pci_bus = buses.get((gpu.host, gpu.uuid))
        gpus.append(gpu)
    return gpus, notes


def _text(value) -> str:
    return value.strip() if isinstance(value, str) else ""


def _uuid(value) -> str:
    uuid = _text(value).lower().removeprefix("gpu-")     # NVML's form of the same UUID
    return uuid if uuid.strip("0-") else ""              # all zeros: a backend's "unknown"


def _moment(created: str) -> dt.datetime:
    """`created` as an aware time; a missing or unreadable one sorts first."""
    try:
        when = dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return dt.datetime.min.replace(tzinfo=dt.timezone.utc)
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _ok_value(result: dict | None) -> float | None:
    return _number(result.get("value")) if result and result.get("status") == "ok" else None


# -- floors and baseline ---------------------------------------------------------------------

@dataclass
class Floors:
    general: dict[str, float] = field(default_factory=dict)
    models: dict[str, dict[str, float]] = field(default_factory=dict)

    def floor(self, model: str, test: str) -> float | None:
        for table in (self.models.get(model, {}), self.general, DEFAULT_FLOORS):
            if test in table:
                return table[test]
            globs = sorted((p for p in table if fnmatch.fnmatchcase(test, p)), key=len, reverse=True)
            if globs:
                return table[globs[0]]
        return None


def load_floors(path: str) -> Floors:
    what = f"--floor {path}"
    raw = _read(path, what)
    try:
        data = json.loads(raw) if path.endswith(".json") else tomllib.loads(raw)
    except ValueError as e:      # JSONDecodeError and TOMLDecodeError are both ValueErrors
        kind = "JSON" if path.endswith(".json") else "TOML"
        raise FleetError(f"{what}: not valid {kind}: {e}") from None
    if not isinstance(data, dict) or not data:
        raise FleetError(f"{what}: expected a [floor] table or [model.\"NAME\"] tables")
    unknown = sorted(set(data) - {"floor", "model"})
    if unknown:
        raise FleetError(f"{what}: unknown key {unknown[0]!r} (expected 'floor' and 'model')")
    models = data.get("model", {})
    if not isinstance(models, dict):
        raise FleetError(f"{what}: 'model' must be a table of models")
    return Floors(_floor_table(data.get("floor", {}), what, "[floor]"),
                  {name: _floor_table(t, what, f'[model."{name}"]') for name, t in models.items()})


def _floor_table(table, what: str, where: str) -> dict[str, float]:
    if not isinstance(table, dict):
        raise FleetError(f"{what}: {where} must be a table of test globs")
    for test, value in table.items():
        number = _number(value)
        if number is None or not 0 <= number <= 100:
            raise FleetError(f"{what}: {where} {test!r} must be a % of spec from 0 to 100, not {value!r}")
    return {test: float(value) for test, value in table.items()}


def load_baseline(path: str) -> dict[tuple[str, str], dict[str, dict]]:
    """An earlier fleet report's groups: (model, backend) -> test -> {"median", "mad"}."""
    what = f"--baseline {path}"
    try:
        doc = strict_loads(_read(path, what))
    except RecursionError:
        raise FleetError(f"{what}: not a fleet report: nested too deeply") from None
    except ValueError as e:
        raise FleetError(f"{what}: not valid JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else None
        raise FleetError(f"{what}: not a fleet report (schema {SCHEMA!r} expected, found {found!r})")
    if not isinstance(doc.get("groups"), list):
        raise FleetError(f"{what}: 'groups' must be a list")
    out = {}
    for i, group in enumerate(doc["groups"]):
        if not (isinstance(group, dict) and _text(group.get("model")) and _text(group.get("backend"))
                and isinstance(group.get("tests"), dict)):
            raise FleetError(f"{what}: group {i} needs a model, a backend and tests")
        tests = {}
        for test, stats in group["tests"].items():
            if not isinstance(stats, dict) or _number(stats.get("median")) is None:
                raise FleetError(f"{what}: group {i}: {test!r} has no numeric median")
            tests[test] = {"median": _number(stats["median"]), "mad": _number(stats.get("mad")) or 0.0}
        out[(group["model"], group["backend"])] = tests
    return out


def _read(path: str, what: str) -> str:
    if path.endswith("/"):
        raise FleetError(f"{what}: names a folder (trailing slash), not a file")
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise FleetError(f"{what}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise FleetError(f"{what}: not a text file") from None


# -- judging ---------------------------------------------------------------------------------

@dataclass
class Report:
    gpus: list[Gpu]
    groups: list[dict]
    regressions: list[dict]
    notes: list[str]
    threshold_pct: float = THRESHOLD_PCT
    mads: float = MADS

    @property
    def exit_code(self) -> int:
        return EXIT_FLAGGED if self.regressions or any(g.flagged for g in self.gpus) else EXIT_OK


def judge(gpus: list[Gpu], floors: Floors | None = None, baseline: dict | None = None,
          threshold_pct: float = THRESHOLD_PCT, mads: float = MADS, notes: list[str] | None = None) -> Report:
    """Flag each GPU against its group (or the baseline, or the floors); see the module docstring."""
    floors, baseline, notes = floors or Floors(), baseline or {}, list(notes or [])
    members: dict[tuple[str, str, str], list[Gpu]] = {}
    for gpu in gpus:
        members.setdefault((gpu.model, gpu.backend, gpu.setting), []).append(gpu)
    groups, regressions = [], []
    for (model, backend, setting), group in sorted(members.items()):
        summary, found, said = _judge_group(model, backend, group, floors, baseline.get((model, backend), {}),
                                            threshold_pct, mads)
        if setting:
            summary["setting"] = setting
        groups.append(summary)
        regressions += found
        notes += said
    split: dict[tuple[str, str], list[str]] = {}
    for model, backend, setting in members:
        split.setdefault((model, backend), []).append(setting or "unknown")
    notes += [f"{model} ({backend}): judged in {len(settings)} groups by driver and power limit: {'; '.join(sorted(settings))}"
              for (model, backend), settings in sorted(split.items()) if len(settings) > 1]
    notes += [f"{model} ({backend}): in the baseline, not in these results"
              for model, backend in sorted(set(baseline) - {(m, b) for m, b, _ in members})]
    return Report(gpus, groups, regressions, notes, threshold_pct, mads)


def _judge_group(model: str, backend: str, group: list[Gpu], floors: Floors, before: dict[str, dict],
                 threshold_pct: float, mads: float) -> tuple[dict, list[dict], list[str]]:
    """One group's summary for the report, its regressions against the baseline, and its notes;
    flags its GPUs on the way."""
    for gpu in group:
        gpu.flagged += health_flags(gpu)
        if gpu.unfinished:
            gpu.fail("-", f"{gpu.source}: {gpu.unfinished}")
        for test, r in gpu.results.items():
            if r.get("status") == "failed":
                gpu.fail(test, f"{test} failed: {r.get('reason') or 'no reason given'}")
    tests, few, missing, unsupported, regressions = {}, [], {}, {}, []
    for test in dict.fromkeys(t for gpu in group for t in gpu.results):
        measured = [(gpu, v) for gpu in group if (v := _ok_value(gpu.results.get(test))) is not None]
        if not measured:
            continue
        values = [v for _, v in measured]
        unit = measured[0][0].results[test]["unit"]
        lower = unit in LOWER_IS_BETTER
        stats = tests[test] = {"median": median(values), "mad": mad(values), "floor": floors.floor(model, test),
                               "unit": unit, "gpus": len(values)}
        if len(values) >= MIN_PEERS:
            ref = (stats["median"], stats["mad"], "the median")
            if test in before:
                regressions += _regression(model, backend, test, unit, stats["median"], before[test]["median"],
                                           lower, threshold_pct)
        else:
            few.append(test)
            ref = (before[test]["median"], before[test]["mad"], "the baseline median") if test in before else None
        for gpu in group:
            r = gpu.results.get(test)
            if r is None:
                missing.setdefault(gpu.label, []).append(test)
                gpu.fail(test, f"{test} missing: its record has no result for it, which "
                               f"{len(measured)} other GPU{'s' if len(measured) > 1 else ''} of its group measured")
            elif r.get("status") == "unsupported":
                unsupported.setdefault(gpu.label, []).append(test)
        per_clock = [p for gpu, _ in measured if (p := _number(gpu.results[test].get("pct_of_clock_peak"))) is not None]
        if per_clock:
            stats["pct_of_clock_peak"] = median(per_clock)
        for gpu, _ in measured:
            _check(gpu, test, gpu.results[test], unit, lower, ref, stats["floor"], threshold_pct, mads,
                   stats.get("pct_of_clock_peak"))
    notes = [f"{label}: {', '.join(t)} unsupported (the others of its group measured it)"
             for label, t in unsupported.items()]
    notes += unverified_notes(model, backend, group)
    against = "the baseline's medians where it has them, the floors" if before else "the floors"
    if len(group) < MIN_PEERS:
        notes.append(f"{model} ({backend}): {len(group)} GPU{'s' if len(group) > 1 else ''}, too few to compare "
                     f"with each other ({MIN_PEERS} needed): judged by {against} and failed tests only")
    elif few:
        notes.append(f"{model} ({backend}): {', '.join(few)} measured on fewer than {MIN_PEERS} GPUs: "
                     f"judged by {against} and failed tests only")
    return {"model": model, "backend": backend, "gpus": len(group), "tests": tests}, regressions, notes


ACTIONS = ("ok", "watch", "reset", "drain")
# Throttle reasons that are the board doing its job (a power cap, a clock the application or the
# driver set, sync boost); any other (thermal, hardware slowdown) flags the GPU whatever its speed.
CAPS = {"sw_power_cap", "applications_clocks", "sync_boost", "display_clocks"}
# A unit of a per-SM map this far from its siblings' median flags the GPU (watch): a weak SM, or
# an L2 path slower from one SM, inside a GPU whose totals still pass.
SM_SHARE = 0.05


def health_flags(gpu: Gpu) -> list[dict]:
    """The flags a GPU gets whatever its speed, each with its reason and action: uncorrected ECC
    errors or a failed row remapping (drain), a pending remapping or a link trained below its
    maximum (reset), retired pages, rows remapped for uncorrectable errors, a throttle outside the
    power and clock caps, a burn-in that did not hold steady, or a per-SM map's unit SM_SHARE from
    its siblings (watch)."""
    from peakbench.telemetry import link_below_max
    h, out = gpu.health, []

    def flag(what: str, reason: str, action: str) -> None:
        out.append({"test": what, "value": None, "median": None, "ratio": None, "reason": reason, "action": action})
    if (n := h.get("ecc_uncorrected")) and n > 0:
        flag("health", f"{n} uncorrected ECC error{'s' if n > 1 else ''} since the driver loaded", "drain")
    if h.get("remapping_failed"):
        flag("health", "a row remapping failed: the memory has no spare row left", "drain")
    if h.get("remapping_pending"):
        flag("health", "a row remapping is pending: it takes effect at the next GPU reset", "reset")
    if link := link_below_max(h):
        flag("health", f"the PCIe link trained at {link}", "reset")
    if (n := h.get("retired_pages")) and n > 0:
        flag("health", f"{n} retired page{'s' if n > 1 else ''}", "watch")
    if (n := h.get("remapped_rows_uncorrected")) and n > 0:
        flag("health", f"{n} row{'s' if n > 1 else ''} remapped for uncorrectable errors", "watch")
    throttles: dict[str, list[str]] = {}
    for test, r in gpu.results.items():
        reasons = ((r.get("telemetry") or {}).get("throttle_reasons") or []) if isinstance(r.get("telemetry"), dict) else []
        for reason in reasons:
            if str(reason) not in CAPS:
                throttles.setdefault(str(reason), []).append(test)
        unstable = (r.get("stability") or {}).get("unstable") if isinstance(r.get("stability"), dict) else None
        if unstable:
            flag(test, f"{test}: the burn-in did not hold steady: {unstable}", "watch")
        weak = _weak_unit(test, r)
        if weak:
            flag(test, weak, "watch")
    for reason, tests in throttles.items():
        flag("health", f"throttled by {reason} (outside the power and clock caps) during {', '.join(tests)}", "watch")
    return out


def _weak_unit(test: str, r: dict) -> str | None:
    """A per-SM map's slowest unit, where it is SM_SHARE or more from the median unit."""
    params = r.get("params") if isinstance(r.get("params"), dict) else {}
    share = params.get("slowest_of_median")
    if not test.startswith("sm.") or r.get("status") != "ok" or not isinstance(share, (int, float)):
        return None
    if abs(share - 1) < SM_SHARE:
        return None
    return (f"{test}: unit {params.get('slowest_unit')} reads {share:.3f}x the median unit"
            f" ({params.get('median_unit')} {r.get('unit', '')}): one part of this GPU trails its siblings")


def unverified(gpu: Gpu) -> dict[str, str]:
    """The tests of a GPU that are ok but unverified (no guard could check their work or bound),
    and why."""
    return {t: (r.get("evidence") or {}).get("unverified") or "no guard could check it"
            for t, r in gpu.results.items() if r.get("status") == "ok" and r.get("verified") is False}


def unverified_notes(model: str, backend: str, group: list[Gpu]) -> list[str]:
    """One note per test that is ok but unverified on some GPUs of a group: never a plain ok."""
    by_test: dict[str, tuple[list[Gpu], str]] = {}
    for gpu in group:
        for test, why in unverified(gpu).items():
            by_test.setdefault(test, ([], why))[0].append(gpu)
    return [f"{model} ({backend}): {test} ok but unverified on {len(gpus)} of {len(group)} GPUs ({why})"
            for test, (gpus, why) in by_test.items()]


def worse_pct(value: float, reference: float, lower: bool) -> float:
    """How much worse `value` is than `reference`, in % of it (negative: better)."""
    return (value - reference if lower else reference - value) / abs(reference) * 100


AT_CLOCK_PCT = 2.0     # points of % at clock within which a slow GPU keeps pace with its group per clock


def _check(gpu: Gpu, test: str, r: dict, unit: str, lower: bool, ref, floor, threshold_pct, mads,
           at_clock: float | None = None) -> None:
    value = _ok_value(r)
    why, centre, ratio = [], None, None
    if ref is not None and ref[0]:
        centre, spread, name = ref
        ratio = value / centre
        allowed = max(threshold_pct / 100 * abs(centre), mads * spread)
        if (value - centre if lower else centre - value) > allowed:
            worse = worse_pct(value, centre, lower)
            why.append(f"{worse:.1f}% {'over' if lower else 'under'} {name} {short_number(centre)}")
    pct = _number(r.get("pct_of_spec"))
    if floor and pct is not None and pct < floor:
        why.append(f"{pct:.1f}% of spec, under the floor {floor:g}%")
    if why:
        reason = f"{test} {short_number(value)} {unit} is {' and '.join(why)}{context(r)}"
        entry = {"test": test, "value": value, "median": centre, "ratio": ratio, "reason": reason}
        cause = held_down(r, at_clock)
        if cause:
            entry.update(cause=cause[0], reason=f"{reason}; {cause[1]}")
        gpu.flagged.append(entry)


def held_down(r: dict, group_at_clock: float | None) -> tuple[str, str] | None:
    """(power | thermal | clock, why) where a slow result's own limit verdict says its clock was
    held down and, at the clock it ran, it keeps pace with its group (% of the peak at the
    measured clock within AT_CLOCK_PCT points of the group's median): the GPU's power or cooling,
    not its silicon."""
    by = (r.get("limit") or {}).get("by") if isinstance(r.get("limit"), dict) else None
    mine = _number(r.get("pct_of_clock_peak"))
    if by not in ("power", "thermal", "clock") or mine is None or group_at_clock is None:
        return None
    if group_at_clock - mine > AT_CLOCK_PCT:
        return None
    return by, (f"held down by {by}: at the clock it ran it reaches {mine:.1f}% of the peak, the group"
                f" {group_at_clock:.1f}%: its {'power supply or limit' if by == 'power' else 'cooling' if by == 'thermal' else 'clock'},"
                f" not its silicon")


def _regression(model, backend, test, unit, now: float, before: float, lower: bool, threshold_pct) -> list[dict]:
    """[the regression] where the group's median is worse than the baseline's by more than the threshold."""
    if not before or worse_pct(now, before, lower) <= threshold_pct:
        return []
    worse = worse_pct(now, before, lower)
    return [{"model": model, "backend": backend, "test": test, "median": now, "baseline_median": before,
             "ratio": now / before,
             "reason": f"{model} ({backend}) {test}: median {short_number(now)} {unit} is {worse:.1f}% "
                       f"{'over' if lower else 'under'} the baseline's {short_number(before)}"}]


def context(r: dict) -> str:
    """What the result says about the clock while it ran: ' (power cap: throttle_reasons=[...],
    1755 MHz, 690 W, 71 C)', or '' when it says nothing."""
    tel = r.get("telemetry") if isinstance(r.get("telemetry"), dict) else {}
    parts = []
    reasons = tel.get("throttle_reasons")
    if isinstance(reasons, list) and reasons:
        reasons = [str(x) for x in reasons]
        causes = [c for c, words in (("power cap", ("power",)), ("thermal", ("thermal", "temp")))
                  if any(w in x.lower() for x in reasons for w in words)]
        parts.append(f"{' and '.join(causes) or 'throttled'}: throttle_reasons={reasons!r}")
    elif isinstance(reasons, list):
        parts.append("no throttle reason")
    sm = _reading(tel.get("sm_clock_mhz"))
    clock = _number(r.get("clock_mhz"))
    if clock is None and sm:
        clock = sm["mean"]
    if clock is not None:
        parts.append(f"{clock:.0f} MHz")
    if power := _reading(tel.get("power_w")):
        parts.append(f"{power['mean']:.0f} W")
    if temperature := _reading(tel.get("temperature_c")):
        parts.append(f"{temperature['max']:.0f} C")
    return f" ({', '.join(parts)})" if parts else ""


def _reading(value) -> dict | None:
    if isinstance(value, dict) and all(_number(value.get(k)) is not None for k in ("min", "mean", "max")):
        return value
    return None


def short_number(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.3g}"


# -- output ----------------------------------------------------------------------------------

def summary(report: Report) -> str:
    counts = {v: sum(g.verdict == v for g in report.gpus) for v in ("pass", "flagged", "failed")}
    hosts = len({g.host for g in report.gpus})
    n = len(report.gpus)
    text = (f"{n} GPU{'s' if n != 1 else ''} on {hosts} host{'s' if hosts != 1 else ''} in "
            f"{len(report.groups)} group{'s' if len(report.groups) != 1 else ''}: "
            f"{counts['pass']} pass, {counts['flagged']} flagged, {counts['failed']} failed")
    if report.regressions:
        text += f"; {len(report.regressions)} fleet-wide regression{'s' if len(report.regressions) > 1 else ''}"
    return text


def render(report: Report, width: int = WIDTH) -> str:
    """The flagged GPUs as a table no wider than `width`, then regressions, notes and the summary."""
    bad = sorted((g for g in report.gpus if g.flagged), key=lambda g: (g.host, g.model, g.backend, g.short_id))
    parts = []
    if bad:
        # A row per flagged test, the GPU named on its first; the reason without the test's name.
        rows = []
        for g in bad:
            for i, f in enumerate(g.flagged):
                gpu = [f"{g.model} ({g.backend})", g.host, g.short_id, g.pci_bus or "-"] if i == 0 else [""] * 4
                rows.append(gpu + [f["test"], f["reason"].removeprefix(f["test"] + " ")])
        parts.append(_table(["GPU", "host", "UUID", "PCI bus", "flagged tests", "reason"], rows, width))
        parts.append("actions:\n" + "\n".join(f"- {g.action}: {g.label}" for g in
                                               sorted(bad, key=lambda g: -ACTIONS.index(g.action))))
    else:
        parts.append("no GPU flagged")
    wrap = lambda text: textwrap.fill(text, width, initial_indent="- ", subsequent_indent="  ")
    if report.regressions:
        parts.append("fleet-wide regressions (against the baseline, or a step in the GPUs' own history):\n"
                     + "\n".join(wrap(r["reason"]) for r in report.regressions))
    if report.notes:
        parts.append("notes:\n" + "\n".join(wrap(n) for n in report.notes))
    parts.append(summary(report))
    return "\n\n".join(parts)


def _table(headers: list[str], rows: list[list[str]], width: int) -> str:
    # Caps for the short columns; the reason takes what is left. tabulate's simple format puts two
    # spaces between columns and makes a column at least its header plus two wide.
    caps = [24, 16, 10, 14, 22]
    widths = [min(cap, max(len(h) + 2, *(len(r[i]) for r in rows))) for i, (h, cap) in enumerate(zip(headers, caps))]
    widths.append(max(20, width - sum(widths) - 2 * len(caps)))
    return tabulate(rows, headers, tablefmt="simple", maxcolwidths=widths, disable_numparse=True)


def to_json(report: Report) -> dict:
    created = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    return {"schema": SCHEMA, "created": created, "threshold_pct": report.threshold_pct, "mads": report.mads,
            "groups": report.groups,
            "gpus": [{"host": g.host, "uuid": g.uuid, "index": g.index, "pci_bus": g.pci_bus, "model": g.model,
                      "backend": g.backend, "source": g.source, "flagged": g.flagged, "verdict": g.verdict,
                      "action": g.action, "health": g.health, "unverified": sorted(unverified(g))}
                     for g in report.gpus],
            "regressions": report.regressions, "notes": report.notes}


# -- command line ----------------------------------------------------------------------------

def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


def build_parser() -> Parser:
    p = Parser(prog="peakbench fleet", description="find the slow, throttling or broken GPU among many: "
               "exit 0 none flagged, 1 some flagged or failed, 2 bad input")
    p.add_argument("files", nargs="+", metavar="RESULT.json", help="peakbench --json outputs, one or more GPUs each")
    p.add_argument("--json", metavar="F", help="write the fleet report (schema peakbench.fleet/1); - for stdout")
    p.add_argument("--floor", metavar="FILE", help="floors in %% of spec per test glob and model (TOML or .json)")
    p.add_argument("--baseline", metavar="F", help="an earlier fleet report: fleet-wide regressions, and the "
                   "reference for groups of fewer than 3 GPUs")
    p.add_argument("--threshold", metavar="PCT", type=_positive, default=THRESHOLD_PCT,
                   help=f"flag a GPU this %% worse than its group's median (default {THRESHOLD_PCT:g})")
    p.add_argument("--mads", metavar="N", type=_positive, default=MADS,
                   help=f"... or N MADs worse, whichever is wider (default {MADS:g})")
    p.add_argument("--history", metavar="DIR", help="records kept by `peakbench --history DIR`: flag a GPU "
                   "slower than its own recent median, and a step of most of a group as one fleet-wide step")
    return p


def main(argv: list[str]) -> int:
    """`peakbench fleet ARGS`: the exit status (errors are one line on stderr, status 2)."""
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as e:           # --help
            return e.code if isinstance(e.code, int) else EXIT_OK
        if args.json is not None and not args.json.strip():
            raise FleetError("--json needs a file name")
        out = check_writable(args.json) if args.json is not None else None
        if out is not None:
            refuse_inputs({"--json": out}, {**{f"the input {f}": f for f in args.files},
                                            **({"the --floor file": args.floor} if args.floor else {}),
                                            **({"the --baseline report": args.baseline} if args.baseline else {})})
        floors = load_floors(args.floor) if args.floor is not None else Floors()
        baseline = load_baseline(args.baseline) if args.baseline is not None else {}
        docs = [(f, load_json(f)) for f in args.files]
        gpus, notes = gpus_of(docs)
        if not gpus:
            raise FleetError(f"no GPU in {', '.join(args.files)}: the files hold no runs")
        report = judge(gpus, floors, baseline, args.threshold, args.mads, notes)
        if args.history is not None:
            if not Path(args.history).is_dir():
                raise FleetError(f"--history {args.history}: no such folder")
            from peakbench.report import history
            steps, said = history.judge(gpus, args.history, args.threshold)
            report.regressions += steps
            report.notes += said
        tables = sys.stderr if out is not None and out.fd == 1 else sys.stdout
        print(render(report), file=tables, flush=True)
        if out is not None:
            out.write(dumps(to_json(report)) + "\n")
        return report.exit_code
    except (FleetError, ResultFileError) as e:
        print(f"peakbench fleet: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:                # a bug: one line, not a traceback
        print(f"peakbench fleet: error: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_USAGE

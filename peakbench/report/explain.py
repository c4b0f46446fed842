"""`peakbench explain RESULT.json [TEST...]`: for each result, the chain behind its limit verdict:
value, spec, the bound it was held under, clock and % at clock, telemetry and throttle reasons,
the loop's machine code, every guard's verdict, and the sentence (report/verdict.py). Results of
one GPU through several backends in the file are refined against each other first."""
from __future__ import annotations

import fnmatch

from peakbench.report import verdict


def chains(doc: dict, patterns: list[str]) -> str:
    """The chains of every result of `doc` whose test matches one of `patterns` (all without)."""
    verdict.judge(doc["runs"])
    blocks = []
    for run in doc["runs"]:
        picked = [r for r in run["results"] if not patterns or any(fnmatch.fnmatch(r["test"], p) for p in patterns)]
        for r in picked:
            blocks.append(chain(run, r))
    if not blocks:
        return f"no result matches {', '.join(patterns)}" if patterns else "the file holds no result"
    return "\n\n".join(blocks)


def chain(run: dict, r: dict) -> str:
    device = run.get("device") or {}
    head = f"{r['test']} ({run['backend']}, {device.get('name', '?')}): {r['status']}"
    if r["status"] != "ok":
        return f"{head}\n  reason: {r.get('reason')}"
    spec = run.get("spec") or {}
    limit = r.get("limit") or verdict.limit(r, spec, device.get("health")) or {}
    lines = [head, f"  value: {r['value']} {r['unit']} (variant {(r.get('params') or {}).get('variant')},"
                   f" spread {(r.get('stats') or {}).get('spread_pct')}%)"]
    if r.get("spec_value") is not None:
        lines.append(f"  spec: {r['spec_value']} {r['unit']} ({spec.get('name')}): {r.get('pct_of_spec')}% of it")
    guards = (r.get("evidence") or {}).get("guards") or {}
    for name in ("clock-ceiling", "bound"):
        if name in guards:
            lines.append(f"  {name}: {guards[name]['verdict']}: {guards[name]['why']}")
    if r.get("clock_mhz"):
        at = r.get("pct_of_clock_peak")
        lines.append(f"  clock: {r['clock_mhz']:.0f} MHz (boost {spec.get('boost_clock_mhz', '?')})"
                     + (f", {at}% of the peak at that clock" if at is not None else ""))
    telemetry = r.get("telemetry") or {}
    if telemetry:
        power, temp = telemetry.get("power_w") or {}, telemetry.get("temperature_c") or {}
        lines.append(f"  telemetry: {power.get('mean')} W mean ({power.get('max')} max), {temp.get('max')} C max,"
                     f" throttle: {', '.join(telemetry.get('throttle_reasons') or []) or 'none'}")
    if device.get("health"):
        lines.append("  health: " + ", ".join(f"{k} {v}" for k, v in device["health"].items()))
    code = verdict.loop_code(r)
    if code:
        lines.append("  loop: " + " + ".join(f"{n} {op}" for op, n in code.items()))
    for name, g in guards.items():
        if name not in ("clock-ceiling", "bound"):
            lines.append(f"  guard {name}: {g.get('verdict')}: {g.get('why')}")
    lines.append(f"  limit: {limit.get('by', '?')}: {limit.get('why', 'no verdict')}")
    return "\n".join(lines)

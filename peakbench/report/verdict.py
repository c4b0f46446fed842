"""Why each number is what it is: a `limit` verdict on every measured result, and the word a
comparison gives two results of one test. Read from the result documents alone (value, spec, %
at the measured clock, telemetry, the loop's machine code in the evidence), so a run, `peakbench
compare` and `peakbench explain` reach the same verdict.

A limit is {"by": one of BY, "why": one sentence, "evidence": {...}}:

  silicon   at the physical or per-clock peak, within SILICON of it
  clock     the peak at the measured clock is met, and the clock is low with no throttle named
  power     the clock is low (or the rate short) under a power throttle
  thermal   ... under a thermal throttle
  api       another backend on this GPU does the same work with less: what this API can express
            costs the difference (a shared chase that must load indices, not addresses)
  driver    another backend on this GPU runs a faster loop: the machine code differs; or copies
            faster, where both move their bytes with their API's own copy command
  kernel    another backend on this GPU does better with the same code, or none to tell: our path
  link      a host or GPU link below its maximum generation or width
  host      host-side time: submission, pageable memory
  unknown   short of the peak, and nothing on this GPU says why (what is missing is named)

One result is judged alone (limit); results of several backends on one GPU then refine the
slower ones (refine), where the word of their comparison is `slower`."""
from __future__ import annotations

import re

BY = ("silicon", "clock", "power", "thermal", "api", "driver", "kernel", "link", "host", "unknown")
SILICON = 0.85          # a rate within 15% of its peak: wgmma reaches 88-92% of the dense spec
CLOCK_LOW = 0.97        # a clock under this share of the boost clock is a low clock
SAME = 0.01             # two medians within 1% and overlapping samples are the same
HEAVY = 0.25            # a loop's opcodes with at least this share of its most frequent one
TIMES = ("ps", "ns", "us", "ms", "s")


def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _throttles(r: dict) -> list[str]:
    reasons = ((r.get("telemetry") or {}).get("throttle_reasons")) or []
    return [str(x) for x in reasons]


def _cause(reasons: list[str]) -> str | None:
    from peakbench.telemetry import throttle_cause
    cause = throttle_cause(reasons) or ""
    return "power" if "power" in cause else "thermal" if "thermal" in cause else None


def _host_path(evidence: dict) -> tuple[str, dict]:
    """Where a launch's host time went, from its evidence: the API's split (host_split) and the
    CPUs the loop was kept off (host_cpus), as words and fields."""
    split, cpus = evidence.get("host_split") or {}, evidence.get("host_cpus") or {}
    why, found = "", {}
    if _num(split.get("submit_us")) is not None and _num(split.get("until_signaled_us")) is not None:
        why += (f"; {split['submit_us']} us in the submission call, {split['until_signaled_us']} us more until the"
                f" completion read signaled")
        found.update(submit_us=split["submit_us"], until_signaled_us=split["until_signaled_us"])
    kept, there = cpus.get("kept_off_cpus"), _num(cpus.get("on_interrupt_cpu_us"))
    if kept and there is not None:
        why += (f"; timed off CPU {', '.join(map(str, kept))}, where the untimed launches' GPU interrupts went"
                f" ({cpus.get('interrupts_of')}): a launch timed on CPU {kept[0]} read {there:g} us")
        found.update(kept_off_cpus=kept, on_interrupt_cpu_us=there)
    return why, found


def limit(r: dict, spec: dict | None = None, health: dict | None = None) -> dict | None:
    """The verdict on one ok result alone; `spec` is the run's spec entry ({"boost_clock_mhz"}),
    `health` its device's (telemetry.health: the link's generation and width)."""
    if r.get("status") != "ok" or _num(r.get("value")) is None:
        return None
    test, unit = r["test"], r.get("unit", "")
    family = test.split(".")[0]
    params, evidence = r.get("params") or {}, r.get("evidence") or {}
    clock, boost = _num(r.get("clock_mhz")), _num((spec or {}).get("boost_clock_mhz"))
    at_clock, of_spec = _num(r.get("pct_of_clock_peak")), _num(r.get("pct_of_spec"))
    reasons = _throttles(r)
    if unit == "us":
        why, found = _host_path(evidence)
        return _verdict("host", "a host-timed submission to completion of an empty launch: the host's and the"
                                " driver's path, the GPU runs nothing" + why, {"value_us": r["value"], **found})
    if family == "latency":
        cycles = _num(params.get("cycles"))
        text = f"a dependent chase: each load waits for the one before" + (
            f", {cycles:.4g} cycles a load at {clock:.0f} MHz" if cycles and clock else "")
        return _verdict("silicon", text, {"cycles": cycles, "clock_mhz": clock})
    if family == "transfer" and params.get("variant") == "pageable":
        return _verdict("host", "pageable host memory: the driver stages each copy through its own pinned buffer",
                        {"variant": "pageable"})
    from peakbench.telemetry import link_below_max
    degraded = link_below_max(health) if family == "transfer" and test != "transfer.p2p" else None
    if degraded:
        return _verdict("link", f"the PCIe link trained at {degraded}", {k: v for k, v in (health or {}).items()
                                                                          if k.startswith("pcie_")})
    low = bool(clock and boost and clock < CLOCK_LOW * boost)
    clock_text = f"{clock:.0f} MHz" + (f" of the {boost:.0f} MHz boost" if boost else "") if clock else ""
    peak = "peak"
    if at_clock is None and (at_clock := _bound_share(evidence)) is not None:
        bound = evidence.get("machine_bound") if isinstance(evidence.get("machine_bound"), dict) else None
        peak = (f"ceiling its machine code sets ({bound.get('share')} x {bound.get('of')}'s peak: {bound.get('why')})"
                if bound else "ceiling derived from another test's peak (no vendor peak)")
    if at_clock is not None:
        share = at_clock / 100
        evidence_ = {"pct_of_clock_peak": at_clock, "clock_mhz": clock, "boost_clock_mhz": boost,
                     "throttle_reasons": reasons}
        cause = _cause(reasons)
        if low and (share >= SILICON or cause):
            by = cause or "clock"
            named = f"; throttle: {', '.join(reasons)}" if reasons else "; no throttle named"
            burst = evidence.get("burst") if isinstance(evidence.get("burst"), dict) else None
            if burst and _num(burst.get("value")):       # the rate before the cap bit (runner.take_burst)
                at = f" at {burst['clock_mhz']} MHz" if burst.get("clock_mhz") else ""
                named += f"; the first {burst.get('launches')} launches ran {burst['value']} {unit}{at}"
                evidence_["burst"] = burst
            return _verdict(by, f"{share:.0%} of the {peak} at the measured {clock_text}{named}", evidence_)
        if share >= SILICON:
            return _verdict("silicon", f"{share:.0%} of the per-clock {peak} at {clock_text}", evidence_)
        return _verdict("unknown", f"{share:.0%} of the per-clock {peak} at {clock_text}, no throttle: short of it,"
                                   " and no other backend on this GPU to compare", evidence_)
    if of_spec is not None:
        share = of_spec / 100
        what = "the host link's" if family == "transfer" else "the spec's"
        evidence_ = {"pct_of_spec": of_spec, "spec_value": r.get("spec_value")}
        ways = _each_way(params) if family == "transfer" else ""
        if share >= SILICON:
            return _verdict("silicon", f"{share:.0%} of {what} {r.get('spec_value')} {unit}{ways}", evidence_)
        return _verdict("unknown", f"{share:.0%} of {what} {r.get('spec_value')} {unit}: short of it, and no other"
                                   f" backend on this GPU to compare{ways}", evidence_)
    if not spec:
        return _verdict("unknown", "no spec entry matched this GPU (--spec names one): no peak to hold it against", {})
    bound = ((evidence.get("guards") or {}).get("clock-ceiling") or (evidence.get("guards") or {}).get("bound") or {})
    return _verdict("unknown", f"no vendor peak for {test} in spec {spec.get('name', '')}" + (
        f" (bounded: {bound['why']})" if bound.get("verdict") == "passed" else ""), {})


# The clock-ceiling guard's sentence (harness/guards.py clock_ceiling): "... is 1.00x the per-clock
# peak at 1980 MHz (0.25 x memory.shared's peak ...)", where a test's peak is derived (bound_from).
_CEILING = re.compile(r" is (\d+(?:\.\d+)?)x the per-clock peak at \d+ MHz \(\d")


def _bound_share(evidence: dict) -> float | None:
    """% of a derived per-clock bound (bound_from) that the clock-ceiling guard found, or None."""
    entry = (evidence.get("guards") or {}).get("clock-ceiling") or {}
    m = _CEILING.search(str(entry.get("why", ""))) if entry.get("verdict") == "passed" else None
    return float(m.group(1)) * 100 if m else None


def _verdict(by: str, why: str, evidence: dict) -> dict:
    return {"by": by, "why": why, "evidence": {k: v for k, v in evidence.items() if v not in (None, [], {})}}


# -- two results of one test -----------------------------------------------------------------------
def word(first: dict, other: dict) -> str:
    """`other` against `first`: "faster", "slower", "same" or "unclear", from both results'
    medians and sample ranges (stats min and max): apart by more than SAME with ranges that do
    not overlap is a difference; within SAME with overlapping ranges the same; else unclear."""
    a, b = _num(first.get("value")), _num(other.get("value"))
    if first.get("status") != "ok" or other.get("status") != "ok" or not a or not b:
        return "unclear"
    ra, rb = _range(first), _range(other)
    overlap = max(ra[0], rb[0]) <= min(ra[1], rb[1])
    ratio = b / a
    if abs(ratio - 1) <= SAME and overlap:
        return "same"
    if overlap or abs(ratio - 1) <= SAME:
        return "unclear"
    better = ratio < 1 if first.get("unit") in TIMES else ratio > 1
    return "faster" if better else "slower"


def _range(r: dict) -> tuple[float, float]:
    stats, v = r.get("stats") or {}, float(r["value"])
    lo, hi = _num(stats.get("min")), _num(stats.get("max"))
    return (lo if lo is not None else v, hi if hi is not None else v)


def loop_code(r: dict) -> dict[str, int]:
    """The heavy opcodes of a result's machine code, by family (HGMMA, HMMA, IDP, IADD3, REDG,
    MATCH, FFMA): the driver's loop mix where the evidence has it, else the kernel's instruction
    mix, else the machine-code census the work guard counted (never SPIR-V, which is no machine
    code); those with at least HEAVY of the most frequent's count."""
    evidence = r.get("evidence") or {}
    sass = evidence.get("sass") if isinstance(evidence.get("sass"), dict) else {}
    work = ((evidence.get("guards") or {}).get("work") or {}).get("evidence") or {}
    machine = work.get("loop_body") if not str(work.get("source", "SPIR-V")).startswith("SPIR-V") else None
    # the main loop's whole mix (the Vulkan driver's SASS, CUDA's), else the instructions the census
    # counted, else a whole kernel's mix, whose stores and address arithmetic are no loop
    mix = (sass.get("loop_mix") or evidence.get("loop_mix") or machine or evidence.get("instruction_mix")
           or evidence.get("sass_mix") or {})
    families: dict[str, int] = {}
    for op, n in mix.items():
        if isinstance(n, int) and not str(op).startswith(("Op", "NOP", "BRA")):
            family = str(op).split()[0].split(".")[0]
            families[family] = families.get(family, 0) + n
    if not families:
        return {}
    top = max(families.values())
    return {f: n for f, n in sorted(families.items(), key=lambda kv: -kv[1]) if n >= HEAVY * top}


# Integer bookkeeping: addresses, counters, predicates, moves. A loop's signature leaves them out
# unless one keeps pace with a long loop's work (an IADD3 after each of 512 IDP.4A is the step's).
BOOKKEEPING = {"IADD3", "IADD", "IMAD", "ISETP", "LOP3", "VIADD", "S2R", "CS2R", "S2UR", "MOV", "UMOV", "SHF",
               "LEA", "SEL", "PLOP3", "UIADD3", "UISETP", "ULDC", "R2UR", "BSSY", "BSYNC", "CALL", "RET", "EXIT",
               "NOP", "BRA", "WARPSYNC", "DEPBAR", "BAR"}
LONG_LOOP = 64          # work instructions a trip from which a keeping-pace bookkeeping family counts
PACE = 0.9


def signature(code: dict[str, int]) -> set[str]:
    """The families a loop's speed rests on: its work instructions, and a bookkeeping family that
    keeps pace with a long loop's work."""
    work = {f: n for f, n in code.items() if f not in BOOKKEEPING}
    if not work:
        return set(code)
    top = max(work.values())
    return set(work) | {f for f, n in code.items() if f in BOOKKEEPING and top >= LONG_LOOP and n >= PACE * top}


# Variants whose bytes the API's own copy command moves (workloads/transfer.py, p2p.py), where a
# mapped read or a copy kernel is peakbench's code; pageable copies are the host's (limit).
COPY_VARIANTS = ("pinned", "ce", "ce_bidir")


def copied_by(r: dict) -> str | None:
    """The API's copy command that moved a result's bytes, as its params name it, or None."""
    params = r.get("params") or {}
    if params.get("variant") not in COPY_VARIANTS or not params.get("engine"):
        return None
    return str(params["engine"])


def _each_way(params: dict) -> str:
    """Both directions at once (balanced copies): each direction's rate over its own copies and
    their sum, as a tool timing one direction while the other runs counts the link (nvbandwidth's
    bidirectional tests), beside what the value counts: both directions' bytes over the window
    both ran in, part of which the lane that ended first left idle."""
    lanes = {d: v for d, v in (params.get("balanced") or {}).items() if isinstance(v, dict)}
    rates = {d: _num(v.get("gb_s")) for d, v in lanes.items()}
    if len(rates) < 2 or not all(rates.values()):
        return ""
    text = ("; each direction over its own copies " + " + ".join(f"{d} {g:.4g}" for d, g in rates.items())
            + f" = {sum(rates.values()):.4g} GB/s")
    ends = [_num(v.get("ms")) for v in lanes.values()]
    if all(ends):
        text += (f", where the value counts both ways' bytes over the window both ran in (the lanes ended"
                 f" {max(ends) - min(ends):.2f} ms apart in {max(ends):.3g})")
    return text


def _ways(r: dict, best: dict, best_backend: str) -> str:
    """Each direction's rate while the other ran, where both balanced their copies."""
    mine, theirs = ((x.get("params") or {}).get("balanced") or {} for x in (r, best))
    shared = [d for d in mine if d in theirs and _num(mine[d].get("gb_s")) and _num(theirs[d].get("gb_s"))]
    if len(shared) < 2:
        return ""

    def rates(balanced: dict) -> str:
        return " and ".join(str(balanced[d]["gb_s"]) for d in shared)
    return (f"; both ways at once its {' and '.join(shared)} copies ran at {rates(mine)} GB/s,"
            f" {best_backend}'s at {rates(theirs)}")


def _shown(code: dict[str, int]) -> str:
    return " + ".join(f"{n} {op}" for op, n in code.items()) or "no machine code in the evidence"


def judge(runs: list[dict]) -> None:
    """Runs read from a file: each ok result without a limit (a file written before verdicts)
    judged as a run would judge it, then one GPU's backends refined against each other (refine).
    Changes the results in place."""
    for run in runs:
        for r in run["results"]:
            if r.get("status") == "ok" and not r.get("limit"):
                r["limit"] = limit(r, run.get("spec"), (run.get("device") or {}).get("health"))
    refine(runs)


def refine(runs: list[dict]) -> None:
    """Results of one test through several backends on one GPU (same device UUID): each one
    `slower` than the fastest gets `driver` where its loop's heavy opcodes differ from the
    fastest's, else `kernel`, unless a throttle or a low clock explains it (power, thermal,
    clock) or it is host time (host). Changes the results' `limit` in place."""
    groups: dict[str, list[dict]] = {}
    for run in runs:
        uuid = (run.get("device") or {}).get("uuid") or ""
        if uuid.strip("0-"):
            groups.setdefault(uuid, []).append(run)
    for group in groups.values():
        if len({run["backend"] for run in group}) < 2:
            continue
        tests: dict[str, list[tuple[str, dict]]] = {}
        for run in group:
            for r in run["results"]:
                if r.get("status") == "ok" and r.get("limit"):
                    tests.setdefault(r["test"], []).append((run["backend"], r))
        for entries in tests.values():
            if len(entries) > 1:
                _refine_test(entries)


def _refine_test(entries: list[tuple[str, dict]]) -> None:
    times = entries[0][1].get("unit") in TIMES
    best_backend, best = (min if times else max)(entries, key=lambda e: float(e[1]["value"]))
    alone = "and no other backend on this GPU to compare"
    if best["limit"]["by"] == "unknown" and alone in best["limit"]["why"]:
        others = ", ".join(b for b, _ in entries if b != best_backend)
        best["limit"] = {**best["limit"], "why": best["limit"]["why"].replace(alone, f"and the fastest on this GPU"
                                                                                    f" (beside {others})")}
    for backend, r in entries:
        if r is best or word(best, r) != "slower":
            continue
        ratio = float(r["value"]) / float(best["value"])
        mine, theirs = loop_code(r), loop_code(best)
        evidence = {"other_backend": best_backend, "other_value": best["value"], "ratio": round(ratio, 3),
                    "loop": mine, "other_loop": theirs, "other_limit": (best.get("limit") or {}).get("by")}
        held = r["limit"]["by"]
        if held in ("power", "thermal", "clock", "host", "link"):
            r["limit"] = {**r["limit"], "evidence": {**r["limit"].get("evidence", {}), **evidence},
                          "why": r["limit"]["why"] + f"; {best_backend} reads {best['value']} {best['unit']} on this GPU"}
            continue
        hop, their_hop = (r.get("params") or {}).get("hop"), (best.get("params") or {}).get("hop")
        if hop == "index" and their_hop == "address":
            r["limit"] = _verdict("api", f"{backend}'s chase loads an index and scales it into an address each hop"
                                         f" ({_shown(mine)}), where {best_backend}'s loads the address itself: its"
                                         f" API addresses shared memory by element only ({ratio:.2f}x of its"
                                         f" {best['value']} {best['unit']})", {**evidence, "hop": hop})
            continue
        copy, their_copy = copied_by(r), copied_by(best)
        if copy and their_copy and not mine and not theirs:
            r["limit"] = _verdict("driver", f"{backend}'s copies are its driver's own ({copy}), where {best_backend}'s"
                                            f" ({their_copy}) read {best['value']} {best['unit']} ({ratio:.2f}x):"
                                            f" peakbench only issues them{_ways(r, best, best_backend)}",
                                  {**evidence, "copy": copy, "other_copy": their_copy,
                                   "queue": (r.get("params") or {}).get("queue")})
            continue
        if mine and theirs and signature(mine) != signature(theirs):
            r["limit"] = _verdict("driver", f"{backend}'s loop runs {_shown(mine)} where {best_backend}'s runs"
                                            f" {_shown(theirs)} ({ratio:.2f}x of its {best['value']} {best['unit']})",
                                  evidence)
        else:
            how = "the same loop" if mine and mine == theirs else (
                "a loop of the same instructions" if mine and theirs else "no machine code to tell them apart")
            r["limit"] = _verdict("kernel", f"{best_backend} reads {best['value']} {best['unit']} on this GPU"
                                            f" ({ratio:.2f}x) with {how}: this path is the ceiling", evidence)

"""The run's checks of itself: what a kernel did against what the catalog claims, once for every
backend. Each guard's verdict goes into the result's evidence["guards"] ({"verdict": "passed",
"failed" or "not_checked", "why": ...}); one that finds a lie fails the test with a reason that
names it ("guard work: ..."); one that cannot look says why and never fails, and a result whose
work or bound no guard could check is reported unverified (`unverified`).

  types          the operand types of the loop's arithmetic (from the compiled kernel) are the
                 test's; a catalog entry with no kernel is never run
  work           the loop body's ops, counted in the compiled kernel, are the catalog's claim,
                 one iteration a trip: SPIR-V on Vulkan, SASS on CUDA, the code object's AMDGPU
                 assembly on ROCm; a stream's device loads and stores are the bytes it counts
                 (SPIR-V, SASS); an atomic test's adds and a special function's results, in
                 the SASS NVIDIA's Vulkan driver made where it shows it
  sass           on NVIDIA's Vulkan driver, the same two of the SASS the driver compiled
  iterations     the output is checked after two different iteration or pass counts
                 (the workloads do it; the reason is theirs)
  coverage       a stream's checks reach the far end of its buffer (the workloads do it)
  measured       the output the timed launches left, at the measured size, is the host's: an
                 atomic buffer sums every launch since it was zeroed, a read's sums and an
                 update's destination follow the count of passes (the workloads say)
  timer          GPU time agrees with host wall time, for launches long enough to tell
                 (the latency sweep's timed launches too)
  clock-ceiling  a rate is not above the spec's per-clock peak at the measured clock
  bound          a rate whose peak does not scale with the clock is not above the spec's peak; a
                 latency is not under one cycle of the device's highest clock a load
  cycle-clock    the chase's cycle counter implies no clock above the device's maximum
  chase-stride   the chase's nodes are at least a cache line apart
  statistics     the value and its statistics follow from the samples the result keeps
"""
from __future__ import annotations

import os

from peakbench.harness.stats import median

TOLERANCE = 0.05           # the rate and clock ceilings: vendor peaks are round numbers
# A peak that is the spec's per-clock rate x units x clock (GpuSpec.exact_peak) is the hardware's
# bound at that clock: a rate more than this over it is the clock's doing, not the peak's rounding
# (clock_ceiling's evidence says which; what fails is CLOCK_OVERSHOOT past the boost clock's).
EXACT_TOLERANCE = 0.01
# The clock itself can run past the spec's maximum: an H100 (1980 MHz) ran its SMs' cycle counters
# at 2040-2085 MHz against %globaltimer after power-capped tensor tests, its FP64 tensor rate
# 256 FLOP a cycle all the while, with NVML reading 1755-1965 (PERFORMANCE_ANALYSIS.md, "An SM
# clock past its maximum"). A rate, or a counted clock, may pass the maximum clock's by this much.
CLOCK_OVERSHOOT = 0.06
MIN_WALL_S = 0.002         # launches judged: this much GPU time (a fast timer) or wall time (a slow one)
# GPU time over host wall time, below which the GPU timer runs fast. The host's part of a launch
# (submit, wait for the fence or event, wake up) is tens of microseconds on a GPU and under a
# millisecond on an idle lavapipe; with lavapipe's host cores loaded by other work, whole tests
# read 0.33-0.38 in every sample (28.5 ms of GPU time in 74.4 ms of wall time). A timer ten times
# fast reads 0.1. A GPU's host is not the device: there the least disturbed launch reads 0.97-0.999
# (PERFORMANCE_ANALYSIS.md, "The run checks itself: guards on the H200"), and a timer twice as fast
# fails.
MIN_TIMER_RATIO = 0.25
MIN_TIMER_RATIO_GPU = 0.5
# Above 1 by the timers' resolution: a timestamp period, a CUDA event's ~0.5 us.
MAX_TIMER_RATIO = 1.05
# The fewest launches of one size (of MIN_WALL_S or more) whose GPU times, all alike to the bit,
# are a replayed time (_replayed); every measured size has 8 at least (runner.own_launches).
REPLAYED_LAUNCHES = 8
# A fast timer's launch is also this much short of its wall time: a few milliseconds of scheduling
# delay on a short launch (a 3.1 ms copy in 12.2 ms on a loaded lavapipe) is not one; a timer ten
# times fast at the quick run's 5 ms samples is 45 ms short.
HOST_DELAY_S = 0.02
# A matrix test's element types as the compiled modules name them (operands.accumulator).
MATRIX_ELEMENTS = {"fp16": "f16", "bf16": "bf16", "fp8_e4m3": "e4m3", "fp8_e5m2": "e5m2", "int8": "i8",
                   "fp32": "f32", "int32": "i32", "fp64": "f64", "tf32": "tf32", "int4": "i4", "fp4": "e2m1"}
# The census that counts the source's own operations (a machine-code census counts instructions).
PORTABLE = "SPIR-V"
# Cache line sizes where the spec entry gives none: NVIDIA's L1 and L2 lines are 128 B (CUDA
# C++ Programming Guide, global memory), AMD's L2 lines 128 B (CDNA3 and RDNA3 ISA guides),
# Intel's Xe 64 B.
CACHE_LINE = {0x10DE: 128, 0x1002: 128, 0x8086: 64}


NOT_CHECKED = "not checked: "


def reason(guard: str, text: str) -> str:
    return f"guard {guard}: {text}"


def verdict(problem: str | None, found: str | dict) -> dict:
    """A guard's entry in evidence["guards"] from what it returned: (problem, evidence), the
    evidence a sentence, "not checked: <why>", or what it counted (kept under "evidence")."""
    if problem:
        entry = {"verdict": "failed", "why": problem}
    elif isinstance(found, str) and found.startswith(NOT_CHECKED):
        entry = {"verdict": "not_checked", "why": found[len(NOT_CHECKED):]}
    else:
        entry = {"verdict": "passed", "why": found if isinstance(found, str) else counted(found)}
    if isinstance(found, dict):
        entry["evidence"] = found
    return entry


def passed(evidence: dict, guard: str, why: str) -> None:
    """A workload's own guard (iterations, coverage) that looked and found the work done."""
    evidence.setdefault("guards", {})[guard] = {"verdict": "passed", "why": why}


def counted(found: dict) -> str:
    """The work guard's count in a sentence."""
    if "bytes_loaded" in found:
        return (f"{found['bytes_loaded']} bytes loaded and {found['bytes_stored']} stored ({found['source']},"
                f" {found['note']}), the catalog claims {found['bytes_claimed']:g}")
    return f"{found['ops_counted']:g} ops in the loop body ({found['source']}), the catalog claims {found['ops_claimed']:g}"


def element(t: str) -> str:
    """"f16x2" -> "f16"; the packed 4x8-bit word "i8x4" stays what it is."""
    return t if t == "i8x4" else t.split("x")[0]


def no_kernel(test) -> str | None:
    """A compute entry with no kernel in the catalog can never be ok: a backend that offers to
    run one runs something else under its label."""
    if test.family == "compute" and not test.kernel:
        return reason("types", f"{test.name} has no native kernel in the catalog, yet the backend offered to run it")
    return None


def uncounted(test, census) -> str | None:
    """Why a census cannot be held against the catalog, or None."""
    if census is None or not census.ops:
        return f"not checked: {census.note if census else 'the platform shows no instructions'}"
    if getattr(test, "pieces", False) and census.source.split()[0] != PORTABLE and "pieces" not in census.forms:
        return f"not checked: {census.source} computes {test.dtype} in 32-bit pieces, no instruction is one step"
    return None


def wanted(test, census, variant=None) -> set[str] | None:
    """The operand types the test's loop (of `variant`) may compute in, as this census names them."""
    if test.family == "matrix":
        a, c = (MATRIX_ELEMENTS.get(t) for t in test.types)
        return {f"{a}.{c}"} if a and c else None
    operands = test.operand_types(variant)
    if not operands:
        return None
    machine = census.source.split()[0] != PORTABLE
    return set(operands) | (set(getattr(test, "widened", ())) if machine else set())


def types(test, variant, census) -> tuple[str | None, str]:
    """(problem, evidence) of the loop's operand types against the test's dtype."""
    if uncounted(test, census):
        return None, uncounted(test, census)
    want = wanted(test, census, variant)
    if want is None and test.family == "compute":
        return f"the catalog names no operand types for {test.dtype} (its ComputeTest's operands)", \
            f"{', '.join(sorted(census.types))} ({census.source})"
    if want is None:
        return None, f"not checked: no operand types known for {test.dtype}"
    found = sorted(census.types)
    seen = f"{', '.join(found)} ({census.source})"
    elements = {element(t) for t in found}
    if not elements <= want or not elements & set(getattr(test, "required", ()) or want):
        # where the type is the variant's (an atomic's u32 or f32), the variant's name says it
        per_variant = variant is not None and test.operand_types(variant) != test.operand_types()
        claimed = variant.name if per_variant else test.dtype
        return (f"module does {' and '.join(found)} arithmetic; test {test.name} is {claimed}"
                f" ({' and '.join(sorted(want))})"), seen
    packed = getattr(test, "packed", 1)
    scalar = [t for t in found if element(t) != "i8x4" and (int(t.split("x")[1]) if "x" in t else 1) < packed]
    if scalar:
        return (f"module does {' and '.join(scalar)} arithmetic; test {test.name} is packed"
                f" {sorted(want)[0]}x{packed}"), seen
    return None, seen


def work(test, variant, census, loop_items: int | None) -> tuple[str | None, dict | str]:
    """(problem, evidence) of the loop body's ops against the catalog's claim for one iteration of
    one invocation: loop_items (steps x accumulators) x per_item. The kernels keep their
    iterations loop rolled (one iteration a trip), so the two must be equal: a compiler that
    unrolled it anyway shows as a multiple, and fails as any other count would."""
    if uncounted(test, census):
        return None, uncounted(test, census)
    if not loop_items:
        return None, "not checked: the workload does not say what one loop iteration claims"
    claim = loop_items * test.per_item(variant)
    evidence = {"loop_body": census.ops, "ops_counted": census.work, "ops_claimed": claim, "source": census.source}
    if census.note:
        evidence["note"] = census.note
    if census.work != claim:
        shown = ", ".join(f"{n} {op}" for op, n in census.ops.items())
        steps = f"{variant.unroll} steps x {loop_items // variant.unroll} accumulators" if variant.unroll else f"{loop_items} items"
        return (f"loop body has {shown} = {census.work} ops, the catalog claims {claim:g}"
                f" ({steps} x {test.per_item(variant):g} ops)"), evidence
    return None, evidence


def launches_timed(test, variant) -> tuple[str | None, str]:
    """(problem, evidence) of a host-timed test's count: the runtime times each launch on its own
    (launch_times: one time a launch), so the catalog must credit one launch to each time."""
    claim = test.per_item(variant)
    if claim != 1:
        return f"each host time is of one launch, the catalog counts {claim:g}", f"{claim:g} launches claimed a time"
    return None, "one launch a host time, as the runtime times them"


def moved(test, variant, census, loop_items: int | None) -> tuple[str | None, dict | str]:
    """(problem, evidence) of a stream kernel's device loads and stores, counted in its compiled
    module (evidence/spirv.py memory_census), against what the host counts: loop_items items per
    invocation (per loop iteration where it loops), each worth per_item bytes (what the rate
    multiplies by), read `reads` and written `writes` times. A read's own stores (its sums) are
    its check's, not its traffic."""
    if uncounted(test, census):
        return None, uncounted(test, census)
    if not loop_items:
        return None, f"{NOT_CHECKED}the workload does not say what one invocation claims"
    from peakbench.evidence.spirv import accessed
    loaded = sum(n * accessed(op)[1] for op, n in census.ops.items())
    stored = sum(n * accessed(op)[2] for op, n in census.ops.items())
    moved_bytes = loaded + (stored if test.writes else 0)
    claim = loop_items * test.per_item(variant)
    split = loop_items * test.access_bytes
    evidence = {"loop_body": census.ops, "bytes_loaded": loaded, "bytes_stored": stored,
                "bytes_claimed": claim, "source": census.source, "note": census.note}
    times = moved_bytes // claim if claim else 0           # an iterations loop unrolled: a whole multiple
    if not times or moved_bytes != times * claim or loaded != times * split * test.reads or \
            (test.writes and stored != times * split * test.writes):
        shown = ", ".join(f"{n} {op}" for op, n in census.ops.items()) or "no device access"
        return (f"{census.note or 'the kernel'}: {shown} move {loaded} bytes read and {stored} written"
                f"{'' if test.writes else ' (its result)'}, the catalog claims {claim:g} bytes"
                f" ({loop_items} x {test.per_item(variant):g}: {test.reads} read and {test.writes} written"
                f" of {test.access_bytes} bytes)"), evidence
    return None, evidence


def sass(test, variant, params: dict, found: dict) -> tuple[str | None, dict | str]:
    """(problem, evidence) of the SASS loop body NVIDIA's Vulkan driver compiled (a result's
    evidence["sass"], evidence/sass_rules.py) against the catalog: its types, then its work."""
    if found.get("note") or not found.get("loop_mix"):
        return None, f"not checked: {found.get('note') or 'no loop body in the SASS'}"
    from peakbench.evidence.sass_rules import census
    machine = census(test.name, params, found)
    if machine is None:
        return None, f"not checked: no SASS rule for {test.name}"
    problem, seen = types(test, variant, machine)
    if problem:
        return problem, seen
    return work(test, variant, machine, params["unroll"] * params["accumulators"])


def timer(timing: list[tuple[float, float]], cpu_device: bool = True,
          launches: list[list[float]] | None = None) -> tuple[str | None, str]:
    """(problem, evidence) of (GPU seconds, host wall seconds) per sample. The host only ever adds
    wall time (a busy CPU delays the submit and the wake-up), so both verdicts read the least
    disturbed launch: a timer runs fast when even it shows less GPU than wall time, by more than a
    busy host can add (of launches of MIN_WALL_S GPU time or more); one runs slow when any launch
    of MIN_WALL_S GPU or wall time or more took longer on the GPU than between its submission and
    its end, which no launch can (a slow timer makes the launches it calibrates shorter than
    MIN_WALL_S of wall time; a loaded host can stretch the typical one's wall time past it).
    `launches`: the GPU seconds of every launch of each measured size (a sweep's or a pair's
    points each one; the samples' where not given), which must not all read alike (replayed).
    `cpu_device`: the device runs on the host's cores (lavapipe), whose load slows its launches."""
    least = MIN_TIMER_RATIO if cpu_device else MIN_TIMER_RATIO_GPU
    by_gpu = [(g, w) for g, w in timing if g >= MIN_WALL_S]
    judged = [(g, w) for g, w in timing if g >= MIN_WALL_S or w >= MIN_WALL_S]
    if not judged:
        return None, f"not checked: no launch of {MIN_WALL_S * 1e3:g} ms or more"

    def shown(launch):
        g, w = launch
        return f"GPU time {g * 1e3:.3g} ms for a launch whose host wall time was {w * 1e3:.3g} ms"
    typical = median([g / w for g, w in judged])
    longest = max(judged, key=lambda gw: gw[0] / gw[1])
    if longest[0] / longest[1] > MAX_TIMER_RATIO:
        return (f"{shown(longest)}: the GPU timer runs slow (GPU/wall {longest[0] / longest[1]:.2f}, at most"
                f" {MAX_TIMER_RATIO}; typically {typical:.2f})", shown(longest))
    text = [f"GPU/wall {typical:.3f} over {len(judged)} launches"]
    if by_gpu:
        g, w = best = max(by_gpu, key=lambda gw: gw[0] / gw[1])
        if g / w < least and w - g > HOST_DELAY_S:
            return (f"{shown(best)}: the GPU timer runs fast (GPU/wall at most {g / w:.2f} over {len(by_gpu)}"
                    f" launches, at least {least})"), shown(best)
        text.append(f"at most {g / w:.3f} over {len(by_gpu)} of {MIN_WALL_S * 1e3:g} ms GPU time")
    groups = [[g for g in group if g >= MIN_WALL_S] for group in (launches or [[g for g, _ in timing]])]
    groups = [group for group in groups if group]
    for group in groups:
        replayed = _replayed(group)
        if replayed:
            return replayed, replayed
    if groups:
        sizes = "its size" if len(groups) == 1 else f"{len(groups)} sizes"
        text.append(f"{sum(len(set(group)) for group in groups)} GPU times in"
                    f" {sum(len(group) for group in groups)} launches of {sizes}")
    return None, ", ".join(text)


def _replayed(long_launches: list[float]) -> str | None:
    """Launches of one size, of MIN_WALL_S or more, that all read one GPU time to the last bit are
    a time replayed, not read: a runtime that lost the launches after the first and reported its
    time again (sleeping as long, so the wall time agrees), or a timer query read stale. A real
    timer reads some steady launches alike (an H100's Vulkan timestamps read 3 distinct times in
    5 samples: PERFORMANCE_ANALYSIS.md, "A replayed time"), so the check reads every launch of
    the size, the warm-up's too, and REPLAYED_LAUNCHES of them at least. Where a launch's output
    does not add up over launches (a special function, a cache read), nothing else sees lost ones."""
    if len(long_launches) < REPLAYED_LAUNCHES or len(set(long_launches)) > 1:
        return None
    return (f"all {len(long_launches)} launches of its size read {long_launches[0] * 1e3:.6g} ms of GPU time"
            f" to the last bit: a time replayed, not measured (launches lost and the first one's time"
            f" reported again, or a timer query read stale)")


def at_counts(counts: tuple[int, ...], check, noun: str, evidence: dict) -> str | None:
    """Verification after each count in turn (`check(n)` -> problem or None). A mismatch after a
    later count, where the first matched, is the iterations guard's: the loop ran fewer
    iterations or passes than it was given."""
    for n in counts:
        problem = check(n)
        if problem and n != counts[0]:
            return reason("iterations", f"output after {n} {noun} differs from the host's"
                                        f" (it matched after {counts[0]}): {problem}")
        if problem:
            return problem
    passed(evidence, "iterations", f"{noun} checked at {' and '.join(map(str, counts))}")
    return None


def ceiling_of(test, spec, loop: tuple | None = None) -> tuple[tuple | None, bool]:
    """(the test's ceiling: (value, the clock it assumes, where it comes from), or None; whether
    it is the one its kernel's machine code sets). `loop`: (a test, the share of its peak, why)
    the machine code allows where the vendor gives no peak (sass_rules.multiply_add_bound); it is
    the ceiling where it is the lower one."""
    ceiling = spec.ceiling(test.name) if spec else None
    if loop and spec and spec.peak(test.name) is None and spec.peak(loop[0]) is not None:
        base, share, why = loop
        if ceiling is None or spec.peak(base) * share < ceiling[0]:
            return (spec.peak(base) * share, spec.peak_clock_mhz(base),
                    f"{share:.4g} x {base}'s peak of spec {spec.name}: {why}"), True
    return ceiling, False


def clock_ceiling(test, value: float, clock_mhz: float | None, spec, loop: tuple | None = None) -> tuple[str | None, str]:
    """(problem, evidence) of a compute or matrix rate against its ceiling (ceiling_of) at the
    measured clock. The rate passes within EXACT_TOLERANCE of an exact peak, or TOLERANCE of a
    round one, at the clock read; past that it is held to the peak at the higher of the clock read
    and the boost clock: within the same tolerance the reading was low (NVML reports the clock of
    the last interval, which short launches can leave idle: 555 MHz was read during a quick matrix
    test running at full rate: PERFORMANCE_ANALYSIS.md, "The run checks itself: guards on the
    H200"), within CLOCK_OVERSHOOT the SMs ran past their maximum, and beyond it the rate fails."""
    ceiling, _ = ceiling_of(test, spec, loop)
    if ceiling is None:
        return None, "not checked: no spec peak"
    peak, peak_mhz, where = ceiling
    per_mhz = peak / peak_mhz
    if not clock_mhz:           # no reading: the most the GPU can do at its highest clock
        highest = max(spec.boost_clock_mhz, peak_mhz)
        times = value / (per_mhz * highest)
        text = (f"{value:.4g} {test.unit} is {times:.2f}x the peak at the {highest:.0f} MHz boost clock"
                f" (no clock measured){'' if where.startswith('spec ') else f' ({where})'}")
        return (text if times > 1 + CLOCK_OVERSHOOT else None), text
    exact = spec.exact_peak(test.name)
    over = 1 + (EXACT_TOLERANCE if exact else TOLERANCE)
    if exact:
        where += ", its per-clock rate x units x clock"
    times = value / (per_mhz * clock_mhz)
    text = f"{value:.4g} {test.unit} is {times:.2f}x the per-clock peak at {clock_mhz:.0f} MHz"
    if not where.startswith("spec ") or exact:
        text += f" ({where})"
    if times <= over:
        return None, text
    highest = max(clock_mhz, spec.boost_clock_mhz)
    at_highest = value / (per_mhz * highest)
    if at_highest > max(over, 1 + CLOCK_OVERSHOOT):
        return (f"{text} ({at_highest:.2f}x even at the {highest:.0f} MHz boost clock, more than an SM clock"
                f" runs past its maximum)"), text
    if at_highest > over:
        return None, (f"{text}: {at_highest:.2f}x even at the {highest:.0f} MHz boost clock, within the"
                      f" {CLOCK_OVERSHOOT:.0%} an SM clock runs past its maximum (the SMs ran faster than"
                      f" the clock read)")
    return None, f"{text}: the clock reading looks low (at the {highest:.0f} MHz boost clock it is {at_highest:.2f}x)"


def bound(test, value: float, info, spec) -> tuple[str | None, str]:
    """(problem, evidence) of a result whose peak does not scale with the core clock against the
    physical bound the run knows: a rate at most the spec's peak (DRAM from the GPU's memory
    bandwidth, transfers from its links), a latency at least one cycle of the device's highest
    clock a load."""
    if test.higher_is_better:
        per_unit = getattr(test, "per_unit_of", "")        # one unit's share of a device-wide peak
        ceiling = spec.ceiling(per_unit or test.name) if spec else None
        if ceiling is None or (per_unit and not info.units):
            return None, f"{NOT_CHECKED}no spec peak for {per_unit or test.name}"
        peak, _, where = ceiling
        if per_unit:
            peak, where = peak / info.units, f"{where}, {per_unit} over {info.units} units"
        of = f"of {where}" if where.startswith("spec ") else f"bound, {where}"
        text = f"{value:.4g} {test.unit} is {value / peak:.2f}x the {peak:.4g} {test.unit} {of}"
        return (text if value > peak * (1 + TOLERANCE) else None), text
    if test.unit != "ns":          # ns: a load's latency (latency.*, sm.l2_latency)
        return None, f"{NOT_CHECKED}no bound on a {test.unit} time but the host's"
    most, where = max_clock_mhz(info, spec)
    if most is None:
        return None, f"{NOT_CHECKED}no maximum clock known for {info.name}"
    floor = 1e3 / most
    text = f"{value:.4g} ns a load, one cycle at the {most:.0f} MHz maximum ({where}) is {floor:.3g} ns"
    return (text if value < floor * (1 - TOLERANCE) else None), text


# The guards that prove a result's work (the kernel did what the count claims) and those that
# bound its value (no more than the hardware can do): a result with neither passed is unverified.
WORK_GUARDS = ("work", "sass", "iterations", "coverage", "cycles", "measured")
BOUND_GUARDS = ("clock-ceiling", "bound", "cycle-clock")


def unverified(checks: dict) -> str | None:
    """Why an ok result's work or bound went unchecked ("work: ...; bound: ..."), or None."""
    missing = []
    for what, names in (("work", WORK_GUARDS), ("bound", BOUND_GUARDS)):
        entries = [(n, checks[n]) for n in names if isinstance(checks.get(n), dict)]
        if not any(e.get("verdict") == "passed" for _, e in entries):
            # the measured guard only adds to a count: why the count itself went unchecked comes first
            why = next((e["why"] for n, e in entries if e.get("verdict") == "not_checked" and n != "measured"),
                       "no guard checks it")
            missing.append(f"{what}: {why}")
    return "; ".join(missing) or None


def max_clock_mhz(info, spec) -> tuple[float | None, str]:
    """The device's highest clock: the spec's boost clock, or for a CPU device the host's."""
    if spec:
        return spec.boost_clock_mhz, f"spec {spec.name}"
    if info.kind == "cpu":
        try:
            khz = int(open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read())
            return khz / 1e3, "host cpufreq"
        except (OSError, ValueError):
            pass
    return None, ""


def cycle_clock(clock_mhz: float | None, info, spec) -> tuple[str | None, str]:
    """(problem, evidence) of the clock the chase's cycle counter implies."""
    if not clock_mhz:
        return None, "not checked: no cycle counter"
    most, where = max_clock_mhz(info, spec)
    if most is None:
        return None, f"not checked: no maximum clock known ({clock_mhz:.0f} MHz from cycles)"
    text = f"the cycle counter implies {clock_mhz:.0f} MHz, the device's maximum is {most:.0f} MHz ({where})"
    return (text if clock_mhz > most * (1 + CLOCK_OVERSHOOT) else None), text


# How far the cycles a load that a latency implies may stand from the counter's own: both are
# taken at the launch the counter read (the latency scaled from the median launch to it), so
# only rounding parts them; a count of loads off by a factor parts them by it.
CYCLES_AGREE = 0.05


def cycles_agree(ns: float, clock_mhz: float | None, cycles: float | None,
                 implied: float | None) -> tuple[str | None, str]:
    """(problem, evidence): the cycles a load the host's count of loads implies (its latency
    times the counter's clock, at the launch the counter read) against the cycles the core's
    counter read a load; a wrong count of loads (or of launches) shows as a ratio far from 1."""
    if not cycles or not implied or not clock_mhz:
        return None, "not checked: no cycle counter"
    text = (f"{ns:.4g} ns at {clock_mhz:.0f} MHz: the count of loads implies {implied:.4g} cycles a load;"
            f" the counter read {cycles:.4g}")
    return (text if abs(implied / cycles - 1) > CYCLES_AGREE else None), text


def cache_line(info, spec) -> tuple[int | None, str]:
    """The device's cache line, from the spec entry, the vendor, or for a CPU device the host."""
    if spec and spec.data.get("cache_line_bytes"):
        return int(spec.data["cache_line_bytes"]), f"spec {spec.name}"
    if info.kind == "cpu":
        try:
            line = os.sysconf("SC_LEVEL1_DCACHE_LINESIZE")
        except (ValueError, OSError):
            line = 0
        return (line, "host L1") if line > 0 else (64, "host CPU")
    if info.vendor_id in CACHE_LINE:
        return CACHE_LINE[info.vendor_id], "vendor documentation"
    return None, ""


def chase_stride(stride: int, info, spec) -> tuple[str | None, str]:
    line, where = cache_line(info, spec)
    if line is None:
        return None, f"not checked: no cache line size known for {info.name}"
    text = f"nodes {stride} B apart, cache line {line} B ({where})"
    return (text if stride < line else None), text

"""The burn-in profile's reading of one test's samples over its share of the duration: the time
series (value, clock, power, temperature against seconds since its first sample) and a
`stability` summary: the drift from the first window to the last, the worst window against the
median of all, and whether anything failed. A window is a fifth of the samples' span, at most a
minute (a long burn-in compares its first minute with its last)."""
from __future__ import annotations

from peakbench.harness.stats import median

WINDOWS = 5
MINUTE_S = 60.0
UNSTABLE = 0.05         # a drift or a worst window beyond 5% of the median flags the test


def series(times: list[float], values: list[float], clocks: list, unit: str, readings: list = ()) -> dict:
    """The result's `series` for a burn-in: x time_s, y the unit; clock_mhz per sample, and power_w
    and temperature_c from the telemetry reading nearest each sample, each where every sample has
    one (a series holds numbers only)."""
    t0 = times[0] if times else 0.0
    out = {"x": "time_s", "y": unit, "time_s": [round(t - t0, 3) for t in times], unit: [round(v, 6) for v in values]}
    nearest = [min(readings, key=lambda s: abs(s.t - t)) for t in times] if readings else []
    for key, found in (("clock_mhz", list(clocks)), ("power_w", [s.power_w for s in nearest]),
                       ("temperature_c", [s.temperature_c for s in nearest])):
        if found and len(found) == len(times) and all(isinstance(x, (int, float)) for x in found):
            out[key] = found
    return out


def windows(times: list[float], values: list[float]) -> tuple[list[list[float]], list[float]]:
    """(consecutive windows of a fifth of the samples' span, at most MINUTE_S each, from the first
    sample; the last window's width of samples, ending at the last sample)."""
    if not times:
        return [], []
    span = times[-1] - times[0]
    width = min(MINUTE_S, span / WINDOWS) if span > 0 else 1.0
    chunks: dict[int, list[float]] = {}
    for t, v in zip(times, values):
        chunks.setdefault(min(int((t - times[0]) / width), int(span / width)), []).append(v)
    return list(chunks.values()), [v for t, v in zip(times, values) if times[-1] - t <= width]


def summary(times: list[float], values: list[float], higher_is_better: bool = True,
            problem: str | None = None) -> dict:
    """`stability`: drift_pct (last window's median over the first's, in %), worst_window_pct (the
    worst window's median against all samples', in %: below for rates, above for times), windows,
    seconds, and `unstable` (why, or null)."""
    parts, last = windows(times, values)
    whole = median(values)
    full = max((len(w) for w in parts), default=0)
    medians = [median(w) for w in parts if 2 * len(w) >= full]      # a short tail window is no window
    drift = (median(last) / median(parts[0]) - 1) * 100 if parts and median(parts[0]) else 0.0
    worst = (min(medians) if higher_is_better else max(medians)) if medians else whole
    worst_pct = (worst / whole - 1) * 100 if whole else 0.0
    bad = [text for text, off in ((f"drift {drift:+.1f}% from the first window to the last", drift),
                                  (f"worst window {worst_pct:+.1f}% from the median", worst_pct))
           if abs(off) > UNSTABLE * 100]
    if problem:
        bad.insert(0, problem)
    return {"drift_pct": round(drift, 2), "worst_window_pct": round(worst_pct, 2), "windows": len(medians),
            "seconds": round(times[-1] - times[0], 2) if times else 0.0, "unstable": "; ".join(bad) or None}

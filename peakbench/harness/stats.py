"""Pure statistics over samples; no I/O, no GPU."""
from __future__ import annotations

import math
from dataclasses import dataclass


def median(values: list[float]) -> float:
    if not values:
        raise ValueError("median of no samples")
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def stdrel(values: list[float]) -> float:
    """Relative standard deviation (sample), 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return math.sqrt(var) / mean if mean else 0.0


@dataclass(frozen=True)
class Summary:
    median: float
    min: float
    max: float
    samples: int
    spread_pct: float    # (max - min) / median, in percent

    def as_json(self, digits: int = 4) -> dict:
        return {"median": round_significant(self.median, digits),
                "min": round_significant(self.min, digits),
                "max": round_significant(self.max, digits), "samples": self.samples,
                "spread_pct": round(self.spread_pct, 2)}


def summarize(values: list[float]) -> Summary:
    m = median(values)
    lo, hi = min(values), max(values)
    return Summary(m, lo, hi, len(values), (hi - lo) / m * 100 if m else 0.0)


def round_significant(x: float, digits: int) -> float:
    """Round to significant digits so JSON stays readable without losing precision that matters."""
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, max(0, digits - 1 - int(math.floor(math.log10(abs(x))))))

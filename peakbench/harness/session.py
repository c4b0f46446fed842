"""Run catalog tests on one opened device: support check, verify, measure, compare to spec.

A test that raises or mismatches the host reference is `failed` and the run goes on; a test with
no native path is `unsupported` with the backend's [category] reason.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

from peakbench.backend import Unsupported, error_text
from peakbench.catalog import TestSpec
from peakbench.harness.runner import Settings, VariantResult, measure
from peakbench.harness.stats import round_significant
from peakbench.report.result import CATEGORIES, Result
from peakbench.specs import GpuSpec


def _reason(e: Exception) -> str:
    text = error_text(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


def with_spec(result: Result, spec: GpuSpec | None) -> Result:
    """The result with its spec columns: % of spec, and % of the peak at the clock measured
    during the test (a new Result; the one given is left as it is)."""
    peak = spec.peak(result.test) if spec else None
    if peak is None or result.value is None:
        return result
    columns = {"spec_value": peak, "pct_of_spec": round(100 * result.value / peak, 1)}
    # Only arithmetic peaks scale with the core clock; memory and latency do not.
    if result.clock_mhz and result.test.split(".")[0] in ("compute", "matrix"):
        at_clock = peak * result.clock_mhz / spec.peak_clock_mhz(result.test)
        columns["pct_of_clock_peak"] = round(100 * result.value / at_clock, 1)
    return replace(result, **columns)


def unsupported(test: TestSpec, reason: str) -> Result:
    """An unsupported result; a reason without its [category] is a backend bug, reported failed."""
    if reason.startswith(CATEGORIES):
        return Result(test.name, "unsupported", test.unit, reason=reason)
    return Result(test.name, "failed", test.unit, reason=f"unsupported without a category: {reason}")


def run_test(device, test: TestSpec, settings: Settings, progress: Callable[[str], None],
             spec: GpuSpec | None = None) -> Result:
    try:
        reason = device.support(test)
        # Matrix tests take their variants (shapes) from the device; others from the catalog.
        offered = () if reason else device.variants(test)
    except Exception as e:
        return Result(test.name, "failed", test.unit, reason=_reason(e))
    if reason:
        return unsupported(test, reason)
    if not offered:
        return Result(test.name, "failed", test.unit, reason="the backend offered no variant to run")
    variants: list[VariantResult] = []
    started = None      # sustained load begins with the first variant's calibration launch
    for variant in offered:
        workload = None
        try:
            workload = device.prepare(test, variant)
            problem = workload.verify()
            if problem:
                return Result(test.name, "failed", test.unit, reason=f"variant {variant.name}: {problem}",
                              params=dict(workload.params), evidence=dict(workload.evidence))
            if hasattr(workload, "measure"):      # latency and launch: the workload measures itself
                v = workload.measure(settings, device.clock_mhz, spec)
            else:
                started = started or time.perf_counter()
                v = measure(workload, test.per_item(variant), test.unit, settings, started, device.clock_mhz)
            v.name = variant.name
            series = workload.series() if hasattr(workload, "series") else None
            if series:
                v.evidence["series"] = series
            variants.append(v)
            progress(f"  {test.name} {variant.name}: {v.summary.median:.4g} {test.unit}"
                     f" (spread {v.summary.spread_pct:.1f}%, {v.summary.samples} samples"
                     f"{f', {v.clock_mhz:.0f} MHz' if v.clock_mhz else ''})")
        except Unsupported as e:
            return unsupported(test, str(e))
        except Exception as e:
            return Result(test.name, "failed", test.unit, reason=f"variant {variant.name}: {_reason(e)}")
        finally:
            if workload is not None and hasattr(workload, "close"):
                try:
                    workload.close()
                except Exception:
                    pass
    best = max(variants, key=lambda v: v.summary.median if test.higher_is_better else -v.summary.median)
    params = dict(best.params)
    params["variant"] = best.name
    params["size"] = best.size
    params["variants"] = {v.name: {"median": round(v.summary.median, 4), "spread_pct": round(v.summary.spread_pct, 2),
                                   "clock_mhz": v.clock_mhz} for v in variants}
    evidence = dict(best.evidence)
    # A sweep is taken once per test, by the variant that offers one, whichever variant wins.
    series = evidence.pop("series", None) or next((v.evidence["series"] for v in variants if v.evidence.get("series")), None)
    return Result(test.name, "ok", test.unit, value=round_significant(best.summary.median, 4),
                  stats=best.summary.as_json(), clock_mhz=best.clock_mhz, params=params,
                  evidence=evidence, series=series, samples=list(best.samples))

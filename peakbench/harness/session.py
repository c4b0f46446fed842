"""A run: every test on every planned device (peakbench.cli plans them), and its outputs.

run_test runs one catalog test on one opened device: support check, verify, measure, compare to
spec. A test that raises or mismatches the host reference is `failed` and the run goes on; a test
with no native path is `unsupported` with the backend's [category] reason. A Session loops over
the devices and tests, saves the JSON after each test, and at the end writes the tables, the
outputs and the plots, each on its own. How each output path is written is in
peakbench.report.result (regular files atomically, FIFOs and devices in place).
"""
from __future__ import annotations

import signal
import time
from dataclasses import asdict, replace
from typing import Callable

from peakbench.backend import Unsupported, error_text
from peakbench.catalog import TestSpec, default_catalog
from peakbench.catalog.descriptors import MemoryTest
from peakbench.evidence.sass_rules import multiply_add_bound
from peakbench import telemetry
from peakbench.harness import guards
from peakbench.harness import runner, stability
from peakbench.harness import ahead
from peakbench.harness.runner import Load, Settings, VariantResult
from peakbench.harness.stats import round_significant
from peakbench.report import compare, render, verdict
from peakbench.report.result import (CATEGORIES, Output, Result, ResultFileError, Run, document, sample_problem,
                                     save_json)
from peakbench.specs import GpuSpec, match
from peakbench.telemetry import Sampler


def describe(e: BaseException) -> str:
    """One line naming an exception and what it says."""
    text = error_text(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _reason(e: Exception) -> str:
    """describe(e) as a failed result's reason: without a trailing colon."""
    return describe(e).rstrip(": ")


CATALOG = default_catalog()


def clocked(test: str) -> bool:
    """Whether a test's peak scales with the core clock, as its descriptor says (False for a
    name the catalog does not hold: a result read back from an older file)."""
    try:
        return CATALOG.get(test).clocked
    except KeyError:
        return False


def with_spec(result: Result, spec: GpuSpec | None) -> Result:
    """The result with its spec columns: % of spec, and % of the peak at the clock measured
    during the test (a new Result; the one given is left as it is)."""
    peak = spec.peak(result.test) if spec else None
    if peak is None or result.value is None:
        return result
    columns = {"spec_value": peak, "pct_of_spec": round(100 * result.value / peak, 1)}
    if result.clock_mhz and clocked(result.test):
        at_clock = peak * result.clock_mhz / spec.peak_clock_mhz(result.test)
        columns["pct_of_clock_peak"] = round(100 * result.value / at_clock, 1)
    return replace(result, **columns)


def with_matrix_ratio(result: Result, test: TestSpec, earlier: list[Result]) -> Result:
    """A vendor GEMM's result with its ratio to the same run's matrix test of the same types
    (which the catalog runs first), where both are ok."""
    matrix = getattr(test, "matrix", None)
    peer = next((r for r in earlier if r.test == matrix and r.status == "ok" and r.value), None)
    if not matrix or result.status != "ok" or peer is None:
        return result
    ratio = {"of": matrix, "ratio": round(result.value / peer.value, 3), "matrix_value": peer.value}
    return replace(result, evidence={**result.evidence, "matrix_ratio": ratio})


def unsupported(test: TestSpec, reason: str) -> Result:
    """An unsupported result; a reason without its [category] is a backend bug, reported failed."""
    if reason.startswith(CATEGORIES):
        return Result(test.name, "unsupported", test.unit, reason=reason)
    return Result(test.name, "failed", test.unit, reason=f"unsupported without a category: {reason}")


def failed(test: TestSpec, variant, problem: str, params: dict, evidence: dict) -> Result:
    """A failed variant: a guard's reason leads with the guard's name, any other says the variant first."""
    if problem.startswith("guard "):
        guard, _, text = problem.partition(": ")
        text = f"{guard}: variant {variant.name}: {text}"
    else:
        text = f"variant {variant.name}: {problem}"
    return Result(test.name, "failed", test.unit, reason=text, params=dict(params), evidence=dict(evidence))


def _apply(checks: dict, name: str, found: tuple) -> str | None:
    """Record a guard's verdict; its problem as a reason, or None."""
    problem, evidence = found
    checks[name] = guards.verdict(problem, evidence)
    return guards.reason(name, problem) if problem else None


def static_guards(test: TestSpec, variant, workload, device, spec, checks: dict) -> str | None:
    """The guards that read the compiled kernel and the workload's layout, before any launch."""
    census = workload.census
    if workload.timing == "host":                                   # launches timed one by one
        return _apply(checks, "work", guards.launches_timed(test, variant))
    if census is not False and isinstance(test, MemoryTest):        # the bytes a stream moves
        problem = _apply(checks, "work", guards.moved(test, variant, census, workload.loop_items))
        if problem:
            return problem
    elif census is not False:
        problem = _apply(checks, "types", guards.types(test, variant, census))
        problem = problem or _apply(checks, "work", guards.work(test, variant, census, workload.loop_items))
        sass = workload.evidence.get("sass")
        if not problem and isinstance(sass, dict):    # the machine code NVIDIA's Vulkan driver made
            problem = _apply(checks, "sass", guards.sass(test, variant, workload.params, sass))
        if problem:
            return problem
    stride = workload.params.get("stride_bytes") if test.family == "latency" else None
    if stride:
        return _apply(checks, "chase-stride", guards.chase_stride(stride, device.info, spec))
    return None


def measured_guards(test: TestSpec, v: VariantResult, device, spec, checks: dict) -> str | None:
    """The guards that read a measurement: the timer, the rate's and the cycle counter's clocks,
    the physical bound."""
    problem = None
    if v.timing:
        problem = _apply(checks, "timer", guards.timer(v.timing, device.info.kind == "cpu", v.launches))
    if not problem and test.clocked:
        found = v.evidence.get("sass")        # the Vulkan driver's loop; CUDA's is the evidence's own
        loop = multiply_add_bound(test.name, v.params, v.evidence.get("loop_mix")
                                  or (found.get("loop_mix") if isinstance(found, dict) else None))
        if guards.ceiling_of(test, spec, loop)[1]:         # the machine code's is the ceiling held to
            v.evidence["machine_bound"] = {"of": loop[0], "share": round(loop[1], 4), "why": loop[2]}
        problem = _apply(checks, "clock-ceiling", guards.clock_ceiling(test, v.summary.median, v.clock_mhz, spec, loop))
    if not problem and test.family == "latency":
        problem = _apply(checks, "cycle-clock", guards.cycle_clock(v.clock_mhz, device.info, spec))
        problem = problem or _apply(checks, "cycles", guards.cycles_agree(
            v.summary.median, v.clock_mhz, v.params.get("cycles"), v.params.get("cycles_implied")))
    if not problem and not test.clocked:
        problem = _apply(checks, "bound", guards.bound(test, v.summary.median, device.info, spec))
    return problem


def run_test(device, test: TestSpec, settings: Settings, progress: Callable[[str], None],
             spec: GpuSpec | None = None, sampler: Sampler | None = None, load: Load | None = None) -> Result:
    """One test on one opened device; with a telemetry `sampler`, the readings taken while it ran
    (over the best variant's timed samples where it has them) go with its result; `load` is the
    device's, for a warm-up shared with the test before (Settings.warm_gap_s)."""
    began = time.perf_counter()
    samples: list = []
    if sampler is None:
        result, best = _run_test(device, test, settings, progress, spec, load)
    else:
        sampler.start()
        try:
            result, best = _run_test(device, test, settings, progress, spec, load)
        finally:
            samples = sampler.stop()
        result = with_telemetry(result, samples, best.window if best else None)
    if settings.burn_in and result.status == "ok" and best is not None and best.times:
        result = with_stability(result, best, test, samples)
    return replace(result, elapsed_s=round(time.perf_counter() - began, 3))


def with_stability(result: Result, best: VariantResult, test: TestSpec, readings: list) -> Result:
    """A burn-in's time series (its `series`) and stability summary; an unstable one keeps its
    value, says why in `stability.unstable`, and the fleet report flags it."""
    series = stability.series(best.times, best.samples, best.clocks, test.unit, readings)
    return replace(result, series=series, stability=stability.summary(best.times, best.samples, test.higher_is_better))


def with_telemetry(result: Result, samples: list, window: tuple | None) -> Result:
    """The result with its telemetry summary, energy and efficiency (unsupported tests ran nothing)."""
    if result.status == "unsupported":
        return result
    found, energy = telemetry.summarize(samples, window)
    if found is None:
        return result
    return replace(result, telemetry=found, energy_j=energy,
                   efficiency=telemetry.efficiency(result.value, result.unit, found))


def _run_test(device, test: TestSpec, settings: Settings, progress: Callable[[str], None],
              spec: GpuSpec | None, load: Load | None = None) -> tuple[Result, tuple | None]:
    """The result, and the best variant's measurement (None where nothing was measured)."""
    try:
        reason = device.support(test)
        # Matrix tests take their variants (shapes) from the device; others from the catalog.
        offered = () if reason else device.variants(test)
    except Exception as e:
        return Result(test.name, "failed", test.unit, reason=_reason(e)), None
    if reason:
        return unsupported(test, reason), None
    if guards.no_kernel(test):
        return Result(test.name, "failed", test.unit, reason=guards.no_kernel(test)), None
    if not offered:
        return Result(test.name, "failed", test.unit, reason="the backend offered no variant to run"), None
    offered = runner.variants(test, offered, settings)
    variants: list[VariantResult] = []
    refused: dict[str, str] = {}        # variants found unsupported once compiled
    started = None      # sustained load begins with the first variant's calibration launch
    for variant in offered:
        workload = None
        try:
            t0 = time.perf_counter()
            workload = device.prepare(test, variant, spec=spec)
            checks = workload.evidence.setdefault("guards", {})
            t1 = time.perf_counter()
            problem = static_guards(test, variant, workload, device, spec, checks)
            guarded = time.perf_counter() - t1
            problem = problem or workload.verify()
            if problem:
                return failed(test, variant, problem, workload.params, workload.evidence), None
            t2 = time.perf_counter()
            load = load or Load()
            # Shared warm-ups: each variant continues the load only where the GPU was busy
            # under warm_gap_s ago; a long compile in between lets the clock fall.
            before = workload.witness.launches if workload.witness is not None else 0
            v = runner.take(workload, test, variant, settings, device.clock_mhz, load, spec, started)
            started = started or load.of(workload, test.tensor).since     # without shared warm-ups, the test's own load
            v.name = workload.name or variant.name      # an aggregated atomic is its own variant
            v.evidence["guards"] = checks = {**checks, **v.evidence.get("guards", {})}
            t3 = time.perf_counter()
            problem = measured_guards(test, v, device, spec, checks)
            if not problem and workload.timing in ("gpu", "host") and workload.axis(spec) is None:
                problem = _apply(checks, "measured", workload.after_timing(v.size))
            if not problem and workload.witness is not None:
                problem = _apply(checks, "launches", workload.witness.check(sum(map(len, v.launches)), before))
            guarded += time.perf_counter() - t3
            if problem:
                return failed(test, variant, problem, v.params, v.evidence), None
            series = runner.series_of(workload, settings)
            if series:
                v.evidence["series"] = series
            # Where a variant's time went: compiling and loading, checking against the host, timing;
            # of those, the guards' own (the census is taken in prepare, beside the evidence).
            v.phases = {"prepare": t1 - t0, "verify": t2 - t1, "measure": time.perf_counter() - t2, "guards": guarded}
            variants.append(v)
            progress(f"  {test.name} {v.name}: {v.summary.median:.4g} {test.unit}"
                     f" (spread {v.summary.spread_pct:.1f}%, {v.summary.samples} samples"
                     f"{f', {v.clock_mhz:.0f} MHz' if v.clock_mhz else ''})")
        except Unsupported as e:        # what the compiler made shows no native path for this variant
            refused[variant.name] = str(e)
        except runner.Failed as e:
            return failed(test, variant, str(e), workload.params, workload.evidence), None
        except Exception as e:
            return Result(test.name, "failed", test.unit, reason=f"variant {variant.name}: {_reason(e)}"), None
        finally:
            if workload is not None:
                try:
                    workload.close()
                except Exception:
                    pass
    if not variants:
        return unsupported(test, next(iter(refused.values()))), None
    best = max(variants, key=lambda v: v.summary.median if test.higher_is_better else -v.summary.median)
    params = dict(best.params)
    params["variant"] = best.name
    params["size"] = best.size
    params["variants"] = {v.name: {"median": round(v.summary.median, 4), "spread_pct": round(v.summary.spread_pct, 2),
                                   "clock_mhz": v.clock_mhz,
                                   "seconds": {k: round(t, 3) for k, t in v.phases.items()}} for v in variants}
    evidence = dict(best.evidence)
    if refused:
        evidence["variants_unsupported"] = {**evidence.get("variants_unsupported", {}), **refused}
    # A sweep is taken once per test, by the variant that offers one, whichever variant wins.
    series = evidence.pop("series", None) or next((v.evidence["series"] for v in variants if v.evidence.get("series")), None)
    unchecked = guards.unverified(evidence.get("guards", {}))
    if unchecked:
        evidence["unverified"] = unchecked
    result = Result(test.name, "ok", test.unit, value=round_significant(best.summary.median, 4),
                    stats=best.summary.as_json(), clock_mhz=best.clock_mhz, params=params,
                    evidence=evidence, series=series, samples=list(best.samples), verified=unchecked is None)
    # what every reader will recompute: a value taken from other samples than those kept fails here
    problem = sample_problem({"status": "ok", "value": result.value, "stats": result.stats, "samples": result.samples})
    if problem:
        return failed(test, best, guards.reason("statistics", problem), params, evidence), None
    return result, best


class Session:
    """One run of `peakbench`: the results of every planned device (`runs`), whether any test or
    output failed, and the signal that ended it, if one did. `base` is the JSON document without
    its runs; `outputs` the checked --json, --csv and --markdown targets."""

    def __init__(self, base: dict, outputs: dict[str, Output], progress: Callable[[str], None]):
        self.base, self.outputs, self.progress = base, outputs, progress
        self.runs: list[Run] = []
        self.failed = False
        self.signum: int | None = None
        self._save_failed = False
        self._rows: dict = {}          # each result's JSON dict, made once (report.result.document)
        self._planned: list[tuple[str, int]] = []
        self._selected: list[str] = []

    def plan(self, plans, tests) -> None:
        """What the run is to measure: (backend, device index) pairs and the selected tests. The
        document is `complete` only when each of those devices has a result for each test."""
        self._planned = [(backend.name, index) for backend, index in plans]
        self._selected = [t.name for t in tests]

    @property
    def complete(self) -> bool:
        if self.signum is not None or not self._planned:
            return False
        for backend, index in self._planned:
            run = next((r for r in self.runs if r.backend == backend and r.device.get("index") == index), None)
            if run is None or not set(self._selected) <= {r.test for r in run.results}:
                return False
        return True

    def save(self) -> None:
        """The JSON so far, after each test, compact (the outputs at the end are indented). A FIFO
        or a stream cannot be rewritten: it gets the JSON once, at the end."""
        out = self.outputs.get("--json")
        if out is None or not out.replace:
            return
        try:
            save_json(out, document(self.runs, self.base, rows=self._rows), indent=None)
        except ResultFileError as e:       # said once; the save at the end tries again
            if not self._save_failed:
                self.progress(f"peakbench: error: {e}")
            self._save_failed = True

    def measure(self, plans, tests, settings: Settings, specs, forced: GpuSpec | None) -> None:
        """Every test on every planned (backend, device index), saving after each test. Ctrl-C or
        SIGTERM (raised as a KeyboardInterrupt) and an unexpected error end the loop; what was
        measured so far is kept for the outputs."""
        try:
            for backend, index in plans:
                self.measure_device(backend, index, tests, settings, specs, forced)
        except KeyboardInterrupt as e:
            self.signum = getattr(e, "signum", signal.SIGINT)
            self.progress(f"interrupted ({signal.Signals(self.signum).name}): keeping the results measured so far")
        except Exception as e:            # a bug or a broken backend: what was measured is still written
            self.progress(f"peakbench: error: {describe(e)}")
            self.failed = True

    def measure_device(self, backend, index: int, tests, settings: Settings, specs,
                       forced: GpuSpec | None) -> None:
        """Every test on one device; one that cannot be opened fails all its tests."""
        progress = self.progress
        info = backend.devices()[index]
        spec = forced or match(specs, info.name, info.vendor_id, info.device_id)
        run = Run(backend.name, info.as_json(), spec.as_json() if spec else None)
        found = telemetry.health(info)
        if found:
            run.device["health"] = found
        self.runs.append(run)
        progress(f"[{backend.name}:{index}] {info.name} ({info.driver}); "
                 f"spec: {spec.name if spec else 'none matched'}")
        try:
            device = backend.open(index)
        except Exception as e:   # the device cannot be opened: its tests fail, the run goes on
            self.failed = True
            reason = f"cannot open the device: {describe(e)}"
            progress(f"  {reason}")
            run.results += [Result(t.name, "failed", t.unit, reason=reason) for t in tests]
            self.save()
            return
        sampler, load = Sampler.for_device(info), Load()
        began = time.perf_counter()
        pending = None
        tag = f"[{backend.name}:{index}]"
        try:
            try:                    # only saves time: the tests compile what it did not
                pending = ahead.start(device, tests, settings, spec)
            except Exception as e:
                progress(f"{tag} compiling ahead stopped: {describe(e)}")
            if pending and info.kind == "cpu":       # a CPU device's kernels share the compilers' cores
                progress(f"{tag} {pending.finish().describe()}")
                pending = None
            elif pending:
                progress(f"{tag} compiling {pending.kernels} kernels ahead on {pending.workers} threads,"
                         " each test waiting for its own")
            for test in tests:
                if pending and (test.family in ahead.HOST_TIMED or pending.done()):
                    progress(f"{tag} {pending.finish().describe()}")
                    pending = None
                elif pending:
                    pending.wait_for(test)
                progress(f"{tag} {test.name} ...")
                result = run_test(device, test, settings, progress, spec, sampler, load)
                try:
                    result = with_spec(result, spec)
                    result = with_matrix_ratio(result, test, run.results)
                except Exception as e:       # a spec entry that cannot be applied: say so, go on
                    progress(f"  {test.name}: spec '{spec.name}' not applied: {describe(e)}")
                result = replace(result, limit=verdict.limit(asdict(result), run.spec, run.device.get("health")))
                self.failed |= result.status == "failed"
                if result.status != "ok":
                    progress(f"  {test.name}: {result.status}: {result.reason}")
                throttled = (result.telemetry or {}).get("throttle_reasons")
                if throttled:
                    progress(f"  {test.name}: throttled: {', '.join(throttled)}")
                run.results.append(result)
                self.save()
            progress(f"[{backend.name}:{index}] {len(tests)} tests in {time.perf_counter() - began:.1f} s")
        finally:
            if pending:             # no compiler may outlive its device
                try:
                    progress(f"{tag} {pending.finish(cancel=True).describe()}")
                except Exception as e:
                    progress(f"{tag} compiling ahead stopped: {describe(e)}")
            if sampler is not None:
                sampler.close()
            try:
                device.close()
            except Exception as e:     # e.g. a kernel fault reported at the last synchronize
                self.failed = True
                progress(f"[{backend.name}:{index}] closing the device failed: {describe(e)}")

    def write_outputs(self, tables, plot: str | None) -> None:
        """The tables (to the stream `tables`), every output file and the plots, each on its own:
        one that fails is one line on stderr, the others are still written, and the run failed."""
        doc = document(self.runs, self.base, self.signum is not None, rows=self._rows, complete=self.complete)
        docs, outputs = doc["runs"], self.outputs
        verdict.refine(docs)            # one GPU through several backends: why the slower row is slower

        def print_tables():
            for run in docs:
                print(render.table(run), file=tables)
                print(file=tables)
            for heading, text in compare.side_by_side(docs):
                print(f"{heading}\n{text}\n", file=tables)

        def markdown():
            both = "".join(f"\n### {heading}\n\n{text}\n" for heading, text in compare.side_by_side(docs, "github"))
            outputs["--markdown"].write(render.markdown(docs) + both)

        def plots():
            from peakbench.report import plots as plots_mod
            written = plots_mod.write(docs, plot)
            for path in written:
                self.progress(f"plot: {path}")
            if not written:
                self.progress(f"plot: no chart in {plot}: no result has a size sweep or a GPU-to-GPU matrix"
                              f"{' (--quick takes no sweeps)' if self.base.get('options', {}).get('quick') else ''}")

        def keep_history():
            from peakbench.report import history
            for path in history.keep(doc, self.base["options"]["history"]):
                self.progress(f"history: {path}")

        def prometheus_text():
            from peakbench.report import prometheus
            outputs["--prometheus"].write(prometheus.text(docs, (doc.get("host") or {}).get("hostname", "")))

        steps = [("tables", print_tables)]
        files = {"--json": lambda: save_json(outputs["--json"], doc),
                 "--csv": lambda: outputs["--csv"].write(render.csv_text(docs)), "--markdown": markdown,
                 "--prometheus": prometheus_text}
        if (self.base.get("options") or {}).get("history"):
            steps.append(("--history", keep_history))
        chosen = [o for o in files if o in outputs]
        steps += [(o, files[o]) for o in chosen if not outputs[o].waits]
        if plot:
            steps.append((f"--plot {plot}", plots))
        # A FIFO waits for its reader: every other output is written first.
        steps += [(o, files[o]) for o in chosen if outputs[o].waits]
        for what, step in steps:
            try:
                step()
            except ResultFileError as e:       # names the file and the problem already
                self.progress(f"peakbench: error: {e}")
                self.failed = True
            except Exception as e:
                self.progress(f"peakbench: error: {what}: {describe(e)}")
                self.failed = True

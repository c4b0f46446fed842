"""`--prometheus FILE`: a run's results in Prometheus' text exposition format, as node_exporter's
textfile collector reads it (the file replaced whole, so the collector never reads half of it).
Written with prometheus_client (the [prometheus] extra); one gauge family per quantity, one
series per test and GPU, labelled with the host, the GPU's UUID and model, the backend, the test
and its unit:

  peakbench_value                 an ok result's value, in its unit
  peakbench_pct_of_spec           % of the vendor's peak, where the spec has one
  peakbench_pct_of_clock_peak     % of the peak at the measured clock
  peakbench_clock_mhz             the clock during the samples
  peakbench_ok                    1 for ok, 0 for failed (unsupported tests have no series)
  peakbench_verified              1 where a guard proved the work and one the bound
  peakbench_limit                 1, with the limit verdict in the label `by`
  peakbench_gpu_health            per GPU, each field of device.health in the label `field`
"""
from __future__ import annotations

MISSING = ("--prometheus needs prometheus_client (pip install 'peakbench[prometheus]')")
LABELS = ("host", "uuid", "model", "backend", "test", "unit")


def available() -> bool:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True


def text(runs: list[dict], host: str) -> str:
    """The exposition text of `runs` (a result document's runs) measured on `host`."""
    from prometheus_client import CollectorRegistry, Gauge, generate_latest
    registry = CollectorRegistry()

    def gauge(name: str, doc: str, extra: tuple = ()) -> Gauge:
        return Gauge(name, doc, [*LABELS, *extra], registry=registry)
    value = gauge("peakbench_value", "An ok result's value, in the unit its label names")
    of_spec = gauge("peakbench_pct_of_spec", "The value as % of the vendor's peak")
    at_clock = gauge("peakbench_pct_of_clock_peak", "The value as % of the peak at the measured clock")
    clock = gauge("peakbench_clock_mhz", "The GPU clock during the samples")
    ok = gauge("peakbench_ok", "1 for an ok result, 0 for a failed one")
    verified = gauge("peakbench_verified", "1 where a guard proved the work and one the bound")
    limit = gauge("peakbench_limit", "What limits the value: its verdict is the label by", ("by",))
    health = Gauge("peakbench_gpu_health", "A field of the GPU's health (device.health)",
                   ["host", "uuid", "model", "backend", "field"], registry=registry)
    for run in runs:
        device = run.get("device") or {}
        gpu = {"host": host, "uuid": device.get("uuid") or "", "model": device.get("name", ""),
               "backend": run["backend"]}
        for field, v in (device.get("health") or {}).items():
            health.labels(**gpu, field=field).set(float(v))
        for r in run["results"]:
            if r["status"] == "unsupported":
                continue
            labels = {**gpu, "test": r["test"], "unit": r.get("unit", "")}
            ok.labels(**labels).set(1.0 if r["status"] == "ok" else 0.0)
            if r["status"] != "ok":
                continue
            for g, key in ((value, "value"), (of_spec, "pct_of_spec"), (at_clock, "pct_of_clock_peak"),
                           (clock, "clock_mhz")):
                if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool):
                    g.labels(**labels).set(float(r[key]))
            if r.get("verified") is not None:
                verified.labels(**labels).set(1.0 if r["verified"] else 0.0)
            if isinstance(r.get("limit"), dict):
                limit.labels(**labels, by=r["limit"].get("by", "unknown")).set(1.0)
    return generate_latest(registry).decode()

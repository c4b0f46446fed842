"""peakbench.harness.stability: a burn-in's windows, drift and worst window, with the samples a
steady, a drifting and a dipping GPU would give; and the --profile options on lavapipe."""
from __future__ import annotations

import json

import pytest

from peakbench import cli
from peakbench.harness import stability

TIMES = [i * 0.1 for i in range(100)]          # 10 s of 100 ms samples: windows of 2 s


def test_a_steady_run_is_stable():
    found = stability.summary(TIMES, [100.0] * 100)
    assert found == {"drift_pct": 0.0, "worst_window_pct": 0.0, "windows": 5, "seconds": 9.9, "unstable": None}


def test_a_falling_rate_drifts_and_a_dip_is_the_worst_window():
    falling = stability.summary(TIMES, [100.0 - 0.1 * i for i in range(100)])
    assert falling["drift_pct"] == pytest.approx(-8.1, abs=0.1)
    assert falling["unstable"] == "drift -8.1% from the first window to the last"
    dip = [100.0] * 100
    dip[40:60] = [80.0] * 20                                # two seconds throttled, in the middle
    found = stability.summary(TIMES, dip)
    assert found["drift_pct"] == 0.0 and found["worst_window_pct"] == -20.0
    assert found["unstable"] == "worst window -20.0% from the median"
    # for a time (lower is better) the worst window is the highest
    assert stability.summary(TIMES, [10.0] * 40 + [12.0] * 20 + [10.0] * 40, higher_is_better=False)[
        "worst_window_pct"] == 20.0


def test_a_long_burn_in_compares_its_first_minute_with_its_last():
    times = [float(i) for i in range(600)]                  # 10 minutes, a sample a second
    values = [100.0] * 60 + [99.0] * 480 + [94.0] * 60
    found = stability.summary(times, values)
    assert found["windows"] == 10 and found["drift_pct"] == -6.0


def test_the_series_keeps_numbers_only():
    class Reading:
        def __init__(self, t, w):
            self.t, self.power_w, self.temperature_c = t, w, None
    out = stability.series([1.0, 1.1], [5.0, 6.0], [1980.0, 1975.0], "TFLOPS", [Reading(1.0, 500.0), Reading(1.1, 510.0)])
    assert out == {"x": "time_s", "y": "TFLOPS", "time_s": [0.0, 0.1], "TFLOPS": [5.0, 6.0],
                   "clock_mhz": [1980.0, 1975.0], "power_w": [500.0, 510.0]}


@pytest.mark.parametrize("argv, words", [
    (["--quick", "--profile", "burn-in"], "--quick is the prolog profile: it cannot go with --profile burn-in"),
    (["--duration", "10"], "--duration needs --profile burn-in"),
    (["--profile", "burn-in", "--duration", "0"], "--duration 0: needs a number of seconds above 0"),
])
def test_profile_options_that_do_not_fit_are_usage_errors(capsys, argv, words):
    assert cli.main(["--backend", "vulkan", "--tests", "compute.fp32", *argv]) == 2
    assert capsys.readouterr().err.strip() == f"peakbench: error: {words}"


def test_a_burn_in_on_lavapipe_keeps_a_time_series_and_a_stability_summary(vulkan_backend, tmp_path):
    from conftest import schema_problems
    out = tmp_path / "burn.json"
    assert cli.main(["--backend", "vulkan", "--profile", "burn-in", "--duration", "4", "--tests",
                     "compute.fp32,memory.read", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert schema_problems(doc) == []
    assert doc["options"]["profile"] == "burn-in" and doc["options"]["duration"] == 4.0
    for r in doc["runs"][0]["results"]:
        s, found = r["series"], r["stability"]
        # 2 s of 50 ms samples: about 40 alone, 9 when the suite's other worker loads the 2 cores
        assert s["x"] == "time_s" and len(s["time_s"]) == len(s[r["unit"]]) >= 5
        assert 1.5 <= s["time_s"][-1] <= 2.5                 # its half of the 4 s
        assert set(found) == {"drift_pct", "worst_window_pct", "windows", "seconds", "unstable"}
        assert r["params"]["variants"].keys() == {r["params"]["variant"]}    # one variant, as in prolog

"""The clock-ceiling guard's arithmetic, on a spec with round numbers (1 TFLOPS at 1000 MHz)."""
from types import SimpleNamespace

from peakbench.harness import guards
from peakbench.specs import GpuSpec

SPEC = GpuSpec("Round GPU", 1000.0, {"compute.fp32": 1.0})
TEST = SimpleNamespace(name="compute.fp32", unit="TFLOPS")


def test_a_rate_at_the_peak_of_its_clock_passes():
    problem, text = guards.clock_ceiling(TEST, 0.5, 500.0, SPEC)     # 0.5 TFLOPS at 500 MHz = 1.00x
    assert problem is None and "1.00x" in text


def test_a_rate_above_the_peak_even_at_the_boost_clock_fails():
    problem, _ = guards.clock_ceiling(TEST, 2.0, 1000.0, SPEC)       # 2.00x at 1000 MHz
    assert problem and "2.00x" in problem


def test_a_low_clock_reading_is_a_note_not_a_failure():
    # 0.9 TFLOPS read at 555 MHz: 1.62x the peak there, but 0.90x at the 1000 MHz boost clock, so
    # the clock sample (taken between launches) is what is wrong, not the rate.
    problem, text = guards.clock_ceiling(TEST, 0.9, 555.0, SPEC)
    assert problem is None
    assert "1.62x" in text and "looks low" in text and "0.90x" in text

"""peakbench.harness.stats: pure functions over samples."""
from __future__ import annotations

import math

import pytest

from peakbench.harness.stats import Summary, median, stdrel, summarize


@pytest.mark.parametrize("values, want", [
    ([7.0], 7.0),
    ([3.0, 1.0, 2.0], 2.0),
    ([5.0, 1.0, 4.0, 2.0, 3.0], 3.0),
    # Even counts: the mean of the two middle values, not either one of them (the classic bug).
    ([4.0, 1.0, 3.0, 2.0], 2.5),
    ([10.0, 20.0], 15.0),
    ([1.0, 1.0, 9.0, 100.0], 5.0),
])
def test_median(values, want):
    assert median(values) == want


def test_median_leaves_its_input_alone():
    values = [3.0, 1.0, 2.0, 0.5]
    median(values)
    assert values == [3.0, 1.0, 2.0, 0.5]


@pytest.mark.parametrize("values, want", [
    ([], 0.0),
    ([5.0], 0.0),
    ([2.0, 2.0, 2.0], 0.0),
    ([2.0, 4.0], math.sqrt(2) / 3),               # sample deviation (n - 1): sqrt(2) around mean 3
    ([1.0, 2.0, 3.0, 4.0], math.sqrt(5 / 3) / 2.5),
])
def test_stdrel(values, want):
    assert stdrel(values) == pytest.approx(want, rel=1e-12)


def test_stdrel_is_scale_free():
    values = [1.0, 1.1, 0.9, 1.05]
    assert stdrel([v * 1e12 for v in values]) == pytest.approx(stdrel(values), rel=1e-12)


def test_summarize_spread():
    s = summarize([4.0, 1.0, 3.0, 2.0])
    assert (s.median, s.min, s.max, s.samples) == (2.5, 1.0, 4.0, 4)
    assert s.spread_pct == pytest.approx((4 - 1) / 2.5 * 100)


def test_summarize_constant_samples_have_no_spread():
    s = summarize([64.1] * 10)
    assert s.spread_pct == 0.0 and s.median == 64.1 and s.samples == 10


def test_summarize_zero_median_does_not_divide_by_zero():
    assert summarize([0.0, 0.0, 0.0]).spread_pct == 0.0


@pytest.mark.parametrize("fn", [median, summarize])
def test_no_samples_raise(fn):
    with pytest.raises(ValueError):
        fn([])


def test_summary_json_rounds_to_significant_digits():
    s = Summary(median=64.123456, min=0.000123456, max=12345.678, samples=10, spread_pct=0.83333)
    # Four significant digits, but never rounding away integer digits.
    assert s.as_json() == {"median": 64.12, "min": 0.0001235, "max": 12346.0, "samples": 10,
                           "spread_pct": 0.83}

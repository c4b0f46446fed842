"""The special-function check with its host reference walked once for both verification counts
(workloads/sfu.py references): each count's chains are those of a walk of their own, and the
check given them still catches a thread that wrote nothing and a chain one step short."""
from __future__ import annotations

import numpy as np
import pytest

from peakbench.workloads import sfu

THREADS, ACC, UNROLL = 5000, 8, 32


@pytest.mark.parametrize("function", sorted(sfu.FUNCTIONS))
def test_one_walk_gives_each_count_the_chains_of_its_own_walk(function):
    inputs = sfu.make_inputs(function, ACC)
    ids = sfu.sampled(THREADS)
    walked = sfu.references(function, inputs, (UNROLL, 2 * UNROLL), ids)
    for steps in (UNROLL, 2 * UNROLL):
        assert np.array_equal(walked[steps], sfu.reference(function, inputs, steps, ids))
    assert not np.array_equal(walked[UNROLL], walked[2 * UNROLL])


def output(function, inputs, steps):
    return sfu.reference(function, inputs, steps, np.arange(THREADS))


@pytest.mark.parametrize("function", ["sin", "log2"])
def test_the_check_with_the_walked_reference_catches_planted_faults(function):
    inputs = sfu.make_inputs(function, ACC)
    want = sfu.references(function, inputs, (UNROLL,), sfu.sampled(THREADS))[UNROLL]
    error = 2.0 ** -20
    assert sfu.check(function, error, inputs, UNROLL, output(function, inputs, UNROLL), want) is None
    short = output(function, inputs, UNROLL - 1)          # one step short
    assert "differ from the host reference" in sfu.check(function, error, inputs, UNROLL, short, want)
    unwritten = output(function, inputs, UNROLL)
    unwritten[17] = np.nan                                  # the poison: thread 17 stored nothing
    assert sfu.check(function, error, inputs, UNROLL, unwritten, want) == f"1 of {THREADS} threads wrote no result"

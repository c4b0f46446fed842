"""Special-function units (reciprocal, square root, exponential, logarithm, sine)."""

TESTS = ()

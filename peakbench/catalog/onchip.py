"""On-chip memory: shared memory / LDS bandwidth and latency, and the L2 as its own level."""

TESTS = ()

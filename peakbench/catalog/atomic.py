"""Atomic read-modify-write throughput on global and shared memory."""

TESTS = ()

"""Timing and statistics: turns a prepared workload into a measured, verified result."""

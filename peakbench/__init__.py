"""peakbench: GPU peak-throughput microbenchmarks, reported against vendor specs."""

__version__ = "0.1.0"

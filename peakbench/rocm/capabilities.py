"""The ROCm capability table the workloads read (peakbench/workloads/__init__.py): the vector-ALU
rule of targets.py and the modules of the families ROCm runs its own way. The modules are named,
not imported: each imports targets.py, never this table."""
from __future__ import annotations

from peakbench import kernels
from peakbench.rocm.targets import alu_support

TABLE = kernels.table(alu_support, "peakbench.rocm.matrix",
                      {"transfer": "peakbench.rocm.transfer", "gemm": "peakbench.rocm.gemm", "p2p": "peakbench.rocm.p2p"})

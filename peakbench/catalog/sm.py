"""Per-SM maps: every compute unit (an NVIDIA SM, an AMD CU) of one GPU measured on its own, the
unit identified through the API (CUDA %smid, HIP __smid(), gl_SMIDNV on NVIDIA's Vulkan driver).

sm.fp32 is the vector FP32 FMA rate of each unit, every unit full of resident workgroups, from the
unit's own cycle counter at the measured clock; sm.l2_latency the latency of a dependent chase
through a working set inside the L2, with loads that skip the L1, from each unit. The value is
the slowest unit's; the map is the series. Kernels: shaders/sm.cu, sm.comp; workloads/sm.py.
"""
from peakbench.catalog.descriptors import SmTest, Variant

TESTS = (
    SmTest("sm.fp32", "TFLOPS", "sm", "fp32", (Variant("fma", unroll=16),), 8,
           "vector FP32 FMA rate of each SM (compute unit) on its own, full of resident workgroups; the value"
           " is the slowest SM's, the map the series", per_unit_of="compute.fp32"),
    SmTest("sm.l2_latency", "ns", "sm", "l2_latency", (Variant("chase"),), 1,
           "L2 load latency seen from each SM: a dependent chase in a 4 MiB working set, loads that skip the"
           " L1; the value is the slowest SM's, the map the series"),
)

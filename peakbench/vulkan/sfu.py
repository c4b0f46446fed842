"""Special functions on Vulkan: shaders/sfu.comp with GLSL's 1/x, inversesqrt, sqrt, exp2, log2
and sin, checked within the precision Vulkan requires of them: the Vulkan specification,
"Precision and Operation of SPIR-V Instructions" (1.3): 1/x 2.5 ULP; inversesqrt 2 ULP; sqrt
inherited from 1.0 / inversesqrt; exp2 3 + 2|x| ULP; log2 3 ULP outside [0.5, 2], absolute error
< 2^-21 inside; sin absolute error <= 2^-11 in [-pi, pi]. What the driver emits for each
(NVIDIA: MUFU, where it keeps the approximate path) is in the evidence where the driver shows
its machine code. The bounds below are absolute on the chain's range (|F| < 2, |x| <= 2, so
1 ULP < 2^-22), rounded up.
"""
from __future__ import annotations

from peakbench.workloads.sfu import SfuKernel, SfuWorkload, defines

ERROR = {"rcp": 3 * 2.0 ** -23, "rsqrt": 2 * 2.0 ** -23, "sqrt": 5 * 2.0 ** -22, "exp2": 7 * 2.0 ** -23,
         "log2": 2.0 ** -21, "sin": 2.0 ** -11}
GLSL = {"rcp": "1.0 / x", "rsqrt": "inversesqrt", "sqrt": "sqrt", "exp2": "exp2", "log2": "log2", "sin": "sin"}


def support(test, rt) -> str | None:
    return None


def workload(test, variant, rt) -> SfuWorkload:
    f = test.function
    kernel = SfuKernel("sfu.comp", "main", defines(f), ERROR[f], "Vulkan SPIR-V precision table",
                       params={"shader": f"sfu.comp ({GLSL[f]})"})
    return SfuWorkload(test, variant, rt, kernel)

"""Host code shared by the CUDA and ROCm backends.

Both compile CUDA-dialect C++ at run time (NVRTC, hiprtc) from the same sources in shaders/*.cu,
whose thin dialect layer picks HIP's names under __HIP_PLATFORM_AMD__. The workloads here (vector
ALU, memory streams, the pointer-chase sweep, launch overhead) drive a `Runtime`
(peakbench/simt/runtime.py) and know nothing of CuPy or hip-python; each backend supplies one.
"""

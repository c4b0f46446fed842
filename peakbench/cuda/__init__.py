"""CUDA backend (CuPy): kernels compiled at run time by NVRTC for the device's exact architecture
(sm_90a on Hopper, so wgmma is available), timed with CUDA events, SM clock from NVML."""
from __future__ import annotations

from peakbench.backend import BackendUnavailable, first_line, vendor_import

INSTALL = "pip install 'peakbench[cuda]', which brings cupy-cuda12x with NVRTC"


def create():
    with vendor_import("cuda", "cupy", "CuPy", INSTALL):     # a wheel for another CUDA major fails as it loads
        import cupy
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        raise BackendUnavailable(f"cuda backend: no usable NVIDIA driver or GPU ({first_line(e)})") from None
    if count == 0:
        raise BackendUnavailable("cuda backend: the NVIDIA driver reports no CUDA device")
    from peakbench.cuda.backend import CudaBackend
    try:
        return CudaBackend(count)
    except Exception as e:
        raise BackendUnavailable(f"cuda backend: cannot read the devices' properties ({first_line(e)})") from None


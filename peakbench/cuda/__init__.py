"""CUDA backend (CuPy): kernels compiled at run time by NVRTC for the device's exact architecture
(sm_90a on Hopper, so wgmma is available), timed with CUDA events, SM clock from NVML."""
from __future__ import annotations

from peakbench.backend import BackendUnavailable
from peakbench.backend import first_line

INSTALL = "pip install 'peakbench[cuda]', which brings cupy-cuda12x with NVRTC"


def create():
    try:
        import cupy
    except ImportError:
        raise BackendUnavailable(f"cuda backend: Python package 'cupy' is not installed ({INSTALL})") from None
    except Exception as e:        # a CuPy wheel for another CUDA major fails here, not at ImportError
        raise BackendUnavailable(f"cuda backend: CuPy cannot load: {first_line(e)}") from None
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


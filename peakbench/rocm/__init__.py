"""ROCm backend (hip-python): kernels compiled at run time by hiprtc for the device's exact gfx
target, timed with HIP events, GFX clock from amdsmi; MFMA on CDNA and WMMA on RDNA3/RDNA4 where
the capability table (targets.py) says the target runs the type natively."""
from __future__ import annotations

from peakbench.backend import BackendUnavailable, first_line, vendor_import

INSTALL = ("pip install 'peakbench[rocm]', with hip-python matching the installed ROCm "
           "(e.g. pip install 'hip-python~=6.4.1' for ROCm 6.4.1)")
NO_DEVICE = 100                  # hipErrorNoDevice
NO_DRIVER = 35                   # hipErrorInsufficientDriver


def create():
    with vendor_import("rocm", "hip-python", "hip-python", INSTALL):
        from hip import hip, hiprtc
    # hip-python loads libamdhip64.so lazily: the first call is where a missing ROCm shows.
    try:
        result = hip.hipGetDeviceCount()
    except Exception as e:
        raise BackendUnavailable(f"rocm backend: the HIP runtime (libamdhip64.so) cannot be loaded "
                                 f"({first_line(e)}); install ROCm or put its lib folder on LD_LIBRARY_PATH") from None
    err, count = (result[0], result[1]) if isinstance(result, tuple) else (result, 0)
    code = int(getattr(err, "value", err))
    name = getattr(err, "name", None) or str(err)
    if code == NO_DEVICE or (code == 0 and count == 0):
        raise BackendUnavailable("rocm backend: the HIP runtime reports no AMD GPU")
    if code == NO_DRIVER:
        raise BackendUnavailable(f"rocm backend: no usable AMD GPU driver ({name}: is the amdgpu kernel "
                                 f"driver loaded and /dev/kfd readable?)")
    if code != 0:
        raise BackendUnavailable(f"rocm backend: hipGetDeviceCount failed: {name} (error {code})")
    from peakbench.rocm.backend import RocmBackend
    from peakbench.rocm.runtime import HipError
    try:
        return RocmBackend(hip, hiprtc, int(count))
    except HipError as e:
        raise BackendUnavailable(f"rocm backend: {e}") from None


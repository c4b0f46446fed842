# Sourced by the scripts that run on a lent GPU machine (gpu-run.sh, gpu-ab.sh, gpu-table.sh), from
# the checkout's root. The machine has no network: unpack the Vulkan loader carried in .gl/,
# install the wheels carried in .whl/ into /tmp/site, and point the loader at NVIDIA's driver
# (PERFORMANCE_ANALYSIS.md, "How the numbers are taken"). The wheels are byte-compiled as pip
# installs them for a user: a run that compiles its imports each time (vulkan's bindings among them)
# measures a start no installed copy pays.
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
# Without zstandard the driver's shader cache cannot be read: every Vulkan result would lose its
# SASS, and the verdicts that rest on it (compute.int64's `silicon`) would read `unknown`.
PYTHONPATH=/tmp/site python3 -c 'import zstandard' 2>/dev/null \
    || echo "lent-machine.sh: no zstandard wheel in .whl/: Vulkan results will carry no SASS" >&2
export PYTHONUNBUFFERED=1
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES=$icd
egl=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
[ -f "$egl" ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$egl

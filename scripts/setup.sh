#!/usr/bin/env bash
# One-step set-up on Debian/Ubuntu (as root, or with sudo available): system packages that are
# missing (Python 3.11+, venv, the Vulkan loader, and Mesa's lavapipe CPU driver when no Vulkan
# driver is installed), then a virtual environment in .venv with peakbench and its pinned tools.
#   scripts/setup.sh          for running peakbench
#   scripts/setup.sh --test   also pytest, the Vulkan validation layer and Chromium (the HTML pages'
#                             browser tests), for the test suite
set -euo pipefail
cd "$(dirname "$0")/.."
want_tests=0
[ "${1:-}" = "--test" ] && want_tests=1

sudo=""
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo="sudo"
packages=()
python=""
for candidate in python3 python3.13 python3.12 python3.11; do
    if command -v "$candidate" >/dev/null &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        python=$candidate
        break
    fi
done
if [ -z "$python" ]; then
    packages+=(python3.11 python3.11-venv)
    python=python3.11
elif ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
    packages+=("$(basename "$python")-venv")
fi
# The cache listing is read whole: `ldconfig -p | grep -q` under pipefail fails whenever grep
# exits before ldconfig has written everything (SIGPIPE), and would reinstall what is there.
libraries=$(ldconfig -p 2>/dev/null || true)
[[ $libraries == *libvulkan.so.1* ]] || packages+=(libvulkan1)
icds=$(ls /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json /usr/local/share/vulkan/icd.d/*.json 2>/dev/null || true)
[ -z "$icds" ] && [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] && packages+=(mesa-vulkan-drivers)
if [ "$want_tests" = 1 ] && ! ls /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json >/dev/null 2>&1; then
    packages+=(vulkan-validationlayers)
fi
# The HTML report's tests open the pages in headless Chromium.
if [ "$want_tests" = 1 ] && ! command -v chromium >/dev/null; then
    packages+=(chromium)
fi
if [ ${#packages[@]} -gt 0 ]; then
    echo "setup: installing system packages: ${packages[*]}" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi

# The test set-up also brings clang-22 and AMD's device library, to check the ROCm kernels' ISA.
[ "$want_tests" = 1 ] && scripts/rocm-isa-deps.sh
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
extras="nvml"
[ "$want_tests" = 1 ] && extras="nvml,plot,report,test"
# With NVIDIA's driver, the Vulkan results carry the SASS its shader cache holds (README: [sass]).
[ -e /proc/driver/nvidia/version ] && extras="$extras,sass"
.venv/bin/python -m pip install -q -e ".[$extras]"
echo "setup: ready (.venv/bin/peakbench)" >&2

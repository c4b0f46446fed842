#!/usr/bin/env bash
# What tests/test_rocm_isa.py needs to compile the ROCm kernels to AMDGPU assembly without ROCm or
# an AMD GPU: Debian's clang-22 and llvm-22 (llvm-mc, llvm-objdump, llvm-readelf; installed with
# apt, as root or through sudo, when missing) and the device library bitcode ocml.bc / ockl.bc,
# taken from PyPI's triton wheel into a cache folder unless already there. Safe to run again: it
# does nothing when all are present.
#   scripts/rocm-isa-deps.sh            install what is missing
#   scripts/rocm-isa-deps.sh --print    print the bitcode folder (for PEAKBENCH_AMD_BITCODE)
# The HIP headers come from ../shared/fixtures/hip-headers-rocm-6.3.tgz beside the clone.
set -euo pipefail
cd "$(dirname "$0")/.."

TRITON=3.9.0                          # its wheel ships triton/backends/amd/lib/{ocml,ockl}.bc
dest="${PEAKBENCH_AMD_BITCODE:-${XDG_CACHE_HOME:-$HOME/.cache}/peakbench-test/amd-bitcode}"
if [ "${1:-}" = "--print" ]; then
    echo "$dest"
    exit 0
fi

if ! command -v clang-22 >/dev/null || ! command -v llvm-objdump-22 >/dev/null; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null ||
            { echo "rocm-isa-deps: error: clang-22 is missing and neither root nor sudo can install it" >&2; exit 1; }
        sudo="sudo"
    fi
    echo "rocm-isa-deps: installing clang-22 and llvm-22" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends clang-22 llvm-22 >/dev/null
fi

if [ ! -s "$dest/ocml.bc" ] || [ ! -s "$dest/ockl.bc" ]; then
    python=$(command -v python3 || true)
    [ -x .venv/bin/python ] && python=.venv/bin/python
    [ -n "$python" ] || { echo "rocm-isa-deps: error: no python3 to download the triton wheel with" >&2; exit 1; }
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    echo "rocm-isa-deps: fetching ocml.bc and ockl.bc from the triton $TRITON wheel" >&2
    # Any one wheel of the release holds the same bitcode: the CPython 3.11 x86-64 one, wherever this runs.
    "$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_28_x86_64 "triton==$TRITON" -d "$tmp"
    mkdir -p "$dest"
    "$python" - "$tmp" "$dest" <<'EOF'
import sys, zipfile
from pathlib import Path
wheel = next(Path(sys.argv[1]).glob("triton-*.whl"))
with zipfile.ZipFile(wheel) as z:
    for name in ("ocml.bc", "ockl.bc"):
        data = z.read(f"triton/backends/amd/lib/{name}")
        part = Path(sys.argv[2]) / f".{name}.part"
        part.write_bytes(data)
        part.replace(Path(sys.argv[2]) / name)          # whole or not at all
EOF
fi
echo "rocm-isa-deps: ready (clang-22, llvm-22, bitcode in $dest)" >&2

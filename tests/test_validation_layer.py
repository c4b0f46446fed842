"""A quick run under the Khronos validation layer reports no Vulkan usage errors.

Skipped unless the layer is installed (its manifest in a Vulkan layer folder, or listed by
`vulkaninfo --summary`) and a Vulkan device exists.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import run_peakbench

LAYER = "VK_LAYER_KHRONOS_validation"
LAYER_FOLDERS = ["/usr/share/vulkan/explicit_layer.d", "/usr/local/share/vulkan/explicit_layer.d",
                 "/etc/vulkan/explicit_layer.d", *filter(None, os.environ.get("VK_LAYER_PATH", "").split(os.pathsep))]


def layer_installed() -> bool:
    for folder in map(Path, LAYER_FOLDERS):
        if folder.is_dir() and any(LAYER in f.read_text(errors="replace") for f in folder.glob("*.json")):
            return True
    if shutil.which("vulkaninfo"):
        try:
            p = subprocess.run(["vulkaninfo", "--summary"], capture_output=True, text=True, timeout=60)
            return LAYER in p.stdout
        except (OSError, subprocess.TimeoutExpired):
            return False
    return False


def test_quick_run_is_clean_under_the_validation_layer(vulkan_backend):
    if not layer_installed():
        pytest.skip(f"{LAYER} is not installed")
    p = run_peakbench("--backend", "vulkan", "--quick", "--tests",
                      "compute.fp32,compute.int8,matrix.fp16.fp32,memory.*,latency.l1,launch.overhead,"
                      "sfu.rcp,atomic.*",
                      env={"VK_INSTANCE_LAYERS": LAYER, "VK_LOADER_DEBUG": "layer"})
    text = p.stdout + p.stderr
    assert p.returncode == 0, text
    assert "Traceback" not in text
    # The loader's own log proves the layer was in the instance, so a clean run means something.
    assert re.search(rf"Insert(ing)? instance layer \"?{LAYER}", text), "the validation layer was not loaded"
    messages = [line for line in text.splitlines() if "Validation Error" in line or re.search(r"VUID-[\w-]+", line)]
    assert not messages, "\n".join(messages)

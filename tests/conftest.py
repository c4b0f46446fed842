"""Shared fixtures: a private shader cache, the Vulkan device (lavapipe here, a GPU there), and the
`gpu` marker.

GPU tests (marked `gpu`) run only where a real, non-CPU device is present: lavapipe counts as no
GPU. On the GPU machine run `pytest --gpu` (or `pytest -m gpu`): then a missing GPU fails those
tests instead of skipping them, so a broken driver install cannot pass as "all skipped".
"""
from __future__ import annotations

import functools

import pytest

from helpers import gpu_required


def pytest_addoption(parser):
    parser.addoption("--gpu", action="store_true",
                     help="run the tests marked gpu and fail them when no real GPU is present")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a real GPU; run on the H200 (pytest --gpu or -m gpu)")


@functools.cache
def real_gpu() -> str | None:
    """The name of the first non-CPU device of any backend, or None (lavapipe is not a GPU)."""
    from peakbench.backend import load
    for name in ("vulkan", "cuda", "rocm"):
        try:
            backend = load(name)
        except Exception:   # unavailable, not built yet, or broken: none of them is a GPU here
            continue
        try:
            gpus = [d.name for d in backend.devices() if d.kind != "cpu"]
        finally:
            backend.close()
        if gpus:
            return f"{name}: {gpus[0]}"
    return None


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items or gpu_required(config) or real_gpu():
        return
    skip = pytest.mark.skip(reason="needs a real (non-CPU) Vulkan, CUDA or ROCm device; run with --gpu on a GPU")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """Compiled shaders go to a per-session folder, never to ~/.cache; subprocesses inherit it."""
    folder = tmp_path_factory.mktemp("peakbench-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PEAKBENCH_CACHE", str(folder))
        yield folder


@pytest.fixture(scope="session")
def vulkan_backend():
    """The Vulkan backend, or skip: no `vulkan` package, no loader, no driver or no device."""
    from peakbench.backend import BackendUnavailable
    try:
        import peakbench.vulkan
        backend = peakbench.vulkan.create()
    except BackendUnavailable as e:
        pytest.skip(str(e))
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def vulkan_device(vulkan_backend):
    """Device 0, opened once for the session (lavapipe on this machine)."""
    device = vulkan_backend.open(0)
    yield device
    device.close()


@pytest.fixture(scope="session")
def shaders():
    """peakbench.vulkan.shaders and workloads; they import the `vulkan` package, which raises
    OSError at import when no Vulkan loader is installed."""
    try:
        from peakbench.vulkan import shaders, workloads
    except (ImportError, OSError) as e:
        pytest.skip(f"vulkan package unusable: {e}")
    return shaders, workloads


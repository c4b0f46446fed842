"""The Vulkan backend on a real Vulkan device: lavapipe (Mesa's CPU driver) on a machine without a
GPU, the GPU where there is one. Skipped when no Vulkan device exists. GPU-side work is kept to
one loop iteration on the backend's own grid (a few hundred threads on lavapipe)."""
from __future__ import annotations

import contextlib
import re
import time

import numpy as np
import pytest

from helpers import alu_params
from peakbench.backend import Unsupported
from peakbench.catalog import alu_reference as ref
from peakbench.catalog import default_catalog

CATALOG = default_catalog()
ALU = alu_params()
NO_KERNEL = [t for t in CATALOG.tests if t.family == "compute" and not t.kernel]


@contextlib.contextmanager
def prepared(device, test, variant):
    """A workload for a test the device supports (else skip), closed afterwards."""
    reason = device.support(test)
    if reason:
        pytest.skip(f"{test.name} on {device.info.name}: {reason}")
    w = device.prepare(test, variant)
    try:
        yield w
    finally:
        w.close()


def test_devices_are_described(vulkan_backend):
    devices = vulkan_backend.devices()
    assert devices
    for i, d in enumerate(devices):
        assert d.index == i
        assert d.name.strip() and d.driver.strip() and d.api.strip()
        major, minor, _ = (int(x) for x in re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", d.api).groups())
        assert (major, minor) >= (1, 3)
        assert re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", d.uuid)
        assert d.kind in ("gpu", "integrated", "cpu", "virtual", "other")
        j = d.as_json()
        assert j["name"] == d.name and re.fullmatch(r"0x[0-9a-f]{4,}", j["vendor_id"])


def test_buffers_round_trip(vulkan_device):
    dev = vulkan_device.rt.dev
    data = bytes(range(256)) * 4
    buf = dev.buffer(len(data))
    try:
        dev.upload(buf, data)
        assert dev.download(buf) == data
        dev.fill(buf, 0xDEADBEEF)
        assert np.all(np.frombuffer(dev.download(buf), dtype=np.uint32) == 0xDEADBEEF)
    finally:
        dev.free(buf)


@pytest.mark.parametrize("test, variant", ALU)
def test_kernel_output_matches_the_host_reference(vulkan_device, test, variant):
    with prepared(vulkan_device, test, variant) as w:
        assert w.verify() is None
        p = w.params
        assert p["threads"] == p["workgroups"] * p["workgroup_size"] >= p["workgroup_size"]
        # The op count the harness divides by: threads x steps x accumulators x ops per step.
        assert w.items(3) == 3 * p["threads"] * variant.unroll * test.accumulators


def other_seeds(kernel: str, inputs: ref.AluInputs) -> ref.AluInputs:
    """Every seed row replaced by its neighbour's."""
    return ref.AluInputs(np.roll(inputs.seeds, 1, axis=0), inputs.params)


def other_params(kernel: str, inputs: ref.AluInputs) -> ref.AluInputs:
    """fma: c doubled (wrapping for integers); dot4x8: every byte of b moved by one; bf16dot: M halved."""
    p = inputs.params.copy()
    if kernel == "fma":
        p[-1] = p[-1] + p[-1]
    elif kernel == "dot4x8":
        p = (p.view(np.uint32) ^ np.uint32(0x01010101)).view(np.int32)
    else:
        p = p * np.float32(0.5)
    return ref.AluInputs(inputs.seeds, p)


@pytest.mark.parametrize("fault", [other_seeds, other_params], ids=["seeds", "params"])
@pytest.mark.parametrize("test, variant", ALU)
def test_planted_input_fault_is_caught(vulkan_device, test, variant, fault):
    with prepared(vulkan_device, test, variant) as w:
        planted = fault(test.kernel, w.inputs)

        def stored(inputs):
            return ref.reference(test.kernel, test.dtype, inputs, test.accumulators, variant.unroll,
                                 np.arange(512))

        assert ref.compare(test.kernel, test.dtype, stored(planted), stored(w.inputs)) is not None
        vulkan_device.rt.upload(w.inp, planted.buffer())
        problem = w.verify()
        assert problem is not None and "differ from the host reference" in problem


def test_output_that_was_never_written_is_caught(vulkan_device, monkeypatch):
    for name in ("compute.fp32", "compute.int32"):
        test = CATALOG.get(name)
        with prepared(vulkan_device, test, test.variants[0]) as w:
            monkeypatch.setattr(w, "run", lambda size: 0.0)    # the dispatch "ran" but wrote nothing
            problem = w.verify() or ""
            if name == "compute.fp32":                          # the poison is NaN for floats
                assert problem == f"{w.threads} of {w.threads} threads wrote no result"
            else:                                               # and -1 for integers
                assert re.match(r"(\d+) of \1 values differ from the host reference", problem), problem


def gpu_seconds(w, size: int, repeat: int = 3) -> tuple[float, float]:
    """The fastest of `repeat` launches, and the wall time of that launch."""
    best = (float("inf"), 0.0)
    for _ in range(repeat):
        t0 = time.perf_counter()
        seconds = w.run(size)
        best = min(best, (seconds, time.perf_counter() - t0))
    return best


def test_run_time_is_positive_and_grows_with_size(vulkan_device):
    test = CATALOG.get("compute.fp32")
    with prepared(vulkan_device, test, test.variants[0]) as w:
        small, _ = gpu_seconds(w, 1)
        large, wall = gpu_seconds(w, 64)
        assert 0 < small < large
        # Timestamps scaled by timestampPeriod: a dispatch cannot take longer than the submit
        # around it (lavapipe's timing is noisy, so nothing finer is asserted).
        assert large <= wall


@pytest.mark.parametrize("test", NO_KERNEL, ids=[t.name for t in NO_KERNEL])
def test_types_without_a_vulkan_path_are_api_unsupported(vulkan_device, test):
    reason = vulkan_device.support(test)
    assert reason.startswith("[api] ") and len(reason) > len("[api] ") + 10
    with pytest.raises(Unsupported) as e:
        vulkan_device.prepare(test, None)
    assert str(e.value) == reason


def test_bf16_needs_the_extension(vulkan_device):
    reason = vulkan_device.support(CATALOG.get("compute.bf16"))
    if "VK_KHR_shader_bfloat16" in vulkan_device.rt.caps.extensions:
        assert reason is None or reason.startswith("[driver] ")
    else:
        assert reason.startswith("[driver] VK_KHR_shader_bfloat16 not exposed by ")
        assert vulkan_device.info.driver in reason


def test_lavapipe_has_no_clock_reading(vulkan_device):
    if vulkan_device.info.kind != "cpu":
        pytest.skip("only a CPU device is known to have no clock reading")
    assert vulkan_device.clock_mhz() is None


MATRIX = [t for t in CATALOG.tests if t.family == "matrix"]


@pytest.mark.parametrize("test", MATRIX, ids=[t.name for t in MATRIX])
def test_matrix_tests_run_every_reported_shape_or_say_why_not(vulkan_device, test):
    """Without VK_KHR_cooperative_matrix (lavapipe in Mesa 22) every matrix test has a [driver] or
    [api] reason; where shapes are reported, each one verifies against the host reference."""
    reason = vulkan_device.support(test)
    if reason:
        assert reason.startswith(("[driver]", "[api]"))
        if "VK_KHR_cooperative_matrix" not in vulkan_device.rt.caps.extensions:
            assert reason.startswith("[api]") or "VK_KHR_cooperative_matrix not exposed" in reason
        return
    for variant in vulkan_device.variants(test):
        with prepared(vulkan_device, test, variant) as w:
            assert w.verify() is None

"""peakbench.workloads.sfu: the host reference against an independent loop, the tolerance against a
lost step, the kernels on lavapipe (every function, every variant, and a planted wrong function
caught), and the CUDA/HIP host path through the fake HIP runtime with a numpy player of
shaders/sfu.cu."""
from __future__ import annotations

import math

import numpy as np
import pytest

import fake_hip
from peakbench.catalog import default_catalog
from peakbench.kernels import sfu as kernels_sfu
from peakbench.workloads import sfu
from test_workloads import args, rt  # noqa: F401  (rt is a fixture)

CATALOG = default_catalog()
SFU = [t for t in CATALOG.tests if t.family == "sfu"]
PARAMS = [pytest.param(t, v, id=f"{t.name}-{v.name}") for t in SFU for v in t.variants]
PY = {"rcp": lambda x: 1 / x, "rsqrt": lambda x: 1 / math.sqrt(x), "sqrt": math.sqrt, "exp2": lambda x: 2.0 ** x,
      "log2": math.log2, "sin": math.sin}


@pytest.mark.parametrize("function", list(sfu.FUNCTIONS))
def test_reference_is_the_chain_of_the_kernel_comment(function):
    inputs, steps, acc = sfu.make_inputs(function, 8), 40, 8
    got = sfu.reference(function, inputs, steps, np.array([0, 3, 77]))
    f32 = lambda v: float(np.float32(v))     # noqa: E731
    for row, gid in zip(got, (0, 3, 77)):
        for k in range(acc):
            x, t = float(inputs.seeds[(gid * acc + k) % sfu.SEEDS]), float(inputs.tmd[0])
            for _ in range(steps):
                t = f32(t * float(inputs.tmd[1]) + float(inputs.tmd[2]))
                x = f32(f32(PY[function](x)) * float(inputs.a[k]) + t)
            assert row[k] == np.float32(x)


@pytest.mark.parametrize("function", list(sfu.FUNCTIONS))
def test_chains_stay_in_range_differ_and_a_lost_step_is_caught(function):
    inputs, ids = sfu.make_inputs(function, 16), np.arange(256)
    f = sfu.FUNCTIONS[function]
    long = sfu.reference(function, inputs, 5000, ids)
    assert np.isfinite(long).all() and (long >= f.lo - 1e-6).all() and (long <= f.lo + 2.1).all()
    assert len(np.unique(long[0])) == 16, "each chain its own path"
    want = sfu.reference(function, inputs, 32, ids)
    worst = max(kernels_sfu.ERROR["cuda"][function], 2.0 ** -11)      # the loosest bound any API has
    assert sfu.compare(function, worst, sfu.reference(function, inputs, 31, ids), want) is not None
    assert sfu.compare(function, worst, sfu.reference(function, inputs, 32, ids[::-1])[::-1], want) is None


def test_machine_code_without_the_function_fails():
    kernel = kernels_sfu.SfuKernel("sfu.cu", "sfu", {}, 1e-6, "x", "MUFU.RCP")
    assert sfu.machine_code(kernel, {"instruction_mix": {"FFMA": 288, "MUFU.RCP": 256}}) is None
    assert "no MUFU.RCP" in sfu.machine_code(kernel, {"instruction_mix": {"FFMA": 288, "MUFU.RSQ": 256}})
    hip = kernels_sfu.SfuKernel("sfu.cu", "sfu", {}, 1e-6, "x", "v_rcp_f32")
    assert sfu.machine_code(hip, {"instruction_mix": {"v_rcp_f32_e32": 256}}) is None
    assert sfu.machine_code(kernel, {}) is None


# -- lavapipe ---------------------------------------------------------------------------------
@pytest.mark.parametrize("test, variant", PARAMS)
def test_vulkan_kernel_matches_the_host_reference(vulkan_device, test, variant):
    assert vulkan_device.support(test) is None
    w = vulkan_device.prepare(test, variant)
    try:
        assert w.verify() is None
        assert w.evidence["guards"]["iterations"]["why"] == "iterations checked at 1 and 2"
        assert w.items(3) == 3 * w.threads * variant.unroll * variant.accumulators
        assert test.per_item(variant) == 1
    finally:
        w.close()


def test_vulkan_kernel_of_another_function_is_caught(vulkan_device):
    test = CATALOG.get("sfu.rcp")
    from peakbench.vulkan import sfu as vulkan_sfu
    kernel = sfu.SfuKernel("sfu.comp", "main", sfu.defines("rsqrt"), vulkan_sfu.ERROR["rcp"], "planted")
    w = sfu.SfuWorkload(test, test.variants[0], vulkan_device.rt, kernel)
    try:
        problem = w.verify()
        assert problem is not None and "differ from the host reference" in problem
    finally:
        w.close()


# -- CUDA/HIP host path, fake HIP -------------------------------------------------------------
def sfu_player(one_iteration: bool = False):
    """shaders/sfu.cu `sfu`: the seeds, multipliers and t from the input buffer, iterations * UNROLL
    steps of the defined function, every chain stored (planted: never more than one iteration)."""
    def play(fake, launch):
        d = fake_hip.defines(launch["options"])
        function = next(k[3:].lower() for k in d if k.startswith("FN_"))
        acc, unroll = int(d["ACC"]), int(d["UNROLL"])
        out_arg, in_arg, _, iterations = args(launch)      # _: the launch witness (fake_hip counts it)
        values = np.frombuffer(bytes(fake.buffer(in_arg)), np.float32)
        seeds, a, tmd = values[:sfu.SEEDS], values[sfu.SEEDS:sfu.SEEDS + acc], values[sfu.SEEDS + acc:]
        threads = launch["grid"][0] * launch["block"][0]
        n = min(fake_hip.scalar(iterations), 1) if one_iteration else fake_hip.scalar(iterations)
        got = sfu.reference(function, sfu.SfuInputs(seeds, a, tmd[:3]), n * unroll, np.arange(threads))
        fake.buffer(out_arg)[:] = got.tobytes()
    return play


def test_hip_workload_verifies_and_a_loop_that_stops_early_fails_the_guard(rt):
    test = CATALOG.get("sfu.sin")
    variant = test.variants[1]
    rt.fake.kernels["sfu"] = sfu_player()
    w = kernels_sfu.workload(test, variant, rt)
    try:
        assert w.verify() is None
        options = fake_hip.defines(rt.fake.launches[-1]["options"])
        assert options["FN_SIN"] == "1" and options["ACC"] == "16" and options["UNROLL"] == "16"
        assert w.params["kernel"] == "sfu.cu (__builtin_amdgcn_sinf)"
        assert w.items(5) == 2048 * 5 * 16 * 16
    finally:
        w.close()
    rt.fake.kernels["sfu"] = sfu_player(one_iteration=True)
    w = kernels_sfu.workload(test, variant, rt)
    try:
        problem = w.verify()
        assert problem.startswith("guard iterations") and "after 2 iterations" in problem
    finally:
        w.close()

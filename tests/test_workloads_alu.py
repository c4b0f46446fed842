"""peakbench.workloads.alu, driven end to end through the ROCm runtime on the fake HIP runtime: a
numpy player stands in for shaders/alu.cu, written from the kernel's own comments, so a wrong
layout or a lost step on the host side fails here, without a GPU."""
from __future__ import annotations

import numpy as np
import pytest

import fake_hip
from peakbench import kernels
from peakbench.catalog import alu_reference as ref
from peakbench.catalog import default_catalog
from peakbench.workloads import alu
from test_workloads import args, rt  # noqa: F401  (rt is a fixture)

CATALOG = default_catalog()
ELEMENT_DTYPE = {"double": "fp64", "float": "fp32", "__half2": "fp16", "bfloat162": "bf16", "short": "int16"}


def alu_player(lost_step: bool = False):
    """shaders/alu.cu `alu`: decode the seeds and parameters from the input buffer, take
    iterations * UNROLL steps per accumulator, store every accumulator of every thread."""
    def play(fake, launch):
        d = fake_hip.defines(launch["options"])
        dot = d["STEP_DOT4X8"] == "1"
        dtype = "int8" if dot else ("int32" if d["E"] == "int" else ELEMENT_DTYPE[d["E"]])
        kernel = "dot4x8" if dot else "fma"
        lanes = 2 if d["E"] in ("__half2", "bfloat162") else 1
        width, acc, unroll = int(d["VEC"]) * lanes, int(d["ACC"]), int(d["UNROLL"])
        out_arg, in_arg, _, iterations = args(launch)      # _: the launch witness (fake_hip counts it)
        raw = bytes(fake.buffer(in_arg))
        if dtype == "bf16":
            values = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            values = np.frombuffer(raw, ref.DTYPES[dtype])
        seeds = values[:256 * width].reshape(256, width)
        params = values[256 * width:].reshape(-1, width)
        threads = launch["grid"][0] * launch["block"][0]
        steps = fake_hip.scalar(iterations) * unroll - (1 if lost_step else 0)
        got = ref.reference(kernel, dtype, ref.AluInputs(seeds, params), acc, steps, np.arange(threads))
        if dtype == "bf16":
            data = (got.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
        else:
            data = got.astype(ref.DTYPES[dtype]).tobytes()
        fake.buffer(out_arg)[:] = data
    return play


# Each test's last variant: the items of 5 iterations are 2048 threads x 5 x unroll x 8 accumulators
# (steps of every chain), and VEC the elements per accumulator (width / lanes per element).
@pytest.mark.parametrize("test, items, vec", [
    ("compute.fp32", 1_310_720, "4"),       # x4u16: 2048 * 5 * 16 * 8; 4 floats
    ("compute.fp16", 2_621_440, "2"),       # x4u32: 2048 * 5 * 32 * 8; 4 lanes in 2 __half2
    ("compute.bf16", 2_621_440, "2"),       # x4u32 of the fma family: 2048 * 5 * 32 * 8; 2 bfloat162
    ("compute.int16", 2_621_440, "2"),      # x2u32: 2048 * 5 * 32 * 8; 2 shorts
    ("compute.int8", 1_310_720, "4")])      # x4u16: 2048 * 5 * 16 * 8; 4 packed ints
def test_alu_workloads_verify_through_the_runtime(rt, test, items, vec):
    rt.fake.kernels["alu"] = alu_player()
    spec = CATALOG.get(test)
    variant = kernels.variants(spec)[-1]
    w = alu.AluWorkload(spec, variant, rt, kernels.alu_kernel(spec, variant, rt))
    try:
        assert w.verify() is None
        assert w.threads == 2048                # 2 CUs x 256 threads x 4 waves
        assert w.items(5) == items
        options = fake_hip.defines(rt.fake.launches[-1]["options"])
        assert options["VEC"] == vec and options["SEEDS"] == "256"
    finally:
        w.close()
    rt.fake.kernels["alu"] = alu_player(lost_step=True)
    w = alu.AluWorkload(spec, variant, rt, kernels.alu_kernel(spec, variant, rt))
    try:
        assert "differ from the host reference" in w.verify()
    finally:
        w.close()

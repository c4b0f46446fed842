"""peakbench.catalog.matrix_reference: the host reference of the matrix kernels against their loop
written out, exact FP16 accumulation, the operand encodings, and a mismatch named by subgroup and
element."""
from __future__ import annotations

import numpy as np
import pytest

from peakbench.catalog import matrix_reference as ref
from peakbench.catalog.matrix import UNROLL

def emulate(inputs: ref.MatrixInputs, unroll: int, verify: bool) -> np.ndarray:
    """The kernel's loop written out: tiles alternate A*B1 and A*B2 steps, then are summed."""
    b2 = inputs.b if verify else -inputs.b
    tiles = inputs.c0.astype(np.float64).copy()
    for step in range(unroll):
        tiles = tiles + inputs.a @ (inputs.b if step % 2 == 0 else b2)
    return tiles.sum(axis=0)


@pytest.mark.parametrize("m, n, k, a, c", [(16, 16, 16, "fp16", "fp32"), (16, 8, 8, "fp16", "fp16"),
                                           (16, 16, 32, "int8", "int32"), (16, 8, 32, "uint8", "uint32"),
                                           (16, 16, 16, "bf16", "fp32"), (16, 16, 32, "fp8_e4m3", "fp32")])
def test_reference_is_the_loop_with_b2_equal_b1(m, n, k, a, c):
    inputs = ref.make_inputs(m, n, k, a, c, 8)
    want = ref.reference(inputs, UNROLL)
    assert want.shape == (m, n)
    assert np.array_equal(want, emulate(inputs, UNROLL, verify=True))
    # Timed runs (B2 = -B1) return to the start tiles every two steps: bounded however long.
    assert np.array_equal(emulate(inputs, UNROLL, verify=False), inputs.c0.sum(axis=0))
    # One step fewer, or one accumulator fewer, changes the stored tile.
    assert not np.array_equal(want, emulate(inputs, UNROLL - 1, verify=True))
    assert not np.array_equal(want, want - (inputs.c0[0] + UNROLL * inputs.a @ inputs.b))


@pytest.mark.parametrize("k", [8, 16, 32])
def test_fp16_accumulation_stays_exact(k):
    """Every value the fp16 kernel forms is a multiple of 1/64 below 2048/64: exact in fp16."""
    inputs = ref.make_inputs(16, 16, k, "fp16", "fp16", 8)
    worst = np.abs(inputs.c0).sum(axis=0) + 8 * UNROLL * (np.abs(inputs.a) @ np.abs(inputs.b))
    assert worst.max() * 64 < 2048
    want = ref.reference(inputs, UNROLL)
    assert np.array_equal(want.astype(np.float16).astype(np.float64), want)


def test_operand_encodings():
    values = np.array([0.125, -0.125, 0.0])
    assert ref._encode(values, "fp8_e4m3") == bytes([0x20, 0xA0, 0x00])
    assert ref._encode(values, "fp8_e5m2") == bytes([0x30, 0xB0, 0x00])
    assert ref._encode(values, "bf16") == np.array([0x3E00, 0xBE00, 0], dtype=np.uint16).tobytes()
    inputs = ref.make_inputs(16, 8, 16, "fp16", "fp32", 8)
    timed, verify = inputs.operands(verify=False), inputs.operands(verify=True)
    a_b1 = 2 * (16 * 16 + 16 * 8)
    assert timed[:a_b1] == verify[:a_b1] and timed != verify
    assert np.array_equal(np.frombuffer(timed[a_b1:], np.float16), -np.frombuffer(verify[a_b1:], np.float16))


def test_compare_names_the_subgroup_and_element():
    inputs = ref.make_inputs(16, 8, 16, "int8", "int32", 8)
    want = ref.reference(inputs, UNROLL)
    got = np.repeat(want[None], 5, axis=0).astype(np.int32)
    assert ref.compare(got, want) is None
    got[3, 2, 1] += 1
    assert ref.compare(got, want).startswith("1 of 640 values differ from the host reference (first at subgroup 3, element (2, 1)")

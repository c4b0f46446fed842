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


# -- 2:4 sparse A (matrix.*.sparse) ------------------------------------------------------------

def hardware_a(compressed: np.ndarray, word: int, bits: int) -> np.ndarray:
    """What the tensor core multiplies, written from PTX's rule: field g of the word gives the two
    positions (i0 = bits 0-1, i1 = bits 2-3) in group g of four elements that the compressed pair
    2g, 2g + 1 fills; a 32-bit element is two 16-bit halves, so 0b0100 keeps the first, 0b1110 the second."""
    m, half = compressed.shape
    full = np.zeros((m, 2 * half))
    for r in range(m):
        for j in range(half):
            if bits == 32:                          # one element of each pair
                field = (word >> (4 * (j % 8))) & 0xF
                full[r, 2 * j + (field >> 3)] = compressed[r, j]
            else:
                g, which = divmod(j, 2)
                field = (word >> (4 * (g % 8))) & 0xF
                full[r, 4 * g + ((field >> (2 * which)) & 3)] = compressed[r, j]
    return full


@pytest.mark.parametrize("bits, operand, k", [(16, "fp16", 32), (8, "int8", 64), (32, "fp32", 16)])
def test_sparse_reference_multiplies_the_a_the_metadata_places(bits, operand, k):
    accumulator = "int32" if operand == "int8" else "fp32"
    for keep in ref.VERIFY_KEEP[bits]:
        inputs = ref.make_sparse_inputs(64, 16, k, operand, accumulator, 1, bits, keep)
        assert inputs.a.shape == (64, k // 2)
        full = hardware_a(inputs.a, inputs.metadata, bits)
        assert np.array_equal(inputs.full_a(), full)
        assert np.array_equal(ref.reference(inputs, UNROLL), inputs.c0.sum(axis=0) + UNROLL * full @ inputs.b)
        groups = (full.reshape(64, k // 4, 4) != 0).sum(axis=2)
        assert groups.max() <= 2, "2:4: at most two values in each group of four"


@pytest.mark.parametrize("bits, operand, k", [(16, "bf16", 32), (8, "fp8_e4m3", 64), (32, "fp32", 16)])
def test_a_wrong_metadata_word_is_caught(bits, operand, k):
    """A kernel that read another word than it was given (or none) stores another tile."""
    right, wrong = (ref.make_sparse_inputs(64, 32, k, operand, "fp32", 1, bits, keep) for keep in ref.VERIFY_KEEP[bits])
    kernel = right.c0.sum(axis=0) + UNROLL * hardware_a(right.a, wrong.metadata, bits) @ right.b
    problem = ref.compare(kernel[None], ref.reference(right, UNROLL))
    assert problem and "values differ from the host reference" in problem
    assert ref.compare(kernel[None], ref.reference(wrong, UNROLL)) is None


def test_metadata_words_and_their_refusals():
    assert ref.metadata_word((1, 3)) == 0xDDDDDDDD and ref.metadata_word((0, 1)) == 0x44444444
    assert ref.kept(0x88888888, 16) == (0, 2) and ref.kept(0xEEEEEEEE, 32) == (1,) and ref.kept(0x44444444, 32) == (0,)
    with pytest.raises(ValueError, match="names position 1 twice"):
        ref.kept(0x55555555, 16)
    with pytest.raises(ValueError, match="fields differ"):
        ref.kept(0xDDDDDDD8, 16)
    with pytest.raises(ValueError, match="both halves"):
        ref.kept(0xDDDDDDDD, 32)


def test_sparse_operands_end_with_the_metadata_word():
    inputs = ref.make_sparse_inputs(64, 256, 32, "fp16", "fp32", 1, 16, (1, 3))
    data = inputs.operands(verify=True)
    a_bytes, b_bytes = 64 * 16 * 2, 32 * 256 * 2
    assert len(data) == a_bytes + 2 * b_bytes + 4
    assert np.array_equal(np.frombuffer(data[:a_bytes], np.float16).reshape(64, 16), inputs.a)
    assert data[-4:] == bytes([0xDD] * 4)
    assert inputs.operands(verify=False)[-4:] == data[-4:]


def test_sparse_fp16_accumulation_stays_exact_after_two_iterations():
    """mma.sp m16n8k32 with 8 FP16 tiles, checked after two iterations: 64 steps a tile sum."""
    inputs = ref.make_sparse_inputs(16, 8, 32, "fp16", "fp16", 8, 16, (1, 3))
    worst = np.abs(inputs.c0).sum(axis=0) + 2 * 8 * UNROLL * (np.abs(inputs.full_a()) @ np.abs(inputs.b))
    assert worst.max() * 64 < 2048

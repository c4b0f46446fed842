"""The matrix kernels' check (catalog/matrix_reference.py compare), which every matrix workload
runs over every tile of every owner: the same verdict and words as an element-by-element float64
comparison on planted faults (a wrong entry, a tile left poisoned, NaN, infinity, -0 for 0), a
reference the output type cannot hold, and a whole workload's verify over a fake runtime whose
kernel misses one owner's tile, at the H200's Vulkan size (4224 workgroups x 128 x 128)."""
from __future__ import annotations

import numpy as np
import pytest

from peakbench.catalog import matrix_reference as ref
from peakbench.catalog.matrix import shape
from peakbench.workloads import matrix as shared

TYPES = [("fp16", "fp32", np.float32), ("fp16", "fp16", np.float16), ("int8", "int32", np.int32),
         ("uint8", "uint32", np.uint32), ("fp64", "fp64", np.float64)]


def elementwise(got, want) -> str | None:
    """The check as every entry compared in float64 (what compare must agree with)."""
    bad = ~np.isclose(got.astype(np.float64), want[None].astype(np.float64), rtol=0, atol=0)
    if not bad.any():
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {bad.size} values differ from the host reference (first at "
            f"subgroup {first[0]}, element {first[1:]}: got {got[first]!r}, want {want[first[1:]]!r})")


def tiles(operand, accumulator, dtype, owners=6, m=16, n=8):
    want = ref.reference(ref.make_inputs(m, n, 16, operand, accumulator, 2), 4)
    return np.broadcast_to(want.astype(dtype), (owners, m, n)).copy(), want


@pytest.mark.parametrize("operand,accumulator,dtype", TYPES, ids=[t[1] for t in TYPES])
def test_planted_faults_get_the_verdict_and_words_of_an_elementwise_check(operand, accumulator, dtype):
    rng = np.random.default_rng(3)
    floats = np.dtype(dtype).kind == "f"
    for _ in range(150):
        got, want = tiles(operand, accumulator, dtype)
        for _ in range(rng.integers(0, 4)):
            i = tuple(int(rng.integers(0, s)) for s in got.shape)
            fault = int(rng.integers(0, 4)) if floats else 3
            if fault == 0:
                got[i] = np.nan
            elif fault == 1:
                got[i] = np.inf
            elif fault == 2 and got[i] == 0:
                got[i] = -got[i]                         # -0 equals the reference's 0
            else:
                got[i] = got[i] + 1
        assert ref.compare(got, want) == elementwise(got, want)


def test_a_right_output_passes_and_negative_zero_is_zero():
    got, want = tiles("fp16", "fp32", np.float32)
    assert ref.compare(got, want) is None
    zeros = np.argwhere(want == 0)
    assert zeros.size, "the reference has zeros to flip"
    got[(2, *zeros[0])] = -0.0
    assert ref.compare(got, want) is None


def test_a_tile_left_poisoned_is_every_entry_of_it():
    got, want = tiles("fp16", "fp32", np.float32)
    got.view(np.uint32)[4] = 0xFFFFFFFF                 # owner 4 stored nothing over the poison
    assert ref.compare(got, want).startswith(f"{16 * 8} of {got.size} values differ from the host reference"
                                             " (first at subgroup 4, element (0, 0): got np.float32(nan)")


def test_a_reference_the_output_type_cannot_hold_fails():
    got, want = tiles("fp16", "fp16", np.float16)
    off = want + 2.0 ** -20                             # between two float16 values
    assert ref.compare(got, off) == elementwise(got, off) and ref.compare(got, off).startswith("768 of 768")


class Runtime:
    """Device buffers as host bytearrays; the kernel writes the reference tile into every
    owner's slot but `skip` (left as the poison)."""

    def __init__(self, workload, skip=None):
        self.w, self.skip, self.launches = workload, skip, 0

    def alloc(self, nbytes):
        return bytearray(nbytes)

    def upload(self, buf, data):
        buf[:len(data)] = bytes(data)

    def fill(self, buf, byte):
        buf[:] = bytes([byte]) * len(buf)

    def download(self, buf, nbytes=None):
        return bytes(buf)

    def launch(self, kernel, grid, args, repeat=1):
        out, done, iterations = args[0], args[3], int(args[4])
        done[:4] = ((int.from_bytes(done[:4], "little") + grid * repeat) % (1 << 32)).to_bytes(4, "little")
        w = self.w
        tile = ref.reference(w.inputs, iterations * w.variant.unroll).astype(w.out_dtype)
        tiles = np.frombuffer(out, w.out_dtype).reshape(w.owners, *w.tile)
        tiles[:] = tile
        if self.skip is not None:
            tiles[self.skip] = np.frombuffer(b"\xff" * tile.nbytes, w.out_dtype).reshape(w.tile)
        self.launches += 1
        return 1e-3


class Workload(shared.MatrixWorkload):
    def __init__(self, owners, skip=None):
        variant = shape(128, 128, 32)
        self.kernel, self.grid, self.owners, self.accumulators = "kernel", owners, owners, 1
        inputs = ref.make_inputs(128, 128, 32, "fp16", "fp32", 1)
        self.setup(None, variant, Runtime(self, skip), inputs, "fp32")


def test_a_workload_at_the_h200_size_verifies_and_names_a_missing_tile():
    assert Workload(4224).verify() is None
    problem = Workload(4224, skip=4100).verify()
    assert problem.startswith(f"16384 of {4224 * 128 * 128} values differ from the host reference (first at "
                              "subgroup 4100, element (0, 0): got np.float32(nan)"), problem

"""What every matrix path shares, written once: operands and accumulators from
catalog/matrix_reference.py in device buffers, the launch, the item count and the check of every
tile against the host reference. A backend's matrix workload (vulkan/coopmat.py, cuda/tensor.py,
rocm/matrix.py) subclasses it with its kernel, grid and operand encoding: which matrix forms exist
and how each is issued stay in the backend."""
from __future__ import annotations

import numpy as np

from peakbench.backend import release
from peakbench.catalog import matrix_reference as ref
from peakbench.workload import Workload
from peakbench.workloads.witness import Witness


class MatrixWorkload(Workload):
    """One shape. A subclass's __init__ compiles `kernel`, sets `grid` (workgroups), `owners`
    (tile owners: subgroups, warps, warpgroups or waves, each with `accumulators` tiles) and
    calls setup(); it may override operands() (the operand encoding) and precheck(). An item is
    one step of one accumulator tile of one owner."""
    kernel = grid = owners = None
    ab = c0 = out = None

    def setup(self, test, variant, rt, inputs: ref.MatrixInputs, accumulator: str) -> None:
        self.test, self.variant, self.rt, self.name = test, variant, rt, variant.name
        self.inputs, self.out_dtype = inputs, ref.STORAGE[accumulator]
        m, n, _ = variant.shape
        self.tile = (m, n)
        self.ab = rt.alloc(len(self.operands(verify=True)))
        self.c0 = rt.alloc(len(inputs.accumulators()))
        self.out = rt.alloc(self.owners * m * n * np.dtype(self.out_dtype).itemsize)
        rt.upload(self.c0, inputs.accumulators())
        rt.upload(self.ab, self.operands(verify=False))
        self.witness = Witness(rt)

    def operands(self, verify: bool) -> bytes:
        """A, B1, B2 as the kernel reads them; B2 = B1 to verify, -B1 to time."""
        return self.inputs.operands(verify)

    def precheck(self) -> str | None:
        """A problem found before running (the machine code lacks the instruction), or None."""
        return None

    def run(self, size: int) -> float:
        return self.witness.launch(self.kernel, self.grid, [self.out, self.ab, self.c0], [np.uint32(size)])

    def items(self, size: int) -> int:
        return self.owners * size * self.variant.unroll * self.accumulators

    def verify(self) -> str | None:
        """One iteration with B2 = B1 on the full grid, output poisoned first, every tile checked."""
        problem = self.precheck()
        if problem:
            return problem
        self.rt.upload(self.ab, self.operands(verify=True))
        self.rt.fill(self.out, 0xFF)
        try:
            self.run(1)
        finally:
            self.rt.upload(self.ab, self.operands(verify=False))
        got = np.frombuffer(self.rt.download(self.out), dtype=self.out_dtype).reshape(self.owners, *self.tile)
        return ref.compare(got, ref.reference(self.inputs, self.variant.unroll))

    def close(self) -> None:
        release(self, self.rt.free, "ab", "c0", "out")
        release(self, Witness.close, "witness")
        release(self, self.rt.discard, "kernel")

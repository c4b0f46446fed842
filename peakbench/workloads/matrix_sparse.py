"""What every 2:4 sparse matrix path shares (matrix.*.sparse): inputs with A compressed and a
metadata word (catalog/matrix_reference.py SparseInputs), and a verification that the kernel
honours the word. A backend's sparse workload puts this class before its dense one:
`class SparseTensorWorkload(SparseMatrixWorkload, TensorWorkload)`."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from peakbench.catalog import matrix_reference as ref
from peakbench.catalog.matrix import OPS_COUNTED
from peakbench.harness import guards
from peakbench.workloads.matrix import MatrixWorkload

# Loop iterations the output is checked after, for each verification metadata word.
VERIFY_ITERATIONS = (1, 2)


def inputs(shape: tuple[int, int, int], operand: str, accumulator: str, accumulators: int,
           bits: int) -> ref.SparseInputs:
    """The sparse inputs of an M x N x K (logical K) form, timed with the first verification word."""
    m, n, k = shape
    return ref.make_sparse_inputs(m, n, k, operand, accumulator, accumulators, bits, ref.VERIFY_KEEP[bits][0])


class SparseMatrixWorkload(MatrixWorkload):
    """Verification with each of VERIFY_KEEP's metadata words in turn (a kernel that ignores the
    word, or reads another, fails one), after one and after two iterations."""

    def verify(self) -> str | None:
        problem = self.precheck()
        if problem:
            return problem
        timed = self.inputs
        try:
            for keep in ref.VERIFY_KEEP[timed.bits]:
                self.inputs = replace(timed, metadata=ref.metadata_word(keep))
                problem = guards.at_counts(VERIFY_ITERATIONS, self._check, "iterations", self.evidence)
                if problem:
                    return f"metadata {self.inputs.metadata:#010x} (kept {keep} of each group): {problem}"
        finally:
            self.inputs = timed
            self.rt.upload(self.ab, self.operands(verify=False))
        self.evidence["metadata_verified"] = [f"{ref.metadata_word(k):#010x}" for k in ref.VERIFY_KEEP[timed.bits]]
        return None

    def _check(self, iterations: int) -> str | None:
        self.rt.upload(self.ab, self.operands(verify=True))
        self.rt.fill(self.out, 0xFF)
        self.run(iterations)
        got = np.frombuffer(self.rt.download(self.out), dtype=self.out_dtype).reshape(self.owners, *self.tile)
        return ref.compare(got, ref.reference(self.inputs, iterations * self.variant.unroll))

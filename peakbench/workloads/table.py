"""The capability table: the one shape in which every backend says which tests run on a device
and why not, the variants it offers, and the kernel each family runs there, as data and rules
(workloads.Device reads it; the backend fills it in its capabilities module)."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from peakbench.workloads.chase import ChaseKernel
from peakbench.workloads.stream import StreamKernel


def _none(test, rt) -> None:
    return None


def _catalog_variants(test, rt) -> tuple:
    return test.variants


@dataclass
class CapabilityTable:
    """A backend's capabilities.

    alu_support(test, rt), alu_kernel(test, variant, rt)
                    the vector ALU's rule (None or an unsupported reason) and kernel (an AluKernel)
    matrix          the module of the matrix tests: support, variants (the shapes the device
                    offers) and workload(test, variant, rt)
    modules         the modules of the other kernel families, by the test's `kernel`, named here
                    and imported when first asked: support(test, rt), workload(test, variant, rt)
                    and, where it offers other variants than the catalog's, variants(test, rt)
    stream, empty, launch_params, chase_kernel(rt)
                    the kernels the shared memory, launch and latency workloads run
    refuse(test, rt)
                    the API's own refusals, read before any family's rule (a family it has no
                    path for at all)
    variants(test, rt)
                    the variants of the families the table runs itself (the catalog's, by default)
    """
    alu_support: Callable
    alu_kernel: Callable
    matrix: str
    modules: dict[str, str]
    stream: StreamKernel
    empty: tuple[str, str]
    launch_params: dict
    chase_kernel: Callable[..., ChaseKernel]
    refuse: Callable = _none
    variants_of: Callable = _catalog_variants

    def matrix_module(self):
        return importlib.import_module(self.matrix)

    def module(self, test):
        """The module of a test's kernel family, or None for the families this table runs itself."""
        name = self.modules.get(test.kernel)
        return importlib.import_module(name) if name else None

    def support(self, test, rt) -> str | None:
        reason = self.refuse(test, rt)
        if reason:
            return reason
        if test.family == "compute":
            return self.alu_support(test, rt)
        if test.family == "matrix":
            return self.matrix_module().support(test, rt)
        module = self.module(test)
        return module.support(test, rt) if module else None

    def variants(self, test, rt) -> tuple:
        if test.family == "matrix":
            return self.matrix_module().variants(test, rt)
        module = self.module(test)
        if module and hasattr(module, "variants"):
            return module.variants(test, rt)
        return self.variants_of(test, rt)

    def matrix_workload(self, test, variant, rt):
        return self.matrix_module().workload(test, variant, rt)

    def workload(self, test, variant, rt):
        return self.module(test).workload(test, variant, rt)

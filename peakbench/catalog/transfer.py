"""Host-device transfers over the host link (PCIe, NVLink-C2C).

transfer.h2d and transfer.d2h copy one large buffer between host and device memory through the
API's copy path (the copy engines); transfer.bidir runs both directions at once, on two streams
or queues, and counts the bytes of both. Variants are the host memory: `pinned` (page-locked, or
on Vulkan memory the driver allocated host-visible) and `pageable` (ordinary memory, which the
driver or the workload stages through pinned memory); transfer.h2d also runs `mapped`, a kernel
reading host memory the device maps, where the GPU's own loads cross the link. The pinned
variant keeps a sweep over transfer sizes as a series. The workload is
peakbench/workloads/transfer.py.
"""
from dataclasses import dataclass

from peakbench.catalog import TestSpec, Variant

KINDS = ("pinned", "pageable")


@dataclass(frozen=True)
class TransferTest(TestSpec):
    """Host-device copies. An item is one byte moved across the link (bidir: in either direction)."""

    def per_item(self, variant: Variant) -> float:
        return 1


def _transfer(direction: str, description: str, kinds: tuple[str, ...] = KINDS) -> TransferTest:
    return TransferTest(f"transfer.{direction}", "GB/s", "transfer", direction,
                        tuple(Variant(kind) for kind in kinds), 1, description)


TESTS = (
    _transfer("h2d", "host-to-device bandwidth over the host link (copies, and a kernel reading host memory),"
                     " with a transfer-size sweep", KINDS + ("mapped",)),
    _transfer("d2h", "device-to-host copy bandwidth over the host link, with a transfer-size sweep"),
    _transfer("bidir", "both directions at once on two streams or queues, bytes of both counted"),
)

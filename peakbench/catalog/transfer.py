"""Host-device transfers over the host link (PCIe, NVLink-C2C).

transfer.h2d and transfer.d2h copy one large buffer between host and device memory through the
API's copy path (the copy engines); transfer.bidir runs both directions at once, on two streams
or queues, and counts the bytes of both. Variants are the host memory: `pinned` (page-locked, or
on Vulkan memory the driver allocated host-visible) and `pageable` (ordinary memory, which the
driver or the workload stages through pinned memory); transfer.h2d also runs `mapped`, a kernel
reading host memory the device maps, where the GPU's own loads cross the link. The pinned
variant keeps a sweep over transfer sizes as a series. The workload is
peakbench/workloads/transfer.py.

transfer.p2p copies between the GPUs of one machine, every ordered pair that has peer access:
`ce` through the copy engines (cudaMemcpyPeerAsync, hipMemcpyPeerAsync), `kernel` a copy kernel
on the destination GPU reading the source GPU's memory; the `_bidir` variants copy both ways
between a pair at once and count the bytes of both. Its workload is peakbench/workloads/p2p.py.
"""
from dataclasses import dataclass

from peakbench.catalog.descriptors import TestSpec, Variant

KINDS = ("pinned", "pageable")


@dataclass(frozen=True)
class TransferTest(TestSpec):
    """Host-device copies. An item is one byte moved across the link (bidir: in either direction)."""

    def per_item(self, variant: Variant) -> float:
        return 1


def _transfer(direction: str, description: str, kinds: tuple[str, ...] = KINDS) -> TransferTest:
    return TransferTest(f"transfer.{direction}", "GB/s", "transfer", direction,
                        tuple(Variant(kind) for kind in kinds), 1, description)


HOST_LINK = (
    _transfer("h2d", "host-to-device bandwidth over the host link (copies, and a kernel reading host memory),"
                     " with a transfer-size sweep", KINDS + ("mapped",)),
    _transfer("d2h", "device-to-host copy bandwidth over the host link, with a transfer-size sweep"),
    _transfer("bidir", "both directions at once on two streams or queues, bytes of both counted"),
)


P2P_VARIANTS = ("ce", "ce_bidir", "kernel", "kernel_bidir")


@dataclass(frozen=True)
class P2pTest(TestSpec):
    """GPU-to-GPU copies. An item is one byte that reached the other GPU (bidir: in either direction)."""

    def per_item(self, variant: Variant) -> float:
        return 1


P2P = P2pTest("transfer.p2p", "GB/s", "p2p", "p2p", tuple(Variant(v) for v in P2P_VARIANTS), 1,
              "GPU-to-GPU bandwidth over the GPU link (NVLink, xGMI), every ordered pair, copy engines and a"
              " copy kernel, one way and both ways at once")

TESTS = HOST_LINK + (P2P,)

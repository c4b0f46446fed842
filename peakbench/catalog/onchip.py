"""On-chip memory: shared memory / LDS bandwidth and latency, and the L2 as its own level.

memory.shared reads shared memory with 16-byte loads, no bank conflicts, from a resident grid on
every compute unit (bytes read from shared memory per second). latency.shared is a dependent
chase inside shared memory (ns per load, cycles from the core's counter). memory.l2 reads working
sets inside the L2 with loads that skip the L1 (bytes read per second); the read sweep of
memory.read keeps the whole curve, this is the level's own number. Kernels and their contract:
shaders/onchip.cu, onchip_shared.comp, onchip_l2.comp; workloads/onchip.py.
"""
from peakbench.catalog.descriptors import LatencyTest, MemoryTest, Variant

SHARED_UNROLL = 16  # 16-byte shared loads a pass per invocation, issued back to back
SHARED_SUMS = 4     # partial sums they are added into (the loads do not wait on one chain)
L2_SUMS = 8         # the L2 read's partial sums (at most one per load in flight)

TESTS = (
    MemoryTest("memory.shared", "GB/s", "shared", "shared", (Variant("lds128", width=4, unroll=SHARED_UNROLL),),
               SHARED_SUMS, "shared-memory (LDS) read bandwidth of the whole device, 16-byte loads, no bank conflicts",
               shared_memory=True),
    LatencyTest("latency.shared", "ns", "shared", "shared", (Variant("chase"),), 1,
                "load-to-use latency of shared memory (LDS), a dependent chase, with cycles"),
    # Variants: 16-byte loads in flight per invocation (the best counts).
    MemoryTest("memory.l2", "GB/s", "l2", "l2",
               (Variant("unroll8", width=4, unroll=8), Variant("unroll16", width=4, unroll=16)), L2_SUMS,
               "L2 read bandwidth: working sets inside the L2, 16-byte loads that skip the L1",
               screen="unroll16",
               bound_from=("memory.shared", 1, "L2 data reaches the cores through their L1/shared-memory data path,"
                                               " at most its bytes a clock")),
)

"""Memory bandwidth, load latency per cache level, and launch overhead.

memory.read / memory.write / memory.copy / memory.update stream a buffer well past the last cache
level with 16-byte accesses (copy counts bytes read plus bytes written; update, dst += src, two
reads and a write). The bandwidth sweep repeats the
read over working sets from a few KiB up, kept as a series. latency.* come from one pointer chase
swept over working sets: its plateaus are the levels (l0..l3, l2_far, dram), found, not assumed.
launch.overhead is the submit-to-completion time of an empty dispatch.
"""
from peakbench.catalog.descriptors import LatencyTest, LaunchTest, MemoryTest, Variant

STREAM_UNROLL = 16  # reads in flight per thread, with two workgroups per compute unit (workloads/stream.py)
ROWS_UNROLL = 32    # rows of the rows read: one load from each per thread (workloads/stream.py, ROWS_BLOCK)
TILE_UNROLL = 1     # vectors per thread of a write/copy tile (1 read faster than 8: by 1-2.5% writing, 5-6% copying)


def _stream(name: str, mode: str, description: str, layouts: tuple[tuple[str, int], ...],
            reads: int, writes: int, overwrites: bool = True) -> MemoryTest:
    """Variants are access layouts (shaders/mem_stream.comp), each with its vectors per thread:
    `rows` (the buffer as unroll rows, one short-lived workgroup per column of each), `chunk`
    (each workgroup of a resident grid reads its own contiguous slice), `stride` (the resident
    grid strides through the buffer), `tile` (one workgroup per tile of workgroup size * unroll
    vectors, passes * tiles of them in one dispatch)."""
    return MemoryTest(name, "GB/s", "stream", mode,
                      tuple(Variant(layout, width=4, ops_per_step=16, unroll=unroll) for layout, unroll in layouts),
                      1, description, reads=reads, writes=writes, overwrites=overwrites,
                      peak_from="memory_bandwidth_gbs")


def _level(name: str, description: str) -> LatencyTest:
    return LatencyTest(name, "ns", "chase", name.split(".")[1], (Variant("chase"),), 1, description)


STREAMS = (
    _stream("memory.read", "read", "device memory read bandwidth (16-byte loads), with a working-set sweep",
            (("rows", ROWS_UNROLL), ("chunk", STREAM_UNROLL), ("stride", STREAM_UNROLL)), reads=1, writes=0),
    _stream("memory.write", "write", "device memory write bandwidth (16-byte stores)", (("tile", TILE_UNROLL),),
            reads=0, writes=1),
    _stream("memory.copy", "copy", "device memory copy bandwidth, bytes read plus bytes written",
            (("tile", TILE_UNROLL),), reads=1, writes=1),
    _stream("memory.update", "update", "device memory read-modify-write bandwidth (dst += src): two reads and a write",
            (("tile", TILE_UNROLL),), reads=2, writes=1, overwrites=False),
)
# The chase and the launches keep the cores nearly idle: run after the core tests (default_catalog)
LIGHT = (
    _level("latency.l0", "load-to-use latency of the first (nearest) cache level, where the GPU has an L0"),
    _level("latency.l1", "load-to-use latency of the L1 cache level"),
    _level("latency.l2", "load-to-use latency of the L2 cache level"),
    _level("latency.l3", "load-to-use latency of the L3 / last-level cache, where the GPU has one"),
    _level("latency.l2_far", "load-to-use latency of the far L2 partition (NVIDIA), where the sweep finds its plateau"),
    _level("latency.dram", "load-to-use latency of device memory"),
    LaunchTest("launch.overhead", "us", "launch", "", (Variant("empty"),), 1,
               "submit-to-completion time of an empty dispatch"),
)

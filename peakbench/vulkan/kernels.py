"""The shaders the shared workloads run on Vulkan (the stream, the empty dispatch, the chase's path),
apart from the capability table so that the modules it names can use them too."""
from __future__ import annotations

from peakbench.workloads.stream import StreamKernel

STREAM = StreamKernel("mem_stream.comp", "main")
EMPTY = ("empty.comp", "main")
LAUNCH_PARAMS = {"dispatch": "1 workgroup of 1 invocation, recorded once",
                 "timed": "vkQueueSubmit to fence signalled, host clock"}
CHASE_PATH = {True: "buffer-reference loads of the next node's address (GL_EXT_buffer_reference), one invocation",
              False: "storage-buffer loads of the next node's index (vector memory), one invocation"}

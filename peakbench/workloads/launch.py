"""Launch overhead, written once: the host's submit-to-completion time of an empty kernel, the
floor under any measured kernel."""
from __future__ import annotations

from peakbench.workload import Workload


class LaunchWorkload(Workload):
    """`source`/`entry`: the API's empty kernel; `params` say how that API launches and times it.
    Its launches are host-timed (the runner's host_timed): an item is one launch."""
    timing = "host"

    def __init__(self, test, variant, rt, source: str, entry: str, params: dict):
        self.test, self.variant, self.rt, self.name = test, variant, rt, variant.name
        self.kernel = rt.compile(source, {}, entry, block=1, args="", label="empty")
        self.params = dict(params)
        self.evidence = {}

    def host_times(self, count: int) -> list[float]:
        return self.rt.launch_times(self.kernel, count)

    def close(self) -> None:
        self.rt.discard(self.kernel)

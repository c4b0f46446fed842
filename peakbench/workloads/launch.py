"""Launch overhead, written once: the host's submit-to-completion time of an empty kernel, the
floor under any measured kernel.

The timed path is checked against the completion it claims to wait for (after_timing, the
measured guard): the same source built with SPIN steps an LCG in one thread for as many
iterations as make at least SPIN_S of GPU time; the host-timed launches of that kernel, through
the same path as the empty ones, must take at least as long as the GPU timer says it runs, and
its output must be the host's. A path that returns before the launch ends, or loses it, reads
shorter."""
from __future__ import annotations

import numpy as np

from peakbench.backend import release, release_on_failure
from peakbench.workload import Workload

SPIN_S = 0.002             # GPU time of the completion check's launch
SPIN_LEAST_S = 2e-5        # or at least this, where the device ends loops early (llvmpipe)
SPIN_LAUNCHES = 5          # each side's shortest of this many (a CPU driver's launches vary by 10-20%)
# The host's time of a launch over the GPU timer's, at least: the host waits from submission to
# completion, so it reads more, less only by the timers' resolution and a clock that rose in
# between (hence the GPU time is the shortest of launches before and after).
LEAST_HOST_OVER_GPU = 0.95
# A CPU driver's timer is the host's clock around a launch that shares the host's cores with the
# polling loop: its launches of ~0.1 ms vary by 10-20% on an idle host, and on a loaded 2-core
# one (the test suite beside lavapipe) a host time read 0.745 of the GPU timer's. A path that does
# not wait reads a few percent of the spin's time, far under either share.
LEAST_HOST_OVER_CPU = 0.5
LCG = (1664525, 1013904223)


def lcg(steps: int, x: int = 1) -> int:
    """x after `steps` of x = a*x + c mod 2^32, by squaring the affine map."""
    a, c = LCG
    while steps:
        if steps & 1:
            x = (a * x + c) & 0xFFFFFFFF
        a, c, steps = (a * a) & 0xFFFFFFFF, (a * c + c) & 0xFFFFFFFF, steps >> 1
    return x


class LaunchWorkload(Workload):
    """`source`/`entry`: the API's empty kernel; `params` say how that API launches and times it.
    Its launches are host-timed (the runner's host_timed): an item is one launch."""
    timing = "host"

    @release_on_failure
    def __init__(self, test, variant, rt, source: str, entry: str, params: dict):
        self.test, self.variant, self.rt, self.name = test, variant, rt, variant.name
        self.kernel = rt.compile(source, {}, entry, block=1, args="", label="empty")
        self.spin = rt.compile(source, {"SPIN": 1}, entry, block=1, args="bu", label="empty-spin")
        self.out = rt.alloc(4)
        self.params = dict(params)
        self.evidence = {}

    def host_times(self, count: int, kernel=None, args: tuple = ()) -> list[float]:
        """Host times of `count` launches of the empty kernel (the runner's), or of `kernel` with
        `args`: the completion check times its spin through this same path."""
        times = self.rt.launch_times(kernel or self.kernel, count, args)
        split = getattr(self.rt, "launch_split", None)
        if kernel is None and split:        # the API's own account of the empty launches' time
            self.evidence["host_split"] = dict(split)
        return times

    def after_timing(self, size: int) -> tuple[str | None, str]:
        rt, n = self.rt, 1 << 10
        most = min(1 << 30, getattr(rt, "max_rounds", 1 << 22) * 256)   # llvmpipe ends a loop after ~65535 iterations
        rt.launch(self.spin, 1, [self.out, np.uint32(n)])             # the first launch: its set-up
        gpu = rt.launch(self.spin, 1, [self.out, np.uint32(n)])
        while gpu < SPIN_S and n < most:
            n = min(most, n * max(2, 1 << int(SPIN_S / max(gpu, 1e-9)).bit_length()))
            gpu = rt.launch(self.spin, 1, [self.out, np.uint32(n)])
        if gpu < SPIN_LEAST_S:
            return None, f"not checked: {n} steps of the completion check's kernel ran {gpu * 1e3:.3g} ms"
        gpu = min([gpu] + [rt.launch(self.spin, 1, [self.out, np.uint32(n)]) for _ in range(SPIN_LAUNCHES - 1)])
        rt.fill(self.out, 0)
        host = min(self.host_times(SPIN_LAUNCHES, self.spin, (self.out, np.uint32(n))))
        got = int(np.frombuffer(rt.download(self.out), np.uint32)[0])
        gpu = min([gpu] + [rt.launch(self.spin, 1, [self.out, np.uint32(n)]) for _ in range(SPIN_LAUNCHES)])
        text = (f"a launch of {n} steps the GPU timer reads {gpu * 1e3:.3g} ms took {host * 1e3:.3g} ms"
                f" from submission to completion on the timed path")
        if got != lcg(n):
            return f"{text}, and its output is not the host's ({got:#x}, want {lcg(n):#x}): the launch did not run", text
        least = LEAST_HOST_OVER_CPU if rt.info.kind == "cpu" else LEAST_HOST_OVER_GPU
        if host < gpu * least:
            return f"{text}: the timed path does not wait for the launch to complete", text
        return None, text

    def close(self) -> None:
        release(self, self.rt.free, "out")
        release(self, self.rt.discard, "kernel", "spin")

"""Launch overhead, written once: the host's submit-to-completion time of an empty kernel, the
floor under any measured kernel."""
from __future__ import annotations

from peakbench.harness.runner import VariantResult, rate
from peakbench.harness.stats import summarize


class LaunchWorkload:
    """`source`/`entry`: the API's empty kernel; `params` say how that API launches and times it."""

    def __init__(self, test, variant, rt, source: str, entry: str, params: dict):
        self.test, self.variant, self.rt, self.name = test, variant, rt, variant.name
        self.kernel = rt.compile(source, {}, entry, block=1, args="", label="empty")
        self.params = dict(params)
        self.evidence = {}

    def verify(self) -> str | None:
        return None

    def measure(self, settings, clock, spec=None) -> VariantResult:
        """20 launches untimed (the first are slower), then the median of 200 (50 with --quick).
        No clock: an empty launch leaves the GPU idle."""
        self.rt.launch_times(self.kernel, 20)
        samples = self.rt.launch_times(self.kernel, 200 if settings.min_samples >= 10 else 50)
        per = self.test.per_item(self.variant)
        values = [rate(1, t, per, self.test.unit) for t in samples]
        return VariantResult(self.name, 0, summarize(values), None, dict(self.params), {}, values)

    def close(self) -> None:
        self.rt.discard(self.kernel)

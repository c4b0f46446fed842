"""What a workload declares to the runner (harness/runner.py), which alone measures it.

A workload is one test variant's kernel, prepared: `verify()` checks it against the host's
reference, `run(size)` launches it and returns GPU seconds, `items(size)` says how many work
items that launch did. It never times, calibrates or turns items into a rate. What else it has
is declared here, with defaults, and read by the runner, never probed:

    timing          "gpu": run/items, calibrated and sampled until the spread settles;
                    "host": host_times(count), host-timed launches (launch overhead);
                    "sweep": the value is read off a Sweep (from_sweep) the runner measures once
    axis(spec)      the points the value is measured at (an Axis), at(point) moving there, and
                    over_points() told what each point read
    series()        a Sweep of the test's series (a curve over sizes), taken outside screening
    observed(v, spec)  what the workload read during its samples beyond their time (a cycle
                    counter); `spec`: the device's spec entry, or None
    census          the main loop's instructions (a runtime.LoopCensus, None where the platform
                    shows none) for the types and work guards; False: no loop of counted steps
    loop_items      the items one invocation does per loop iteration, for the work guard
    after_timing(size)  (problem, evidence) of the output the timed launches left, at the
                    measured size (the measured guard); "not checked: <why>" where it cannot
    launch_s        the least GPU time one launch is calibrated to in every profile (None: the
                    profile's sample_s), for a rate that still rises with the launch's length
                    there, so that --quick and the default suite read it at the same size
    witness         a workloads.witness.Witness where the kernel counts its own workgroups (the
                    launches guard holds the count to the workgroups launched); None: it does not
    cores           False: its launches keep copy engines busy, not the cores, whose clock falls
                    meanwhile: it continues no core load, so the test after it is held to the
                    clock of the core load before it (runner.hold) or warms up afresh, never
                    continues at the fallen clock this workload read; copies share a load of
                    their own (Load.link), which a core load does not warm up
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator


@dataclass(frozen=True)
class Axis:
    """The points a value is measured at. `value`: "best" (the best point's samples are the
    value, the point recorded in params[name]) or "median" (the median over the points, each
    point's median a sample). `screen`: how many of the first points a screening run takes
    (None: all). `samples`: a fixed count of timed launches per point after its own warm-up
    (the points, not the samples, make the spread), else each point is sampled as any test."""
    name: str
    points: tuple
    value: str = "best"
    screen: int | None = None
    samples: int | None = None


class Workload:
    """The defaults of what a workload may declare (see the module's text)."""
    name: str = ""
    timing: str = "gpu"
    census = False
    launch_s: float | None = None
    cores = True
    loop_items: int | None = None
    witness = None
    params: dict
    evidence: dict

    def verify(self) -> str | None:
        return None

    def run(self, size: int) -> float:
        raise NotImplementedError(f"{type(self).__name__} launches nothing the runner can time")

    def items(self, size: int) -> int:
        raise NotImplementedError(f"{type(self).__name__} counts no items")

    def after_timing(self, size: int) -> tuple[str | None, str | dict]:
        return None, "not checked: each launch overwrites the output the checks at small counts read"

    def host_times(self, count: int) -> list[float]:
        raise NotImplementedError(f"{type(self).__name__} has no host-timed launches")

    def axis(self, spec=None) -> Axis | None:
        return None

    def at(self, point) -> None:
        raise NotImplementedError(f"{type(self).__name__} declares no axis")

    def over_points(self, measured: dict, value) -> None:
        """Told each point's VariantResult and the value's, to record what the points show."""

    def observed(self, v, spec=None) -> None:
        """Add to a measured VariantResult what the workload read besides time."""

    def series(self) -> Sweep | None:
        return None

    sweep: Sweep | None = None

    def from_sweep(self, spec=None):
        raise NotImplementedError(f"{type(self).__name__} reads no sweep")

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class Stage:
    """Points of a sweep measured with launches of `sample_s` each."""
    points: tuple
    sample_s: float


class Sweep:
    """A curve over points (working sets, transfer sizes): at each, the runner moves there
    (at), finds the launch length of the stage's sample_s (calibrated, or with `predict` the
    last point's time per item predicts it and the launch corrects it), times `timed` launches
    and hands their median rate to after(). `x`: the points' JSON key; `unit` the rate's, each
    item worth `per_item`; `digits`: the series' rounding (None: kept as measured)."""
    x: str = "size"
    unit: str = "GB/s"
    per_item: float = 1
    timed: int = 3
    digits: int | None = 2
    predict: bool = False
    max_size: int = 1 << 24
    taken: bool = False          # the runner has measured it (a sweep several tests share is taken once)
    problem: str | None = None   # what the sweep found wrong on its way (the chase's end check)

    def __init__(self, points: tuple = (), sample_s: float = 0.002):
        self.points, self.sample_s = tuple(points), sample_s
        self.xs, self.values = [], []

    def stages(self, screening: bool = False) -> Iterator[Stage]:
        yield Stage(self.points, self.sample_s)

    def at(self, point) -> None:
        pass

    def run(self, size: int) -> float:
        raise NotImplementedError

    def items(self, size: int) -> int:
        raise NotImplementedError

    def after(self, point, size: int, value: float, timing: list) -> None:
        self.xs.append(point)
        self.values.append(value)

    def finish(self) -> None:
        """Release what the sweep held; called once, whether it ended or failed."""

    def series(self) -> dict:
        return {"x": self.x, "y": self.unit, self.x: list(self.xs), self.unit: list(self.values)}

"""A fake driver for the harness, session and CLI tests: deterministic GPU times, no GPU.

A FakeWorkload's launch of `size` takes `size * seconds_per_unit` of fake GPU time (times an
optional repeating noise factor) and does `size * ops_per_unit` items (a bare TestSpec counts an item as one op), so the expected rate of any
sample is known in closed form. A FakeClock stands in for time.perf_counter and advances by the
GPU time of each launch, so warm-up and budget logic run deterministically and instantly.
"""
from __future__ import annotations

import itertools
import time
from types import SimpleNamespace

from peakbench.backend import DeviceInfo
from peakbench.workload import Sweep, Workload


TIMER_TICK_S = 1e-9


class FakeClock:
    def __init__(self, start: float = 1000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def use_clock(monkeypatch, clock: FakeClock, *modules) -> None:
    """Make `time.perf_counter` inside the given modules read the fake clock."""
    for module in modules:
        monkeypatch.setattr(module, "time", SimpleNamespace(perf_counter=clock))


class FakeWorkload(Workload):
    def __init__(self, seconds_per_unit: float = 1e-6, ops_per_unit: float = 1e6, *,
                 clock: FakeClock | None = None, noise=(1.0,), problem: str | None = None,
                 fail_on_run: int | None = None, name: str = "fake"):
        self.seconds_per_unit, self.ops_per_unit = seconds_per_unit, ops_per_unit
        self.clock, self.problem, self.fail_on_run, self.name = clock, problem, fail_on_run, name
        self._noise = itertools.cycle(noise)
        self.sizes: list[int] = []          # every launch, in order
        self.starts: list[float] = []       # fake time at the start of every launch
        self.verified = self.closed = False
        self.params = {"fake_param": 7}
        self.evidence = {"fake_evidence": "isa"}

    def seconds(self, size: int) -> float:
        return size * self.seconds_per_unit

    def rate(self, scale: float = 1e12) -> float:
        """The noise-free rate in units of `scale` (TFLOPS for 1e12)."""
        return self.ops_per_unit / self.seconds_per_unit / scale

    def run(self, size: int) -> float:
        if self.fail_on_run is not None and len(self.sizes) == self.fail_on_run:
            raise RuntimeError("device lost during launch")
        # a real timer's tick of jitter: no two launches read the same to the bit (guards.timer)
        seconds = self.seconds(size) * next(self._noise) + TIMER_TICK_S * (len(self.sizes) % 3)
        self.starts.append(self.clock() if self.clock else 0.0)
        self.sizes.append(size)
        if self.clock:
            self.clock.advance(seconds)
        else:           # no GPU time is longer than the host's wait for it (the timer guard checks)
            time.sleep(max(0.0, seconds))
        return seconds

    def items(self, size: int) -> float:
        return size * self.ops_per_unit

    def verify(self) -> str | None:
        self.verified = True
        return self.problem

    def close(self) -> None:
        self.closed = True


class FakeSweep(Sweep):
    """A series over `points` whose launches are a fake workload's: at every point its rate is
    the workload's, items x 1 byte over its GPU seconds, in GB/s."""
    x, unit = "working_set_bytes", "GB/s"

    def __init__(self, workload: FakeWorkload, points: tuple = (4096, 8192)):
        super().__init__(points, sample_s=0.002)
        self.workload = workload

    def run(self, size: int) -> float:
        return self.workload.run(size)

    def items(self, size: int) -> int:
        return self.workload.items(size)


def fake_info(index: int = 0, name: str = "Fake GPU 9000", kind: str = "gpu") -> DeviceInfo:
    return DeviceInfo(index=index, name=name, vendor_id=0x1234, device_id=0x5678, driver="fake 1.0",
                      api="1.3.999", uuid="5a5a5a5a-0000-0000-0000-000000000001", kind=kind, units=4)


class FakeDevice:
    """`plan` maps a test name to a callable (test, variant) -> workload, which may raise;
    tests not in the plan get a FakeWorkload whose rate grows with the variant's width."""

    def __init__(self, plan: dict | None = None, unsupported: dict | None = None,
                 clock_mhz: float | None = None, clock: FakeClock | None = None, info: DeviceInfo | None = None):
        self.plan, self.unsupported = plan or {}, unsupported or {}
        self._clock_mhz, self.clock = clock_mhz, clock
        self.info = info or fake_info()
        self.prepared: list[tuple[str, str]] = []
        self.workloads: list[FakeWorkload] = []
        self.closed = False

    def support(self, test) -> str | None:
        return self.unsupported.get(test.name)

    def variants(self, test) -> tuple:
        return test.variants

    def prepare(self, test, variant, settings=None, spec=None):
        self.prepared.append((test.name, variant.name))
        make = self.plan.get(test.name)
        # 1e6 ops a size unit, in the items of the test's descriptor
        w = make(test, variant) if make else FakeWorkload(1e-6 / variant.width, 1e6 / test.per_item(variant),
                                                          clock=self.clock, name=variant.name)
        self.workloads.append(w)
        return w

    def clock_mhz(self) -> float | None:
        return self._clock_mhz

    def close(self) -> None:
        self.closed = True


class FakeBackend:
    name = "vulkan"

    def __init__(self, devices: list[FakeDevice]):
        self._devices = devices
        self.closed = False

    def devices(self) -> list[DeviceInfo]:
        return [d.info for d in self._devices]

    def open(self, index: int) -> FakeDevice:
        return self._devices[index]

    def close(self) -> None:
        self.closed = True

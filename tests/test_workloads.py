"""peakbench.workloads: the Device that serves the workloads to the harness, on the ROCm runtime
over the fake HIP runtime (tests/fake_hip.py). The `rt` fixture (a small fake GPU) and the launch
helpers serve the workloads' own tests too."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import fake_hip
from peakbench import kernels
from peakbench.catalog import Variant, default_catalog
from peakbench.workloads import chase, launch, stream

CATALOG = default_catalog()
MIB = 1 << 20


@pytest.fixture
def rt(monkeypatch):
    """A small fake GPU: 2 CUs of 256 resident threads, 64 MiB free (a 16 MiB stream buffer)."""
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    gpu = fake_hip.mi300x(multiProcessorCount=2, maxThreadsPerMultiProcessor=256, totalGlobalMem=(1 << 30) + 64 * MIB)
    hip, rtc = fake_hip.pair([gpu])
    fake_hip.install(monkeypatch, hip, rtc)
    import peakbench.rocm
    device = peakbench.rocm.create().open(0)
    device.rt.fake = hip
    yield device.rt
    device.close()


def args(launch):
    return launch["extra"]


def words(fake, arg) -> np.ndarray:
    return np.frombuffer(fake.buffer(arg), np.uint32).reshape(-1, 4)


def test_the_device_routes_each_family_and_shares_one_sweep(rt, monkeypatch):
    import peakbench.rocm
    device = peakbench.rocm.create().open(0)
    try:
        assert device.support(CATALOG.get("compute.fp4")).startswith("[")
        assert device.support(CATALOG.get("memory.read")) is None
        assert device.variants(CATALOG.get("compute.bf16")) == kernels.FAMILIES["bf16dot"][1]
        made = []
        monkeypatch.setattr(chase, "sweep", lambda rt, kernel, max_bytes, **kw: made.append(rt) or "the sweep")
        for name in ("latency.l1", "latency.dram"):
            w = device.prepare(CATALOG.get(name), Variant("chase"))
            assert w.sweep == "the sweep" and "VGPR" in w.params["path"]
        assert len(made) == 1
        assert isinstance(device.prepare(CATALOG.get("launch.overhead"), Variant("empty")), launch.LaunchWorkload)
    finally:
        device.close()


def test_a_workload_that_fails_part_way_frees_what_it_allocated(rt):
    """The fill launch fails after both 16 MiB buffers and the count's slots exist: the error goes
    on, the three buffers go."""
    rt.fake.fail["hipModuleLaunchKernel"] = fake_hip.hipError_t.hipErrorLaunchFailure
    spec = CATALOG.get("memory.copy")
    before = len(rt.fake.memory)
    with pytest.raises(Exception, match="hipModuleLaunchKernel"):
        stream.StreamWorkload(spec, spec.variants[0], rt, kernels.STREAM)
    assert rt.fake.names().count("hipFree") == 3
    assert len(rt.fake.memory) == before

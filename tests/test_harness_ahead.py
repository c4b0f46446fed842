"""Compiling ahead (harness/ahead.py, workloads.Device.plan): a plan lists what a workload
compiles and stops at its first other use of the device; the requests of a run's selection are
made into the cache, so the run compiles none; a failed prefetch is left to its test; on ROCm
(the fake HIP runtime) the code objects land in the cache the run reads."""
from __future__ import annotations

import types

import pytest

from peakbench.catalog import default_catalog
from peakbench.harness import ahead
from peakbench.harness.runner import Settings
from peakbench.harness.session import run_test
from peakbench.workloads import Planned, Planner, Request
from test_rocm import device as rocm_device, fakes, no_amdsmi  # noqa: F401  (fixtures)

CATALOG = default_catalog()


class Recorder:
    """A runtime that says what was asked of it."""

    def __init__(self):
        self.calls, self.limits = [], types.SimpleNamespace(units=4)

    def alloc(self, nbytes):
        self.calls.append(("alloc", nbytes))

    def upload(self, buf, data):
        self.calls.append(("upload", buf))

    def free(self, buf):
        self.calls.append(("free", buf))

    def grid_threads(self, waves):
        return 128 * waves


def test_a_plan_records_compiles_passes_questions_and_stops_at_the_first_buffer():
    rt = Recorder()
    planner = Planner(rt)
    kernel = planner.compile("alu_fma.comp", {"UNROLL": 8, "A": 1}, "main", block=64, args="bbu", label="fp32")
    assert kernel.handle is None and kernel.name == "fp32"
    assert planner.requests == [Request("alu_fma.comp", (("A", 1), ("UNROLL", 8)), "main", 64, "bbu", "fp32")]
    assert planner.limits.units == 4 and planner.grid_threads(2) == 256     # questions pass through
    planner.free("anything")                                                 # releases do nothing
    assert planner.alloc(1 << 20).size == 1 << 20                            # a placeholder, no memory
    with pytest.raises(Planned):
        planner.upload(None, b"data")
    assert rt.calls == [], "a plan never reaches the device"


def quick_tests(*names):
    return [CATALOG.get(n) for n in names]


def test_the_selection_is_compiled_ahead_and_the_run_compiles_nothing(vulkan_device, monkeypatch, tmp_path):
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path))
    tests = quick_tests("compute.fp32", "compute.int32", "sfu.rsqrt", "memory.read", "launch.overhead")
    settings = Settings.quick()
    by_test = ahead.requests(vulkan_device, tests, settings)
    wanted = {r for requests in by_test.values() for r in requests}
    sources = {r.source for r in wanted}
    assert {"alu_fma.comp", "sfu.comp", "mem_stream.comp", "empty.comp"} <= sources, sources
    assert all(len(rs) == len(set(rs)) for rs in by_test.values()), "each request once a test"
    made = ahead.compile_ahead(vulkan_device, tests, settings)
    assert made.kernels == len(wanted) and made.failed == 0 and "compiled" in made.describe()
    # with every module in the cache, the run never starts a compiler
    import peakbench.vulkan.shaders as shaders

    def no_compiler(*args, **kwargs):
        raise AssertionError(f"compiled during the run: {args[0]}")
    monkeypatch.setattr(shaders, "run_tool", no_compiler)
    for test in tests:
        result = run_test(vulkan_device, test, settings, lambda line: None)
        assert result.status == "ok", (test.name, result.reason)


def test_a_failed_prefetch_is_left_to_its_test(vulkan_device, monkeypatch, tmp_path):
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path))

    def broken(request):
        raise RuntimeError("compiler crashed")
    monkeypatch.setattr(vulkan_device, "prefetch", broken)
    tests = quick_tests("compute.fp32")
    made = ahead.compile_ahead(vulkan_device, tests, Settings.quick())
    assert made.failed == made.kernels > 0 and "left to their tests" in made.describe()
    monkeypatch.undo()
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path))
    assert run_test(vulkan_device, tests[0], Settings.quick(), lambda line: None).status == "ok"


def test_families_that_build_outside_the_runtime_are_not_planned(vulkan_device):
    # a vendor GEMM or a host copy makes library handles and buffers of its own before anything
    for name in ("transfer.h2d", "transfer.d2h"):
        test = CATALOG.get(name)
        assert all(vulkan_device.plan(test, v) == [] for v in vulkan_device.variants(test))


def test_rocm_code_objects_made_ahead_are_the_ones_the_run_loads(rocm_device, fakes, monkeypatch, tmp_path):
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path))
    _, rtc = fakes
    tests = quick_tests("compute.fp32", "memory.read")
    # without hiprtc's version nothing is cached, so nothing is made ahead (it would compile twice)
    ahead.compile_ahead(rocm_device, tests, Settings.quick())
    assert rtc.programs == []
    rocm_device.rt.__dict__["compiler_version"] = "hiprtc 60342134 hip 60342134"
    made = ahead.compile_ahead(rocm_device, tests, Settings.quick())
    assert made and made.failed == 0
    compiled = len(rtc.programs)
    assert compiled == made.kernels
    # the run's own compiles, their defines in the workloads' order, find what was made ahead
    for test in tests:
        run_test(rocm_device, test, Settings.quick(), lambda line: None)
    assert len(rtc.programs) == compiled, "the run compiled again what was made ahead"
    assert len(rocm_device.rt._modules) == compiled, "every kernel made ahead was loaded by its test"


def test_the_slowest_request_is_named_as_the_floor_of_the_wait():
    made = ahead.compile_ahead(Slow(), quick_tests("compute.fp32", "sfu.sin", "sfu.rcp"), Settings.quick())
    assert made.kernels == 3 and made.longest[0] == "sfu.sin" and 0.3 <= made.longest[1] <= made.seconds
    assert "(the longest, sfu.sin, 0.3 s)" in made.describe()


class Slow:
    """A device whose compiler takes 0.3 s for sfu.sin's kernel and 0.01 s for any other."""
    def support(self, test):
        return None

    def variants(self, test):
        return test.variants

    def plan(self, test, variant, spec=None):
        return [Request("k.comp", (), "main", 1, "", test.name)]

    def prefetch(self, request):
        import time
        time.sleep(0.3 if request.label == "sfu.sin" else 0.01)


def test_a_test_waits_for_its_own_kernels_while_the_rest_are_made():
    import time
    tests = quick_tests("compute.fp32", "sfu.sin", "sfu.rcp")
    pending = ahead.start(Slow(), tests, Settings.quick())
    began = time.perf_counter()
    pending.wait_for(tests[0])
    assert time.perf_counter() - began < 0.2 and not pending.done(), "compute.fp32 waited for sfu.sin's kernel"
    pending.wait_for(tests[1])
    assert pending.futures[pending.by_test["sfu.sin"][0]].done()
    made = pending.finish()
    assert made.kernels == 3 and made.failed == 0 and 0.3 <= made.seconds < 1.0


def test_the_run_drains_the_pool_before_a_host_timed_test(rocm_device, fakes, monkeypatch, tmp_path, capsys):
    # on a GPU (the fake MI300X) the tests start while the pool compiles; a test the host times
    # waits for all of it. The tests themselves are not what is tested here: each is unsupported.
    from peakbench import cli
    from peakbench.harness import session
    from peakbench.report.result import Result
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(session, "run_test", lambda device, test, *a: Result(test.name, "unsupported", test.unit,
                                                                               reason="[api] not measured here"))
    monkeypatch.setattr(ahead.Pending, "done", lambda self: False)     # as a pool still compiling
    cli.main(["--backend", "rocm", "--quick", "--tests", "compute.fp32,compute.int32,launch.overhead"])
    err = capsys.readouterr().err
    started = err.index("kernels ahead on")
    assert "each test waiting for its own" in err[started:err.index("\n", started)], err
    assert err.index("compute.fp32 ...") < err.index("] compiled ") < err.index("launch.overhead ..."), err


def test_a_run_that_ends_early_drops_the_requests_not_started(monkeypatch):
    # one worker, three requests of 0.3 s: the first is running when the run ends, the others dropped
    import time
    monkeypatch.setattr(ahead, "workers", lambda: 1)
    slow = Slow()
    slow.prefetch = lambda request: time.sleep(0.3)
    pending = ahead.start(slow, quick_tests("sfu.sin", "compute.fp32", "sfu.rcp"), Settings.quick())
    while not any(f.running() or f.done() for f in pending.futures.values()):
        time.sleep(0.01)
    made = pending.finish(cancel=True)
    assert made.workers == 1 and made.kernels == 1 and made.failed == 0, made

"""Planted faults, one at a time, the way a broken kernel, a wrong formula or a driver bug would
look: a plain `peakbench --backend vulkan --quick` run on lavapipe reports each test `failed`
with the reason of the guard that caught it (peakbench/harness/guards.py).

Kernel faults are edits of a copy of shaders/ that the run finds through PEAKBENCH_SHADERS, in a
subprocess, as a kernel developer would run it; faults in formulas, the timer and the chase's
layout are not kernels and are planted in-process through cli.main.

The CUDA-dialect path is planted through the fake HIP runtime at the end (`peakbench --backend
rocm --quick`, a numpy player for shaders/alu.cu); its types and work guards read real code
objects in tests/test_rocm_census.py, the SASS ones tests/test_cuda_census.py and
tests/test_vulkan_sass_evidence.py. A plain quick run on lavapipe, with no fault, is all ok or
unsupported (test_a_plain_quick_run_raises_no_false_alarm)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest

from peakbench.sources import SHADERS

lavapipe = pytest.mark.usefixtures("vulkan_backend")


def results(path) -> dict:
    doc = json.loads(path.read_text())
    return {r["test"]: r for run in doc["runs"] for r in run["results"]}


def run_edited(tmp_path, source: str, old: str, new: str, tests: str, profile=("--quick",)) -> dict:
    """The CLI on a copy of shaders/ whose `source` has `old` replaced by `new` (once); `profile`:
    the default suite (()) where the fault is in a variant the screening profile does not run."""
    folder = tmp_path / "shaders"
    shutil.copytree(SHADERS, folder)
    text = (folder / source).read_text()
    assert text.count(old) == 1, f"{source}: the fault's anchor {old!r} is not there once"
    (folder / source).write_text(text.replace(old, new))
    out = tmp_path / "out.json"
    env = {**os.environ, "PEAKBENCH_SHADERS": str(folder), "PEAKBENCH_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "peakbench", "--backend", "vulkan", *profile, "--tests", tests,
                           "--json", str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    return results(out)


def run_inprocess(tmp_path, monkeypatch, tests: str, *extra: str, quick: bool = True) -> dict:
    """A plain run in this process (--quick unless `quick` is False: every variant), which must exit 1."""
    from peakbench import cli
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out.json"
    profile = ["--quick"] if quick else []
    assert cli.main(["--backend", "vulkan", *profile, "--tests", tests, "--json", str(out), *extra]) == 1
    return results(out)


def levels_found(tmp_path, monkeypatch, tests: str, *extra: str) -> dict:
    """The latency levels a planted run found, each of which must fail. lavapipe's levels are the
    host CPU's caches: on a host loaded by other work its quick sweep has found none (every
    latency test unsupported, the run exiting 0), and then there is nothing to catch: skipped."""
    from peakbench import cli
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out.json"
    code = cli.main(["--backend", "vulkan", "--quick", "--tests", tests, "--json", str(out), *extra])
    found = {t: r for t, r in results(out).items() if r["status"] != "unsupported"}
    if not found:
        pytest.skip(f"the latency sweep found no level on this host: {next(iter(results(out).values()))['reason']}")
    assert code == 1
    return found


def assert_caught(result: dict, guard: str, *words: str) -> None:
    assert result["status"] == "failed", result
    assert result["reason"].startswith(f"guard {guard}: "), result["reason"]
    for w in words:
        assert w in result["reason"], result["reason"]


# -- kernels ---------------------------------------------------------------------------------
@lavapipe
def test_an_alu_loop_doing_half_its_iterations_fails_the_iterations_guard(tmp_path):
    r = run_edited(tmp_path, "alu_fma.comp", "i < push.iterations; i++", "i < push.iterations; i += 2", "compute.fp32")
    assert_caught(r["compute.fp32"], "iterations", "after 2 iterations", "matched after 1")


@lavapipe
def test_scalar_fp16_work_under_the_packed_label_fails_the_types_guard(tmp_path):
    # Lane by lane: the same results, so only the module's types tell.
    r = run_edited(tmp_path, "alu_fma.comp", "acc[k] = fma(acc[k], b_, c_);",
                   "acc[k].x = fma(acc[k].x, b_.x, c_.x); acc[k].y = fma(acc[k].y, b_.y, c_.y);", "compute.fp16")
    assert_caught(r["compute.fp16"], "types", "f16 arithmetic", "packed f16x2")


@lavapipe
def test_a_kernel_doing_less_work_per_step_fails_the_work_guard(tmp_path):
    # x = x * b + c as one multiply: fewer ops than the catalog counts (the check at 1 and 2
    # iterations would catch the values too; the work guard reads the module first).
    r = run_edited(tmp_path, "alu_fma.comp", "acc[k] = acc[k] * b_ + c_;", "acc[k] = acc[k] * b_;", "compute.int32")
    assert_caught(r["compute.int32"], "work", "512 OpIMul i32", "the catalog claims 1024")


@lavapipe
def test_a_read_doing_half_its_passes_fails_the_iterations_guard(tmp_path):
    # The chunk read is memory.read's and the mapped host read's (transfer.h2d) alike.
    r = run_edited(tmp_path, "mem_stream.comp", "pass < push.passes; pass++) {", "pass < push.passes; pass += 2) {",
                   "memory.read,transfer.h2d", profile=())
    assert_caught(r["memory.read"], "iterations", "variant chunk", "after 2 passes")
    assert_caught(r["transfer.h2d"], "iterations", "variant mapped", "after 2 passes")


# -- formulas, timer, layout -------------------------------------------------------------------
@lavapipe
def test_a_doubled_op_count_fails_the_work_guard(tmp_path, monkeypatch):
    from peakbench.catalog import ComputeTest
    monkeypatch.setattr(ComputeTest, "per_item", lambda self, variant: 2 * variant.ops_per_step)
    r = run_inprocess(tmp_path, monkeypatch, "compute.fp32")
    assert_caught(r["compute.fp32"], "work", "512 Fma f32 = 1024 ops", "the catalog claims 2048")


@lavapipe
def test_a_timer_ten_times_too_fast_fails_the_timer_guard(tmp_path, monkeypatch):
    from peakbench.vulkan.runtime import VulkanRuntime
    launch = VulkanRuntime.launch
    monkeypatch.setattr(VulkanRuntime, "launch", lambda self, *a, **k: launch(self, *a, **k) / 10)
    r = run_inprocess(tmp_path, monkeypatch, "compute.fp32,memory.write")
    assert_caught(r["compute.fp32"], "timer", "the GPU timer runs fast")
    assert_caught(r["memory.write"], "timer", "the GPU timer runs fast")


@lavapipe
def test_a_chase_with_16_byte_steps_fails_the_stride_guard(tmp_path, monkeypatch):
    from peakbench.workloads import chase
    monkeypatch.setattr(chase, "LINE", 16)
    r = run_inprocess(tmp_path, monkeypatch, "latency.l1")
    assert_caught(r["latency.l1"], "chase-stride", "nodes 16 B apart", "cache line")


@lavapipe
def test_an_fp16_kernel_under_the_fp8_label_is_never_ok(tmp_path, monkeypatch):
    from peakbench.catalog import default_catalog
    from peakbench.vulkan import capabilities
    fp16 = default_catalog().get("compute.fp16")
    table = capabilities.TABLE
    support, variants, alu_kernel = table.support, table.variants, table.alu_kernel
    monkeypatch.setattr(table, "support", lambda test, rt: None if test.name == "compute.fp8_e4m3" else support(test, rt))
    monkeypatch.setattr(table, "variants", lambda test, rt: fp16.variants if test.name == "compute.fp8_e4m3" else variants(test, rt))
    monkeypatch.setattr(table, "alu_kernel", lambda test, v, rt: alu_kernel(fp16, v, rt))
    r = run_inprocess(tmp_path, monkeypatch, "compute.fp8_e4m3")
    assert_caught(r["compute.fp8_e4m3"], "types", "no native kernel")


def test_the_module_types_against_the_label():
    """The types guard on its own: an fp16 module under an FP8 label (a backend that skips the
    session's rule) and an int8 module under fp32 fail; the test's own types pass."""
    from peakbench.catalog import default_catalog
    from peakbench.harness import guards
    from peakbench.runtime import LoopCensus
    cat = default_catalog()
    f16 = LoopCensus({"Fma f16x2": 512}, 2048, frozenset({"f16x2"}), "SPIR-V")
    fp8 = cat.get("compute.fp8_e4m3")
    problem, _ = guards.types(fp8, None, f16)
    assert problem == "module does f16x2 arithmetic; test compute.fp8_e4m3 is fp8_e4m3 (fp8_e4m3)"
    fp16 = cat.get("compute.fp16")
    assert guards.types(fp16, fp16.variants[0], f16) == (None, "f16x2 (SPIR-V)")
    problem, _ = guards.types(cat.get("compute.fp32"), None, f16)
    assert problem == "module does f16x2 arithmetic; test compute.fp32 is fp32 (f32)"
    # the atomics' type is their variant's; the special functions' FP32
    atomic = cat.get("atomic.global_add")
    u32, f32 = (next(v for v in atomic.variants if v.name == t) for t in ("u32", "f32"))
    integer = LoopCensus({"REDG.E.ADD.STRONG.GPU": 16}, 16, frozenset({"u32"}), "SASS")
    assert guards.types(atomic, u32, integer) == (None, "u32 (SASS)")
    problem, _ = guards.types(atomic, f32, integer)
    assert problem == "module does u32 arithmetic; test atomic.global_add is f32 (f32)"
    rsqrt = cat.get("sfu.rsqrt")
    assert guards.types(rsqrt, rsqrt.variants[0], LoopCensus({"MUFU.RSQ": 8}, 8, frozenset({"f32"}), "SASS"))[0] is None
    problem, _ = guards.types(rsqrt, rsqrt.variants[0], LoopCensus({"MUFU.RSQ64H": 8}, 8, frozenset({"f64"}), "SASS"))
    assert problem == "module does f64 arithmetic; test sfu.rsqrt is fp32 (f32)"


def spec_file(tmp_path, peak: float, boost_mhz: float) -> str:
    path = tmp_path / "lavapipe.toml"
    path.write_text(f'[[gpu]]\nname = "Planted"\nboost_clock_mhz = {boost_mhz}\n[gpu.peaks]\n"compute.fp32" = {peak}\n')
    return str(path)


@lavapipe
def test_a_rate_above_the_per_clock_peak_fails_the_clock_ceiling_guard(tmp_path, monkeypatch):
    from peakbench.vulkan.runtime import VulkanRuntime
    monkeypatch.setattr(VulkanRuntime, "clock_mhz", lambda self: 1000.0)
    # lavapipe does ~0.1 TFLOPS; a spec of 0.001 TFLOPS at 1000 MHz is the planted lie.
    r = run_inprocess(tmp_path, monkeypatch, "compute.fp32", "--spec", spec_file(tmp_path, 0.001, 1000))
    assert_caught(r["compute.fp32"], "clock-ceiling", "x the per-clock peak at 1000 MHz")


@lavapipe
def test_a_host_count_of_bytes_off_by_a_factor_fails_the_streams_work_guard(tmp_path, monkeypatch):
    # The host counts a copy's or an update's vector twice (per_item x2): the rate doubles, the
    # kernel's own loads and stores still move what they move.
    from peakbench.catalog.descriptors import MemoryTest
    per_item = MemoryTest.per_item
    monkeypatch.setattr(MemoryTest, "per_item", lambda self, variant: 2 * per_item(self, variant))
    r = run_inprocess(tmp_path, monkeypatch, "memory.copy,memory.update,memory.shared,memory.l2")
    assert_caught(r["memory.copy"], "work", "1 OpLoad i32x4 (load, 16 B), 1 OpStore i32x4 (store, 16 B) move 16 bytes"
                  " read and 16 written", "the catalog claims 64 bytes")
    assert_caught(r["memory.update"], "work", "2 OpLoad i32x4 (load, 16 B), 1 OpStore", "the catalog claims 96 bytes")
    for test in ("memory.shared", "memory.l2"):       # the on-chip reads: 16 loads a pass, counted as 32
        assert_caught(r[test], "work", "16 OpLoad i32x4 (load, 16 B) move 256 bytes read", "the catalog claims 512 bytes")


@lavapipe
@pytest.mark.parametrize("test, old, new, words", [
    # the copy reads a neighbour too: twice the bytes read that the catalog counts
    ("memory.copy", "dst[j] = src[j];", "dst[j] = src[j] + src[j ^ 1u];", "2 OpLoad i32x4 (load, 16 B), 1 OpStore"),
    # the update no longer reads what it adds to: a copy's traffic under the update's name
    ("memory.update", "dst[j] += src[j];", "dst[j] = src[j] + uvec4(1u);", "1 OpLoad i32x4 (load, 16 B), 1 OpStore"),
])
def test_a_stream_kernel_moving_other_bytes_than_counted_fails_the_work_guard(tmp_path, test, old, new, words):
    r = run_edited(tmp_path, "mem_stream.comp", old, new, test)
    assert_caught(r[test], "work", words)


@lavapipe
@pytest.mark.parametrize("test, source, old", [
    # every other of the pass's 16 loads left out: half the bytes the host counts
    ("memory.shared", "onchip_shared.comp", "acc[u % SUMS] += s[at + 32 * u];"),
    ("memory.l2", "onchip_l2.comp", "acc[u % SUMS] += src[(base + i + u * lane) & push.mask];"),
])
def test_an_on_chip_read_loading_half_the_bytes_counted_fails_the_work_guard(tmp_path, test, source, old):
    target, _, load = old.partition(" += ")
    r = run_edited(tmp_path, source, old, f"{target} += u % 2u == 0u ? {load[:-1]} : uvec4(0u);", test)
    assert_caught(r[test], "work", "8 OpLoad i32x4 (load, 16 B) move 128 bytes read", "the catalog claims 256 bytes")


@lavapipe
def test_a_stream_above_the_gpus_memory_bandwidth_fails_the_bound_guard(tmp_path, monkeypatch):
    # lavapipe streams 1-10 GB/s; a spec whose memory moves 0.001 GB/s is the planted bound, as a
    # host count of bytes far too high would read against the real one.
    path = tmp_path / "slow-memory.toml"
    path.write_text('[[gpu]]\nname = "Planted"\nboost_clock_mhz = 1000\nmemory_bandwidth_gbs = 0.001\n'
                    '[gpu.peaks]\n"compute.fp32" = 1.0\n')
    r = run_inprocess(tmp_path, monkeypatch, "memory.write,memory.update", "--spec", str(path))
    for test in ("memory.write", "memory.update"):
        assert_caught(r[test], "bound", "GB/s of spec Planted")


@lavapipe
def test_a_cycle_count_above_the_maximum_clock_fails_the_cycle_clock_guard(tmp_path, monkeypatch, vulkan_device):
    if not vulkan_device.rt.kernel_clock:
        pytest.skip("this driver's kernels cannot read a cycle counter")
    # Every level the sweep finds fails: by its counter's clock, or where a loaded host's sweep kept
    # no counter reading for it (a full suite on 2 cores), by its latency under one cycle of 1 MHz.
    for result in levels_found(tmp_path, monkeypatch, "latency.l1,latency.dram",
                               "--spec", spec_file(tmp_path, 1.0, 1)).values():
        if result["reason"].startswith("guard bound: "):
            assert_caught(result, "bound", "one cycle at the 1 MHz maximum")
        else:
            assert_caught(result, "cycle-clock", "the device's maximum is 1 MHz")


@lavapipe
@pytest.mark.parametrize("tests", ["latency.l1,latency.dram", "latency.shared"])
def test_a_host_count_of_loads_off_by_two_fails_the_cycles_guard(tmp_path, monkeypatch, vulkan_device, tests):
    # The host claims twice the loads each launch did (the sweep's and the shared chase's):
    # every latency halves, the core's counter still counts each load's cycles.
    if not vulkan_device.rt.kernel_clock:
        pytest.skip("this driver's kernels cannot read a cycle counter")
    from peakbench.workloads import chase, onchip
    monkeypatch.setattr(chase.ChaseSweep, "items", lambda self, rounds: 2 * rounds * chase.ROUND)
    monkeypatch.setattr(onchip.SharedChaseWorkload, "items", lambda self, size: 2 * size * chase.ROUND)
    for result in levels_found(tmp_path, monkeypatch, tests).values():
        assert_caught(result, "cycles", "cycles a load; the counter read")


@lavapipe
def test_a_timer_ten_times_too_slow_fails_the_timer_guard(tmp_path, monkeypatch):
    from peakbench.vulkan.runtime import VulkanRuntime
    launch = VulkanRuntime.launch
    monkeypatch.setattr(VulkanRuntime, "launch", lambda self, *a, **k: launch(self, *a, **k) * 10)
    # Burn-in's 50 ms samples: a launch calibrated by the slow timer still runs 5 ms, which a host
    # busy with other tests cannot stretch ten times over; quick's 5 ms samples became 0.5 ms
    # launches, and on 2 loaded cores each one's wall time once passed ten times its GPU time.
    from peakbench import cli
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out.json"
    assert cli.main(["--backend", "vulkan", "--profile", "burn-in", "--duration", "2", "--tests", "compute.fp32",
                     "--json", str(out)]) == 1
    assert_caught(results(out)["compute.fp32"], "timer", "the GPU timer runs slow")


@lavapipe
def test_a_timer_ten_times_too_slow_fails_every_level_the_latency_sweep_found(tmp_path, monkeypatch):
    # The chase's timed launches are judged too: 10x slow, each level's latencies are 10x high.
    from peakbench.vulkan.runtime import VulkanRuntime
    launch = VulkanRuntime.launch
    monkeypatch.setattr(VulkanRuntime, "launch", lambda self, *a, **k: launch(self, *a, **k) * 10)
    for result in levels_found(tmp_path, monkeypatch, "latency.l1,latency.l2,latency.l3,latency.dram").values():
        assert_caught(result, "timer", "the GPU timer runs slow")


@lavapipe
def test_an_int64_loop_doing_less_work_per_step_fails_the_work_guard(tmp_path):
    # the 64-bit integer path (GLSL int64_t): a multiply where the catalog counts a multiply-add
    r = run_edited(tmp_path, "alu_fma.comp", "acc[k] = acc[k] * b_ + c_;", "acc[k] = acc[k] * b_;", "compute.int64")
    if r["compute.int64"]["status"] == "unsupported":
        pytest.skip(r["compute.int64"]["reason"])
    assert_caught(r["compute.int64"], "work", "512 OpIMul i64", "the catalog claims 1024")


@lavapipe
def test_atomics_folded_into_one_add_an_iteration_fail_the_work_guard(tmp_path):
    # One add of v * UNROLL where the catalog counts UNROLL adds of v: the same sums after every
    # count (the iterations guard passes), a sixteenth of the atomics.
    r = run_edited(tmp_path, "atomic.comp", "u < UNROLL; u++) atomicAdd(words[at], v);",
                   "u < 1u; u++) atomicAdd(words[at], v * T(UNROLL));", "atomic.global_add,atomic.global_add_contended")
    for name in ("atomic.global_add", "atomic.global_add_contended"):
        assert_caught(r[name], "work", "1 OpAtomicIAdd i32 = 1 ops", "the catalog claims 16")


@lavapipe
def test_a_fault_in_the_float_atomics_alone_fails_a_quick_run(tmp_path):
    # --quick measures both variants of an atomic test (runner.SCREEN_ALL): half the float adds,
    # the integer ones untouched, still fails the screening run
    r = run_edited(tmp_path, "atomic.comp", "u < UNROLL; u++) atomicAdd(words[at], v);",
                   "u < (IS_FLOAT != 0 ? UNROLL / 2 : UNROLL); u++) atomicAdd(words[at], v);",
                   "atomic.global_add,atomic.global_add_contended")
    for name in ("atomic.global_add", "atomic.global_add_contended"):
        assert_caught(r[name], "work", "variant f32", "8 OpAtomicFAddEXT f32 = 8 ops", "the catalog claims 16")


@lavapipe
def test_float_atomics_made_integer_adds_fail_the_types_guard(tmp_path):
    # the f32 variant adding 32-bit integers: as many adds, the sums its own, another test's work
    r = run_edited(tmp_path, "atomic.comp", "#define T float", "#define T uint", "atomic.global_add")
    assert_caught(r["atomic.global_add"], "types", "variant f32", "module does i32 arithmetic",
                  "test atomic.global_add is f32 (f32)")


@lavapipe
def test_a_special_function_computed_in_double_fails_the_types_guard(tmp_path):
    # a reciprocal square root taken in FP64 (a double promoted by a stray literal or cast)
    r = run_edited(tmp_path, "sfu.comp", "#define F(x) inversesqrt(x)",
                   "#define F(x) float(inversesqrt(double(x)))", "sfu.rsqrt")
    assert_caught(r["sfu.rsqrt"], "types", "module does f64 arithmetic; test sfu.rsqrt is fp32 (f32)")


@lavapipe
@pytest.mark.parametrize("descriptor, tests, words", [
    ("atomic.AtomicTest", "atomic.*", "16 OpAtomicIAdd i32 = 16 ops, the catalog claims 32"),
    ("sfu.SfuTest", "sfu.sin,sfu.rcp", "= 256 ops, the catalog claims 512"),
])
def test_a_host_count_of_atomics_or_function_results_off_by_two_fails_the_work_guard(tmp_path, monkeypatch,
                                                                                   descriptor, tests, words):
    import importlib
    module, name = descriptor.split(".")
    cls = getattr(importlib.import_module(f"peakbench.catalog.{module}"), name)
    per_item = cls.per_item
    monkeypatch.setattr(cls, "per_item", lambda self, variant: 2 * per_item(self, variant))
    r = run_inprocess(tmp_path, monkeypatch, tests)
    assert r and all(t["status"] == "failed" for t in r.values()), r
    for t in r.values():
        assert_caught(t, "work", words)


def long_launch(args, repeat: int) -> bool:
    """A launch past the checks' (which run 1 and 2 iterations or passes, one launch each)."""
    from peakbench.vulkan.device import Buffer
    return repeat > 2 or any(int(a) > 2 for a in args if not isinstance(a, Buffer))


def plant_lost_launches(monkeypatch, jitter_s: float = 0.0) -> None:
    """A runtime that skips a long launch identical to the one before (a command buffer thought
    still valid), waiting as long as the earlier one took and reporting its time (plus `jitter_s`
    in turn, a timer's tick): the checks at 1 and 2 iterations or passes and the timer's GPU/wall
    pass; the timed launches are lost."""
    import itertools
    import time
    from peakbench.vulkan.runtime import VulkanRuntime
    launch, last, ticks = VulkanRuntime.launch, {}, itertools.cycle((0, 1, 2))

    def lossy(self, kernel, grid, args, repeat=1):
        key = (kernel.name, grid, tuple(str(a) for a in args), repeat)
        if long_launch(args, repeat) and last.get("key") == key:
            time.sleep(last["seconds"])
            return last["seconds"] + jitter_s * next(ticks)
        last.update(key=key, seconds=launch(self, kernel, grid, args, repeat))
        return last["seconds"]
    monkeypatch.setattr(VulkanRuntime, "launch", lossy)


@lavapipe
def test_launches_lost_after_the_first_fail_the_timer_guard_as_a_replayed_time(tmp_path, monkeypatch):
    # The tests whose launches each leave the same output (a special function's, a cache read's, a
    # shared-memory atomic's, the ALU's) see nothing else of the lost launches.
    plant_lost_launches(monkeypatch)
    tests = "sfu.rcp,atomic.shared_add,memory.l2,compute.fp32,atomic.global_add"
    r = run_inprocess(tmp_path, monkeypatch, tests)
    assert set(r) == set(tests.split(","))
    for t in r.values():
        assert_caught(t, "timer", "to the last bit: a time replayed, not measured")


@lavapipe
def test_launches_lost_after_the_first_behind_a_jittered_time_fail_the_measured_guard(tmp_path, monkeypatch):
    # The replayed time given a tick of jitter passes the timer; an atomic buffer sums every
    # launch, an update's destination every pass.
    plant_lost_launches(monkeypatch, jitter_s=1e-9)
    r = run_inprocess(tmp_path, monkeypatch, "atomic.global_add,atomic.global_add_contended,memory.update")
    for name in ("atomic.global_add", "atomic.global_add_contended"):
        assert_caught(r[name], "measured", "iterations launched since the check", "differ from the host's sums")
    assert_caught(r["memory.update"], "measured", "passes since the check", "differs from the host's")


@lavapipe
def test_launches_lost_after_the_first_behind_a_jittered_time_fail_the_launches_guard(tmp_path, monkeypatch):
    # Each launch of these leaves the same output (a read's sums, a write's or copy's destination
    # too), so only the kernel's own count of its workgroups (workloads/witness.py) sees the
    # launches that never ran.
    plant_lost_launches(monkeypatch, jitter_s=1e-9)
    tests = "sfu.rcp,atomic.shared_add,memory.l2,memory.shared,compute.fp32,compute.int8,memory.read,memory.write,memory.copy"
    r = run_inprocess(tmp_path, monkeypatch, tests)
    assert set(r) == set(tests.split(","))
    for t in r.values():
        assert_caught(t, "launches", "workgroups of the", "launches lost or cut short")


@lavapipe
def test_runs_that_launch_nothing_behind_a_jittered_time_fail_the_launches_guard(tmp_path, monkeypatch):
    # The fault above the runtime: a workload's run that, for a long run like the one before it,
    # launches nothing and reports that one's time again (plus a tick), the wall time waited out.
    # The kernel's count agrees with the launches made; the runs timed outnumber them.
    import itertools
    import time
    from peakbench.workloads.alu import AluWorkload
    from peakbench.workloads.atomic import AtomicWorkload
    from peakbench.workloads.onchip import L2Workload
    from peakbench.workloads.sfu import SfuWorkload
    for cls in (AluWorkload, AtomicWorkload, L2Workload, SfuWorkload):
        def lossy(self, size, run=cls.run, last={}, ticks=itertools.cycle((0, 1, 2))):
            if size > 2 and last.get(id(self)) and last[id(self)][0] == size:
                time.sleep(last[id(self)][1])
                return last[id(self)][1] + 1e-9 * next(ticks)
            last[id(self)] = (size, run(self, size))
            return last[id(self)][1]
        monkeypatch.setattr(cls, "run", lossy)
    tests = "sfu.rcp,atomic.shared_add,memory.l2,compute.fp32"
    r = run_inprocess(tmp_path, monkeypatch, tests)
    assert set(r) == set(tests.split(","))
    for t in r.values():
        assert_caught(t, "launches", "runs timed", "runs that launched nothing")


@lavapipe
def test_launches_cut_short_of_their_workgroups_fail_the_launches_guard(tmp_path, monkeypatch):
    # A runtime that dispatches one workgroup fewer than asked, once the checks are done: the
    # sampled output of the checks cannot see it, the kernel's count does.
    from peakbench.vulkan.runtime import VulkanRuntime
    launch = VulkanRuntime.launch

    def short(self, kernel, grid, args, repeat=1):
        return launch(self, kernel, grid - 1 if long_launch(args, repeat) and grid > 1 else grid, args, repeat)
    monkeypatch.setattr(VulkanRuntime, "launch", short)
    r = run_inprocess(tmp_path, monkeypatch, "sfu.rcp,compute.fp32")
    assert set(r) == {"sfu.rcp", "compute.fp32"}
    for t in r.values():
        assert_caught(t, "launches", "launches lost or cut short")


@lavapipe
@pytest.mark.parametrize("fault, words", [
    # the host stops its clock at submission: a tenth of each launch's submit-to-fence time
    ("early", "the timed path does not wait for the launch to complete"),
    # the timed path submits nothing and reads the clock twice
    ("lost", "its output is not the host's"),
])
def test_a_launch_path_that_does_not_wait_or_loses_launches_fails_the_measured_guard(tmp_path, monkeypatch, fault,
                                                                                     words):
    import time
    from peakbench.vulkan.runtime import VulkanRuntime
    real = VulkanRuntime.launch_times

    def planted(self, kernel, count, args=()):
        if fault == "early":
            return [t / 10 for t in real(self, kernel, count, args)]
        out = []
        for _ in range(count):
            t0 = time.perf_counter()
            out.append(time.perf_counter() - t0 + 1e-5)
        return out
    monkeypatch.setattr(VulkanRuntime, "launch_times", planted)
    r = run_inprocess(tmp_path, monkeypatch, "launch.overhead")
    assert_caught(r["launch.overhead"], "measured", "from submission to completion on the timed path", words)


@lavapipe
def test_a_launch_count_off_by_two_fails_the_work_guard(tmp_path, monkeypatch):
    # The catalog credits two launches to each host-timed one: the overhead would read half.
    from peakbench.catalog import LaunchTest
    monkeypatch.setattr(LaunchTest, "per_item", lambda self, variant: 2)
    r = run_inprocess(tmp_path, monkeypatch, "launch.overhead")
    assert_caught(r["launch.overhead"], "work", "each host time is of one launch, the catalog counts 2")


@lavapipe
def test_a_runtime_that_times_fewer_launches_than_asked_fails(tmp_path, monkeypatch):
    from peakbench.vulkan.runtime import VulkanRuntime
    real = VulkanRuntime.launch_times
    monkeypatch.setattr(VulkanRuntime, "launch_times", lambda self, kernel, count, args=():
                        real(self, kernel, count, args)[:max(1, count // 2)])
    r = run_inprocess(tmp_path, monkeypatch, "launch.overhead")
    assert r["launch.overhead"]["status"] == "failed"
    assert "the runtime timed" in r["launch.overhead"]["reason"], r["launch.overhead"]["reason"]


@lavapipe
def test_copies_lost_after_the_first_fail_the_measured_guard(tmp_path, monkeypatch):
    # A copy path that submits only the first copy of a launch and waits as long as all would take.
    import time
    from peakbench.vulkan.transfer import VulkanLink
    copy = VulkanLink.copy

    def first_only(self, jobs, nbytes, at):
        seconds = copy(self, jobs, nbytes, at[:1])
        time.sleep(seconds * (len(at) - 1))
        return seconds * len(at)
    monkeypatch.setattr(VulkanLink, "copy", first_only)
    r = run_inprocess(tmp_path, monkeypatch, "transfer.h2d,transfer.d2h")
    # a loaded host can calibrate one copy a launch (a copy past the sample time): nothing to lose there
    single = {name for name, t in r.items() if t["status"] == "ok"
              and "1 copy a launch" in t["evidence"]["guards"]["measured"]["why"]}
    if single == set(r):
        pytest.skip(f"this host calibrated one copy a launch for {sorted(single)}: no copy to lose")
    for name in sorted(set(r) - single):
        assert_caught(r[name], "measured", "copies a launch, each at its own offset", "bytes differ from the host data")


@lavapipe
def test_a_transfer_byte_count_off_by_two_fails_against_the_copies_handed_to_the_api(tmp_path, monkeypatch):
    # lavapipe has no spec to bound a link's rate: the counted bytes meet the bytes of the regions
    # the copies were handed, pinned and pageable, one way and both.
    from peakbench.workloads.transfer import TransferWorkload
    items = TransferWorkload.items
    monkeypatch.setattr(TransferWorkload, "items", lambda self, *a, **k: 2 * items(self, *a, **k))
    r = run_inprocess(tmp_path, monkeypatch, "transfer.h2d,transfer.bidir")      # bidir: both directions
    for name in ("transfer.h2d", "transfer.bidir"):
        assert_caught(r[name], "measured", "the last timed launch counted", "its copy calls were handed")


@lavapipe
def test_a_mapped_read_cut_short_at_the_measured_count_fails_the_measured_guard(tmp_path, monkeypatch):
    # Two passes whatever the count: the checks at 1 and 2 passes see nothing wrong, and lavapipe
    # has no link rate to bound it (it read 59.7 million GB/s, `ok`, before the measured guard).
    from peakbench.workloads.transfer import MappedReadWorkload
    run = MappedReadWorkload.run
    monkeypatch.setattr(MappedReadWorkload, "run", lambda self, size, n_vec=None: run(self, min(size, 2), n_vec))
    r = run_inprocess(tmp_path, monkeypatch, "transfer.h2d", quick=False)       # quick runs no mapped read
    assert_caught(r["transfer.h2d"], "measured", "variant mapped", "did not read their share")


@lavapipe
def test_a_mapped_read_byte_count_off_by_two_fails_against_what_its_kernel_read(tmp_path, monkeypatch):
    from peakbench.workloads.transfer import MappedReadWorkload
    items = MappedReadWorkload.items
    monkeypatch.setattr(MappedReadWorkload, "items", lambda self, size: 2 * items(self, size))
    r = run_inprocess(tmp_path, monkeypatch, "transfer.h2d", quick=False)
    assert_caught(r["transfer.h2d"], "measured", "variant mapped", "counted", "the kernel's")


@lavapipe
def test_a_plain_quick_run_raises_no_false_alarm(tmp_path):
    out = tmp_path / "out.json"
    env = {**os.environ, "PEAKBENCH_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "peakbench", "--backend", "vulkan", "--quick", "--json", str(out)],
                          env=env, capture_output=True, text=True, timeout=900)
    found = results(out)
    wrong = {name: r["reason"] for name, r in found.items() if r["status"] not in ("ok", "unsupported")}
    assert not wrong and done.returncode == 0, wrong or done.stderr
    ok = [r for r in found.values() if r["status"] == "ok"]
    assert any(r["test"].startswith("compute.") for r in ok)
    for r in ok:
        checks = r["evidence"].get("guards", {})
        if r["test"].startswith("compute."):
            assert checks["work"]["evidence"]["ops_counted"] % checks["work"]["evidence"]["ops_claimed"] == 0, r["test"]
            assert checks["types"]["why"].endswith("(SPIR-V)"), r["test"]
            assert checks["iterations"]["why"] == "iterations checked at 1 and 2", r["test"]
        if r["test"].startswith("latency.") and r["test"] != "latency.shared":   # the sweep's chain ends
            assert checks["iterations"]["verdict"] == "passed", r["test"]
            assert checks["iterations"]["why"].startswith("the chase ended on the node the host predicts")


# -- the CUDA dialect, through the fake HIP runtime ------------------------------------------------
MIB = 1 << 20


@pytest.fixture
def fake_rocm(monkeypatch):
    """A small fake MI300X as `hip` (2 CUs), no amdsmi; yields the FakeHip."""
    import fake_hip
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    gpu = fake_hip.mi300x(multiProcessorCount=2, maxThreadsPerMultiProcessor=256, totalGlobalMem=(1 << 30) + 64 * MIB)
    hip, rtc = fake_hip.pair([gpu])
    fake_hip.install(monkeypatch, hip, rtc)
    return hip


def alu_player(stop_after: int | None = None, seconds_per_iteration: float = 0.0):
    """shaders/alu.cu played in numpy (tests/test_workloads_alu.py) for the verification launches;
    `stop_after`: the loop ends after that many iterations (a lost trip count);
    `seconds_per_iteration`: host time each iteration takes (the wall time a timer is held to)."""
    import time

    import fake_hip
    from test_workloads_alu import alu_player as play_alu
    play = play_alu()

    def run(fake, launch):
        n = fake_hip.scalar(launch["extra"][3])
        time.sleep(n * seconds_per_iteration)
        if n <= 2:
            if stop_after is not None and n > stop_after:
                launch["extra"][3].value = stop_after
            play(fake, launch)
    return run


def run_rocm(tmp_path, tests: str, *extra: str, code: int = 1) -> dict:
    from peakbench import cli
    out = tmp_path / "out.json"
    assert cli.main(["--backend", "rocm", "--quick", "--tests", tests, "--json", str(out), *extra]) == code
    return results(out)


def test_through_the_fake_hip_a_loop_ending_early_fails_the_iterations_guard(tmp_path, fake_rocm):
    fake_rocm.kernels["alu"] = alu_player(stop_after=1)
    fake_rocm.elapsed_ms = lambda launch: 1e-3 * launch["extra"][3].value
    r = run_rocm(tmp_path, "compute.fp32")
    assert_caught(r["compute.fp32"], "iterations", "after 2 iterations", "matched after 1")


def test_through_the_fake_hip_a_timer_ten_times_too_fast_fails_the_timer_guard(tmp_path, fake_rocm):
    fake_rocm.kernels["alu"] = alu_player(seconds_per_iteration=1e-6)       # 1 us of wall time an iteration
    fake_rocm.elapsed_ms = lambda launch: 1e-4 * launch["extra"][3].value    # the GPU timer says 0.1 us
    r = run_rocm(tmp_path, "compute.fp32")
    assert_caught(r["compute.fp32"], "timer", "the GPU timer runs fast")


def test_through_the_fake_hip_a_rate_above_the_per_clock_peak_fails_the_clock_ceiling_guard(tmp_path, fake_rocm,
                                                                                             monkeypatch):
    from peakbench.rocm.runtime import HipRuntime
    monkeypatch.setattr(HipRuntime, "clock_mhz", lambda self: 1000.0)
    fake_rocm.kernels["alu"] = alu_player(seconds_per_iteration=1e-6)       # wall time as the GPU's
    fake_rocm.elapsed_ms = lambda launch: 1e-3 * launch["extra"][3].value
    r = run_rocm(tmp_path, "compute.fp32", "--spec", spec_file(tmp_path, 0.001, 1000))
    assert_caught(r["compute.fp32"], "clock-ceiling", "x the per-clock peak at 1000 MHz")


def test_through_the_fake_hip_a_chase_with_16_byte_steps_fails_the_stride_guard(tmp_path, fake_rocm, monkeypatch):
    from peakbench.workloads import chase
    monkeypatch.setattr(chase, "LINE", 16)
    monkeypatch.setattr(chase, "sweep", lambda rt, kernel, max_bytes, **kw: None)     # the guard reads the layout first
    r = run_rocm(tmp_path, "latency.l1")
    assert_caught(r["latency.l1"], "chase-stride", "nodes 16 B apart", "cache line 128 B (vendor documentation)")


def test_through_the_fake_hip_an_fp16_kernel_under_the_fp8_label_is_never_ok(tmp_path, fake_rocm, monkeypatch):
    from peakbench.catalog import default_catalog
    from peakbench.rocm import capabilities
    fp16 = default_catalog().get("compute.fp16")
    table = capabilities.TABLE
    support, variants = table.support, table.variants
    monkeypatch.setattr(table, "support", lambda test, rt: None if test.name == "compute.fp8_e4m3" else support(test, rt))
    monkeypatch.setattr(table, "variants", lambda test, rt: fp16.variants if test.name == "compute.fp8_e4m3" else variants(test, rt))
    r = run_rocm(tmp_path, "compute.fp8_e4m3")
    assert_caught(r["compute.fp8_e4m3"], "types", "no native kernel")


@lavapipe
def test_a_value_taken_from_the_wrong_sample_fails_the_statistics_guard(tmp_path, monkeypatch):
    # The runner's summary reports the best sample as the median (a statistic from the wrong
    # sample): the value no longer follows from the samples the result keeps.
    from peakbench.harness import runner, stats
    summarize = stats.summarize
    monkeypatch.setattr(runner, "summarize", lambda values: replace(summarize(values), median=max(values)))
    r = run_inprocess(tmp_path, monkeypatch, "compute.fp32,memory.write")
    for test in ("compute.fp32", "memory.write"):
        assert_caught(r[test], "statistics", "is not the median of its")


@lavapipe
@pytest.mark.parametrize("test, bounding", [("compute.int64", "compute.int32"), ("sfu.sqrt", "sfu.rsqrt"),
                                            ("atomic.shared_add", "memory.shared")])
def test_a_rate_above_the_test_that_bounds_it_fails_where_the_vendor_gives_no_peak(tmp_path, monkeypatch, test, bounding):
    # No peak of its own: a spec whose bounding test's peak lavapipe already exceeds many times is
    # the planted bound (lavapipe reads no clock: the peak at the boost clock holds it).
    path = tmp_path / "bounding.toml"
    path.write_text(f'[[gpu]]\nname = "Planted"\nboost_clock_mhz = 1000\n[gpu.peaks]\n"{bounding}" = 1e-6\n')
    r = run_inprocess(tmp_path, monkeypatch, test, "--spec", str(path))
    if r[test]["status"] == "unsupported":
        pytest.skip(r[test]["reason"])
    assert_caught(r[test], "clock-ceiling", f"x {bounding}'s peak of spec Planted")

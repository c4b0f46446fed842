"""peakbench.workloads.atomic: the host's sums, the kernels on lavapipe (every test, u32; f32 where
the device enables float atomics, else the reason), planted faults caught (a wrong address map,
a loop that stops early), the CUDA/HIP variant rules, and the host path through the fake HIP
runtime with a numpy player of shaders/atomic.cu."""
from __future__ import annotations

import numpy as np
import pytest

import fake_hip
from peakbench.catalog import default_catalog
from peakbench.kernels import atomic as kernels_atomic
from peakbench.workloads import atomic
from test_workloads import args, rt  # noqa: F401  (rt is a fixture)

CATALOG = default_catalog()
ATOMIC = [t for t in CATALOG.tests if t.family == "atomic"]
IDS = [t.name for t in ATOMIC]


def test_expected_sums_by_hand():
    distinct, contended = CATALOG.get("atomic.global_add"), CATALOG.get("atomic.global_add_contended")
    # 10 threads, v = gid % 5 + 1: 1 2 3 4 5 1 2 3 4 5; 3 adds each.
    assert atomic.expected(distinct, "u32", 10, 4, 3).tolist() == [3, 6, 9, 12, 15, 3, 6, 9, 12, 15]
    # warps of 4: (1+2+3+4), (5+1+2+3), (4+5) times 3
    assert atomic.expected(contended, "f32", 10, 4, 3).tolist() == [30.0, 33.0, 27.0]
    assert atomic.words(contended, 10, 4) == 3 and atomic.words(distinct, 10, 4) == 10


def test_a_wrong_count_or_address_map_is_caught():
    test = CATALOG.get("atomic.global_add_contended")
    good = atomic.expected(test, "u32", 256, 32, 16)
    assert atomic.check(test, "u32", 256, 32, 16, good) is None
    assert "differ from the host's sums" in atomic.check(test, "u32", 256, 32, 32, good)
    assert atomic.check(test, "u32", 256, 64, 16, atomic.expected(test, "u32", 256, 32, 16)[:4]) is not None


# -- lavapipe ---------------------------------------------------------------------------------
@pytest.mark.parametrize("test", ATOMIC, ids=IDS)
def test_vulkan_kernels_leave_the_host_sums(vulkan_device, test):
    assert vulkan_device.support(test) is None
    offered = vulkan_device.variants(test)
    assert "u32" in [v.name for v in offered]
    for variant in offered:
        w = vulkan_device.prepare(test, variant)
        try:
            assert w.verify() is None
            assert w.evidence["guards"]["iterations"]["why"] == "iterations checked at 1 and 2"
            assert w.items(3) == 3 * w.threads * variant.unroll and test.per_item(variant) == 1
            if test.contended:
                assert w.params["threads_per_address"] == vulkan_device.rt.limits.warp
            if "f32" not in [v.name for v in offered]:
                why = w.evidence["variants_unsupported"]["f32"]
                assert why.startswith(("[driver]", "[toolchain]")) and "shader_atomic_float" in why
        finally:
            w.close()


def test_vulkan_planted_address_map_is_caught(vulkan_device):
    """The kernel's subgroups are of rt.limits.warp invocations; a host that groups by twice that
    expects other sums."""
    test = CATALOG.get("atomic.global_add_contended")
    w = vulkan_device.prepare(test, test.variants[0])
    try:
        w.warp *= 2
        w.words = atomic.words(test, w.threads, w.warp)
        assert "differ from the host's sums" in w.verify()
    finally:
        w.close()


# -- CUDA/HIP ---------------------------------------------------------------------------------
class Rt:
    """What kernels/atomic.py reads of a runtime: HipRuntime's base target and family."""
    def __init__(self, dialect, arch):
        from peakbench.rocm import targets
        self.dialect, self.arch = dialect, targets.base_target(arch)
        family = targets.family(self.arch) if dialect == "hip" else None
        self.family = family.name if family else ""


def test_float_variants_follow_the_hardware():
    shared, glob = CATALOG.get("atomic.shared_add"), CATALOG.get("atomic.global_add")
    assert [v.name for v in kernels_atomic.variants(shared, Rt("cuda", "sm_90a"))] == ["u32"]
    assert kernels_atomic.missing(shared, Rt("cuda", "sm_90a"))["f32"].startswith("[hardware]")
    assert [v.name for v in kernels_atomic.variants(glob, Rt("cuda", "sm_90a"))] == ["u32", "f32"]
    assert [v.name for v in kernels_atomic.variants(shared, Rt("hip", "gfx1030"))] == ["u32", "f32"]
    assert "gfx1030" in kernels_atomic.missing(glob, Rt("hip", "gfx1030"))["f32"]
    for arch in ("gfx90a:sramecc+:xnack-", "gfx942", "gfx1100", "gfx1201"):
        assert kernels_atomic.missing(glob, Rt("hip", arch)) == {}


def atomic_player(one_iteration: bool = False, ignore_base: bool = False):
    """shaders/atomic.cu `atomic`: every thread adds gid % 5 + 1 to its word (from word `base`)
    iterations * UNROLL times (planted: never more than one iteration; the words from the
    buffer's start whatever `base` says)."""
    def play(fake, launch):
        d = fake_hip.defines(launch["options"])
        test = next(t for t in ATOMIC if (t.space == "shared") == (d["SHARED"] == "1")
                    and t.contended == (d["CONTENDED"] == "1"))
        dtype = "f32" if d["IS_FLOAT"] == "1" else "u32"
        out_arg, _, iterations, base = args(launch)      # _: the launch witness (fake_hip counts it)
        n = fake_hip.scalar(iterations)
        n = min(n, 1) if one_iteration else n
        at = 0 if ignore_base else 4 * fake_hip.scalar(base)
        threads = launch["grid"][0] * launch["block"][0]
        got = atomic.expected(test, dtype, threads, int(d["WARP"]), n * int(d["UNROLL"]))
        buf = fake.buffer(out_arg)
        # global words keep what earlier launches added; a shared word starts at 0 in each launch
        before = 0 if test.space == "shared" else np.frombuffer(bytes(buf[at:at + got.nbytes]), atomic.DTYPES[dtype])
        buf[at:at + got.nbytes] = (before + got).astype(atomic.DTYPES[dtype]).tobytes()
    return play


@pytest.mark.parametrize("test", ATOMIC, ids=IDS)
def test_hip_workload_verifies_and_a_loop_that_stops_early_fails_the_guard(rt, test):
    variant = test.variants[-1]                     # f32: native on gfx942 in both memories
    rt.fake.kernels["atomic"] = atomic_player()
    assert kernels_atomic.variants(test, rt) == test.variants
    w = kernels_atomic.workload(test, variant, rt)
    try:
        assert w.verify() is None
        options = fake_hip.defines(rt.fake.launches[-1]["options"])
        assert options["IS_FLOAT"] == "1" and options["WARP"] == "64" and options["UNROLL"] == "16"
        assert w.words == (2048 // 64 if test.contended else 2048)
    finally:
        w.close()
    rt.fake.kernels["atomic"] = atomic_player(one_iteration=True)
    w = kernels_atomic.workload(test, variant, rt)
    try:
        assert w.verify().startswith("guard iterations")
    finally:
        w.close()


@pytest.mark.parametrize("test", ATOMIC, ids=IDS)
def test_global_words_start_at_a_2_mib_boundary_and_a_kernel_that_ignores_it_fails(rt, test):
    rt.fake.kernels["atomic"] = atomic_player()
    pad = rt.alloc(4096)           # so the output starts off a boundary
    w = kernels_atomic.workload(test, test.variants[0], rt)
    try:
        start = rt.address(w.out) + 4 * w.base
        if test.space == "shared":
            assert w.base == 0 and w.params["placement"] == "from the buffer's start"
        else:
            assert start % atomic.PLACE == 0 and 0 <= 4 * w.base < atomic.PLACE
            assert w.params["placement"].startswith("from a 2 MiB boundary of device address")
        assert w.verify() is None
    finally:
        w.close()
    if test.space == "shared":
        return
    assert w.base > 0
    rt.fake.kernels["atomic"] = atomic_player(ignore_base=True)
    w = kernels_atomic.workload(test, test.variants[0], rt)
    try:
        assert "words differ from the host's sums (first at word 0: got" in w.verify()
    finally:
        w.close()
        rt.free(pad)


# -- what the compiler made of the add (the atomic census's forms) ------------------------------
def with_forms(monkeypatch, rt, forms: set[str], only: str = ""):
    """The device's runtime reads the real census of its kernel, with the compiler's `forms` as
    NVIDIA's Vulkan driver shows them (MATCH + REDUX; ATOMS.CAST.SPIN), for the kernels whose
    label holds `only`."""
    from dataclasses import replace
    monkeypatch.undo()
    real = type(rt).census
    monkeypatch.setattr(type(rt), "census", lambda self, kernel, kind="arithmetic": (
        replace(real(self, kernel, kind), forms=frozenset(forms)) if kind == "atomic" and only in kernel.name
        else real(self, kernel, kind)))


def test_the_census_counts_the_loops_adds_on_lavapipe(vulkan_device):
    test = CATALOG.get("atomic.global_add")
    w = vulkan_device.prepare(test, test.variants[0])
    try:
        assert w.census.ops == {"OpAtomicIAdd i32": test.variants[0].unroll} and w.census.source == "SPIR-V"
        assert w.loop_items == test.variants[0].unroll and not w.census.forms
    finally:
        w.close()


def test_an_aggregated_add_is_its_own_variant_counting_the_hardwares_atomics(vulkan_device, monkeypatch):
    test = CATALOG.get("atomic.global_add_contended")
    with_forms(monkeypatch, vulkan_device.rt, {"aggregated"})
    variant = test.variants[0]
    w = vulkan_device.prepare(test, variant)
    try:
        warp = vulkan_device.rt.limits.warp
        assert w.name == f"{variant.name}-aggregated" and w.combined == warp
        assert w.items(3) == 3 * w.threads * variant.unroll // warp
        assert f"sums each warp's {warp} adds to one address" in w.params["aggregated"]
        assert w.verify() is None                      # the sums are the same: only the count changes
    finally:
        w.close()
    # one address a thread: aggregation combines nothing, every add reaches memory
    distinct = CATALOG.get("atomic.global_add")
    w = vulkan_device.prepare(distinct, distinct.variants[0])
    try:
        assert w.name == distinct.variants[0].name and w.combined == 1
        assert "one address a thread: nothing is combined, every add is counted" in w.params["aggregated"]
    finally:
        w.close()


def test_a_compare_and_swap_loop_is_unsupported_and_the_other_variants_still_run(vulkan_device, monkeypatch):
    from peakbench.backend import Unsupported
    from peakbench.harness.runner import Settings
    from peakbench.harness.session import run_test
    test = CATALOG.get("atomic.shared_add")
    with_forms(monkeypatch, vulkan_device.rt, {"compare-and-swap"})
    with pytest.raises(Unsupported, match=r"^\[hardware\] the compiler makes the u32 atomic add in shared memory"
                                          r" a compare-and-swap loop \(SPIR-V: OpAtomicIAdd i32\)"):
        vulkan_device.prepare(test, test.variants[0])
    quick = Settings.quick()
    result = run_test(vulkan_device, test, quick, lambda _: None)
    assert result.status == "unsupported" and result.reason.startswith("[hardware] the compiler makes")
    # only the float add a CAS loop (as on NVIDIA): the u32 add is measured, the f32 refusal kept
    with_forms(monkeypatch, vulkan_device.rt, {"compare-and-swap"}, only="-f32")
    full = Settings(sample_s=0.002, min_samples=3, max_samples=3, budget_s=0.1, warmup_s=0.0)
    result = run_test(vulkan_device, test, full, lambda _: None)
    assert result.status == "ok", result.reason
    if "f32" in [v.name for v in vulkan_device.variants(test)]:
        assert result.params["variants"].keys() == {"u32"}
        assert result.evidence["variants_unsupported"]["f32"].startswith("[hardware] the compiler makes the f32")

"""The clock-ceiling guard's arithmetic, on a spec with round numbers (1 TFLOPS at 1000 MHz)."""
from types import SimpleNamespace

from peakbench.harness import guards
from peakbench.specs import GpuSpec

SPEC = GpuSpec("Round GPU", 1000.0, {"compute.fp32": 1.0})
TEST = SimpleNamespace(name="compute.fp32", unit="TFLOPS")


def test_a_rate_at_the_peak_of_its_clock_passes():
    problem, text = guards.clock_ceiling(TEST, 0.5, 500.0, SPEC)     # 0.5 TFLOPS at 500 MHz = 1.00x
    assert problem is None and "1.00x" in text


def test_a_rate_above_the_peak_even_at_the_boost_clock_fails():
    problem, _ = guards.clock_ceiling(TEST, 2.0, 1000.0, SPEC)       # 2.00x at 1000 MHz
    assert problem and "2.00x" in problem


def test_a_low_clock_reading_is_a_note_not_a_failure():
    # 0.9 TFLOPS read at 555 MHz: 1.62x the peak there, but 0.90x at the 1000 MHz boost clock, so
    # the clock sample (taken between launches) is what is wrong, not the rate.
    problem, text = guards.clock_ceiling(TEST, 0.9, 555.0, SPEC)
    assert problem is None
    assert "1.62x" in text and "looks low" in text and "0.90x" in text


# -- timer ---------------------------------------------------------------------------------------
def launches(gpu_s: float, wall_s: float, n: int) -> list[tuple[float, float]]:
    """n launches of about gpu_s, a nanosecond apart as a real timer's are (no two alike to the bit)."""
    return [(gpu_s + i * 1e-9, wall_s) for i in range(n)]


def test_a_busy_host_adds_wall_time_but_is_no_fast_timer():
    # lavapipe under load: most launches waited for the CPU, one did not
    timing = launches(0.00425, 0.0126, 9) + [(0.00425, 0.0045)]
    problem, text = guards.timer(timing)
    assert problem is None and text == ("GPU/wall 0.337 over 10 launches, at most 0.944 over 10 of 2 ms GPU time,"
                                        " 9 GPU times in 10 launches of its size")


def test_a_timer_fast_in_every_launch_fails():
    problem, _ = guards.timer([(0.005, 0.05)] * 5)
    assert problem == ("GPU time 5 ms for a launch whose host wall time was 50 ms: the GPU timer runs fast"
                       " (GPU/wall at most 0.10 over 5 launches, at least 0.25)")


def test_on_a_gpu_a_timer_twice_as_fast_fails_where_a_cpu_device_may_read_so():
    timing = launches(0.02, 0.05, 5)              # GPU/wall 0.4: a loaded lavapipe reads 0.33-0.38
    assert guards.timer(timing, cpu_device=True)[0] is None
    assert guards.timer(timing, cpu_device=False)[0] == (
        "GPU time 20 ms for a launch whose host wall time was 50 ms: the GPU timer runs fast"
        " (GPU/wall at most 0.40 over 5 launches, at least 0.5)")
    assert guards.timer(launches(0.0198, 0.0201, 5), cpu_device=False)[0] is None      # an H200 launch


def test_a_shortfall_a_busy_host_can_cause_is_no_fast_timer():
    # lavapipe with every core loaded: a 3.1 ms copy took 12.2 ms, a 28.5 ms dispatch 74.4 ms, a
    # 0.07 ms dispatch 2.2 ms
    assert guards.timer(launches(0.0031, 0.0122, 10))[0] is None
    assert guards.timer(launches(0.0285, 0.0744, 10))[0] is None
    assert guards.timer([(0.00007, 0.0022)] * 5) == (None, "GPU/wall 0.032 over 5 launches")     # judged for slow only


def test_a_timer_slow_in_any_launch_fails_and_short_launches_are_not_judged():
    problem, _ = guards.timer([(0.04, 0.004)] * 4 + [(0.004, 0.004)])
    assert problem and "the GPU timer runs slow (GPU/wall 10.00, at most 1.05; typically 10.00)" in problem
    # 10x slow on a loaded host: most launches waited 12 ms for the CPU, one did not
    problem, _ = guards.timer([(0.01, 0.012)] * 9 + [(0.01, 0.0011)])
    assert problem == ("GPU time 10 ms for a launch whose host wall time was 1.1 ms: the GPU timer runs slow"
                       " (GPU/wall 9.09, at most 1.05; typically 0.83)")
    assert guards.timer([(0.0001, 0.001)] * 5) == (None, "not checked: no launch of 2 ms or more")


def test_a_slow_timer_is_caught_where_the_launches_it_calibrated_are_short_in_wall_time():
    # A timer 10x slow makes a 5 ms sample 0.5 ms of wall time: judged by its GPU time.
    problem, _ = guards.timer([(0.005, 0.0005)] * 5)
    assert problem and "the GPU timer runs slow (GPU/wall 10.00, at most 1.05" in problem
    assert guards.timer(launches(0.0049, 0.0050, 5))[0] is None       # a true one: GPU time within wall time


def test_long_launches_all_alike_to_the_bit_are_a_replayed_time_and_fail():
    # a runtime that lost the launches after the first, sleeping as long and reporting its time again:
    # calibration's last launch, four of warm-up and five timed
    timing = [(0.0049713, 0.0050122)] * 5
    problem, evidence = guards.timer(timing, cpu_device=False, launches=[[0.0049713] * 10])
    assert problem == evidence == ("all 10 launches of its size read 4.9713 ms of GPU time to the last bit:"
                                   " a time replayed, not measured (launches lost and the first one's time"
                                   " reported again, or a timer query read stale)")
    # one launch apart by a tick is a timer read, as are steady launches of which some read alike
    problem, evidence = guards.timer(timing, cpu_device=False, launches=[[0.0049713] * 9 + [0.0049714]])
    assert problem is None and evidence.endswith("2 GPU times in 10 launches of its size")
    # too few launches to tell: without a warm-up's, the five samples alone
    assert guards.timer(timing, cpu_device=False)[0] is None
    assert guards.timer(timing * 2, cpu_device=False)[0].startswith("all 10 launches of its size read 4.9713 ms")
    # each size on its own: a sweep's or a pair's points, one of them replayed
    steady = [0.0031 + i * 1e-9 for i in range(8)]
    problem, _ = guards.timer(timing, cpu_device=False, launches=[steady, [0.0049713] * 8])
    assert problem.startswith("all 8 launches of its size read 4.9713 ms")
    problem, evidence = guards.timer(timing, cpu_device=False, launches=[steady, [0.0049713] * 7 + [0.0049714]])
    assert problem is None and evidence.endswith("10 GPU times in 16 launches of 2 sizes")
    # short launches, whose times a coarse timer may round alike, are not judged
    assert guards.timer([(0.0001, 0.0021)] * 5, launches=[[0.0001] * 20])[0] is None


# -- types and work on the census --------------------------------------------------------------
def census(ops, work, types, source="SASS"):
    from peakbench.runtime import LoopCensus
    return LoopCensus(ops, work, frozenset(types), source)


def test_an_int8_loop_must_hold_the_dot_product_not_only_its_accumulate():
    from peakbench.catalog import default_catalog
    int8 = default_catalog().get("compute.int8")
    assert guards.types(int8, None, census({"IDP.4A.S8.S8 i8x4": 512}, 4096, {"i8x4"}))[0] is None
    problem, _ = guards.types(int8, None, census({"IMAD i32": 512}, 1024, {"i32"}))
    assert problem == "module does i32 arithmetic; test compute.int8 is int8 (i32 and i8x4)"


def test_a_vector_type_the_catalog_names_no_operand_types_for_fails_not_passes():
    """A new compute row without its operand types is a failed types guard, never "not checked"."""
    import dataclasses

    from peakbench.catalog import default_catalog
    uint16 = dataclasses.replace(default_catalog().get("compute.int16"), name="compute.uint16", dtype="uint16",
                                 operands=())
    problem, seen = guards.types(uint16, None, census({"OpIMul i16": 512}, 512, {"i16"}, "SPIR-V"))
    assert problem == "the catalog names no operand types for uint16 (its ComputeTest's operands)"
    assert seen == "i16 (SPIR-V)"


def test_every_vector_test_of_the_catalog_has_its_operand_types():
    from peakbench.catalog import default_catalog
    tests = [t for t in default_catalog().tests if t.family == "compute"]
    assert all(t.operands for t in tests)
    assert all(set(t.required) <= set(t.operands) for t in tests)


def test_machine_types_and_pieces_are_not_false_alarms():
    from peakbench.catalog import default_catalog
    cat = default_catalog()
    # NVIDIA runs int16 lanes as IMAD on 32-bit registers; SPIR-V keeps its i16
    assert guards.types(cat.get("compute.int16"), None, census({"IMAD i32": 512}, 1024, {"i32"}))[0] is None
    problem, _ = guards.types(cat.get("compute.int16"), None, census({"OpIMul i32": 512}, 512, {"i32"}, "SPIR-V"))
    assert problem == "module does i32 arithmetic; test compute.int16 is int16 (i16)"
    # 64-bit integers in 32-bit pieces: no instruction is one step, so neither guard judges them
    int64 = cat.get("compute.int64")
    pieces = census({"IMAD i32": 1024}, 2048, {"i32"})
    assert guards.types(int64, None, pieces)[1] == "not checked: SASS computes int64 in 32-bit pieces, no instruction is one step"
    assert guards.work(int64, int64.variants[0], pieces, 512)[0] is None


def test_work_must_equal_one_iteration_a_multiple_is_a_doubled_count():
    # The kernels keep their iterations loop rolled: twice the claim in the loop is what a host
    # counting half the work, or a compiler unrolling against the kernel's pragma, would show.
    from peakbench.catalog import default_catalog
    fp16 = default_catalog().get("compute.fp16")
    v = fp16.variants[0]                                       # x2u64: 64 x 8 items of 4 ops
    problem, evidence = guards.work(fp16, v, census({"HFMA2 f16x2": 512}, 2048, {"f16x2"}), 512)
    assert problem is None and evidence["ops_counted"] == evidence["ops_claimed"] == 2048
    problem, _ = guards.work(fp16, v, census({"HFMA2 f16x2": 1024}, 4096, {"f16x2"}), 512)
    assert problem.startswith("loop body has 1024 HFMA2 f16x2 = 4096 ops, the catalog claims 2048")
    problem, _ = guards.work(fp16, v, census({"HFMA2 f16x2": 768}, 3072, {"f16x2"}), 512)
    assert problem == ("loop body has 768 HFMA2 f16x2 = 3072 ops, the catalog claims 2048"
                       " (64 steps x 8 accumulators x 4 ops)")


def test_a_latency_and_its_counters_cycles_must_agree():
    assert guards.cycles_agree(10.0, 1980.0, 19.8, 19.8)[0] is None            # 10 ns at 1980 MHz: 19.8 cycles
    assert guards.cycles_agree(10.0, 1980.0, 19.8, 20.7)[0] is None            # 4.5% apart: rounding
    problem, text = guards.cycles_agree(5.0, 1980.0, 19.8, 9.9)                # half the ns: loads counted twice
    assert problem == text == ("5 ns at 1980 MHz: the count of loads implies 9.9 cycles a load;"
                               " the counter read 19.8")
    assert guards.cycles_agree(10.0, None, None, None) == (None, "not checked: no cycle counter")


# -- bounds the vendor does not publish, from a test that bounds them -----------------------------
def h200():
    from peakbench.specs import find, load_database
    return find(load_database(), "NVIDIA H200 SXM")


def test_a_test_without_a_vendor_peak_is_bounded_by_the_one_its_descriptor_names():
    spec = h200()
    assert spec.peak("compute.int64") is None                     # no % of spec: the vendor gives none
    value, mhz, where = spec.ceiling("compute.int64")
    assert (value, mhz) == (33.5, 1980.0)                          # 1 x compute.int32's 33.5 TOPS
    assert where.startswith("1 x compute.int32's peak of spec NVIDIA H200 SXM: a 64-bit multiply-add")
    assert spec.ceiling("atomic.shared_add")[0] == 33454 / 4       # a word a bank and clock: 8363.5 GOPS
    assert spec.ceiling("sfu.sqrt")[0] == spec.peak("sfu.rsqrt")
    assert spec.ceiling("memory.l2")[0] == 33454                   # through the SMs' 128 B a clock
    assert spec.ceiling("atomic.global_add")[0] == spec.ceiling("atomic.global_add_contended")[0] == 33454 / 4
    assert spec.ceiling("compute.int8")[0] == 4 * 66.9 and spec.ceiling("compute.int16")[0] == 2 * 66.9
    assert spec.ceiling("compute.fp32")[2] == "spec NVIDIA H200 SXM"  # a vendor peak is its own


def test_on_the_h200_what_was_measured_stays_under_every_derived_bound():
    # 2026-12-03 on board a7de1679 (PERFORMANCE_ANALYSIS.md): no false alarm from the new bounds,
    # and a doubled count of L2 bytes or atomics would still pass where the factor is under them
    from peakbench.catalog import default_catalog
    cat, spec = default_catalog(), h200()
    for name, value in (("memory.l2", 14007), ("atomic.global_add", 719.3), ("compute.int8", 133.6),
                        ("compute.int16", 32.69)):
        test = cat.get(name)
        check = guards.clock_ceiling if test.clocked else lambda t, v, mhz, s: guards.bound(t, v, None, s)
        assert check(test, value, 1980.0, spec)[0] is None, name
    problem, _ = guards.bound(cat.get("memory.l2"), 3 * 14007, None, spec)
    assert problem.startswith("4.202e+04 GB/s is 1.26x the 3.345e+04 GB/s bound, 1 x memory.shared's peak")


def test_an_int64_rate_above_int32s_peak_fails_the_clock_ceiling():
    from peakbench.catalog import default_catalog
    int64 = default_catalog().get("compute.int64")
    assert guards.clock_ceiling(int64, 8.33, 1980.0, h200())[0] is None
    problem, _ = guards.clock_ceiling(int64, 503.0, 1980.0, h200())   # a host count 60x too high
    assert problem.startswith("503 TOPS is 15.01x the per-clock peak at 1980 MHz (1 x compute.int32's peak")


def test_shared_atomics_above_a_word_a_bank_and_clock_fail_the_bound():
    from peakbench.catalog import default_catalog
    shared = default_catalog().get("atomic.shared_add")
    info = SimpleNamespace(name="NVIDIA H200", kind="gpu", vendor_id=0x10DE)
    assert guards.bound(shared, 8349.0, info, h200())[0] is None
    problem, _ = guards.bound(shared, 17 * 8349.0, info, h200())
    assert problem.startswith("1.419e+05 GOPS is 16.97x the 8364 GOPS bound, 0.25 x memory.shared's peak of spec")


def test_without_a_clock_reading_a_rate_is_held_under_the_peak_at_the_boost_clock():
    spec = GpuSpec("Fake GPU", 2000.0, {"compute.fp32": 100.0})
    fp32 = SimpleNamespace(name="compute.fp32", unit="TFLOPS")
    problem, text = guards.clock_ceiling(fp32, 90.0, None, spec)
    assert problem is None and text == "90 TFLOPS is 0.90x the peak at the 2000 MHz boost clock (no clock measured)"
    problem, _ = guards.clock_ceiling(fp32, 200.0, None, spec)         # a host count twice too high
    assert problem == "200 TFLOPS is 2.00x the peak at the 2000 MHz boost clock (no clock measured)"


def test_a_loop_whose_branch_names_its_predicate_as_an_operand_is_found():
    from peakbench.evidence import sass
    # sm_100 and later: `BRA.U !UP0, target` closes a loop as `@!UP0 BRA target` did
    listing = ("        /*0040*/                   LDG.E.128 R4, desc[UR4][R2.64] ;\n"
               "        /*0050*/                   BRA.U !UP0, 0x0040 ;\n")
    assert sass.loops(listing) == [(0x40, 0x50)]
    assert sass.memory_census(listing).note == "counted in the innermost loop"


def test_the_table_names_what_is_unverified_whatever_the_reasons_say():
    from peakbench.report.render import rows
    r = {"test": "memory.read", "unit": "GB/s", "status": "ok", "value": 1.0, "verified": False,
         "evidence": {"unverified": "work: spirv-opt failed (x); counted as compiled; counted in y"}}
    assert rows({"results": [r]})[0][-1] == "ok (unverified: no work check)"
    r["evidence"]["unverified"] = "work: a; b; bound: no spec peak for memory.read"
    assert rows({"results": [r]})[0][-1] == "ok (unverified: no work check, no bound)"


def test_above_a_peak_that_is_the_per_clock_rate_only_a_clock_past_its_maximum_passes():
    # An H100's FP64 tensor peak is 256 FLOP a clock x 132 SMs x 1.98 GHz = 66.9 TFLOPS. Quick runs
    # read 69.04 at a 1905 MHz reading: the SMs' counters ran at 2040 MHz, past the 1980 maximum.
    from peakbench.catalog import default_catalog
    from peakbench.specs import load_database
    h100 = next(s for s in load_database() if s.name == "NVIDIA H100 SXM5")
    fp64 = default_catalog().get("matrix.fp64.fp64")
    assert h100.exact_peak("matrix.fp64.fp64")
    problem, text = guards.clock_ceiling(fp64, 69.04, 1905.0, h100)
    assert problem is None
    assert text == ("69.04 TFLOPS is 1.07x the per-clock peak at 1905 MHz (spec NVIDIA H100 SXM5, its per-clock"
                    " rate x units x clock): 1.03x even at the 1980 MHz boost clock, within the 6% an SM"
                    " clock runs past its maximum (the SMs ran faster than the clock read)")
    problem, text = guards.clock_ceiling(fp64, 67.5, 1965.0, h100)        # 1.009x at the boost clock
    assert problem is None and "looks low" in text
    # at the 2085 MHz counted, 70.4 TFLOPS; 6% past the maximum's peak is more than was ever counted
    assert guards.clock_ceiling(fp64, 70.4, 1980.0, h100)[0] is None
    problem, _ = guards.clock_ceiling(fp64, 71.2, 1980.0, h100)
    assert problem == ("71.2 TFLOPS is 1.06x the per-clock peak at 1980 MHz (spec NVIDIA H100 SXM5, its per-clock"
                       " rate x units x clock) (1.06x even at the 1980 MHz boost clock, more than an SM clock"
                       " runs past its maximum)")
    # a round vendor figure keeps 5% at the clock read, and a rate with no clock read the overshoot
    assert not SPEC.exact_peak("compute.fp32")
    assert guards.clock_ceiling(TEST, 1.03, 1000.0, SPEC)[0] is None
    assert guards.clock_ceiling(fp64, 69.04, None, h100)[0] is None
    assert guards.clock_ceiling(fp64, 71.2, None, h100)[0]


def test_an_exact_peak_is_the_rate_times_the_units_times_the_clock_it_assumes():
    rated = GpuSpec("Rated GPU", 2000.0, {"compute.fp32": 102.4, "matrix.fp16.fp32": 300.0},
                    data={"units": 200, "rates": {"compute.fp32": 256, "matrix.fp16.fp32": 1024}})
    assert rated.exact_peak("compute.fp32")                 # 256 x 200 x 2 GHz = 102.4 T
    assert not rated.exact_peak("matrix.fp16.fp32")         # 409.6 by the rate: not what the peak says
    assert not rated.exact_peak("compute.fp64")             # no peak, no rate


def test_an_integer_loop_is_held_to_the_imad_slots_it_takes():
    """compute.int64 on an H100: 2 IMAD + IMAD.WIDE.U32 + IADD3 a multiply-add, 4 IMAD slots, so a
    quarter of compute.int32's peak; the descriptor's own bound (one IMAD) allowed four times it."""
    from peakbench.catalog import default_catalog
    from peakbench.evidence.sass_rules import multiply_add_bound
    from peakbench.specs import load_database
    h100 = next(s for s in load_database() if s.name == "NVIDIA H100 SXM5")
    int64 = default_catalog().get("compute.int64")
    params = {"unroll": 64, "accumulators": 8, "width": 1}
    loop = multiply_add_bound("compute.int64", params, {"IMAD": 1024, "IMAD.WIDE.U32": 512, "IADD3": 512, "BRA": 1})
    assert loop == ("compute.int32", 0.25, "its loop takes 2048 IMAD issue slots for 512 multiply-adds (each of its"
                                           " 512 IMAD.WIDE writes a 64-bit result: two slots)")
    problem, text = guards.clock_ceiling(int64, 8.325, 1980.0, h100, loop)
    assert problem is None and text.startswith("8.325 TOPS is 0.99x the per-clock peak at 1980 MHz (0.25 x compute.int32")
    # twice the work counted: over the loop's bound, where the descriptor's let it pass at 0.5x
    assert guards.clock_ceiling(int64, 16.65, 1980.0, h100, loop)[0]
    assert guards.clock_ceiling(int64, 16.65, 1980.0, h100)[0] is None
    # a move made an IMAD takes a slot too; a loop with no IMAD, or another test, has no such bound
    assert multiply_add_bound("compute.int16", params, {"IMAD": 512, "IMAD.MOV.U32": 8, "PRMT": 520})[1] == 512 / 520
    assert multiply_add_bound("compute.int64", params, {"V_MAD_U64_U32": 512}) is None
    # a loop unrolled twice over holds two trips: its slots are not one trip's
    assert multiply_add_bound("compute.int64", params, {"IMAD": 2048, "IMAD.WIDE.U32": 1024}) is None
    assert multiply_add_bound("compute.int32", params, {"IMAD": 512}) is None

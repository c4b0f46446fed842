"""peakbench.report.verdict: every `by` a result can get, each from the evidence that decides it
(shapes of real H200 results: board 31afc52e, 2026-12-03), and the word a comparison gives."""
from __future__ import annotations

import copy

import pytest

from peakbench.report import verdict

H200 = {"name": "NVIDIA H200 SXM", "boost_clock_mhz": 1980.0}


def ok(test, value, unit="TFLOPS", **fields) -> dict:
    stats = fields.pop("stats", {"min": value * 0.999, "max": value * 1.001})
    return {"test": test, "status": "ok", "value": value, "unit": unit, "stats": stats, "params": {},
            "evidence": {}, **fields}


def throttled(*reasons) -> dict:
    return {"throttle_reasons": list(reasons), "power_w": {"mean": 690.0, "max": 701.0}}


@pytest.mark.parametrize("result, by, words", [
    (ok("compute.fp32", 66.16, clock_mhz=1980, pct_of_clock_peak=98.9), "silicon", "99% of the per-clock peak"),
    (ok("memory.read", 4731.0, "GB/s", pct_of_spec=98.6, spec_value=4800), "silicon", "99% of the spec's 4800 GB/s"),
    (ok("matrix.fp16.fp32", 865.9, clock_mhz=1785, pct_of_clock_peak=89.7, telemetry=throttled("sw_power_cap")),
     "power", "90% of the peak at the measured 1785 MHz of the 1980 MHz boost; throttle: sw_power_cap"),
    (ok("gemm.bf16.fp32", 673.6, clock_mhz=1470, pct_of_clock_peak=87.0, telemetry=throttled("sw_power_cap"),
        evidence={"burst": {"value": 781.2, "clock_mhz": 1755, "launches": 10, "seconds": 0.1, "load_before_s": 0.05}}),
     "power", "throttle: sw_power_cap; the first 10 launches ran 781.2 TFLOPS at 1755 MHz"),
    (ok("compute.fp64", 30.1, clock_mhz=1700, pct_of_clock_peak=99.0, telemetry=throttled("hw_thermal")),
     "thermal", "throttle: hw_thermal"),
    (ok("compute.fp64", 30.1, clock_mhz=1700, pct_of_clock_peak=99.0), "clock", "no throttle named"),
    (ok("launch.overhead", 9.0, "us"), "host", "host-timed submission to completion"),
    (ok("transfer.h2d", 20.0, "GB/s", params={"variant": "pageable"}), "host", "pageable host memory"),
    (ok("matrix.fp16.fp32", 651.2, clock_mhz=1980, pct_of_clock_peak=60.8), "unknown",
     "61% of the per-clock peak at 1980 MHz of the 1980 MHz boost, no throttle"),
    (ok("latency.l1", 16.4, "ns", clock_mhz=1980, params={"cycles": 32.4}), "silicon", "32.4 cycles a load"),
])
def test_one_result_alone(result, by, words):
    found = verdict.limit(result, H200)
    assert found["by"] == by and words in found["why"], found


def test_a_link_below_its_maximum_is_the_link():
    health = {"pcie_generation": 3, "pcie_generation_max": 5, "pcie_width": 16, "pcie_width_max": 16}
    found = verdict.limit(ok("transfer.h2d", 12.5, "GB/s", pct_of_spec=19.5, spec_value=64), H200, health)
    assert found == {"by": "link", "why": "the PCIe link trained at Gen3 x16, its maximum Gen5 x16",
                     "evidence": health}
    at_max = {**health, "pcie_generation": 5}
    assert verdict.limit(ok("transfer.h2d", 55.5, "GB/s", pct_of_spec=86.7, spec_value=64), H200, at_max)["by"] == "silicon"


def test_no_spec_entry_says_what_is_missing():
    found = verdict.limit(ok("compute.fp32", 0.1), None)
    assert found["by"] == "unknown" and "no spec entry matched this GPU" in found["why"]


def test_a_derived_ceiling_is_named_as_such():
    guard = {"verdict": "passed", "why": "8354 GOPS is 1.00x the per-clock peak at 1980 MHz (0.25 x memory.shared's"
                                         " peak of spec NVIDIA H200 SXM: ...)"}
    found = verdict.limit(ok("atomic.shared_add", 8354.0, "GOPS", clock_mhz=1980,
                             evidence={"guards": {"clock-ceiling": guard}}), H200)
    assert found["by"] == "silicon" and "ceiling derived from another test's peak" in found["why"]


def test_an_int64_rate_at_what_its_loop_can_issue_is_the_silicons():
    """compute.int64 has no vendor peak: against compute.int32's it read 25% (unknown); its loop's
    IMAD slots (sass_rules.multiply_add_bound) put it at 100% of what that code can issue."""
    why = "its loop takes 2048 IMAD issue slots for 512 multiply-adds (each of its 512 IMAD.WIDE writes ...)"
    guard = {"verdict": "passed", "why": f"8.339 TOPS is 1.00x the per-clock peak at 1980 MHz (0.25 x"
                                         f" compute.int32's peak of spec NVIDIA H200 SXM: {why})"}
    found = verdict.limit(ok("compute.int64", 8.339, "TOPS", clock_mhz=1980, evidence={
        "guards": {"clock-ceiling": guard}, "machine_bound": {"of": "compute.int32", "share": 0.25, "why": why}}), H200)
    assert found["by"] == "silicon", found
    assert found["why"].startswith("100% of the per-clock ceiling its machine code sets (0.25 x compute.int32's"
                                   " peak: its loop takes 2048 IMAD issue slots"), found["why"]


def runs_of(vulkan: dict, cuda: dict) -> list[dict]:
    device = {"name": "NVIDIA H200", "uuid": "31afc52e-1ee3-2cd6-d471-9b78c9214a77"}
    out = []
    for backend, r in (("vulkan", vulkan), ("cuda", cuda)):
        r["limit"] = verdict.limit(r, H200)
        out.append({"backend": backend, "device": dict(device), "spec": H200, "results": [r]})
    return out


def test_a_slower_backend_whose_loop_differs_is_the_driver():
    vulkan = ok("matrix.fp16.fp32", 651.2, clock_mhz=1980, pct_of_clock_peak=60.8,
                evidence={"sass": {"loop_mix": {"HMMA.16816.F32": 256, "IADD3": 3, "BRA": 1}}})
    cuda = ok("matrix.fp16.fp32", 865.9, clock_mhz=1785, pct_of_clock_peak=89.7, telemetry=throttled("sw_power_cap"),
              evidence={"loop_mix": {"HGMMA.64x256x16.F32": 4, "WARPGROUP": 4}})
    runs = runs_of(vulkan, cuda)
    verdict.refine(runs)
    slow = runs[0]["results"][0]["limit"]
    assert slow["by"] == "driver" and slow["why"] == ("vulkan's loop runs 256 HMMA where cuda's runs 4 HGMMA + 4"
                                                      " WARPGROUP (0.75x of its 865.9 TFLOPS)"), slow
    assert runs[1]["results"][0]["limit"]["by"] == "power"


def test_a_slower_backend_with_the_same_loop_is_our_kernel_and_an_extra_step_instruction_the_driver():
    l2 = {"IADD3": 44, "IMAD": 25, "LDG": 16, "ISETP": 15}
    runs = runs_of(ok("memory.l2", 13967.0, "GB/s", evidence={"loop_mix": l2}),
                   ok("memory.l2", 12726.0, "GB/s", evidence={"loop_mix": {**l2, "ISETP": 3, "CS2R": 16}}))
    verdict.refine(runs)
    assert runs[1]["results"][0]["limit"]["by"] == "kernel"
    assert runs[0]["results"][0]["limit"]["by"] == "unknown"          # no vendor peak for the L2
    runs = runs_of(ok("sfu.sin", 3.0, clock_mhz=1980, pct_of_clock_peak=72.0),
                   ok("sfu.sin", 2.0, clock_mhz=1980, pct_of_clock_peak=48.0))
    verdict.refine(runs)
    assert runs[0]["results"][0]["limit"]["why"].endswith("short of it, and the fastest on this GPU (beside cuda)")
    assert runs[1]["results"][0]["limit"]["by"] == "kernel"
    # an IADD3 after each IDP.4A keeps pace with the work: a different loop
    runs = runs_of(ok("compute.int8", 125.5, "TOPS", evidence={"sass": {"loop_mix": {"IDP.4A.S8.S8": 512, "IADD3": 482}}}),
                   ok("compute.int8", 133.4, "TOPS", evidence={"loop_mix": {"IDP.4A.S8.S8": 512, "IADD3": 2}}))
    verdict.refine(runs)
    assert runs[0]["results"][0]["limit"]["by"] == "driver"


def test_a_chase_that_must_load_indices_is_its_api():
    # the H200's shared chase: Vulkan's loop scales each loaded index (SPIR-V has no byte address of
    # Workgroup memory), CUDA's loads the address itself; nvcc's index chase scales it the same way
    vulkan = ok("latency.shared", 14.65, "ns", clock_mhz=1980, params={"cycles": 29.0, "hop": "index"},
                evidence={"sass": {"loop_mix": {"LDS": 256, "IMAD.SHL.U32": 141, "SHF.L.U32": 115}}})
    cuda = ok("latency.shared", 11.72, "ns", clock_mhz=1980, params={"cycles": 23.1, "hop": "address"},
              evidence={"loop_mix": {"LDS": 256}})
    runs = runs_of(vulkan, cuda)
    verdict.refine(runs)
    slow = runs[0]["results"][0]["limit"]
    assert slow["by"] == "api" and "loads an index and scales it into an address each hop" in slow["why"], slow
    assert "256 LDS + 141 IMAD + 115 SHF" in slow["why"] and slow["evidence"]["hop"] == "index"
    assert runs[1]["results"][0]["limit"]["by"] == "silicon"
    # two chases of addresses: the loops decide, as for any test
    runs = runs_of({**vulkan, "params": {"hop": "address"}}, cuda)
    verdict.refine(runs)
    assert runs[0]["results"][0]["limit"]["by"] == "kernel"


def test_noise_keeps_a_verdict_and_a_throttle_keeps_its_cause():
    a = ok("memory.read", 4731.0, "GB/s", pct_of_spec=98.6, spec_value=4800, stats={"min": 4700.0, "max": 4760.0})
    b = ok("memory.read", 4719.0, "GB/s", pct_of_spec=98.3, spec_value=4800, stats={"min": 4690.0, "max": 4740.0})
    runs = runs_of(a, b)
    verdict.refine(runs)
    assert [r["results"][0]["limit"]["by"] for r in runs] == ["silicon", "silicon"]
    slow = ok("matrix.bf16.fp32", 600.0, clock_mhz=1500, pct_of_clock_peak=89.0, telemetry=throttled("sw_power_cap"))
    runs = runs_of(slow, ok("matrix.bf16.fp32", 900.0, clock_mhz=1980, pct_of_clock_peak=91.0))
    verdict.refine(runs)
    held = runs[0]["results"][0]["limit"]
    assert held["by"] == "power" and held["why"].endswith("cuda reads 900.0 TFLOPS on this GPU")


@pytest.mark.parametrize("other, want", [
    ({"value": 100.5, "stats": {"min": 99.9, "max": 101.0}}, "same"),
    ({"value": 103.0, "stats": {"min": 99.5, "max": 106.0}}, "unclear"),        # apart, but inside the noise
    ({"value": 110.0, "stats": {"min": 109.0, "max": 111.0}}, "faster"),
    ({"value": 90.0, "stats": {"min": 89.0, "max": 91.0}}, "slower"),
])
def test_the_word_comes_from_the_samples(other, want):
    first = ok("compute.fp32", 100.0, stats={"min": 99.5, "max": 100.5})
    assert verdict.word(first, {**copy.deepcopy(first), **other}) == want


def test_copies_both_moved_by_their_apis_own_command_are_the_drivers():
    # an H100's bidirectional copies (board 7184e42e, 2026-12-06): Vulkan's two transfer queues
    # against CUDA's two streams, each direction's rate while the other ran
    def bidir(value, engine, h2d, d2h, **params):
        return ok("transfer.bidir", value, "GB/s", pct_of_spec=value / 1.28, spec_value=128.0, params={
            "variant": "pinned", "engine": engine, **params,
            "balanced": {"h2d": {"pieces": 8, "ms": 9.0, "gb_s": h2d}, "d2h": {"pieces": 12, "ms": 9.1, "gb_s": d2h}}})
    vulkan = bidir(64.7, "vkCmdCopyBuffer", 21.3, 47.1, queue="transfer-only family 1, a queue each")
    cuda = bidir(99.7, "cudaMemcpyAsync (copy engines)", 48.1, 50.8, streams="one per direction")
    runs = runs_of(vulkan, cuda)
    verdict.refine(runs)
    slow = runs[0]["results"][0]["limit"]
    assert slow["by"] == "driver", slow
    assert slow["why"] == ("vulkan's copies are its driver's own (vkCmdCopyBuffer), where cuda's (cudaMemcpyAsync (copy"
                           " engines)) read 99.7 GB/s (0.65x): peakbench only issues them; both ways at once its h2d"
                           " and d2h copies ran at 21.3 and 47.1 GB/s, cuda's at 48.1 and 50.8")
    assert slow["evidence"]["queue"] == "transfer-only family 1, a queue each"
    # a read of host memory by a kernel of ours is no copy of the driver's: its loop decides
    mapped = ok("transfer.h2d", 51.2, "GB/s", params={"variant": "mapped", "engine": "the stream read kernel"})
    runs = runs_of(mapped, ok("transfer.h2d", 55.4, "GB/s", params={"variant": "pinned", "engine": "cudaMemcpyAsync"}))
    verdict.refine(runs)
    assert runs[0]["results"][0]["limit"]["by"] == "kernel"


def test_for_times_lower_is_faster():
    first = ok("latency.l1", 16.0, "ns", stats={"min": 15.9, "max": 16.1})
    assert verdict.word(first, ok("latency.l1", 12.0, "ns", stats={"min": 11.9, "max": 12.1})) == "faster"
    assert verdict.word(first, {"status": "failed", "unit": "ns"}) == "unclear"


def test_every_by_is_reached_here():
    # the list above: silicon, power, thermal, clock, host, unknown, link, api, driver, kernel
    assert set(verdict.BY) == {"silicon", "clock", "power", "thermal", "api", "driver", "kernel", "link", "host",
                               "unknown"}


def test_a_bidirectional_rate_shows_each_direction_over_its_own_copies_and_their_sum():
    # an H100's default suite (board a86bc656, 2026-12-07): nvbandwidth's two bidirectional tests read
    # 51.61 + 50.74; each of our directions over its own copies 52.13 + 50.16, the value 100.7
    r = ok("transfer.bidir", 100.7, "GB/s", pct_of_spec=78.7, spec_value=128.0, params={
        "variant": "pinned", "balanced": {"h2d": {"pieces": 17, "ms": 10.942, "gb_s": 52.13},
                                          "d2h": {"pieces": 16, "ms": 10.702, "gb_s": 50.16}}})
    found = verdict.limit(r, {"name": "NVIDIA H100 SXM5"}, None)
    assert found["by"] == "unknown"
    assert found["why"].endswith("; each direction over its own copies h2d 52.13 + d2h 50.16 = 102.3 GB/s, where the"
                                 " value counts both ways' bytes over the window both ran in (the lanes ended 0.24 ms"
                                 " apart in 10.9)"), found["why"]
    one_way = ok("transfer.h2d", 55.4, "GB/s", pct_of_spec=86.6, spec_value=128.0, params={"variant": "pinned"})
    assert "each direction" not in verdict.limit(one_way, {"name": "NVIDIA H100 SXM5"}, None)["why"]

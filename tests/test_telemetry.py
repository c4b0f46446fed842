"""peakbench.telemetry with a fake NVML at the API boundary (the pynvml functions): readings, the
throttle bitmask, energy and efficiency on a result, the table's mark, a missing library, a device
whose UUID NVML does not know; and the Vulkan UUID filter of peakbench.harness.visible."""
from __future__ import annotations

import json
import sys
import types

import pytest

from conftest import schema_problems
from fakes import FakeBackend, FakeDevice, fake_info
from peakbench import telemetry
from peakbench.backend import BackendUnavailable, DeviceInfo
from peakbench.catalog import TestSpec as Spec  # aliased: pytest would try to collect Test*
from peakbench.catalog import Variant
from peakbench.harness import visible
from peakbench.harness.runner import Settings
from peakbench.harness.session import run_test
from peakbench.report import render
from peakbench.report.result import Run, document

UUIDS = ["11111111-2222-3333-4444-555555555555", "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"]
SETTINGS = Settings(sample_s=0.02, warmup_s=0.0, min_samples=10, max_samples=10, budget_s=2.0)
FP32 = Spec("compute.fake", "TFLOPS", "fma", "fp32", (Variant("only"),))


def fake_nvml(gpus: list[dict]):
    """A pynvml module over `gpus`: each {"uuid", "sm", "mem", "mw", "temp", "reasons"}."""
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM, m.NVML_TEMPERATURE_GPU = 1, 2, 0
    m.calls = []
    m.nvmlInit = lambda: m.calls.append("init")
    m.nvmlShutdown = lambda: m.calls.append("shutdown")
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: gpus[i]
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h['uuid']}"
    m.nvmlDeviceGetClockInfo = lambda h, kind: h["sm"] if kind == 1 else h["mem"]
    m.nvmlDeviceGetPowerUsage = lambda h: h["mw"]
    m.nvmlDeviceGetTemperature = lambda h, kind: h["temp"]
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: h["reasons"]
    return m


def gpu(uuid=UUIDS[0], reasons=0x1, mw=500_000):
    return {"uuid": uuid, "sm": 1755, "mem": 3201, "mw": mw, "temp": 61, "reasons": reasons}


def nvidia(uuid=UUIDS[0], index=0) -> DeviceInfo:
    return DeviceInfo(index, "NVIDIA H200", telemetry.NVIDIA, 0x2335, "580", "1.4", uuid)


@pytest.fixture
def nvml(monkeypatch):
    def install(gpus):
        module = fake_nvml(gpus)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module
    return install


def test_throttle_bits_decode_to_names_and_idle_and_applications_clocks_are_none():
    assert telemetry.throttle_names(0x1 | 0x2) == []
    assert telemetry.throttle_names(0x4 | 0x40) == ["sw_power_cap", "hw_thermal"]
    assert telemetry.throttle_names(0x8 | 0x20 | 0x80) == ["hw_slowdown", "sw_thermal", "hw_power_brake"]
    assert telemetry.throttle_names(0x10000) == ["bit_0x10000"]


def test_a_throttled_run_keeps_readings_energy_efficiency_and_the_table_marks_it(nvml):
    nvml([gpu(reasons=0x4 | 0x1, mw=700_000)])
    sampler = telemetry.Sampler.for_device(nvidia())
    sampler.interval = 0.005
    device = FakeDevice(info=nvidia())
    # FakeDevice's FakeWorkload has no clock: its GPU time passes as wall time does not; sleep a little.
    result = run_test(device, FP32, SETTINGS, lambda _: None, None, sampler)
    sampler.close()
    t = result.telemetry
    assert t["sm_clock_mhz"] == {"min": 1755, "mean": 1755, "max": 1755}
    assert t["mem_clock_mhz"]["mean"] == 3201 and t["temperature_c"]["max"] == 61
    assert t["power_w"]["mean"] == 700.0
    assert t["throttle_reasons"] == ["sw_power_cap"]
    assert result.efficiency == {"value": pytest.approx(result.value / 700, rel=1e-3), "unit": "TFLOPS/W"}
    assert result.energy_j is not None and result.energy_j >= 0
    run = document([Run("cuda", nvidia().as_json(), None, [result])])["runs"][0]
    table = render.table(run)
    assert "ok (unverified: no work check, no bound; power throttle: sw_power_cap)" in table
    assert "700" in table and "TFLOPS/W" in table
    assert "sw_power_cap" in render.csv_text([run])
    doc = document([Run("cuda", nvidia().as_json(), None, [result])])
    assert schema_problems(json.loads(json.dumps(doc))) == []


def test_an_unthrottled_run_has_an_empty_reason_list_and_no_mark(nvml):
    nvml([gpu(reasons=0x1)])
    samples = [telemetry.NvmlSource.for_device(nvidia()).read() for _ in range(3)]
    found, _ = telemetry.summarize(samples)
    assert found["throttle_reasons"] == []
    assert render.throttled({"telemetry": found}) is None


def test_power_is_the_instant_field_where_nvml_has_it_else_the_average_and_says_which(nvml):
    module = nvml([gpu(mw=500_000)])
    source = telemetry.NvmlSource.for_device(nvidia())
    assert source.read().power_w == 500.0 and source.power_source.startswith("nvmlDeviceGetPowerUsage")

    class Value:
        def __init__(self, mw, ret=0):
            self.nvmlReturn, self.value = ret, types.SimpleNamespace(uiVal=mw)
    module.NVML_FI_DEV_POWER_INSTANT = 186
    module.nvmlDeviceGetFieldValues = lambda h, ids: [Value(612_500) if ids == [186] else Value(0, 1)]
    source = telemetry.NvmlSource.for_device(nvidia())
    sample = source.read()
    assert sample.power_w == 612.5 and sample.power_source == "instant"
    found, _ = telemetry.summarize([sample, source.read()])
    assert found["power_source"] == "instant" and found["power_w"]["mean"] == 612.5
    module.nvmlDeviceGetFieldValues = lambda h, ids: [Value(0, ret=3)]      # NVML_ERROR_NOT_SUPPORTED
    source = telemetry.NvmlSource.for_device(nvidia())
    assert source.read().power_w == 500.0 and source.power_source != "instant"


def test_summary_takes_the_window_and_energy_is_mean_power_times_its_length():
    samples = [telemetry.Sample(t, power_w=p) for t, p in ((0.0, 100.0), (1.0, 300.0), (2.0, 500.0), (9.0, 50.0))]
    found, energy = telemetry.summarize(samples, (0.5, 2.5))
    assert found["power_w"] == {"min": 300.0, "mean": 400.0, "max": 500.0}
    assert energy == pytest.approx(400.0 * 2.0)
    assert telemetry.efficiency(4.0, "ns", found) is None
    assert telemetry.efficiency(800.0, "GB/s", found) == {"value": 2.0, "unit": "GB/s/W"}


def test_no_library_means_no_sampler_and_no_telemetry(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)       # import pynvml raises ImportError
    assert telemetry.Sampler.for_device(nvidia()) is None
    result = run_test(FakeDevice(info=nvidia()), FP32, SETTINGS, lambda _: None)
    assert result.status == "ok" and result.telemetry is None and result.efficiency is None


def test_a_device_nvml_does_not_know_gets_no_readings_among_several(nvml):
    module = nvml([gpu(UUIDS[0]), gpu(UUIDS[1])])
    assert telemetry.Sampler.for_device(nvidia("99999999-0000-0000-0000-000000000000")) is None
    assert module.calls[-1] == "shutdown"
    matched = telemetry.NvmlSource.for_device(nvidia(UUIDS[1]))
    assert matched.handle["uuid"] == UUIDS[1]


def test_with_one_gpu_an_unmatched_uuid_takes_that_one_and_other_vendors_get_nothing(nvml):
    nvml([gpu(UUIDS[0])])
    assert telemetry.NvmlSource.for_device(nvidia("00000000-0000-0000-0000-000000000000")) is not None
    assert telemetry.Sampler.for_device(fake_info()) is None      # vendor 0x1234: no library


# -- the Vulkan UUID filter --------------------------------------------------------------------

def vulkan_with(*infos):
    return FakeBackend([FakeDevice(info=i) for i in infos])


LAVAPIPE = DeviceInfo(2, "llvmpipe", 0x10005, 0, "Mesa", "1.3", "6d657361-0000-0000-0000-000000000000", kind="cpu")


@pytest.mark.parametrize("value", ["1", f"GPU-{UUIDS[1]}", "GPU-aaaa", "1,7,0"])
def test_cuda_visible_devices_limits_vulkan_by_uuid_index_or_prefix(nvml, value):
    nvml([gpu(UUIDS[0]), gpu(UUIDS[1])])
    backend = vulkan_with(nvidia(UUIDS[0], 0), nvidia(UUIDS[1], 1), LAVAPIPE)
    limited = visible.limited(backend, {"CUDA_VISIBLE_DEVICES": value})
    infos = limited.devices()
    # "1,7,0": CUDA stops at the first entry that names no GPU.
    assert [(i.index, i.uuid) for i in infos] == [(0, UUIDS[1]), (1, LAVAPIPE.uuid)]
    assert infos[0].extra["vulkan_index"] == 1
    assert limited.open(0).info.uuid == UUIDS[1]


def test_unset_variables_leave_vulkan_as_it_is():
    backend = vulkan_with(nvidia(UUIDS[0], 0))
    assert visible.limited(backend, {}) is backend


def test_an_empty_variable_hides_every_nvidia_device(nvml):
    nvml([gpu(UUIDS[0])])
    limited = visible.limited(vulkan_with(nvidia(UUIDS[0], 0), LAVAPIPE), {"CUDA_VISIBLE_DEVICES": ""})
    assert [i.name for i in limited.devices()] == ["llvmpipe"]


def test_indices_without_nvml_cannot_be_honoured_and_say_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(BackendUnavailable, match="CUDA_VISIBLE_DEVICES=0 names GPUs by index"):
        visible.limited(vulkan_with(nvidia(UUIDS[0], 0)), {"CUDA_VISIBLE_DEVICES": "0"})
    # UUIDs need no library
    limited = visible.limited(vulkan_with(nvidia(UUIDS[0], 0), nvidia(UUIDS[1], 1)),
                              {"CUDA_VISIBLE_DEVICES": f"GPU-{UUIDS[1]}"})
    assert [i.uuid for i in limited.devices()] == [UUIDS[1]]


def test_hip_visible_devices_numbers_what_rocr_left(monkeypatch):
    monkeypatch.setattr(visible, "amdsmi_uuids", lambda: ["a0", "b1", "c2"])
    assert visible.visible(telemetry.AMD, {"ROCR_VISIBLE_DEVICES": "2,0", "HIP_VISIBLE_DEVICES": "1"}) == ["a0"]


# -- on the H200 (pytest --gpu) ----------------------------------------------------------------

@pytest.fixture(scope="module")
def nvidia_run(request, tmp_path_factory):
    from helpers import gpu_required, run_peakbench
    from peakbench.backend import load
    missing = pytest.fail if gpu_required(request.config) else pytest.skip
    try:
        import pynvml  # noqa: F401
        load("cuda").close()
    except Exception as e:
        missing(f"needs CUDA and nvidia-ml-py: {e}")
    path = tmp_path_factory.mktemp("telemetry") / "t.json"
    p = run_peakbench("--backend", "cuda,vulkan", "--quick", "--tests", "compute.fp32,matrix.fp16.fp32,memory.read,latency.*",
                      "--json", str(path), timeout=600)
    assert path.exists(), p.stderr
    return p, json.loads(path.read_text())


@pytest.mark.gpu
def test_every_result_on_the_gpu_has_clock_power_and_throttle_readings(nvidia_run):
    p, doc = nvidia_run
    assert p.returncode == 0, p.stderr
    for run in doc["runs"]:
        for r in run["results"]:
            if r["status"] != "ok":
                continue
            t = r["telemetry"]
            where = f"{run['backend']} {r['test']}"
            assert 500 < t["sm_clock_mhz"]["mean"] <= 2100, where
            assert t["mem_clock_mhz"]["mean"] > 1000, where
            assert 50 < t["power_w"]["mean"] <= 800, where           # H200 SXM: 700 W board limit
            assert isinstance(t["throttle_reasons"], list), where
            assert "gpu_idle" not in t["throttle_reasons"], where
            if r["unit"] in ("ns", "us"):
                assert r["efficiency"] is None, where
            else:
                assert r["efficiency"]["unit"] == f"{r['unit']}/W" and r["efficiency"]["value"] > 0, where
                assert r["energy_j"] > 0, where
    assert " W " in p.stdout or "per W" in p.stdout


@pytest.mark.gpu
def test_vulkan_follows_cuda_visible_devices_by_uuid_on_the_gpu(nvidia_run):
    from helpers import run_peakbench
    _, doc = nvidia_run
    uuid = next(r["device"]["uuid"] for r in doc["runs"] if r["backend"] == "cuda")
    for value in (f"GPU-{uuid}", "0"):
        p = run_peakbench("--backend", "vulkan", "--list-devices", env={"CUDA_VISIBLE_DEVICES": value})
        assert p.returncode == 0, p.stderr
        assert "NVIDIA" in p.stdout
    p = run_peakbench("--backend", "vulkan", "--list-devices", env={"CUDA_VISIBLE_DEVICES": ""})
    assert p.returncode == 0 and "NVIDIA" not in p.stdout.split("\n", 2)[-1]


def test_a_planted_power_throttle_comes_out_as_the_power_limit(nvml):
    # NVML reports sw_power_cap and 1755 MHz during the samples; the rate meets the peak at that clock
    from dataclasses import asdict, replace
    from peakbench.report import verdict
    nvml([gpu(reasons=0x4, mw=700_000)])
    sampler = telemetry.Sampler.for_device(nvidia())
    sampler.interval = 0.005
    result = run_test(FakeDevice(info=nvidia()), FP32, SETTINGS, lambda _: None, None, sampler)
    sampler.close()
    row = asdict(replace(result, clock_mhz=1755.0, pct_of_clock_peak=97.0))
    found = verdict.limit(row, {"name": "Fake", "boost_clock_mhz": 1980.0})
    assert found["by"] == "power", found
    assert found["why"] == "97% of the peak at the measured 1755 MHz of the 1980 MHz boost; throttle: sw_power_cap"


def test_health_reads_the_link_ecc_and_remapping_by_uuid(nvml):
    m = nvml([gpu()])
    m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, m.NVML_MEMORY_ERROR_TYPE_CORRECTED, m.NVML_VOLATILE_ECC = 1, 0, 0
    m.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, m.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERRORS = 0, 1
    m.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: 3
    m.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: 5
    m.nvmlDeviceGetCurrPcieLinkWidth = lambda h: 16
    m.nvmlDeviceGetMaxPcieLinkWidth = lambda h: 16
    m.nvmlDeviceGetTotalEccErrors = lambda h, kind, counter: 2 if kind == 1 else 7
    m.nvmlDeviceGetRetiredPages = lambda h, cause: [0x1000] if cause == 1 else []
    m.nvmlDeviceGetRemappedRows = lambda h: (0, 1, True, False)
    found = telemetry.health(nvidia())
    assert found == {"pcie_generation": 3, "pcie_generation_max": 5, "pcie_width": 16, "pcie_width_max": 16,
                     "ecc_uncorrected": 2, "ecc_corrected": 7, "retired_pages": 1, "remapped_rows_corrected": 0,
                     "remapped_rows_uncorrected": 1, "remapping_pending": True, "remapping_failed": False}
    assert telemetry.link_below_max(found) == "Gen3 x16, its maximum Gen5 x16"
    del m.nvmlDeviceGetRemappedRows                   # a board without row remapping: the field is left out
    assert "remapping_pending" not in telemetry.health(nvidia())

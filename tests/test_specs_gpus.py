"""Checks of the spec database data (peakbench/specs/gpus.toml): fields, names, sources, and that
every per-clock rate reproduces its peak (units * rate * clock_mhz, in the test's unit, == peak
within 2%), sparse peaks are twice the dense ones, host links match the PCIe arithmetic."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from peakbench import specs
from peakbench.catalog import default_catalog
from peakbench.harness.session import clocked

DATABASE = Path(__file__).parents[1] / "peakbench/specs/gpus.toml"

# The test catalog, name -> unit.
UNITS = {t.name: t.unit for t in default_catalog().tests}
TEST_NAMES = frozenset(UNITS)
DRAM = [t.name for t in default_catalog().tests if t.peak_from == "memory_bandwidth_gbs"]   # the streams
# Tests that a vendor peak can exist for (latency and launch have none).
PEAK_TESTS = frozenset(t for t in TEST_NAMES if t.split(".")[0] not in ("latency", "launch"))
# A per-clock rate exists only where the peak scales with the core clock (the % at clock does too).
RATE_TESTS = frozenset(t for t in PEAK_TESTS if clocked(t))
# units * rate (per clock per unit) * clock in MHz is 1e6 per second: this many make the unit.
PER_UNIT = {"TFLOPS": 1e6, "TOPS": 1e6, "GB/s": 1e3, "GOPS": 1e3}
# NVLink per-link rate in one direction by generation, GB/s: NVLink 4 (Hopper) 25 GB/s per
# direction, 18 links = 900 GB/s both ways together (H100 whitepaper v1.04, "Fourth-Generation NVLink").
NVLINK_GBS = {"4": 25}
# PCIe per-lane rate by generation (GT/s), all 128b/130b encoded (PCI-SIG).
PCIE_GTS = {"3.0": 8, "4.0": 16, "5.0": 32, "6.0": 64}

VENDORS = {"NVIDIA", "AMD", "Intel", "Apple"}
REQUIRED = {
    "name": str, "vendor": str, "architecture": str, "match": list, "pci_ids": list,
    "units": int, "unit_name": str, "boost_clock_mhz": (int, float),
    "memory_bandwidth_gbs": (int, float), "source": str, "peaks": dict,
}
OPTIONAL_NUMBERS = ("memory_gb", "l1_kib_per_unit", "l2_mib", "l3_mib")
KNOWN_FIELDS = set(REQUIRED) | set(OPTIONAL_NUMBERS) | {"rates", "sources", "peak_clock_mhz",
                                                         "host_link", "host_link_gbs", "gpu_link", "gpu_link_gbs"}
PCI_ID = re.compile(r"^0x[0-9a-f]{4}:0x[0-9a-f]{4}$")
TOLERANCE = 0.02


def _load() -> list[dict]:
    with DATABASE.open("rb") as f:
        return tomllib.load(f)["gpu"]


GPUS = _load()
GPU_IDS = [g.get("name", f"entry{i}") for i, g in enumerate(GPUS)]


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def test_database_has_entries():
    assert len(GPUS) >= 20


@pytest.mark.parametrize("gpu", GPUS, ids=GPU_IDS)
def test_required_fields(gpu):
    for key, kind in REQUIRED.items():
        assert key in gpu, f"{gpu.get('name')}: missing {key}"
        assert isinstance(gpu[key], kind) and not isinstance(gpu[key], bool), \
            f"{gpu['name']}: {key} has type {type(gpu[key]).__name__}"
    for key in ("units", "boost_clock_mhz", "memory_bandwidth_gbs"):
        assert gpu[key] > 0, f"{gpu['name']}: {key} must be positive"
    for key in OPTIONAL_NUMBERS:
        if key in gpu:
            assert _is_number(gpu[key]) and gpu[key] >= 0, f"{gpu['name']}: bad {key}"
    for key in ("memory_gb",):
        if key in gpu:
            assert gpu[key] > 0
    assert gpu["vendor"] in VENDORS
    assert gpu["name"].strip() and gpu["architecture"].strip() and gpu["unit_name"].strip()
    assert gpu["match"], f"{gpu['name']}: needs at least one match string"
    assert all(isinstance(m, str) and m.strip() for m in gpu["match"])
    assert gpu["peaks"], f"{gpu['name']}: no peaks"
    unknown = set(gpu) - KNOWN_FIELDS
    assert not unknown, f"{gpu['name']}: unknown fields {sorted(unknown)}"


@pytest.mark.parametrize("gpu", GPUS, ids=GPU_IDS)
def test_peaks_are_catalog_tests_with_positive_values(gpu):
    for test, value in gpu["peaks"].items():
        assert test in TEST_NAMES, f"{gpu['name']}: '{test}' is not a test of the catalog"
        assert test in PEAK_TESTS, f"{gpu['name']}: '{test}' cannot have a vendor peak"
        assert _is_number(value) and value > 0, f"{gpu['name']}: {test} = {value!r}"


@pytest.mark.parametrize("gpu", GPUS, ids=GPU_IDS)
def test_memory_peaks_are_the_bandwidth_no_entry_repeats(gpu):
    """Every DRAM stream's peak is the GPU's memory bandwidth, derived (the catalog's peak_from),
    never copied into an entry; an entry of a user's file that names one still wins."""
    spec = next(s for s in specs.load_database() if s.name == gpu["name"])
    for test in DRAM:
        assert test not in gpu["peaks"], f"{gpu['name']}: {test} repeats memory_bandwidth_gbs"
        assert spec.peak(test) == gpu["memory_bandwidth_gbs"], f"{gpu['name']}: {test}"
    named = specs.GpuSpec(spec.name, spec.boost_clock_mhz, {**spec.peaks, "memory.read": 1.0}, data=spec.data)
    assert named.peak("memory.read") == 1.0 and named.peak("memory.copy") == gpu["memory_bandwidth_gbs"]


@pytest.mark.parametrize("gpu", GPUS, ids=GPU_IDS)
def test_fp32_peak_present(gpu):
    assert "compute.fp32" in gpu["peaks"]


def _rate_cases():
    cases = []
    for gpu in GPUS:
        for test in gpu.get("rates", {}):
            cases.append(pytest.param(gpu, test, id=f"{gpu['name']}::{test}"))
    return cases


@pytest.mark.parametrize("gpu, test", _rate_cases())
def test_rate_reproduces_peak(gpu, test):
    rate = gpu["rates"][test]
    assert test in RATE_TESTS, f"{gpu['name']}: rate for {test}, whose peak does not scale with the clock"
    assert _is_number(rate) and rate > 0
    assert test in gpu["peaks"], f"{gpu['name']}: rate for {test} but no peak"
    clock = gpu.get("peak_clock_mhz", {}).get(test, gpu["boost_clock_mhz"])
    derived = gpu["units"] * rate * clock / PER_UNIT[UNITS[test]]
    peak = gpu["peaks"][test]
    assert abs(derived / peak - 1) <= TOLERANCE, (
        f"{gpu['name']} {test}: {gpu['units']} units x {rate}/clk x {clock} MHz = "
        f"{derived:.2f} {UNITS[test]}, peak {peak}")


def test_every_unit_of_a_rate_test_converts():
    assert {UNITS[t] for t in RATE_TESTS} <= set(PER_UNIT)


def test_rates_cover_the_new_per_clock_families():
    # The check above reaches the bytes and results rates, not only TFLOPS and TOPS.
    cases = {test for gpu in GPUS for test in gpu.get("rates", {})}
    assert {"memory.shared", "sfu.rcp", "matrix.fp16.fp32.sparse"} <= cases


@pytest.mark.parametrize("gpu", GPUS, ids=GPU_IDS)
def test_sparse_peaks_are_twice_dense_at_the_dense_clock(gpu):
    peaks, clocks, rates = gpu["peaks"], gpu.get("peak_clock_mhz", {}), gpu.get("rates", {})
    for test in (t for t in peaks if t.endswith(".sparse")):
        dense = test.removesuffix(".sparse")
        assert dense in peaks, f"{gpu['name']}: {test} without {dense}"
        assert abs(peaks[test] / (2 * peaks[dense]) - 1) <= TOLERANCE, f"{gpu['name']}: {test}"
        assert clocks.get(test) == clocks.get(dense), f"{gpu['name']}: {test} clock differs from {dense}'s"
        if test in rates or dense in rates:
            assert rates.get(test) == 2 * rates.get(dense, 0), f"{gpu['name']}: {test} rate"
        assert test in gpu.get("sources", {}), f"{gpu['name']}: no source for {test} (the sparse column)"


@pytest.mark.parametrize("gpu", GPUS, ids=GPU_IDS)
def test_gemm_peaks_come_from_the_matrix_test(gpu):
    assert not [t for t in gpu["peaks"] if t.startswith("gemm.")], "the loader derives gemm.* peaks"
    spec = specs.find(specs.load_database(), gpu["name"])
    for gemm in (t for t in TEST_NAMES if t.startswith("gemm.")):
        matrix = specs.matrix_of(gemm)
        assert spec.peak(gemm) == gpu["peaks"].get(matrix)
        assert spec.peak_clock_mhz(gemm) == spec.peak_clock_mhz(matrix)


@pytest.mark.parametrize("gpu", [g for g in GPUS if "host_link" in g or "host_link_gbs" in g],
                         ids=[g["name"] for g in GPUS if "host_link" in g or "host_link_gbs" in g])
def test_host_link_rate_is_the_pcie_arithmetic(gpu):
    link = re.fullmatch(r"PCIe (\d\.0) x(\d+)", gpu["host_link"])
    assert link, f"{gpu['name']}: host_link '{gpu['host_link']}' is not 'PCIe N.0 xW'"
    per_direction = PCIE_GTS[link[1]] * int(link[2]) * 128 / 130 / 8
    assert abs(gpu["host_link_gbs"] / per_direction - 1) <= TOLERANCE, (
        f"{gpu['name']}: {gpu['host_link_gbs']} GB/s, {gpu['host_link']} gives {per_direction:.2f}")
    assert "host_link_gbs" in gpu.get("sources", {}), f"{gpu['name']}: no source for host_link_gbs"


@pytest.mark.parametrize("gpu", [g for g in GPUS if "gpu_link" in g or "gpu_link_gbs" in g],
                         ids=[g["name"] for g in GPUS if "gpu_link" in g or "gpu_link_gbs" in g])
def test_gpu_link_rate_is_the_nvlink_arithmetic(gpu):
    link = re.fullmatch(r"NVLink (\d), (\d+) links", gpu["gpu_link"])
    assert link, f"{gpu['name']}: gpu_link '{gpu['gpu_link']}' is not 'NVLink N, L links'"
    per_direction = NVLINK_GBS[link[1]] * int(link[2])
    assert gpu["gpu_link_gbs"] == per_direction, f"{gpu['name']}: {gpu['gpu_link_gbs']} GB/s, {link[0]} gives {per_direction}"
    assert "gpu_link_gbs" in gpu.get("sources", {}), f"{gpu['name']}: no source for gpu_link_gbs"
    assert "transfer.p2p" not in gpu["peaks"], "the loader derives transfer.p2p from the GPU link"


def test_the_h200_and_h100_sxm_have_nvlink4_both_ways():
    for name in ("NVIDIA H200 SXM", "NVIDIA H100 SXM5"):
        spec = specs.find(specs.load_database(), name)
        assert spec.data["gpu_link"] == "NVLink 4, 18 links" and spec.peak("transfer.p2p") == 900.0
    assert specs.find(specs.load_database(), "NVIDIA H200 NVL").peak("transfer.p2p") is None


def test_the_h200_has_every_spec_its_new_tests_compare_against():
    spec = specs.find(specs.load_database(), "NVIDIA H200 SXM")
    expected = {"transfer.h2d": 64, "transfer.bidir": 128, "memory.shared": 33454, "sfu.rsqrt": 4.18,
                "gemm.bf16.fp32": 989.4, "matrix.int8.int32.sparse": 3957.8}
    assert {t: spec.peak(t) for t in expected} == expected
    assert spec.peak_clock_mhz("gemm.fp8_e4m3.fp32") == 1830 and spec.peak_clock_mhz("sfu.sin") == 1980


@pytest.mark.parametrize("gpu", [g for g in GPUS if g["vendor"] in ("NVIDIA", "AMD")],
                         ids=[g["name"] for g in GPUS if g["vendor"] in ("NVIDIA", "AMD")])
def test_nvidia_amd_have_fp32_rate_and_fp64_rate_where_fp64_is_listed(gpu):
    rates = gpu.get("rates", {})
    assert "compute.fp32" in rates, f"{gpu['name']}: no FP32 per-clock rate"
    if "compute.fp64" in gpu["peaks"]:
        assert "compute.fp64" in rates, f"{gpu['name']}: no FP64 per-clock rate"


@pytest.mark.parametrize("gpu", GPUS, ids=GPU_IDS)
def test_peak_clocks_refer_to_peaks(gpu):
    for test, clock in gpu.get("peak_clock_mhz", {}).items():
        assert test in gpu["peaks"], f"{gpu['name']}: clock for {test} without a peak"
        assert _is_number(clock) and 0 < clock <= gpu["boost_clock_mhz"] * 1.5


@pytest.mark.parametrize("gpu", GPUS, ids=GPU_IDS)
def test_sources(gpu):
    assert gpu["source"].startswith("https://"), f"{gpu['name']}: main source must be a URL"
    allowed = TEST_NAMES | KNOWN_FIELDS
    for key, text in gpu.get("sources", {}).items():
        assert key in allowed, f"{gpu['name']}: source for unknown key '{key}'"
        assert isinstance(text, str) and len(text) > 20, f"{gpu['name']}: thin source for {key}"


def test_names_unique():
    names = [g["name"].lower() for g in GPUS]
    dupes = {n for n in names if names.count(n) > 1}
    assert not dupes, f"duplicate names: {sorted(dupes)}"


def test_match_strings_unique():
    seen: dict[str, str] = {}
    for g in GPUS:
        for m in g["match"]:
            key = m.lower()
            assert key not in seen, f"match string '{m}' in both {seen[key]} and {g['name']}"
            seen[key] = g["name"]


@pytest.mark.parametrize("gpu", GPUS, ids=GPU_IDS)
def test_pci_ids_format(gpu):
    for pci in gpu["pci_ids"]:
        assert PCI_ID.match(pci), f"{gpu['name']}: '{pci}' is not 0xVVVV:0xDDDD (lower-case hex)"
    vendor_ids = {"NVIDIA": "0x10de", "AMD": "0x1002", "Intel": "0x8086"}
    for pci in gpu["pci_ids"]:
        assert pci.split(":")[0] == vendor_ids.get(gpu["vendor"]), f"{gpu['name']}: {pci}"


def test_pci_ids_unique():
    # The loader looks PCI IDs up before names: an ID in two entries would be ambiguous.
    seen: dict[str, str] = {}
    for g in GPUS:
        for pci in g["pci_ids"]:
            assert pci not in seen, f"{pci} in both {seen[pci]} and {g['name']}"
            seen[pci] = g["name"]


def _longest_match(device_name: str) -> str | None:
    name = device_name.lower()
    hits = [(len(m), g["name"]) for g in GPUS for m in g["match"] if m.lower() in name]
    if not hits:
        return None
    best = max(h[0] for h in hits)
    winners = {n for length, n in hits if length == best}
    assert len(winners) == 1, f"'{device_name}' matches {sorted(winners)} equally"
    return winners.pop()


@pytest.mark.parametrize("gpu", GPUS, ids=GPU_IDS)
def test_own_match_strings_resolve_to_self(gpu):
    for m in gpu["match"]:
        assert _longest_match(m) == gpu["name"]


@pytest.mark.parametrize("device, expected", [
    ("NVIDIA H200", "NVIDIA H200 SXM"),
    ("NVIDIA H200 NVL", "NVIDIA H200 NVL"),
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5"),
    ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 SXM4 80GB"),
    ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
    ("AMD Radeon RX 7900 XTX (RADV NAVI31)", "AMD Radeon RX 7900 XTX"),
    ("AMD Instinct MI300X", "AMD Instinct MI300X"),
    ("Intel(R) Arc(TM) B580 Graphics", "Intel Arc B580"),
    ("Apple M1", "Apple M1 (8-core GPU)"),
])
def test_driver_names_resolve(device, expected):
    assert _longest_match(device) == expected


def _gpu(name: str) -> dict:
    return next(g for g in GPUS if g["name"] == name)


def test_h200_sxm_matches_datasheet():
    """The GPU measured most: dense peaks equal the NVIDIA H200 datasheet (sparse figures / 2)."""
    g = _gpu("NVIDIA H200 SXM")
    p = g["peaks"]
    assert g["pci_ids"] == ["0x10de:0x2335"] and "NVIDIA H200" in g["match"]
    assert g["units"] == 132 and g["boost_clock_mhz"] == 1980
    assert g["memory_gb"] == 141 and g["memory_bandwidth_gbs"] == 4800
    datasheet_dense = {"compute.fp64": 34, "matrix.fp64.fp64": 67, "compute.fp32": 67}
    datasheet_sparse = {"matrix.tf32.fp32": 989, "matrix.bf16.fp32": 1979,
                        "matrix.fp16.fp32": 1979, "matrix.fp8_e4m3.fp32": 3958,
                        "matrix.fp8_e5m2.fp32": 3958, "matrix.int8.int32": 3958}
    for test, value in datasheet_dense.items():
        assert p[test] == pytest.approx(value, rel=0.015), test
    for test, value in datasheet_sparse.items():
        assert p[test] == pytest.approx(value / 2, rel=0.002), test
        assert p[test + ".sparse"] == pytest.approx(value, rel=0.002), test

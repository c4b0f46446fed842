"""Checks of the spec database data (peakbench/specs/gpus.toml): fields, names, sources, and that
every per-clock rate reproduces its peak (units * rate * clock_mhz / 1e6 == peak, within 2%)."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

DATABASE = Path(__file__).parents[1] / "peakbench/specs/gpus.toml"

# The test catalog of DESIGN.md ("Test names").
COMPUTE = ["compute.fp64", "compute.fp32", "compute.fp16", "compute.bf16", "compute.int32",
           "compute.int16", "compute.int8", "compute.fp8_e4m3", "compute.fp8_e5m2",
           "compute.int4", "compute.fp4"]
MATRIX = ["matrix.fp16.fp16", "matrix.fp16.fp32", "matrix.bf16.fp32", "matrix.tf32.fp32",
          "matrix.fp8_e4m3.fp32", "matrix.fp8_e5m2.fp32", "matrix.int8.int32",
          "matrix.int4.int32", "matrix.fp4.fp32", "matrix.fp64.fp64"]
MEMORY = ["memory.read", "memory.write", "memory.copy"]
LATENCY = ["latency.l0", "latency.l1", "latency.l2", "latency.l3", "latency.dram"]
LAUNCH = ["launch.overhead"]
TEST_NAMES = frozenset(COMPUTE + MATRIX + MEMORY + LATENCY + LAUNCH)
# Tests that a vendor peak can exist for (latency and launch have none).
PEAK_TESTS = frozenset(COMPUTE + MATRIX + MEMORY)
RATE_TESTS = frozenset(COMPUTE + MATRIX)

VENDORS = {"NVIDIA", "AMD", "Intel", "Apple"}
REQUIRED = {
    "name": str, "vendor": str, "architecture": str, "match": list, "pci_ids": list,
    "units": int, "unit_name": str, "boost_clock_mhz": (int, float),
    "memory_bandwidth_gbs": (int, float), "source": str, "peaks": dict,
}
OPTIONAL_NUMBERS = ("memory_gb", "l1_kib_per_unit", "l2_mib", "l3_mib")
KNOWN_FIELDS = set(REQUIRED) | set(OPTIONAL_NUMBERS) | {"rates", "sources", "peak_clock_mhz"}
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
        assert test in TEST_NAMES, f"{gpu['name']}: '{test}' is not a test name of DESIGN.md"
        assert test in PEAK_TESTS, f"{gpu['name']}: '{test}' cannot have a vendor peak"
        assert _is_number(value) and value > 0, f"{gpu['name']}: {test} = {value!r}"


@pytest.mark.parametrize("gpu", GPUS, ids=GPU_IDS)
def test_memory_peaks_equal_bandwidth(gpu):
    for test in MEMORY:
        assert test in gpu["peaks"], f"{gpu['name']}: missing {test}"
        assert gpu["peaks"][test] == gpu["memory_bandwidth_gbs"], f"{gpu['name']}: {test}"


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
    assert test in RATE_TESTS, f"{gpu['name']}: rate for non-compute test {test}"
    assert _is_number(rate) and rate > 0
    assert test in gpu["peaks"], f"{gpu['name']}: rate for {test} but no peak"
    clock = gpu.get("peak_clock_mhz", {}).get(test, gpu["boost_clock_mhz"])
    derived = gpu["units"] * rate * clock / 1e6
    peak = gpu["peaks"][test]
    assert abs(derived / peak - 1) <= TOLERANCE, (
        f"{gpu['name']} {test}: {gpu['units']} units x {rate} ops/clk x {clock} MHz = "
        f"{derived:.2f}, peak {peak}")


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

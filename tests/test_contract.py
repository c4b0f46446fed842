"""The one contract every backend meets, run over each backend the same way: Vulkan on a real
device (lavapipe here), ROCm through the fake HIP, CUDA's table against a stand-in Hopper runtime
(no CuPy). Each fills one CapabilityTable; every catalog test is either supported with variants
to run or unsupported with a [category] reason; every workload it prepares is a Workload whose
measurement path is declared (timing, axis, series), never a measure of its own."""
from __future__ import annotations

import ast
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from test_workloads import rt  # noqa: F401  (a fixture: the ROCm runtime on the fake HIP)
from peakbench.catalog import Variant, default_catalog
from peakbench.report.result import CATEGORIES
from peakbench.runtime import Limits
from peakbench.workload import Sweep, Workload
from peakbench.workloads import Device
from peakbench.workloads.table import CapabilityTable

CATALOG = default_catalog()
MIB = 1 << 20
PACKAGE = Path(__file__).resolve().parent.parent / "peakbench"
# One test per family the shared workloads or a backend's modules run, prepared on each device.
PREPARED = ("compute.fp32", "memory.read", "latency.l1", "launch.overhead", "memory.shared", "latency.shared",
            "memory.l2", "sfu.rcp", "atomic.global_add", "transfer.h2d")


@pytest.fixture
def rocm_device(rt):
    """The ROCm backend's Device on the fake HIP (test_workloads' runtime, which it closes)."""
    from peakbench.rocm import capabilities
    return Device(rt, capabilities.TABLE)


def hopper():
    """What CUDA's table reads of a runtime, for an H200 (sm_90a), without CuPy or a GPU."""
    info = SimpleNamespace(name="NVIDIA H200", vendor_id=0x10DE, device_id=0x2335, kind="gpu", index=0)
    limits = Limits(units=132, threads_per_unit=2048, max_block=1024, warp=32, l2_bytes=60 * MIB,
                    memory_bytes=141 << 30, max_buffer=1 << 40)
    return SimpleNamespace(cc=(9, 0), arch="sm_90a", dialect="cuda", info=info, limits=limits, count=1)


def check_table(table, rt) -> dict:
    """Every catalog test against one device's table: (reason or None) by name."""
    assert isinstance(table, CapabilityTable)
    found = {}
    for test in CATALOG.tests:
        reason = table.support(test, rt)
        assert reason is None or reason.startswith(CATEGORIES), (test.name, reason)
        if reason is None:
            offered = table.variants(test, rt)
            assert offered and all(isinstance(v, Variant) for v in offered), (test.name, offered)
        found[test.name] = reason
    return found


def check_workload(w) -> None:
    assert isinstance(w, Workload), type(w)
    assert w.timing in ("gpu", "host", "sweep") and isinstance(w.params, dict) and isinstance(w.evidence, dict)
    if w.timing == "sweep":
        assert isinstance(w.sweep, Sweep)
    series = w.series()
    assert series is None or isinstance(series, Sweep)


def prepare_each(device, names=PREPARED) -> list[str]:
    prepared = []
    for name in names:
        test = CATALOG.get(name)
        if device.support(test):
            continue
        w = device.prepare(test, device.variants(test)[0])
        try:
            check_workload(w)
        finally:
            w.close()
        prepared.append(name)
    return prepared


def test_vulkan_meets_the_contract(vulkan_device):
    reasons = check_table(vulkan_device.table, vulkan_device.rt)
    assert reasons["gemm.bf16.fp32"].startswith("[api]") and reasons["transfer.p2p"].startswith("[api]")
    assert prepare_each(vulkan_device) == [n for n in PREPARED if reasons[n] is None]
    assert "compute.fp32" in reasons and reasons["memory.read"] is None


def test_rocm_meets_the_contract(rocm_device):
    reasons = check_table(rocm_device.table, rocm_device.rt)
    assert reasons["transfer.p2p"].startswith("[hardware] one GPU")
    # host transfers need pinned memory this fake HIP lacks (test_rocm_transfer.py extends it)
    assert prepare_each(rocm_device, PREPARED[:-1]) == [n for n in PREPARED[:-1] if reasons[n] is None]


def test_cudas_table_meets_the_contract(monkeypatch):
    from peakbench.backend import Unsupported
    from peakbench.cuda import capabilities, gemm

    def no_library():
        raise Unsupported("[toolchain] no libcublasLt in this process")
    monkeypatch.setattr(gemm, "library", no_library)        # it is found through CuPy, absent here
    cupy = ModuleType("cupy")                                # what the transfer and P2P modules ask at import
    cupy.ndarray = type("ndarray", (), {})
    cupy.cuda = SimpleNamespace(runtime=SimpleNamespace(getDeviceCount=lambda: 1))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    for name in ("peakbench.cuda.transfer", "peakbench.cuda.p2p"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    reasons = check_table(capabilities.TABLE, hopper())
    assert reasons["gemm.bf16.fp32"] == "[toolchain] no libcublasLt in this process"
    assert reasons["compute.fp32"] is None and reasons["compute.fp8_e4m3"].startswith("[hardware]")
    assert reasons["matrix.bf16.fp32"] is None and reasons["memory.read"] is None


def measuring(package: Path) -> list[str]:
    """What defines measure, calibrate or rate outside the harness, or imports them from the runner."""
    own = {"measure", "calibrate", "rate", "measure_on"}
    offenders = []
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package).as_posix()
        if where.startswith("harness/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in own:
                offenders.append(f"{where}: def {node.name}")
            if isinstance(node, ast.ImportFrom) and node.module == "peakbench.harness.runner":
                offenders += [f"{where}: imports {a.name}" for a in node.names if a.name in own]
    return sorted(offenders)


def test_no_workload_measures_itself():
    """The runner alone calibrates, samples and turns items into rates: no workload, backend or
    kernel module defines measure, calibrate or rate, nor imports them from the runner."""
    assert measuring(PACKAGE) == []


def test_the_check_sees_a_planted_measure(tmp_path):
    planted = tmp_path / "peakbench" / "workloads"
    planted.mkdir(parents=True)
    (planted / "mine.py").write_text("from peakbench.harness.runner import calibrate\n"
                                     "class W:\n    def measure(self):\n        pass\n")
    assert measuring(tmp_path / "peakbench") == ["workloads/mine.py: def measure", "workloads/mine.py: imports calibrate"]

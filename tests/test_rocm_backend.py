"""peakbench.rocm.backend on the fake HIP runtime: what enumeration reads into DeviceInfo, the GFX
clock through amdsmi, and the whole CLI (list the devices, a quick run) on the fake."""
from __future__ import annotations

import json
import sys
import types

import pytest

import fake_hip
from fake_hip import scalar
from peakbench import cli
from peakbench.rocm import matrix
from test_rocm import create, device, fakes, no_amdsmi  # noqa: F401  (fixtures)
from test_rocm_matrix import mma_player

def test_enumeration_fills_device_info(monkeypatch, tmp_path, no_amdsmi):
    (tmp_path / "0000:1c:00.0").mkdir()
    (tmp_path / "0000:1c:00.0" / "device").write_text("0x74a1\n")
    hip, rtc = fake_hip.pair([fake_hip.mi300x(), fake_hip.rx7900xtx()])
    from peakbench.rocm.backend import RocmBackend
    (tmp_path / "amdgpu-version").write_text("6.12.12\n")
    infos = RocmBackend(hip, rtc, 2, sysfs=tmp_path, amdgpu=tmp_path / "amdgpu-version").devices()
    mi, rx = infos
    assert (mi.index, mi.name, mi.vendor_id, mi.device_id, mi.units) == (0, "AMD Instinct MI300X", 0x1002, 0x74A1, 304)
    assert mi.uuid == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert mi.driver == "amdgpu 6.12.12, HIP 6.4.43483" and mi.api == "HIP 6.4.43483 (hip-python 6.4.1.552.37)"
    no_module = RocmBackend(hip, rtc, 1, sysfs=tmp_path, amdgpu=tmp_path / "absent").devices()[0]
    assert no_module.driver == "HIP 6.4.43483", "the in-tree amdgpu driver has no version file"
    assert mi.extra["arch"] == "gfx942" and mi.extra["target_id"] == "gfx942:sramecc+:xnack-"
    assert mi.extra["isa_family"] == "CDNA3" and mi.extra["pci_address"] == "0000:1c:00.0"
    assert (mi.extra["max_clock_mhz"], mi.extra["memory_bytes"], mi.extra["l2_bytes"]) == (2100, 192 << 30, 4 << 20)
    assert (rx.name, rx.device_id, rx.extra["arch"], rx.extra["wave_size"], rx.kind) == \
        ("Radeon RX 7900 XTX", 0, "gfx1100", 32, "gpu")
    assert json.loads(json.dumps(mi.as_json()))["vendor_id"] == "0x1002", "the JSON report takes it as is"


def test_amdsmi_clock_by_pci_address(monkeypatch):
    smi = types.ModuleType("amdsmi")
    smi.AmdSmiClkType = types.SimpleNamespace(GFX="gfx")
    state = {"shut": 0}
    smi.amdsmi_init = lambda: None
    smi.amdsmi_shut_down = lambda: state.__setitem__("shut", state["shut"] + 1)
    smi.amdsmi_get_processor_handles = lambda: ["h0", "h1"]
    smi.amdsmi_get_gpu_device_bdf = lambda h: {"h0": "0000:03:00.0", "h1": "0000:1C:00.0"}[h]
    smi.amdsmi_get_clock_info = lambda h, kind: {"clk": {"h0": 1000, "h1": 2100}[h], "max_clk": 2100} if kind == "gfx" else {}
    monkeypatch.setitem(sys.modules, "amdsmi", smi)
    from peakbench.rocm.backend import AmdSmiClock
    clock = AmdSmiClock.for_device("0000:1c:00.0")
    assert clock.gfx_mhz() == 2100.0
    smi.amdsmi_get_clock_info = lambda h, kind: {"clk": "N/A"}
    assert clock.gfx_mhz() is None, "an unreadable clock is no reading, not an error"
    clock.close()
    assert state["shut"] == 1
    assert AmdSmiClock.for_device("0000:99:00.0") is None and state["shut"] == 2, "two GPUs, none matches"


def test_no_amdsmi_means_no_clock(device):
    assert device.clock_mhz() is None


def test_cli_list_devices_and_a_quick_run_on_the_fake(monkeypatch, capsys, tmp_path):
    hip, rtc = fake_hip.pair([fake_hip.r9700()])
    fake_hip.install(monkeypatch, hip, rtc)
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    hip.kernels["mma_peak"] = mma_player(fnuz=False)
    hip.elapsed_ms = lambda launch: 1e-3 * scalar(launch["extra"][-1])      # 1 us per iteration
    assert cli.main(["--backend", "rocm", "--list-devices"]) == 0
    out = capsys.readouterr().out
    assert "rocm:" in out and "AMD Radeon AI PRO R9700" in out and "0x1002" in out
    path = tmp_path / "r.json"
    code = cli.main(["--backend", "rocm", "--tests", "matrix.fp8_e5m2.fp32,compute.bf16", "--quick",
                     "--json", str(path)])
    assert code == 0, capsys.readouterr().err
    results = {r["test"]: r for r in json.loads(path.read_text())["runs"][0]["results"]}
    fp8 = results["matrix.fp8_e5m2.fp32"]
    assert fp8["status"] == "ok" and fp8["params"]["arch"] == "gfx1201", fp8
    # 2*16*16*16 ops per step, ACC 8, UNROLL 4, 64 CUs * 4 blocks * 4 waves, 1 us per iteration
    want = 64 * matrix.BLOCKS_PER_UNIT * matrix.WAVES * 4 * 8 * 2 * 16 * 16 * 16 / 1e-6 / 1e12
    assert fp8["value"] == pytest.approx(want, rel=1e-3)            # the report keeps 4 digits
    bf16 = results["compute.bf16"]
    assert bf16["status"] == "unsupported" and bf16["reason"].startswith("[toolchain]")

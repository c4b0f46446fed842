"""The ROCm backend's host code against a fake HIP runtime (tests/fake_hip.py) at hip-python's API
boundary: backend creation and its errors, enumeration, hiprtc options, argument marshalling,
error codes, event timing, the capability table, and the matrix workloads end to end with a
Python player of the kernel that decodes the operands by the hardware's formats."""
from __future__ import annotations

import ctypes
import json
import struct
import sys
import types

import numpy as np
import pytest

import fake_hip
from fake_hip import defines, scalar
from peakbench import cli
from peakbench.backend import BackendUnavailable
from peakbench.catalog import default_catalog
from peakbench.catalog import matrix as catalog_matrix
from peakbench.catalog.matrix_reference import FP8
from peakbench.rocm import matrix, targets
from peakbench.rocm.runtime import CompileError, HipError, code_object, hip_version, marshal

CATALOG = default_catalog()


def blocked(kernel, block):
    """The kernel with the workgroup size it was compiled for (the runtime launches with it)."""
    kernel.block = block
    return kernel


@pytest.fixture
def no_amdsmi(monkeypatch):
    monkeypatch.setitem(sys.modules, "amdsmi", None)


@pytest.fixture
def fakes(monkeypatch, no_amdsmi):
    """A fake HIP runtime with an MI300X and an RX 7900 XTX, installed as `hip`."""
    hip, rtc = fake_hip.pair([fake_hip.mi300x(), fake_hip.rx7900xtx()])
    fake_hip.install(monkeypatch, hip, rtc)
    return hip, rtc


def create():
    import peakbench.rocm
    return peakbench.rocm.create()


@pytest.fixture
def device(fakes):
    """Device 0 (the MI300X) opened through create(), as the CLI would."""
    backend = create()
    dev = backend.open(0)
    yield dev
    dev.close()


# -- creation: a missing package, runtime, driver or GPU is one clear line --------------------------

def test_without_hip_python_the_error_names_the_package_and_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "hip", None)
    with pytest.raises(BackendUnavailable) as e:
        create()
    assert "'hip-python' is not installed" in str(e.value)
    assert "pip install 'peakbench[rocm]'" in str(e.value) and "ROCm" in str(e.value)


@pytest.mark.parametrize("code, words", [
    (fake_hip.hipError_t.hipErrorNoDevice, "no AMD GPU"),
    (fake_hip.hipError_t.hipErrorInsufficientDriver, "no usable AMD GPU driver"),
    (fake_hip.hipError_t.hipErrorInvalidValue, "hipGetDeviceCount failed: hipErrorInvalidValue"),
])
def test_device_count_errors_become_backend_unavailable(monkeypatch, code, words):
    hip, rtc = fake_hip.pair()
    hip.fail["hipGetDeviceCount"] = code
    fake_hip.install(monkeypatch, hip, rtc)
    with pytest.raises(BackendUnavailable, match=words):
        create()


def test_zero_devices_is_no_gpu(monkeypatch):
    hip, rtc = fake_hip.pair([])
    fake_hip.install(monkeypatch, hip, rtc)
    with pytest.raises(BackendUnavailable, match="reports no AMD GPU"):
        create()


def test_a_missing_hip_library_at_first_call_is_backend_unavailable(monkeypatch):
    """hip-python loads libamdhip64.so lazily: the import works, the first call fails."""
    hip, rtc = fake_hip.pair()
    hip.raise_on["hipGetDeviceCount"] = OSError("libamdhip64.so: cannot open shared object file")
    fake_hip.install(monkeypatch, hip, rtc)
    with pytest.raises(BackendUnavailable, match="libamdhip64.so.*LD_LIBRARY_PATH"):
        create()


def test_an_enumeration_error_is_backend_unavailable_naming_the_call(monkeypatch):
    hip, rtc = fake_hip.pair()
    hip.fail["hipGetDeviceProperties"] = fake_hip.hipError_t.hipErrorInvalidDevice
    fake_hip.install(monkeypatch, hip, rtc)
    with pytest.raises(BackendUnavailable, match="hipGetDeviceProperties failed: hipErrorInvalidDevice"):
        create()


def test_cli_without_hip_python_exits_2_with_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "hip", None)
    code = cli.main(["--backend", "rocm", "--tests", "compute.fp32"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("peakbench: error: rocm backend: Python package 'hip-python' is not installed")


def test_cli_with_no_gpu_exits_2(monkeypatch, capsys, no_amdsmi):
    hip, rtc = fake_hip.pair()
    hip.fail["hipGetDeviceCount"] = fake_hip.hipError_t.hipErrorNoDevice
    fake_hip.install(monkeypatch, hip, rtc)
    assert cli.main(["--backend", "rocm", "--list-devices"]) == 2
    assert "rocm backend: the HIP runtime reports no AMD GPU" in capsys.readouterr().err


# -- enumeration ------------------------------------------------------------------------------------

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


def test_hip_version_text():
    assert hip_version(60342134) == "6.3.42134"
    assert hip_version(70_000_000 + 2 * 100_000 + 7) == "7.2.7"


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


# -- the runtime at the hip-python boundary ---------------------------------------------------------

def test_runtime_setup_sizes_from_the_properties(device, fakes):
    hip, _ = fakes
    rt = device.rt
    assert (rt.arch, rt.target, rt.dialect) == ("gfx942", "gfx942:sramecc+:xnack-", "hip")
    assert (rt.limits.units, rt.limits.warp, rt.limits.max_block, rt.limits.l2_bytes) == (304, 64, 1024, 4 << 20)
    assert rt.limits.memory_bytes == (192 << 30) - (1 << 30), "free memory, from hipMemGetInfo"
    assert hip.last("hipSetDevice")[0] == (0,)
    assert hip.names().count("hipEventCreate") == 2 and "hipStreamCreate" in hip.names()


def test_compile_targets_the_exact_gfx_target_with_its_features(device, fakes):
    hip, rtc = fakes
    kernel = device.rt.compile_text("extern \"C\" __global__ void k() {}", {"ACC": 8, "FORM_X": 1}, "k")
    prog = rtc.programs[-1]
    options = [o.decode() for o in prog.options]
    assert options[0] == "--offload-arch=gfx942:sramecc+:xnack-"
    assert "-O3" in options and "-std=c++17" in options and "-DACC=8" in options and "-DFORM_X=1" in options
    assert prog.source == b"extern \"C\" __global__ void k() {}" and prog.name == b"k.cu"
    assert prog.destroyed
    loaded = hip.last("hipModuleLoadData")[0][0]
    assert loaded == kernel.binary and kernel.binary.startswith(b"\x7fELF")
    assert hip.last("hipModuleGetFunction")[0][1] == b"k"
    assert kernel.handle.extra["name"] == "k" and kernel.extra["target"] == "gfx942:sramecc+:xnack-"


def test_a_compile_error_carries_the_hiprtc_log(device, fakes):
    _, rtc = fakes
    rtc.compile_error = "matrix_amd.cu:42:7: error: '__builtin_amdgcn_mfma_f32_16x16x32_f16' needs target feature gfx950-insts"
    with pytest.raises(CompileError) as e:
        device.rt.compile_text("bad", {}, "mma_peak")
    text = str(e.value)
    assert "hiprtc could not compile mma_peak for gfx942:sramecc+:xnack-" in text
    assert "HIPRTC_ERROR_COMPILATION" in text and "needs target feature gfx950-insts" in text
    assert rtc.programs[-1].destroyed, "the program is released on the error path too"


def test_launch_marshals_buffers_and_numpy_scalars(device, fakes):
    hip, _ = fakes
    rt = device.rt
    kernel = rt.compile_text("src", {}, "k")
    out, inp = rt.alloc(64), rt.alloc(128)
    rt.launch(blocked(kernel, (64, 2)), 7, [out, inp, np.uint32(5), np.int32(-3), np.uint64(1 << 40), np.float32(0.5),
                                   np.float64(2.25)], shared_bytes=512)
    (f, *dims), kw = hip.last("hipModuleLaunchKernel")
    assert dims == [7, 1, 1, 64, 2, 1] and kw["sharedMemBytes"] == 512 and kw["kernelParams"] is None
    assert kw["stream"] is rt.stream
    extra = kw["extra"]
    assert [type(a) for a in extra] == [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int32,
                                        ctypes.c_uint64, ctypes.c_float, ctypes.c_double]
    assert [extra[0].value, extra[1].value] == [out.address, inp.address]
    assert [a.value for a in extra[2:]] == [5, -3, 1 << 40, 0.5, 2.25]


def test_launch_without_arguments_passes_no_extra(device, fakes):
    hip, _ = fakes
    kernel = device.rt.compile_text("src", {}, "empty")
    device.rt.launch_times(kernel, 3)
    assert hip.last("hipModuleLaunchKernel")[1]["extra"] is None
    assert hip.names().count("hipStreamSynchronize") >= 3


@pytest.mark.parametrize("arg", [5, 2.0, b"raw", None])
def test_plain_python_scalars_are_refused(arg):
    with pytest.raises(TypeError, match="kernel argument 0"):
        marshal([arg])


def test_event_timing_is_milliseconds_to_seconds(device, fakes):
    hip, _ = fakes
    hip.elapsed_ms = 12.5
    rt = device.rt
    kernel = rt.compile_text("src", {}, "k")
    assert rt.launch(blocked(kernel, 64), 1, [np.uint32(1)]) == pytest.approx(0.0125)
    order = [n for n in hip.names() if n in ("hipEventRecord", "hipModuleLaunchKernel", "hipEventSynchronize",
                                             "hipEventElapsedTime")][-5:]
    assert order == ["hipEventRecord", "hipModuleLaunchKernel", "hipEventRecord", "hipEventSynchronize",
                     "hipEventElapsedTime"]
    start, end = hip.last("hipEventElapsedTime")[0]
    assert hip.last("hipEventSynchronize")[0] == (end,) and start is not end
    assert all(a[1] is rt.stream for n, a, _ in hip.calls if n == "hipEventRecord")


def test_repeated_launches_sit_between_one_pair_of_events(device, fakes):
    hip, _ = fakes
    hip.elapsed_ms = 30.0
    kernel = device.rt.compile_text("src", {}, "k")
    before = len(hip.calls)
    assert device.rt.launch(blocked(kernel, 256), 4, [np.uint32(1)], repeat=3) == pytest.approx(0.030)
    names = [n for n, _, _ in hip.calls[before:]]
    assert names == ["hipEventRecord"] + ["hipModuleLaunchKernel"] * 3 + ["hipEventRecord", "hipEventSynchronize",
                                                                          "hipEventElapsedTime"]


def test_memory_round_trip_and_fill(device, fakes):
    hip, _ = fakes
    rt = device.rt
    buf = rt.alloc(16)
    rt.upload(buf, bytes(range(16)))
    assert rt.download(buf) == bytes(range(16)) and rt.download(buf, 4) == bytes(range(4))
    rt.fill(buf, 0x1FF)
    assert rt.download(buf) == b"\xff" * 16
    assert hip.last("hipMemset")[0][1:] == (0xFF, 16)
    with pytest.raises(ValueError):
        rt.upload(buf, bytes(17))
    address = buf.address
    rt.free(buf)
    rt.free(buf)                                   # twice is harmless
    assert address not in hip.memory and hip.names().count("hipFree") == 1


def _action(rt, kernel):
    return {
        "hipMalloc": lambda: rt.alloc(8),
        "hipMemcpy": lambda: rt.upload(rt.alloc(8), b"12345678"),
        "hipMemset": lambda: rt.fill(rt.alloc(8), 0),
        "hipFree": lambda: rt.free(rt.alloc(8)),
        "hipModuleLaunchKernel": lambda: rt.launch(blocked(kernel, 64), 1, []),
        "hipEventRecord": lambda: rt.launch(blocked(kernel, 64), 1, []),
        "hipEventSynchronize": lambda: rt.launch(blocked(kernel, 64), 1, []),
        "hipEventElapsedTime": lambda: rt.launch(blocked(kernel, 64), 1, []),
        "hipStreamSynchronize": lambda: rt.launch_times(kernel, 1),
        "hipDeviceSynchronize": lambda: rt.fill(rt.alloc(8), 0),
        "hipModuleLoadData": lambda: rt.compile_text("src", {}, "k"),
        "hipModuleGetFunction": lambda: rt.compile_text("src", {}, "k"),
        "hiprtcCreateProgram": lambda: rt.compile_text("src", {}, "k"),
        "hiprtcGetCodeSize": lambda: rt.compile_text("src", {}, "k"),
        "hiprtcGetCode": lambda: rt.compile_text("src", {}, "k"),
        "hiprtcGetProgramLogSize": lambda: rt.compile_text("src", {}, "k"),
        "hiprtcDestroyProgram": lambda: rt.compile_text("src", {}, "k"),
    }


ACTIONS = list(_action(None, None))


@pytest.mark.parametrize("call", ACTIONS)
def test_every_failing_call_raises_naming_the_call_and_the_code(device, fakes, call):
    hip, rtc = fakes
    rt = device.rt
    kernel = rt.compile_text("src", {}, "k")
    code = (fake_hip.hiprtcResult.HIPRTC_ERROR_INVALID_PROGRAM if call.startswith("hiprtc")
            else fake_hip.hipError_t.hipErrorLaunchFailure)
    hip.fail[call] = code
    with pytest.raises(HipError) as e:
        _action(rt, kernel)[call]()
    assert str(e.value).startswith(f"{call} failed: {code.name} (error {int(code)})")
    assert e.value.call == call and e.value.code == int(code)
    del hip.fail[call]


@pytest.mark.parametrize("call", ["hipSetDevice", "hipMemGetInfo", "hipStreamCreate", "hipEventCreate"])
def test_opening_a_device_checks_every_call(fakes, call):
    hip, _ = fakes
    backend = create()
    hip.fail[call] = fake_hip.hipError_t.hipErrorInvalidDevice
    with pytest.raises(HipError, match=f"{call} failed: hipErrorInvalidDevice"):
        backend.open(0)


def test_an_exception_inside_hip_python_names_the_call(device, fakes):
    hip, _ = fakes
    hip.raise_on["hipMalloc"] = TypeError("expected a Pointer-convertible object")
    with pytest.raises(HipError, match="hipMalloc failed: TypeError: expected a Pointer"):
        device.rt.alloc(4)


def test_close_releases_modules_events_and_stream(fakes):
    hip, _ = fakes
    dev = create().open(0)
    dev.rt.compile_text("src", {}, "a")
    dev.rt.compile_text("src", {}, "b")
    dev.close()
    names = hip.names()
    assert names.count("hipModuleUnload") == 2 and names.count("hipEventDestroy") == 2
    assert names[-1] == "hipStreamDestroy"


# -- code objects and disassembly -------------------------------------------------------------------

def _bundle(entries: list[tuple[str, bytes]]) -> bytes:
    header = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(entries))
    size = len(header) + sum(24 + len(i) for i, _ in entries)
    table, blobs, offset = b"", b"", size
    for entry_id, data in entries:
        table += struct.pack("<QQQ", offset, len(data), len(entry_id)) + entry_id.encode()
        blobs += data
        offset += len(data)
    return header + table + blobs


def test_code_object_from_elf_and_bundle():
    elf = b"\x7fELF" + b"\x00" * 12
    assert code_object(elf) == elf
    bundle = _bundle([("host-x86_64-unknown-linux-gnu-", b""), ("hipv4-amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-", b"A" * 8),
                      ("hipv4-amdgcn-amd-amdhsa--gfx942", elf)])
    assert code_object(bundle, "gfx942") == elf and code_object(bundle, "gfx90a") == b"A" * 8
    assert code_object(b"CCOB compressed") is None


def test_disassemble_without_llvm_objdump_is_none(monkeypatch, device):
    from peakbench.rocm import runtime
    monkeypatch.setattr(runtime, "objdump", lambda: None)
    kernel = device.rt.compile_text("src", {}, "k")
    assert device.rt.disassemble(kernel) is None


# -- the capability table -----------------------------------------------------------------------------
# Every compute and matrix test on the five targets the ROCm backend is written for: "ok" (native)
# or the category the reason must start with.
OK = "ok"
EXPECTED = {
    #                        gfx90a        gfx942        gfx950        gfx1100       gfx1201
    "compute.fp64":         (OK,           OK,           OK,           OK,           OK),
    "compute.fp32":         (OK,           OK,           OK,           OK,           OK),
    "compute.fp16":         (OK,           OK,           OK,           OK,           OK),
    "compute.bf16":         ("hardware",   "hardware",   "toolchain",  "toolchain",  "toolchain"),
    "compute.int32":        (OK,           OK,           OK,           OK,           OK),
    "compute.int16":        (OK,           OK,           OK,           OK,           OK),
    "compute.int8":         (OK,           OK,           OK,           OK,           OK),
    "compute.fp8_e4m3":     ("hardware",   "hardware",   "hardware",   "hardware",   "toolchain"),
    "compute.fp8_e5m2":     ("hardware",   "hardware",   "hardware",   "hardware",   "toolchain"),
    "compute.int4":         ("toolchain",  "toolchain",  "toolchain",  "toolchain",  "toolchain"),
    "compute.fp4":          ("hardware",   "hardware",   "hardware",   "hardware",   "hardware"),
    "matrix.fp16.fp16":     ("hardware",   "hardware",   "hardware",   OK,           OK),
    "matrix.fp16.fp32":     (OK,           OK,           OK,           OK,           OK),
    "matrix.bf16.fp32":     (OK,           OK,           OK,           OK,           OK),
    "matrix.tf32.fp32":     ("hardware",   OK,           "hardware",   "hardware",   "hardware"),
    "matrix.fp8_e4m3.fp32": ("hardware",   OK,           OK,           "hardware",   OK),
    "matrix.fp8_e5m2.fp32": ("hardware",   OK,           OK,           "hardware",   OK),
    "matrix.int8.int32":    (OK,           OK,           OK,           OK,           OK),
    "matrix.int4.int32":    ("hardware",   "hardware",   "hardware",   OK,           OK),
    "matrix.fp4.fp32":      ("hardware",   "hardware",   OK,           "hardware",   "hardware"),
    "matrix.fp64.fp64":     (OK,           OK,           OK,           "hardware",   "hardware"),
}
ARCHES = ("gfx90a:sramecc+:xnack-", "gfx942:sramecc+:xnack-", "gfx950", "gfx1100", "gfx1201")


def test_the_expectations_cover_every_compute_and_matrix_test():
    assert set(EXPECTED) == {t.name for t in CATALOG.tests if t.family in ("compute", "matrix")}


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("test_name", sorted(EXPECTED))
def test_capability_decision(arch, test_name):
    want = EXPECTED[test_name][ARCHES.index(arch)]
    fn = targets.alu_reason if test_name.startswith("compute.") else targets.matrix_support
    reason = fn(arch, test_name)
    if want == OK:
        assert reason is None, reason
    else:
        assert reason and reason.startswith(f"[{want}] "), reason
        assert len(reason) > len(want) + 20, "the reason says what is missing"


def test_reasons_name_what_the_brief_expects():
    assert "emulates it in FP32" in targets.alu_reason("gfx1201", "compute.bf16")
    assert "v_dot4_f32_fp8_fp8" in targets.alu_reason("gfx1201", "compute.fp8_e4m3")
    assert "XF32" in targets.matrix_support("gfx950", "matrix.tf32.fp32")
    assert "gfx950" in targets.matrix_support("gfx942", "matrix.fp4.fp32")


def test_matrix_shapes_per_target():
    shapes = lambda arch, test: [f.shape for f in targets.matrix_forms(arch, test)]
    assert shapes("gfx942", "matrix.fp8_e4m3.fp32") == [(32, 32, 16), (16, 16, 32)]
    assert shapes("gfx950", "matrix.fp4.fp32") == [(32, 32, 64), (16, 16, 128)]
    assert [f.fmt for f in targets.matrix_forms("gfx950", "matrix.fp4.fp32")] == [4, 4]
    assert shapes("gfx1201", "matrix.int4.int32") == [(16, 16, 32), (16, 16, 16)]
    assert shapes("gfx1100", "matrix.int4.int32") == [(16, 16, 16)]
    assert shapes("gfx90a", "matrix.int8.int32") == [(32, 32, 8), (16, 16, 16)]
    assert shapes("gfx942", "matrix.int8.int32") == [(32, 32, 16), (16, 16, 32)]


def test_forms_keep_to_their_family_wave_and_kind():
    for fam in targets.FAMILIES:
        for forms in fam.matrix.values():
            for f in forms:
                assert f.builtin.startswith("mfma" if fam.wave == 64 else "wmma"), (fam.name, f)
                if fam.name == "RDNA4":
                    assert f.builtin.endswith("_w32_gfx12")
                if fam.name == "RDNA3":
                    assert f.builtin.endswith("_w32")


def test_family_lookup_ignores_target_features_and_knows_the_fp8_encoding():
    assert targets.family("gfx90a:sramecc+:xnack-").name == "CDNA2"
    assert targets.family("gfx942").fp8 == "fnuz" and targets.family("gfx950").fp8 == "ocp"
    assert targets.family("gfx1201").fp8 == "ocp" and targets.family("gfx1151").name == "RDNA3"
    unknown = targets.matrix_support("gfx1010:xnack-", "matrix.fp16.fp32")
    assert unknown.startswith("[toolchain]") and "gfx1010" in unknown
    assert targets.alu_reason("gfx1010", "compute.fp32") is None, "plain FMA runs on any target"


def test_device_support_and_variants_follow_the_table(device):
    fp8 = CATALOG.get("matrix.fp8_e4m3.fp32")
    assert device.support(fp8) is None
    assert [v.name for v in device.variants(fp8)] == ["32x32x16", "16x16x32"]
    assert all(v.shape and v.scope == "subgroup" for v in device.variants(fp8))
    assert device.support(CATALOG.get("matrix.int4.int32")).startswith("[hardware]")
    assert device.support(CATALOG.get("compute.bf16")).startswith("[hardware]")
    assert device.support(CATALOG.get("compute.fp16")) is None


# -- matrix workloads end to end on the fake, played by a decoder of the hardware's formats ----------

def _minifloat(codes: np.ndarray, exp_bits: int, mant_bits: int, bias: int) -> np.ndarray:
    codes = codes.astype(np.int64)
    sign = np.where(codes >> (exp_bits + mant_bits) & 1, -1.0, 1.0)
    exp = (codes >> mant_bits) & ((1 << exp_bits) - 1)
    mant = codes & ((1 << mant_bits) - 1)
    value = np.where(exp > 0, 2.0 ** (exp - bias) * (1 + mant / 2 ** mant_bits), 2.0 ** (1 - bias) * mant / 2 ** mant_bits)
    return sign * value


def _nibbles(raw: bytes, count: int) -> np.ndarray:
    b = np.frombuffer(raw, np.uint8)
    return np.stack([b & 0xF, b >> 4], axis=1).reshape(-1)[:count]


BYTES = {"fp16": 2, "bf16": 2, "tf32": 4, "fp64": 8, "int8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "int4": 0.5,
         "fp4": 0.5, "fp32": 4, "int32": 4}


def decode(raw: bytes, kind: str, count: int, fnuz: bool) -> np.ndarray:
    """Elements as the matrix units read them (AMD ISA guides): FNUZ FP8 on CDNA3 takes the OCP
    exponent bias plus one."""
    if kind == "fp16":
        return np.frombuffer(raw, np.float16, count).astype(np.float64)
    if kind == "bf16":
        return (np.frombuffer(raw, np.uint16, count).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if kind in ("tf32", "fp32"):
        return np.frombuffer(raw, np.float32, count).astype(np.float64)
    if kind == "fp64":
        return np.frombuffer(raw, np.float64, count)
    if kind == "int8":
        return np.frombuffer(raw, np.int8, count).astype(np.int64)
    if kind == "int32":
        return np.frombuffer(raw, np.int32, count).astype(np.int64)
    if kind == "int4":
        n = _nibbles(raw, count).astype(np.int64)
        return np.where(n >= 8, n - 16, n)
    if kind == "fp4":
        return _minifloat(_nibbles(raw, count), 2, 1, 1)
    mant, bias = FP8[kind]
    return _minifloat(np.frombuffer(raw, np.uint8, count), 7 - mant, mant, bias + (1 if fnuz else 0))


def form_types(form: str, fmt: str | None) -> tuple[str, str, tuple[int, int, int]]:
    """Operand type, accumulator type and M x N x K from a FORM name alone."""
    kinds = [("F8f6f4", {"0": "fp8_e4m3", "1": "fp8_e5m2", "4": "fp4"}.get(fmt)), ("Bf16", "bf16"),
             ("Bf8", "fp8_e5m2"), ("Fp8", "fp8_e4m3"), ("Xf32", "tf32"), ("F64", "fp64"), ("F16", "fp16"),
             ("I8", "int8"), ("I4", "int4")]
    operand = next(kind for key, kind in kinds if key in form)
    acc = ("fp16" if form.endswith("F16F16") else "int32" if operand.startswith("int") else
           "fp64" if operand == "fp64" else "fp32")
    if "_" in form:
        shape = tuple(int(x) for x in form.split("_")[1].split("x"))
    else:
        shape = (16, 16, 32) if form.endswith("K32") else (16, 16, 16)
    return operand, acc, shape


def mma_player(fnuz: bool, corrupt: bool = False):
    """The kernel mma_peak in numpy: decode A, B1, B2 and C0 from device memory, run `iterations`
    steps per accumulator, store the summed tile for every wave."""
    def play(fake, launch):
        d = defines(launch["options"])
        form = next(k[len("FORM_"):] for k in d if k.startswith("FORM_"))
        operand, acc, (m, n, k) = form_types(form, d.get("FMT"))
        out, ab, c0, iterations = launch["extra"]
        unroll, accs, waves, wave = (int(d[x]) for x in ("UNROLL", "ACC", "WAVES", "WAVE"))
        assert launch["block"] == (waves * wave, 1, 1)
        owners = launch["grid"][0] * waves
        raw = bytes(fake.buffer(ab))
        sa, sb = int(m * k * BYTES[operand]), int(k * n * BYTES[operand])
        assert len(raw) == sa + 2 * sb, "the operand buffer holds A, B1, B2"
        a = decode(raw[:sa], operand, m * k, fnuz).reshape(m, k)
        b1 = decode(raw[sa:sa + sb], operand, k * n, fnuz).reshape(k, n)
        b2 = decode(raw[sa + sb:], operand, k * n, fnuz).reshape(k, n)
        c = decode(bytes(fake.buffer(c0)), acc, accs * m * n, fnuz).reshape(accs, m, n)
        tile = c.sum(axis=0) + scalar(iterations) * (unroll // 2) * accs * (a @ b1 + a @ b2)
        store = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64, "int32": np.int32}[acc]
        tiles = np.repeat(tile.astype(store)[None], owners, axis=0)
        if corrupt:
            tiles[owners // 2, m - 1, 0] += 1
        target = fake.buffer(out)
        assert len(target) == tiles.nbytes, "one tile per wave"
        target[:] = tiles.tobytes()
    return play


CASES = [
    (fake_hip.mi250x, ["matrix.fp16.fp32", "matrix.bf16.fp32", "matrix.int8.int32", "matrix.fp64.fp64"]),
    (fake_hip.mi300x, ["matrix.fp16.fp32", "matrix.bf16.fp32", "matrix.tf32.fp32", "matrix.fp8_e4m3.fp32",
                       "matrix.fp8_e5m2.fp32", "matrix.int8.int32", "matrix.fp64.fp64"]),
    (fake_hip.mi355x, ["matrix.fp16.fp32", "matrix.bf16.fp32", "matrix.fp8_e4m3.fp32", "matrix.fp8_e5m2.fp32",
                       "matrix.int8.int32", "matrix.fp4.fp32"]),
    (fake_hip.rx7900xtx, ["matrix.fp16.fp16", "matrix.fp16.fp32", "matrix.bf16.fp32", "matrix.int8.int32",
                          "matrix.int4.int32"]),
    (fake_hip.r9700, ["matrix.fp16.fp16", "matrix.fp16.fp32", "matrix.bf16.fp32", "matrix.fp8_e4m3.fp32",
                      "matrix.fp8_e5m2.fp32", "matrix.int8.int32", "matrix.int4.int32"]),
]


def open_fake(monkeypatch, make, player=None):
    hip, rtc = fake_hip.pair([make()])
    fake_hip.install(monkeypatch, hip, rtc)
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    arch = make()["gcnArchName"].decode()
    hip.kernels["mma_peak"] = player or mma_player(fnuz=arch.startswith("gfx94"))
    return hip, create().open(0)


@pytest.mark.parametrize("make, test_name", [pytest.param(make, t, id=f"{make.__name__}-{t}")
                                             for make, tests in CASES for t in tests])
def test_matrix_workload_verifies_against_the_host_reference(monkeypatch, make, test_name):
    hip, dev = open_fake(monkeypatch, make)
    test = CATALOG.get(test_name)
    variants = dev.variants(test)
    assert variants, test_name
    for v in variants:
        w = dev.prepare(test, v)
        try:
            assert w.verify() is None, (test_name, v.name)
            launch = hip.launches[-1]
            d = defines(launch["options"])
            assert int(d["WAVE"]) == dev.rt.limits.warp and int(d["UNROLL"]) == v.unroll
            assert w.params["operands"] == test.dtype.split(".")[0]
            m, n, k = v.shape
            assert w.items(10) == w.owners * 10 * v.unroll * w.accumulators
        finally:
            w.close()
    dev.close()


def test_verification_leaves_the_timed_operands_in_place(monkeypatch):
    """After verify (B2 = B1), the buffer holds B2 = -B1 again, so timed runs stay bounded."""
    hip, dev = open_fake(monkeypatch, fake_hip.mi300x)
    test = CATALOG.get("matrix.fp16.fp32")
    w = dev.prepare(test, dev.variants(test)[0])
    assert w.verify() is None
    m, n, k = w.form.shape
    raw = bytes(hip.memory[w.ab.address])
    b1 = decode(raw[2 * m * k: 2 * (m * k + k * n)], "fp16", k * n, False)
    b2 = decode(raw[2 * (m * k + k * n):], "fp16", k * n, False)
    assert np.array_equal(b2, -b1) and np.any(b1 != 0)
    w.close()


def test_fp8_on_gfx942_is_encoded_fnuz(monkeypatch):
    """The same workload fails when the matrix units are assumed to read OCP FP8 on gfx942: the
    encoding is the target's, and verification would catch the wrong one."""
    _, dev = open_fake(monkeypatch, fake_hip.mi300x, mma_player(fnuz=False))
    test = CATALOG.get("matrix.fp8_e4m3.fp32")
    w = dev.prepare(test, dev.variants(test)[0])
    assert w.evidence["fp8_encoding"].startswith("FNUZ")
    problem = w.verify()
    assert problem and "differ from the host reference" in problem
    w.close()


def test_a_wrong_element_fails_verification(monkeypatch):
    _, dev = open_fake(monkeypatch, fake_hip.r9700, mma_player(fnuz=False, corrupt=True))
    test = CATALOG.get("matrix.int8.int32")
    w = dev.prepare(test, dev.variants(test)[0])
    problem = w.verify()
    assert problem and problem.startswith("1 of ") and "subgroup" in problem
    w.close()


def test_matrix_workload_launch_and_evidence(monkeypatch):
    hip, dev = open_fake(monkeypatch, fake_hip.mi355x)
    hip.elapsed_ms = 4.0
    test = CATALOG.get("matrix.fp4.fp32")
    v = dev.variants(test)[0]
    w = dev.prepare(test, v)
    assert w.run(100) == pytest.approx(0.004)
    launch = hip.launches[-1]
    d = defines(launch["options"])
    assert d["FORM_MfmaF8f6f4_32x32x64"] == "1" and d["FMT"] == "4" and launch["options"][0].startswith("--offload-arch=gfx950")
    assert launch["grid"] == (256 * matrix.BLOCKS_PER_UNIT, 1, 1) and launch["block"] == (matrix.WAVES * 64, 1, 1)
    assert scalar(launch["extra"][3]) == 100
    assert w.evidence["builtin"] == "__builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4"
    assert w.params["kernel"] == "matrix_amd.cu (MfmaF8f6f4_32x32x64)"
    w.close()


def test_evidence_counts_the_matrix_instructions_in_the_disassembly(monkeypatch):
    from peakbench.rocm import runtime
    hip, dev = open_fake(monkeypatch, fake_hip.mi300x)
    listing = ("\tv_mfma_f32_32x32x16_fp8_fp8 a[0:15], v[2:3], v[4:5], a[0:15]\n"
               "\tv_mfma_f32_32x32x16_fp8_fp8 a[16:31], v[2:3], v[4:5], a[16:31]\n"
               "\ts_waitcnt vmcnt(0)\n\tv_mfma_f32_16x16x32_fp8_fp8 v[0:3], v[2:3], v[4:5], v[0:3]\n")
    monkeypatch.setattr(runtime, "disassemble", lambda binary, arch: listing)
    test = CATALOG.get("matrix.fp8_e4m3.fp32")
    w = dev.prepare(test, dev.variants(test)[0])
    assert w.evidence["matrix_instructions"] == 2
    assert w.evidence["instruction_mix"]["v_mfma_f32_32x32x16_fp8_fp8"] == 2
    w.close()


def test_a_shape_the_target_lacks_is_unsupported(device):
    from peakbench.backend import Unsupported
    test = CATALOG.get("matrix.fp16.fp32")
    with pytest.raises(Unsupported, match=r"^\[hardware\]"):
        device.prepare(test, catalog_matrix.shape(8, 8, 4))


def test_encodings_of_the_narrow_types():
    vals = np.array([[1.0, -1.0, 0.0, 1.0]])
    assert matrix.encode(vals, "fp4") == bytes([0xA2, 0x20])           # +1 = 0b0010, -1 = 0b1010
    assert matrix.encode(np.array([[1, -1, 0, 7]]), "int4") == bytes([0xF1, 0x70])
    eighth = np.array([[0.125, -0.125]])
    assert matrix.encode(eighth, "fp8_e4m3", "ocp") == bytes([0x20, 0xA0])   # exponent 4 = -3 + 7
    assert matrix.encode(eighth, "fp8_e4m3", "fnuz") == bytes([0x28, 0xA8])  # exponent 5 = -3 + 8
    assert matrix.encode(eighth, "fp8_e5m2", "fnuz") == bytes([0x34, 0xB4])  # exponent 13 = -3 + 16


# -- the whole CLI on the fake ----------------------------------------------------------------------

def test_cli_list_devices_and_a_quick_run_on_the_fake(monkeypatch, capsys, tmp_path):
    hip, rtc = fake_hip.pair([fake_hip.r9700()])
    fake_hip.install(monkeypatch, hip, rtc)
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    hip.kernels["mma_peak"] = mma_player(fnuz=False)
    hip.elapsed_ms = lambda launch: 1e-3 * scalar(launch["extra"][3])      # 1 us per iteration
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

"""peakbench.rocm.runtime at hip-python's API boundary (the fake HIP runtime): set-up from the
properties, hiprtc options and logs, argument marshalling, event timing, memory, an error code
named with its call, what close() releases, and code objects and their disassembly."""
from __future__ import annotations

import ctypes
import struct

import numpy as np
import pytest

import fake_hip
from peakbench.rocm.runtime import CompileError, HipError, code_object, hip_version, marshal
from test_rocm import create, device, fakes, no_amdsmi  # noqa: F401  (fixtures)

def blocked(kernel, block):
    """The kernel with the workgroup size it was compiled for (the runtime launches with it)."""
    kernel.block = block
    return kernel


def test_hip_version_text():
    assert hip_version(60342134) == "6.3.42134"
    assert hip_version(70_000_000 + 2 * 100_000 + 7) == "7.2.7"


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


# -- the code-object and listing caches -------------------------------------------------------

@pytest.fixture
def versioned(fakes, tmp_path, monkeypatch):
    """The fake hiprtc with a version to key its code objects by (real hiprtc has hiprtcVersion),
    and a fresh cache."""
    _, rtc = fakes
    monkeypatch.setattr(rtc, "hiprtcVersion", lambda: (fake_hip.hiprtcResult.HIPRTC_SUCCESS, 6, 3), raising=False)
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path / "cache"))
    return fakes


def test_a_second_compile_of_the_same_source_reads_the_cache(versioned, device):
    hip, rtc = versioned
    rtc.warning_log = "k.cu:1:1: warning: unused"
    first = device.rt.compile_text("extern \"C\" __global__ void k() {}", {"ACC": 8}, "k")
    again = device.rt.compile_text("extern \"C\" __global__ void k() {}", {"ACC": 8}, "k")
    assert len(rtc.programs) == 1, "hiprtc ran once"
    assert again.binary == first.binary and again.log == first.log == "k.cu:1:1: warning: unused"
    assert "cached" not in first.extra and again.extra["cached"] is True
    assert hip.last("hipModuleLoadData")[0][0] == first.binary, "the cached code object is loaded"
    assert hip.names().count("hipModuleLoadData") == 2
    changed = device.rt.compile_text("extern \"C\" __global__ void k() {}", {"ACC": 4}, "k")
    assert len(rtc.programs) == 2 and "-DACC=4" in [o.decode() for o in rtc.programs[-1].options]
    assert changed.binary != first.binary and "cached" not in changed.extra
    device.rt.compile_text("extern \"C\" __global__ void k() { }", {"ACC": 8}, "k")
    assert len(rtc.programs) == 3, "an edited source is compiled again"


def test_a_failed_compile_is_not_cached(versioned, device):
    _, rtc = versioned
    rtc.compile_error = "k.cu:1:1: error: no"
    with pytest.raises(CompileError):
        device.rt.compile_text("bad", {}, "k")
    rtc.compile_error = None
    device.rt.compile_text("bad", {}, "k")
    assert len(rtc.programs) == 2


def test_without_a_hiprtc_version_nothing_is_cached(fakes, device, tmp_path, monkeypatch):
    _, rtc = fakes
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path / "cache"))
    for _ in range(2):
        device.rt.compile_text("src", {}, "k")
    assert len(rtc.programs) == 2 and not (tmp_path / "cache").exists()


def test_a_listing_is_read_once_per_code_object_and_tool(versioned, device, monkeypatch):
    from peakbench.rocm import runtime
    runs = []
    text = "0000000000001000 <k>:\n\tv_fma_f32 v1, v2, v3, v4\n"
    monkeypatch.setattr(runtime, "objdump", lambda: "/opt/rocm/llvm/bin/llvm-objdump")
    monkeypatch.setattr(runtime, "run_on_file", lambda command, data, name: runs.append(command) or text)
    kernel = device.rt.compile_text("src", {}, "k")
    assert device.rt.disassemble(kernel) == text and len(runs) == 1
    assert "cached" not in device.rt.evidence(kernel)
    again = device.rt.compile_text("src", {}, "k")
    assert device.rt.disassemble(again) == text and len(runs) == 1, "read back, not disassembled again"
    assert device.rt.evidence(again)["cached"] == "binary"
    assert runtime.disassemble(kernel.binary, "gfx90a") == text and len(runs) == 2, "another target is run again"
    monkeypatch.setattr(runtime, "objdump", lambda: "/usr/bin/llvm-objdump-22")
    assert runtime.disassemble(kernel.binary, "gfx942") == text and len(runs) == 3, "another tool too"

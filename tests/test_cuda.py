"""CUDA backend host code that needs no GPU: SASS parsing, the cubin repair, the ALU rules, and
the errors a user sees without CuPy."""
from __future__ import annotations

import struct
import sys
from types import SimpleNamespace

import pytest

from peakbench.backend import BackendUnavailable
from peakbench.catalog import default_catalog
from peakbench.cuda import capabilities, sass
from peakbench import listing

CATALOG = default_catalog()
LISTING = """
        Function : alu
        /*0000*/                   LDC R1, c[0x0][0x28] ;                       /* 0x00000a00ff017b82 */
        /*0150*/               @!P0 HFMA2.MMA R4, R4, R2, R5 ;                   /* 0x000000020404a235 */
        /*0160*/                   HFMA2 R6, R6, R2, R5 ;                       /* 0x0000000206067231 */
        /*0170*/                   HFMA2 R7, R7, R2, R5 ;                       /* 0x0000000207077231 */
        /*0180*/                   HGMMA.64x256x16.F32 R24, gdesc[UR4], R24 ;   /* 0x00000000181879f0 */
        /*0190*/                   EXIT ;                                       /* 0x000000000000794d */
"""


def test_sass_opcodes_are_counted_with_their_modifiers():
    mix = sass.instruction_mix(LISTING)
    assert mix == {"HFMA2": 2, "LDC": 1, "HFMA2.MMA": 1, "HGMMA.64x256x16.F32": 1, "EXIT": 1}
    assert next(iter(mix)) == "HFMA2"                                   # the most frequent first
    assert sass.count(LISTING, "HFMA2") == 3
    assert sass.count(LISTING, "HGMMA") == 1
    assert sass.count(LISTING, "FFMA") == 0


def test_a_kernel_is_cut_out_of_a_module_listing():
    module = ("\t\tFunction : empty\n        /*0000*/                   EXIT ;\n"
              "\t\tFunction : chase\n        /*0000*/                   LDG.E.STRONG.SM R2, desc[UR4][R2.64] ;\n"
              "        /*0010*/                   EXIT ;\n")
    assert listing.instruction_mix(listing.function(module, "chase")) == {"LDG.E.STRONG.SM": 1, "EXIT": 1}
    assert listing.instruction_mix(listing.function(module, "empty")) == {"EXIT": 1}
    assert listing.function(module, "stream") == ""
    assert listing.instruction_mix(listing.function(LISTING, "alu")) == listing.instruction_mix(LISTING)
    bare = "        /*0000*/                   EXIT ;\n"
    assert listing.function(bare, "alu") == bare                  # no function names: all of it


def test_amdgcn_listings_are_counted_too():
    text = "  v_pk_fma_f16 v1, v2, v3, v4 // 0000001C: CC0E0001\n  v_pk_fma_f16 v5, v2, v3, v4\n  s_endpgm\n"
    assert listing.instruction_mix(text) == {"v_pk_fma_f16": 2, "s_endpgm": 1}


def elf(body: int, phoff: int, phnum: int, shoff: int, shnum: int) -> bytes:
    head = bytearray(64)
    head[:5] = b"\x7fELF\x02"
    struct.pack_into("<QQ", head, 0x20, phoff, shoff)
    struct.pack_into("<HHHH", head, 0x36, 56, phnum, 64, shnum)
    return bytes(head) + b"\x01" * (body - 64)


def test_a_cubin_cut_short_by_one_byte_is_restored_to_its_stated_length():
    whole = elf(9024, phoff=8744, phnum=5, shoff=7400, shnum=21)       # the H200's stream.cubin
    assert len(sass.whole_elf(whole[:-1])) == 9024
    assert sass.whole_elf(whole[:-1])[-1] == 0
    assert sass.whole_elf(whole) == whole                                # nothing to restore
    assert sass.whole_elf(b"//ptx text") == b"//ptx text"               # not an ELF: untouched


@pytest.mark.parametrize("cc, test, reason", [
    ((9, 0), "compute.bf16", None), ((7, 5), "compute.bf16", "compute capability 8.0"),
    ((6, 0), "compute.int8", "compute capability 6.1"), ((9, 0), "compute.fp8_e4m3", "[hardware]"),
    ((10, 0), "compute.fp4", "[hardware]"), ((9, 0), "compute.fp64", None)])
def test_alu_rules_name_the_missing_hardware(cc, test, reason):
    got = capabilities.alu_support(CATALOG.get(test), SimpleNamespace(cc=cc))
    if reason is None:
        assert got is None
    else:
        assert got.startswith("[hardware]") and reason in got


def test_cuda_backend_without_cupy_is_a_clear_usage_error(monkeypatch, capsys):
    import builtins
    real = builtins.__import__

    def no_cupy(name, *args, **kwargs):
        if name == "cupy" or name.startswith("cupy."):
            raise ImportError("No module named 'cupy'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cupy)
    from peakbench import cli
    assert cli.main(["--backend", "cuda", "--tests", "compute.fp32"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("peakbench: error: cuda backend: Python package 'cupy' is not installed")
    assert "peakbench[cuda]" in err and "Traceback" not in err


def test_pci_bus_ids_match_across_cuda_and_nvml_spellings():
    from peakbench.cuda import identity
    assert identity.bus_key("0000:19:00.0") == identity.bus_key("00000000:19:00.0") == (0, 0x19, 0, 0)
    assert identity.bus_key("0000:1a:00.0") != identity.bus_key("0000:19:00.0")
    assert identity.uuid_text(b"\xd1\xaa\xfa\xa0_\x95d\xe3\x8d\x9fMD\xb9{\x1f\x9c") == "d1aafaa0-5f95-64e3-8d9f-4d44b97b1f9c"
    assert identity.uuid_text(b"\x53\x1b") == "531b0000-0000-0000-0000-000000000000"     # cut at a zero byte


def fake_cupy(monkeypatch, count=None, error=None):
    """A stand-in `cupy` whose runtime reports `count` devices or raises `error`."""
    import types

    def get_count():
        if error:
            raise error
        return count
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=get_count))
    monkeypatch.setitem(sys.modules, "cupy", cupy)


@pytest.mark.parametrize("count, error, message", [
    (None, RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient\nmore"),
     "cuda backend: no usable NVIDIA driver or GPU (cudaErrorInsufficientDriver: CUDA driver version is insufficient)"),
    (0, None, "cuda backend: the NVIDIA driver reports no CUDA device")])
def test_no_driver_or_no_gpu_is_one_line(monkeypatch, count, error, message):
    import peakbench.cuda
    fake_cupy(monkeypatch, count, error)
    with pytest.raises(BackendUnavailable) as e:
        peakbench.cuda.create()
    assert str(e.value) == message


def test_a_device_whose_properties_cannot_be_read_is_unavailable(monkeypatch):
    import types

    import peakbench.cuda
    fake_cupy(monkeypatch, count=1)
    broken = types.ModuleType("peakbench.cuda.backend")

    def backend(count):
        raise RuntimeError("cudaErrorDevicesUnavailable: all CUDA-capable devices are busy\nstack")
    broken.CudaBackend = backend
    monkeypatch.setitem(sys.modules, "peakbench.cuda.backend", broken)
    with pytest.raises(BackendUnavailable, match=r"cannot read the devices' properties \(cudaErrorDevicesUnavailable: all CUDA-capable devices are busy\)$"):
        peakbench.cuda.create()

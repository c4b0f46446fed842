"""peakbench.cuda.identity: PCI bus ids and UUIDs as CUDA and NVML spell them."""
from __future__ import annotations

from peakbench.cuda import identity


def test_pci_bus_ids_match_across_cuda_and_nvml_spellings():
    assert identity.bus_key("0000:19:00.0") == identity.bus_key("00000000:19:00.0") == (0, 0x19, 0, 0)
    assert identity.bus_key("0000:1a:00.0") != identity.bus_key("0000:19:00.0")
    assert identity.uuid_text(b"\xd1\xaa\xfa\xa0_\x95d\xe3\x8d\x9fMD\xb9{\x1f\x9c") == "d1aafaa0-5f95-64e3-8d9f-4d44b97b1f9c"
    assert identity.uuid_text(b"\x53\x1b") == "531b0000-0000-0000-0000-000000000000"     # cut at a zero byte

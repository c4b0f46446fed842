"""Host-device transfers over the host link (PCIe, NVLink-C2C)."""

TESTS = ()

"""Host-device data movement on lavapipe, for real: upload takes any C-contiguous buffer (bytes, a
memoryview, a numpy array of any dtype) and download returns its bytes in memory of their own;
Vulkan's one staging buffer is reused, grown and freed; copies larger than it go in pieces. And the
checks that read what came back: the ALU check compares every value of every thread (a workgroup
that never ran, a wrong byte anywhere, caught for floats and integers), the transfer check every
byte copied."""
from __future__ import annotations

import numpy as np
import pytest

from peakbench.catalog import alu_reference as ref
from peakbench.catalog import default_catalog
from peakbench.catalog import transfer as transfer_catalog
from peakbench.vulkan import device as vk_device
from peakbench.workloads import alu, transfer

CATALOG = default_catalog()


class Counted:
    """A Vulkan entry point wrapped to count its calls."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


@pytest.fixture
def counted(monkeypatch):
    """vkAllocateMemory and vkFreeMemory, counted."""
    calls = {}
    for name in ("vkAllocateMemory", "vkFreeMemory"):
        calls[name] = Counted(getattr(vk_device.vk, name))
        monkeypatch.setattr(vk_device.vk, name, calls[name])
    return calls


@pytest.fixture
def rt(vulkan_device):
    return vulkan_device.rt


@pytest.fixture
def buf(rt):
    b = rt.alloc(1 << 16)
    yield b
    rt.free(b)


# -- upload and download -----------------------------------------------------------------------

ARRAYS = {
    "bytes": bytes(range(256)) * 5,
    "bytearray": bytearray(range(255, -1, -1)) * 3,
    "memoryview": memoryview(bytes(range(7, 7 + 200)) * 2),
    "float32 2-D": np.arange(12 * 33, dtype=np.float32).reshape(12, 33) / 7,
    "float64": np.linspace(-1, 1, 301),
    "uint16 read-only": np.frombuffer(np.arange(999, dtype=np.uint16).tobytes(), np.uint16),
    "int8 slice": np.arange(-100, 100, dtype=np.int8)[50:150],
}


@pytest.mark.parametrize("name", ARRAYS)
def test_upload_of_any_contiguous_buffer_round_trips(rt, buf, name):
    data = ARRAYS[name]
    raw = bytes(memoryview(data).cast("B"))
    rt.fill(buf, 0x5A)
    rt.upload(buf, data)
    got = rt.download(buf, len(raw) + 8)
    assert len(got) == len(raw) + 8
    assert got[:len(raw)] == raw                           # compares equal to bytes
    assert bytes(got[len(raw):]) == b"\x5a" * 8             # nothing past the data was written
    if isinstance(data, np.ndarray):
        assert np.array_equal(np.frombuffer(got, data.dtype, count=data.size).reshape(data.shape), data)


def test_download_defaults_to_the_whole_buffer_and_is_memory_of_its_own(rt, buf):
    rt.upload(buf, np.full(1 << 16, 7, np.uint8))
    first = rt.download(buf)
    rt.upload(buf, np.full(1 << 16, 9, np.uint8))
    second = rt.download(buf)
    assert len(first) == 1 << 16
    assert np.all(np.frombuffer(first, np.uint8) == 7)       # not a view of the staging buffer
    assert np.all(np.frombuffer(second, np.uint8) == 9)


def test_upload_refuses_a_strided_array_and_one_larger_than_the_buffer(rt, buf):
    with pytest.raises(ValueError, match="contiguous"):
        rt.upload(buf, np.arange(64, dtype=np.uint32)[::2])
    with pytest.raises(ValueError, match=r"upload of 65537 bytes into a 65536-byte buffer"):
        rt.upload(buf, bytes(65537))


# -- the staging buffer ------------------------------------------------------------------------

def test_the_staging_buffer_is_made_once_reused_and_grown(rt, buf, counted):
    dev = rt.dev
    dev._drop_staging()                                        # a known start: no staging buffer
    allocate, free = counted["vkAllocateMemory"], counted["vkFreeMemory"]
    allocate.calls = free.calls = 0
    rt.upload(buf, bytes(4096))
    assert allocate.calls == 1 and dev._staging.size == vk_device.STAGING_MIN
    for i in range(20):
        rt.upload(buf, np.full(1 << 16, i, np.uint8))
        assert np.all(np.frombuffer(rt.download(buf), np.uint8) == i)
    assert (allocate.calls, free.calls) == (1, 0)              # 40 copies, no allocation
    big = rt.alloc(3 << 20)
    try:
        data = np.random.default_rng(1).integers(0, 256, 3 << 20, dtype=np.uint8)
        rt.upload(big, data)                                   # larger than STAGING_MIN: grown once
        assert np.array_equal(np.frombuffer(rt.download(big), np.uint8), data)
        assert dev._staging.size == 3 << 20
        assert allocate.calls == 1 + 2 and free.calls == 1     # the big buffer and the new staging
    finally:
        rt.free(big)


def test_copies_larger_than_the_staging_buffer_go_through_it_in_pieces(rt, monkeypatch, counted):
    monkeypatch.setattr(vk_device, "STAGING_MAX", 1 << 16)
    monkeypatch.setattr(vk_device, "STAGING_MIN", 1 << 12)
    rt.dev._drop_staging()
    counted["vkAllocateMemory"].calls = 0
    nbytes = 5 * (1 << 16) + 13                                # five pieces and a ragged end
    big = rt.alloc(nbytes)
    try:
        data = np.random.default_rng(2).integers(0, 256, nbytes, dtype=np.uint8)
        rt.upload(big, data)
        got = np.frombuffer(rt.download(big), np.uint8)
        assert np.array_equal(got, data)
        assert np.array_equal(np.frombuffer(rt.download(big, 70_000), np.uint8), data[:70_000])
        assert rt.dev._staging.size == 1 << 16
        assert counted["vkAllocateMemory"].calls == 2          # the buffer, one staging buffer
    finally:
        rt.free(big)
        rt.dev._drop_staging()                                 # the next test grows its own


def test_close_frees_the_staging_buffer(vulkan_backend, counted):
    device = vulkan_backend.open(0)
    try:
        b = device.rt.alloc(4096)
        device.rt.upload(b, bytes(range(256)) * 16)
        staging = device.rt.dev._staging
        assert staging is not None
        device.rt.free(b)
    finally:
        frees = counted["vkFreeMemory"].calls
        device.close()
    assert counted["vkFreeMemory"].calls == frees + 1 and device.rt.dev._staging is None


# -- the ALU check -----------------------------------------------------------------------------

def alu_workload(vulkan_device, name):
    test = CATALOG.get(name)
    reason = vulkan_device.support(test)
    if reason:
        pytest.skip(f"{name}: {reason}")
    return vulkan_device.prepare(test, test.variants[0])


def output(w, iterations: int) -> np.ndarray:
    """The kernel's whole output after `iterations`, poisoned first, as verify() reads it."""
    w.rt.fill(w.out, 0xFF)
    w.run(iterations)
    return alu.decode(w.rt.download(w.out), w.test.dtype, w.bf16_words).reshape(w.threads, *w.out_shape).copy()


def checked(w, got: np.ndarray, iterations: int = 1):
    return ref.check(w.family, w.test.dtype, w.inputs, w.test.accumulators, iterations * w.variant.unroll, got)


@pytest.mark.parametrize("name", ["compute.fp32", "compute.int32", "compute.fp16", "compute.int16",
                                  "compute.fp64", "compute.int8"])
def test_the_alu_check_catches_one_wrong_byte_in_any_thread(vulkan_device, name):
    w = alu_workload(vulkan_device, name)
    try:
        got = output(w, 1)
        assert checked(w, got) is None
        for thread in (0, w.threads // 2 + 1, w.threads - 1):
            planted = got.copy()
            planted[thread].reshape(-1).view(np.uint8)[-1] ^= 0x01    # the last byte of its last value
            problem = checked(w, planted)
            last = (w.test.accumulators - 1, w.variant.width - 1)
            assert problem.startswith("1 of ") and f"first at ({thread}, {last[0]}, {last[1]})" in problem, problem
    finally:
        w.close()


@pytest.mark.parametrize("name", ["compute.fp32", "compute.int32", "compute.int16"])
def test_a_workgroup_that_never_ran_fails_the_alu_verification(vulkan_device, monkeypatch, name):
    """The launch misses its last workgroup: its threads keep the poison (NaN, or -1 for integers)."""
    w = alu_workload(vulkan_device, name)
    try:
        assert w.verify() is None
        local = w.threads // w.groups
        monkeypatch.setattr(w, "run", lambda size: w.rt.launch(w.kernel, w.groups - 1, [w.out, w.inp, np.uint32(size)]))
        problem = w.verify()
        if name == "compute.fp32":
            assert f"{local} of {w.threads} threads wrote no result" in problem, problem
        else:
            assert "values differ from the host reference" in problem
            assert f"first at ({w.threads - local}, 0, 0)" in problem, problem
    finally:
        w.close()


def test_the_alu_check_compares_a_partial_last_period(vulkan_device):
    """A grid that is not a whole number of periods: the threads after the last whole one are
    compared too."""
    w = alu_workload(vulkan_device, "compute.int32")
    try:
        p = ref.period(w.test.accumulators)
        got = output(w, 1)
        cut = got[:w.threads - p // 2]                          # ends half-way through a period
        assert checked(w, cut) is None
        planted = cut.copy()
        planted[-1, 0, 0] += 1
        assert f"first at ({len(cut) - 1}, 0, 0)" in checked(w, planted)
    finally:
        w.close()


def test_tolerance_bounds_in_float32_are_the_float64_bounds():
    """bf16dot's interval, rounded inward to float32, keeps exactly the float32 values inside the
    float64 one: the largest inside passes, the next one up fails."""
    want = np.array([1.0, 3.0, -7.5, 100.25], np.float32)
    lo, hi = ref._interval(want, 1e-2, np.float32)
    exact_lo = want.astype(np.float64) * (1 - 1e-2 * np.sign(want))
    exact_hi = want.astype(np.float64) * (1 + 1e-2 * np.sign(want))
    assert np.all(lo >= exact_lo) and np.all(np.nextafter(lo, np.float32(-np.inf)) < exact_lo)
    assert np.all(hi <= exact_hi) and np.all(np.nextafter(hi, np.float32(np.inf)) > exact_hi)
    got = np.stack([hi, np.nextafter(hi, np.float32(np.inf))])
    assert ref.matches("bf16dot", "bf16", got, want).tolist() == [[True] * 4, [False] * 4]


# -- the transfer check ------------------------------------------------------------------------

def test_the_pattern_is_each_words_hash_and_read_only():
    got = transfer.pattern.__wrapped__(4098, 0x85EBCA77)
    words = np.arange(1025, dtype=np.uint64) * 2654435761 % 2**32 ^ 0x85EBCA77
    assert got.size == 4098 and np.array_equal(got, words.astype(np.uint32).view(np.uint8)[:4098])
    assert not got.flags.writeable


@pytest.mark.parametrize("direction", ["transfer.h2d", "transfer.d2h"])
def test_one_wrong_byte_of_a_copy_fails_the_transfer_verification(vulkan_device, monkeypatch, direction):
    """The copy's last byte arrives changed: the check of every byte names it."""
    from peakbench.vulkan import transfer as vk_transfer
    test = {t.name: t for t in transfer_catalog.HOST_LINK}[direction]
    w = vulkan_device.prepare(test, test.variants[0])
    copy = vk_transfer.VulkanLink.copy

    def corrupting(self, jobs, nbytes, repeat):
        host = w.lanes[0].host.array
        if direction == "transfer.h2d":              # the host's byte is wrong for the copy only
            host[nbytes - 1] ^= 0x80
            seconds = copy(self, jobs, nbytes, repeat)
            host[nbytes - 1] ^= 0x80
        else:                                       # the byte changes on its way to the host
            seconds = copy(self, jobs, nbytes, repeat)
            host[nbytes - 1] ^= 0x80
        return seconds

    try:
        assert w.verify() is None
        monkeypatch.setattr(vk_transfer.VulkanLink, "copy", corrupting)
        problem = w.verify()
        n = min(transfer.SWEEP_FIRST, w.nbytes)
        assert f"of {n} bytes: 1 of {n} bytes differ from the host data (first at byte {n - 1})" in problem, problem
    finally:
        w.close()

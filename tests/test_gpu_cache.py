"""On a real NVIDIA GPU with CuPy: a second compile of the same kernel reads its cubin from the
cache (NVRTC runs once), the kernel from the cached cubin runs and gives the host reference's
answer, a changed define compiles again, and the cached cubin's SASS is the same listing.
Run on the GPU machine with `pytest --gpu tests/test_gpu_cache.py`."""
from __future__ import annotations

import numpy as np
import pytest

from helpers import gpu_required

pytestmark = pytest.mark.gpu

SOURCE = r"""
extern "C" __global__ void axpb(float* out, const float* in, float a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * in[i] + OFFSET;
}
"""
N, BLOCK = 4096, 256


@pytest.fixture
def cuda_rt(request, tmp_path, monkeypatch):
    """The CUDA runtime of device 0 on an empty cache, and a count of its NVRTC compiles."""
    missing = pytest.fail if gpu_required(request.config) else pytest.skip
    monkeypatch.setenv("PEAKBENCH_CACHE", str(tmp_path / "cache"))
    from peakbench.backend import BackendUnavailable, load
    try:
        backend = load("cuda")
    except BackendUnavailable as e:
        missing(str(e))
    device = backend.open(0)
    rt = device.rt
    compiles = []
    real = type(rt)._nvrtc

    def counted(self, source, options, kernel):
        compiles.append(options)
        return real(self, source, options, kernel)

    monkeypatch.setattr(type(rt), "_nvrtc", counted)
    yield rt, compiles
    device.close()
    backend.close()


def run(rt, kernel, a: float) -> np.ndarray:
    data = np.arange(N, dtype=np.float32) * 0.5
    inp, out = rt.alloc(data.nbytes), rt.alloc(data.nbytes)
    rt.upload(inp, data.tobytes())
    rt.fill(out, 0)
    rt.launch(kernel, N // BLOCK, [out, inp, np.float32(a), np.uint32(N)])
    return np.frombuffer(rt.download(out, data.nbytes), dtype=np.float32)


def test_a_second_compile_loads_the_cached_cubin_and_it_runs(cuda_rt):
    from peakbench.evidence import sass
    rt, compiles = cuda_rt
    first = rt.compile_text(SOURCE, {"OFFSET": "3.0f"}, "axpb", BLOCK)
    assert len(compiles) == 1 and "cached" not in first.extra
    listing = rt.disassemble(first)
    again = rt.compile_text(SOURCE, {"OFFSET": "3.0f"}, "axpb", BLOCK)
    assert len(compiles) == 1, "NVRTC did not run for the second compile"
    assert again.extra["cached"] is True and again.binary == first.binary
    assert again.extra["ptx"] == first.extra["ptx"] and ".entry axpb" in again.extra["ptx"]
    want = np.arange(N, dtype=np.float32) * 0.5 * np.float32(2.0) + np.float32(3.0)
    np.testing.assert_array_equal(run(rt, again, 2.0), want)
    np.testing.assert_array_equal(run(rt, first, 2.0), want)
    if sass.installed():
        assert listing and "FFMA" in listing
        assert rt.disassemble(again) == listing
        assert rt.evidence(again)["cached"] == "binary" and "cached" not in rt.evidence(first)
    changed = rt.compile_text(SOURCE, {"OFFSET": "5.0f"}, "axpb", BLOCK)
    assert len(compiles) == 2 and "cached" not in changed.extra, "a changed define compiles again"
    np.testing.assert_array_equal(run(rt, changed, 2.0), want + np.float32(2.0))

"""The clock the SMs run matrix.fp64.fp64 at, counted: the test's mma.sync m16n8k16 kernel with
each block recording clock64() and %globaltimer around its loop, so a block's cycles over its
nanoseconds is its SM clock, beside NVML's reading and the rate the CUDA events give. Run idle,
then right after quick's power-capped tensor tests (PERFORMANCE_ANALYSIS.md, "An SM clock past its
maximum"). On an NVIDIA GPU with CuPy, from the repository's root:

    python3 scripts/probes/sm_clock.py
"""
import numpy as np

from peakbench.backend import load
from peakbench.catalog import default_catalog
from peakbench.cuda import tensor
from peakbench.harness.runner import Load, Settings
from peakbench.harness.session import run_test

BLOCKS = 8192                  # the stamps' room: four words a block
STAMPED = (f"__device__ u64 stamps[4 * {BLOCKS}];\nextern \"C\" __global__", 1)
START = ("    const unsigned warp = blockIdx.x * WARPS + threadIdx.x / 32;\n",
         "    u64 c0s = clock64(), g0s; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(g0s));\n")
END = ("#pragma unroll\n    for (int r = 0; r < F::NC; r++)\n#pragma unroll\n        for (int part",
       "    u64 c1s = clock64(), g1s; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(g1s));\n"
       "    if (threadIdx.x == 0) { stamps[4 * blockIdx.x] = c1s - c0s; stamps[4 * blockIdx.x + 1] = g0s;"
       " stamps[4 * blockIdx.x + 2] = g1s; }\n")
HEAT = ("matrix.fp16.fp16", "matrix.bf16.fp32", "matrix.fp8_e4m3.fp32", "matrix.int8.int32")


def stamped_source() -> str:
    with open("shaders/tensor_mma.cu") as f:
        src = f.read()
    src = src.replace("extern \"C\" __global__", STAMPED[0], STAMPED[1])
    src = src.replace(START[0], START[0] + START[1], 1)
    src = src.replace(END[0], END[1] + END[0], 1)
    if src.count("stamps[") != 4:
        raise SystemExit("shaders/tensor_mma.cu changed: the stamps could not be placed")
    return src


def main() -> None:
    import cupy as cp
    device = load("cuda").open(0)
    rt, catalog = device.rt, default_catalog()
    test = catalog.get("matrix.fp64.fp64")
    variant = next(v for v in device.variants(test) if v.name == "mma.sync:m16n8k16")
    w = device.prepare(test, variant)
    if w.grid > BLOCKS:
        raise SystemExit(f"{w.grid} blocks: more than the {BLOCKS} the stamps have room for")
    form = tensor.find_form(test, variant.name)
    kernel = rt.compile_text(stamped_source(), tensor.defines(form, variant, w.accumulators), "mma_peak",
                             block=w.block)
    stamps = rt._modules[-1].get_global_var("stamps")       # the module compile_text just loaded

    def launch(size: int, label: str) -> None:
        seconds = rt.launch(kernel, w.grid, [w.out, w.ab, w.c0, np.uint32(size)])
        raw = np.empty(4 * w.grid, dtype=np.uint64)
        cp.cuda.runtime.memcpy(raw.ctypes.data, int(stamps), raw.nbytes, cp.cuda.runtime.memcpyDeviceToHost)
        cycles, g0, g1, _ = raw.reshape(-1, 4).astype(np.float64).T
        mhz = cycles / (g1 - g0) * 1e3
        tflops = w.items(size) * test.per_item(variant) / seconds / 1e12
        print(f"{label:8s} size {size:5d}  events {seconds * 1e3:7.3f} ms  globaltimer {(g1.max() - g0.min()) * 1e-6:7.3f} ms"
              f"  {tflops:6.2f} TFLOPS  blocks at {np.median(mhz):5.0f} MHz ({mhz.min():.0f}-{mhz.max():.0f})"
              f"  NVML {device.clock_mhz()} MHz", flush=True)

    try:
        for size in (2048, 8192):
            launch(size, "idle")
        quick, load_ = Settings.quick(), Load()
        for name in HEAT:
            r = run_test(device, catalog.get(name), quick, lambda line: None, None, None, load_)
            print(f"heat     {name} {r.status} {r.value} at {r.clock_mhz} MHz", flush=True)
        for size in (2048, 2048, 8192, 8192):
            launch(size, "capped")
    finally:
        w.close()
        device.close()


if __name__ == "__main__":
    main()

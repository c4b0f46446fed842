"""What NVIDIA's Vulkan driver compiles, read from its shader cache (peakbench/vulkan/driver_cache.py);
not peakbench tests. Sections, each run as `python3 experiments/probes/vulkan_hgmma.py SECTION ...`:

  env             when the driver reads __GL_SHADER_DISK_CACHE*: set before the instance (peakbench's
                  way), after it, after the device; two backends in one process; what is left behind.
  suite ARGS...   `peakbench ARGS` with the time spent in the SASS evidence counted (stderr).
  check FILE      every compute and matrix result of a result file against its catalog work
                  (peakbench/vulkan/sass_check.py); the memory and latency loops; exit 1 on a miss.
  shapes          every workgroup-scope shape VK_NV_cooperative_matrix2 reports, in tiles from the
                  granularity up: the operands in registers (shaders/matrix_coopmat.comp) and loaded
                  from shared memory inside the loop; the MMA instruction the driver emitted and the rate.
  listings DIR    CUDA's SASS of the kernels the analysis compares (write, chase, int8, fp16, fp32),
                  as DIR/cuda-<label>.txt, each loop mix beside the Vulkan one found in DIR
                  (a suite run with PEAKBENCH_DUMP_DIR=DIR writes those).

Run on the GPU machine from the repository root.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SETTINGS = ("__GL_SHADER_DISK_CACHE", "__GL_SHADER_DISK_CACHE_PATH", "__GL_SHADER_DISK_CACHE_SKIP_CLEANUP")

ENV_CASE = r'''
import json, os, sys
from pathlib import Path
case, folder = sys.argv[1], sys.argv[2]
settings = {"__GL_SHADER_DISK_CACHE": "1", "__GL_SHADER_DISK_CACHE_PATH": folder,
            "__GL_SHADER_DISK_CACHE_SKIP_CLEANUP": "1"}
from peakbench.vulkan import instance
from peakbench.vulkan.shaders import compile_shader
from peakbench.catalog.alu_reference import SEEDS

class Off:                      # no cache of peakbench's: the settings are set by hand below
    folder, off = None, "set by the probe"
    def close(self): pass

def bins(where):
    return {str(p.relative_to(where)): p.stat().st_size for p in Path(where).rglob("*.bin")} if where and Path(where).exists() else None

def pipeline(device, t):
    code = compile_shader("alu_fma.comp", {"ACC": 8, "UNROLL": 64, "T": t, "IS_FLOAT": 1, "SEEDS": SEEDS})
    k = device.rt.load(code, 256, "bbu", f"probe-{t}")
    ev = device.rt.evidence(k)
    device.rt.discard(k)
    return ev.get("sass_note") or ev["sass"]["loop_mix"]

home = os.environ["HOME"]
if case == "two-backends":
    b1 = instance.VulkanBackend(); d1 = b1.open(0); f1 = b1.cache.folder
    e1 = pipeline(d1, "float"); n1 = bins(f1); d1.close(); b1.close()
    b2 = instance.VulkanBackend(); d2 = b2.open(0); f2 = b2.cache.folder
    e2 = pipeline(d2, "vec2"); n2 = bins(f2)
    print(json.dumps({"case": case, "first": [f1, n1, e1], "second": [f2, n2, e2],
                      "first_after_second": bins(f1)}))
    d2.close(); b2.close()
    sys.exit()
if case != "ours":
    instance.DriverCache = Off
if case == "before-instance":
    os.environ.update(settings)
backend = instance.VulkanBackend()
if case == "after-instance":
    os.environ.update(settings)
device = backend.open(0)
if case == "after-device":
    os.environ.update(settings)
evidence = pipeline(device, "float")
where = backend.cache.folder if case == "ours" else folder
print(json.dumps({"case": case, "ours": bins(where), "home": bins(home), "evidence": evidence}))
device.close(); backend.close()
'''


def env_section() -> None:
    print("== env: when the driver reads its cache settings")
    with tempfile.TemporaryDirectory() as tmp:
        base = {k: v for k, v in os.environ.items() if k not in SETTINGS and k != "XDG_CACHE_HOME"}
        for case in ("ours", "none", "before-instance", "after-instance", "after-device", "two-backends"):
            home, temp, folder = Path(tmp, case, "home"), Path(tmp, case, "tmp"), Path(tmp, case, "cache")
            for p in (home, temp, folder):
                p.mkdir(parents=True)
            env = {**base, "HOME": str(home), "TMPDIR": str(temp), "PYTHONPATH": f"{ROOT}:{base.get('PYTHONPATH', '')}"}
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", ENV_CASE, case, str(folder)], env=env, cwd=ROOT,
                                  capture_output=True, text=True, timeout=120)
            left = sorted(p.name for p in temp.iterdir())
            print(f"{case}: rc {done.returncode}, {time.perf_counter() - t0:.1f} s, left in TMPDIR after exit: {left}")
            print("   " + (done.stdout.strip().splitlines() or ["(no output)"])[-1])
            if done.returncode:
                print("   " + done.stderr.strip()[-1500:])


def suite_section(argv: list[str]) -> int:
    from peakbench.vulkan import driver_cache as dc
    from peakbench.vulkan import nvidia_sass as ns
    spent: dict[str, list] = {}

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                s = spent.setdefault(name, [0, 0.0])
                s[0] += 1
                s[1] += time.perf_counter() - t0
        return wrapper

    for name in ("mark", "created", "evidence", "finish"):
        setattr(dc.PipelineCode, name, timed(name, getattr(dc.PipelineCode, name)))
    ns.disassemble = timed("nvdisasm (worker thread)", ns.disassemble)
    from peakbench import cli
    t0 = time.perf_counter()
    rc = cli.main(argv)
    wall = time.perf_counter() - t0
    main_thread = sum(v[1] for k, v in spent.items() if "worker" not in k)
    print(f"suite: rc {rc}, {wall:.1f} s wall; SASS evidence on the main thread {main_thread:.2f} s: "
          + ", ".join(f"{k} {n}x {s:.2f} s" for k, (n, s) in spent.items()), file=sys.stderr)
    return rc


def check_section(path: str) -> int:
    from peakbench.vulkan.sass_check import check
    misses = 0
    for run in json.loads(Path(path).read_text())["runs"]:
        print(f"== check {path}: {run['backend']} {run['device']['name']} {run['device']['driver']}")
        for r in run["results"]:
            if r["status"] != "ok":
                continue
            ev, family = r["evidence"], r["test"].split(".")[0]
            sass, note = ev.get("sass"), ev.get("sass_note")
            stats = (ev.get("pipeline_statistics") or {}).get("CS", {})
            if not sass:
                misses += family in ("compute", "matrix")
                print(f"{r['test']:18s} {r['params'].get('variant')}: NO SASS: {note}")
                continue
            loop = ", ".join(f"{n} {op}" for op, n in list(sass["loop_mix"].items())[:5])
            ok, how = check(r["test"], r["params"], sass)
            misses += ok is False
            regs = f"{sass['registers']} regs (statistics {stats.get('Register Count')})"
            print(f"{r['test']:18s} {r['params'].get('variant')}: {regs}, {sass.get('mma_instruction', '')} "
                  f"{sass['cache_record']}; loop: {loop}; check {ok}: {how}" + (f"; NOTE {note}" if note else ""))
    print(f"misses: {misses}")
    return 1 if misses else 0


SHARED_GLSL = r'''#version 450
// The coopmat tile loop with A and B loaded from shared memory inside the loop, a barrier each
// iteration (so the loads stay in it): the shape a wgmma mainloop has. Same buffers, push
// constant, steps and stored sum as shaders/matrix_coopmat.comp with WORKGROUP_SCOPE 1.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0) in;
layout(push_constant) uniform Push { uint iterations; } push;
layout(std430, binding = 0) writeonly buffer Out { C_T result[]; };
layout(std430, binding = 1) readonly buffer Operands { A_T ab[]; };
layout(std430, binding = 2) readonly buffer Accumulators { C_T c0[]; };
shared A_T sh[M * K + 2 * K * N];
#define ROW gl_CooperativeMatrixLayoutRowMajor
void main() {
    for (uint i = gl_LocalInvocationIndex; i < M * K + 2 * K * N; i += gl_WorkGroupSize.x) sh[i] = ab[i];
    barrier();
    coopmat<A_T, gl_ScopeWorkgroup, M, K, gl_MatrixUseA> a;
    coopmat<A_T, gl_ScopeWorkgroup, K, N, gl_MatrixUseB> b;
    coopmat<C_T, gl_ScopeWorkgroup, M, N, gl_MatrixUseAccumulator> acc[ACC];
    [[unroll]] for (uint k = 0; k < ACC; k++) coopMatLoad(acc[k], c0, k * M * N, N, ROW);
    for (uint i = 0; i < push.iterations; i++) {
        barrier();
        [[unroll]] for (uint u = 0; u < UNROLL; u += 2) {
            coopMatLoad(a, sh, 0, K, ROW);
            coopMatLoad(b, sh, M * K, N, ROW);
            [[unroll]] for (uint k = 0; k < ACC; k++) acc[k] = coopMatMulAdd(a, b, acc[k]);
            coopMatLoad(b, sh, M * K + K * N, N, ROW);
            [[unroll]] for (uint k = 0; k < ACC; k++) acc[k] = coopMatMulAdd(a, b, acc[k]);
        }
    }
    [[unroll]] for (uint k = 1; k < ACC; k++) acc[0] = acc[0] + acc[k];
    coopMatStore(acc[0], result, gl_WorkGroupID.x * M * N, N, ROW);
}
'''

TILES = ((64, 64, 32), (64, 128, 32), (128, 64, 32), (128, 128, 32), (128, 128, 64), (64, 256, 16),
         (128, 256, 32), (256, 128, 32))
SHARED_TILES = ((64, 64, 32), (128, 128, 32), (128, 256, 32))


def shared_module(a: str, c: str, m: int, n: int, k: int, accumulators: int, workgroup: bool = True) -> bytes:
    from peakbench.catalog import matrix as catalog
    from peakbench.vulkan import coopmat
    from peakbench.vulkan.shaders import TARGET_ENV, _run, tool, validate
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp, "shared.comp"), Path(tmp, "shared.spv")
        src.write_text(SHARED_GLSL)
        defines = {"A_T": coopmat.GLSL[a], "C_T": coopmat.GLSL[c], "M": m, "N": n, "K": k, "ACC": accumulators,
                   "UNROLL": catalog.UNROLL}
        _run([tool("glslangValidator"), "-V", "--target-env", TARGET_ENV,
              *[f"-D{key}={v}" for key, v in defines.items()], str(src), "-o", str(out)], f"shared {defines}")
        validate(out.read_bytes(), "shared")
        return out.read_bytes()


def time_workload(w) -> float:
    w.run(2)
    t = w.run(2)
    size = max(2, int(2 * 0.03 / max(t, 1e-6)) // 2 * 2)
    best = min(w.run(size) for _ in range(3))
    return w.items(size) * w.variant.ops_per_step / best / 1e12


def shapes_section(deadline_s: float = 120) -> None:
    from peakbench.catalog import default_catalog
    from peakbench.catalog import matrix as catalog
    from peakbench.vulkan import coopmat
    from peakbench.vulkan.instance import VulkanBackend
    from peakbench.vulkan.sass_check import check
    start = time.perf_counter()
    backend = VulkanBackend()
    device = backend.open(0)
    rt = device.rt
    caps = rt.caps
    print(f"== shapes: {rt.info.name} {rt.driver_label}; VK_NV_cooperative_matrix2 {caps.coopmat2}; "
          f"workgroupScope {caps.has('cooperativeMatrixWorkgroupScope')}, "
          f"flexibleDimensions {caps.has('cooperativeMatrixFlexibleDimensions')}")
    for s in caps.coopmat_shapes:
        print(f"   reported: {s.describe()}")
    limit = caps.coopmat2.get("max_dimension", 0)
    real_module = coopmat.module
    for test in default_catalog().tests:
        if test.family != "matrix" or coopmat.support(test, rt):
            continue
        groups = {}
        for s in coopmat.matching(test, caps.coopmat_shapes, coopmat.SCOPE_WORKGROUP):
            if s.a != "uint8":
                groups.setdefault(s.invocations, s)
        for invocations, s in sorted(groups.items()):
            for layout, tiles in (("registers", TILES), ("shared", SHARED_TILES)):
                if layout == "shared" and s.a not in coopmat.GLSL:
                    continue
                for m, n, k in tiles:
                    if time.perf_counter() - start > deadline_s:
                        print("   deadline reached")
                        device.close()
                        backend.close()
                        return
                    if not all(d % g == 0 and d <= limit for d, g in ((m, s.m), (n, s.n), (k, s.k))):
                        continue
                    if m * n > 128 * invocations:
                        continue
                    variant = catalog.workgroup_shape(m, n, k, invocations, 1)
                    label = f"{test.name} {variant.name} {layout}"
                    coopmat.module = shared_module if layout == "shared" else real_module
                    w = None
                    try:
                        w = coopmat.MatrixWorkload(test, variant, rt)
                        problem = w.verify()
                        rate = time_workload(w) if not problem else None
                    except Exception as e:
                        print(f"   {label}: {type(e).__name__}: {str(e).strip().splitlines()[-1][:200] if str(e).strip() else ''}")
                        continue
                    finally:
                        coopmat.module = real_module
                        if w is not None:
                            w.close()
                    sass = w.evidence.get("sass", {})
                    loop = ", ".join(f"{c} {op}" for op, c in list(sass.get("loop_mix", {}).items())[:4])
                    ok, how = check(test.name, w.params, sass) if sass else (None, w.evidence.get("sass_note"))
                    hgmma = any("GMMA" in op for op in sass.get("instruction_mix", {}))
                    print(f"   {label}: {sass.get('mma_instruction')} (HGMMA anywhere: {hgmma}), "
                          f"{sass.get('registers')} regs, {'%.1f TFLOPS' % rate if rate else problem}; loop: {loop}; "
                          f"check {ok}: {how}", flush=True)
    device.close()
    backend.close()


def listings_section(folder: str) -> None:
    from peakbench.backend import load
    from peakbench.catalog import default_catalog
    from peakbench.vulkan import nvidia_sass as ns
    from peakbench.workloads import chase
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    catalog = default_catalog()
    wanted = [("memory.write", "tile"), ("compute.int8", "x1u64"), ("compute.int8", "x4u16"),
              ("compute.fp16", "x2u64"), ("compute.fp16", "x4u32"), ("compute.fp32", "x1u64")]
    try:
        backend = load("cuda")
        device = backend.open(0)
    except Exception as e:
        print(f"== listings: no CUDA backend: {e}")
        return
    rt = device.rt
    print(f"== listings: CUDA {rt.arch}")

    def keep(label: str, listing: str | None) -> None:
        cuda = listing or ""
        (out / f"cuda-{label}.txt").write_text(cuda)
        vk_file = out / f"{label}-sass.txt"
        vulkan = vk_file.read_text() if vk_file.exists() else ""
        for name, text in (("cuda", cuda), ("vulkan", vulkan)):
            body = ns.loop_body(text)
            mix = ns.instruction_mix(body, top=None) if body else {}
            print(f"   {label} {name}: {len(ns.opcodes(text))} instructions, loop {mix or '(none found)'}")

    for test_name, variant_name in wanted:
        test = catalog.get(test_name)
        variant = next(v for v in test.variants if v.name == variant_name)
        w = None
        try:
            w = device.prepare(test, variant)
            keep(f"{test_name}-{variant_name}" if test.family == "compute" else test_name, rt.disassemble(w.kernel))
        except Exception as e:
            print(f"   {test_name} {variant_name}: {type(e).__name__}: {e}")
        finally:
            if w is not None:
                w.close()
    try:
        chaser = chase.Chaser(rt, device.table.chase_kernel(rt))
        keep("chase", rt.disassemble(chaser.kernel))
        chaser.release()
    except Exception as e:
        print(f"   chase: {type(e).__name__}: {e}")
    device.close()
    backend.close()


def main(argv: list[str]) -> int:
    section, rest = (argv[0], argv[1:]) if argv else ("", [])
    if section == "env":
        env_section()
    elif section == "suite":
        return suite_section(rest)
    elif section == "check":
        return check_section(rest[0])
    elif section == "shapes":
        shapes_section(float(rest[0]) if rest else 120)
    elif section == "listings":
        listings_section(rest[0])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The capability table of the ROCm backend (peakbench/rocm/targets.py) against what the AMD backend
of LLVM emits, without an AMD GPU: every kernel variant of shaders/alu.cu, mem.cu and
matrix_amd.cu is compiled by clang-22 to AMDGPU assembly for every target of the table, with the
defines and dialect the backend hands hiprtc, and each cell is checked in the assembly
(evidence/amdgpu.py reads it):
  - a native vector-ALU cell shows its instruction in the loop body, as many lanes as the catalog
    counts (unroll * accumulators * lanes of the variant);
  - a native matrix cell shows every MFMA/WMMA form of the table in the loop, unroll * accumulators
    times; a [hardware] matrix cell refuses every form that any target has for those types;
  - BF16 on the vector ALU ([hardware] or [toolchain]) holds no BF16 arithmetic: FP32 FMAs, each
    rounded back to BF16 with integer instructions;
  - streams move 128 bits per lane in every global load and store; the chase loads through vector
    memory, never s_load;
  - registers, spills and occupancy are recorded per kernel and target (census.json in pytest's
    temporary folder; `-s` prints the summary).
What this is not: execution, timing, accumulator layouts, or hiprtc itself (clang's driver stands
in for it, with the same headers and device library).

Needs clang-22, the HIP headers (../shared/fixtures/hip-headers-rocm-6.3.tgz beside the clone) and
the device library (ocml.bc, ockl.bc: scripts/rocm-isa-deps.sh installs both); skips without them.
The tests of the reader itself, at the end, need none of it.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

import isa_cache
from helpers import fixture, fixture_absent

from peakbench import kernels
from peakbench.catalog import TestSpec as Spec, Variant, default_catalog
from peakbench.catalog import matrix as matrix_catalog
from peakbench.evidence import amdgpu
from peakbench.harness import guards
from peakbench.rocm import matrix as rocm_matrix
from peakbench.rocm import targets
from peakbench.rocm.runtime import HipRuntime
from peakbench.workloads import alu, chase, onchip, stream

ROOT = Path(__file__).resolve().parents[1]
SHADERS = ROOT / "shaders"
HEADERS = fixture("hip-headers-rocm-6.3.tgz")
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
BITCODE = Path(os.environ.get("PEAKBENCH_AMD_BITCODE") or CACHE / "peakbench-test" / "amd-bitcode")
CLANG, LLVM = "clang-22", "22"
WORKERS = 2


# -- what the ROCm backend compiles -------------------------------------------------------------
@dataclass(frozen=True)
class Build:
    source: str                       # a file of shaders/
    entry: str
    defines: tuple[tuple[str, object], ...]


# What the ROCm backend hands hiprtc, from its own tables: kernels.alu_kernel and workloads/alu.py's
# DEFINES (the vector ALU), workloads/stream.py's MODES and LAYOUTS, kernels.chase_kernel with
# workloads/chase.py's ROUND and HipRuntime.kernel_clock, rocm/matrix.py's WAVES and forms.
HIP = SimpleNamespace(dialect="hip")      # what kernels.* read of a runtime to pick HIP's kernels


def build(test: Spec, variant: Variant | None, form: targets.Mma | None = None, fill: bool = False) -> Build:
    """The kernel the ROCm backend compiles for `test` and `variant` (a matrix test: and `form`, with
    the wave size of the family that runs it; the fill: the kernel that writes the source buffer)."""
    if test.family == "compute":
        k = kernels.alu_kernel(test, variant, HIP)
        return Build(k.source, k.entry, tuple({**k.defines, **alu.DEFINES}.items()))
    if test.name in ("memory.shared", "memory.l2"):
        shared = test.name == "memory.shared"
        defines = (onchip.shared_defines if shared else onchip.l2_defines)(test, variant)
        return Build("onchip.cu", "shared_read" if shared else "l2_read", tuple(defines.items()))
    if test.family == "memory":
        s = kernels.STREAM
        if fill:
            return Build(s.source, s.entry, (("MODE", stream.MODES["fill"]), ("UNROLL", variant.unroll)))
        return Build(s.source, s.entry, tuple(stream.measured_defines(test, variant).items()))
    if test.family == "latency":
        k = kernels.chase_kernel(HIP)
        return Build(k.source, k.entry, (("CLOCK", int(HipRuntime.kernel_clock)), ("ROUND", chase.ROUND),
                                         ("POINTER", int(k.pointer))))
    defines = {f"FORM_{form.form}": 1, "ACC": variant.accumulators or test.accumulators, "UNROLL": variant.unroll,
               "WAVES": rocm_matrix.WAVES, "WAVE": wave_of(form), **({"FMT": form.fmt} if form.fmt is not None else {})}
    return Build(rocm_matrix.SOURCE, "mma_peak", tuple(defines.items()))


def variants(test: Spec, form: targets.Mma | None = None) -> tuple[Variant, ...]:
    """The variants the backend runs: kernels.variants (a bf16dot test runs the fma family), or a
    matrix form's one shape (rocm/matrix.py variants)."""
    if form is not None:
        return (matrix_catalog.shape(form.m, form.n, form.k),)
    return kernels.variants(test)


def wave_of(form: targets.Mma) -> int:
    """The wave size of the family whose table lists `form` (MFMA 64, WMMA 32)."""
    return next(f.wave for f in targets.FAMILIES for fs in f.matrix.values() if form in fs)


def hiprtc_options(target: str, defines: dict) -> list[str]:
    """The options the ROCm backend hands hiprtc (HipRuntime.compile_options), less the include
    folders of an installed ROCm: the headers here are the fixture's."""
    options = HipRuntime.compile_options(SimpleNamespace(target=target), defines)
    return [o for o in options if not o.startswith("-I")]


def clang_command(target: str, b: Build, path: Path, tools: "Toolchain") -> list[str]:
    """hiprtc's compile as clang's driver spells it: the backend's options, plus what hiprtc does on
    its own (device code only, the HIP runtime header included first, the device library linked,
    the wave size macro the 6.3 headers read)."""
    defines = [o for o in hiprtc_options(target, dict(b.defines)) if o.startswith("-D")]
    return [*tools.base(target), "-include-pch", str(tools.pch_path(target)), *tools.bitcode_flags,
            "-S", "-o", "-", *defines, str(path)]


CATALOG = default_catalog()
ALU_TESTS = [t for t in CATALOG.tests if t.family == "compute" and t.kernel]
# The families this file mirrors; those with a module of their own (kernels.MODULES: shared memory,
# L2, special functions, atomics) and the sparse matrices have their own shader tests.
MATRIX_TESTS = [t for t in CATALOG.tests if t.family == "matrix" and t.kernel == "mma"]
STREAM_TESTS = [t for t in CATALOG.tests if t.family == "memory" and t.kernel == "stream"]
CHASE_TEST = next(t for t in CATALOG.tests if t.family == "latency")
L2_TEST = CATALOG.get("memory.l2")
SHARED_TEST = CATALOG.get("memory.shared")
TARGETS = [t for fam in targets.FAMILIES for t in fam.targets]
# The table lists them; LLVM 21 removed them (gfx942 stands for CDNA3), so LLVM 22 cannot check them.
NOT_IN_LLVM = {"gfx940": "LLVM 22 has no gfx940 target (removed in LLVM 21; gfx942 is checked for CDNA3)",
               "gfx941": "LLVM 22 has no gfx941 target (removed in LLVM 21; gfx942 is checked for CDNA3)"}

# Cells where the table and clang-22 disagree: (target, test) -> what each says. Empty while the
# table follows the compiler; an entry makes its cell a strict xfail until the table is fixed.
DISAGREEMENTS: dict[tuple[str, str], str] = {}


def cell_params(tests) -> list:
    out = []
    for target in TARGETS:
        for test in tests:
            why = DISAGREEMENTS.get((target, test.name))
            marks = [pytest.mark.xfail(strict=True, raises=AssertionError, reason=why)] if why else []
            out.append(pytest.param(target, test, id=f"{target}-{test.name}", marks=marks))
    return out


def candidate_forms(test_name: str) -> list[targets.Mma]:
    """Every form any family runs for a matrix test: what a [hardware] cell must refuse. A form
    that several tests share with other formats (gfx950's f8f6f4) is tried in its first format."""
    first = {}
    for fam in targets.FAMILIES:
        for fs in fam.matrix.values():
            for f in fs:
                first.setdefault(f.form, f)
    names = dict.fromkeys(f.form for fam in targets.FAMILIES for f in fam.matrix.get(test_name, ()))
    return [first[n] for n in names]


def target_builds(target: str) -> list[Build]:
    """Every kernel a target's cells compile, in the order the tests ask for them."""
    out = [build(t, v) for t in ALU_TESTS for v in variants(t)]
    for t in MATRIX_TESTS:
        forms = targets.matrix_forms(target, t.name) or candidate_forms(t.name)
        out += [build(t, variants(t, f)[0], f) for f in forms]
    for t in STREAM_TESTS:
        out += [build(t, v) for v in variants(t)]
    out += [build(STREAM_TESTS[0], STREAM_TESTS[0].variants[0], fill=True), build(CHASE_TEST, None)]
    out += [build(L2_TEST, v) for v in L2_TEST.variants] + [build(SHARED_TEST, SHARED_TEST.variants[0])]
    return list(dict.fromkeys(out))


# -- the compiler -------------------------------------------------------------------------------
@dataclass
class Compiled:
    target: str
    build: Build
    asm: str
    error: str
    seconds: float
    cached: str = ""                 # where a cached output came from (tests/isa_cache.py)

    @property
    def ok(self) -> bool:
        return not self.error

    def kernel(self) -> amdgpu.Kernel:
        assert self.ok, f"{self.build} on {self.target} did not compile:\n{self.error[:2000]}"
        found = amdgpu.parse(self.asm)
        assert self.build.entry in found, f"no kernel {self.build.entry} in the assembly ({sorted(found)})"
        return found[self.build.entry]


def missing() -> str | None:
    if not shutil.which(CLANG):
        return f"{CLANG} is not installed (scripts/rocm-isa-deps.sh installs it)"
    if fixture_absent(HEADERS.name):
        return fixture_absent(HEADERS.name)
    if not all((BITCODE / n).is_file() for n in ("ocml.bc", "ockl.bc")):
        return f"no ocml.bc / ockl.bc in {BITCODE} (scripts/rocm-isa-deps.sh fetches them)"
    return None


class Toolchain:
    """clang-22 with the HIP 6.3 headers and the device library; each target's headers parsed once
    into a precompiled header, with the same flags (test_the_precompiled_header_changes_nothing)."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        with tarfile.open(HEADERS) as tar:
            tar.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        self.rocm = next(p.parents[2] for p in tmp.glob("*/include/hip/hip_runtime.h"))
        # What comgr links beside ocml and ockl: the code-object ABI version the headers branch on
        # (ROCm device-libs oclc_abi_version_600), here as one constant.
        abi = tmp / "oclc_abi_version_600.ll"
        abi.write_text('target triple = "amdgcn-amd-amdhsa"\n'
                       "@__oclc_ABI_version = hidden local_unnamed_addr addrspace(4) constant i32 600, align 4\n")
        subprocess.run([CLANG, "--target=amdgcn-amd-amdhsa", "-nogpulib", "-c", "-emit-llvm", str(abi),
                        "-o", str(abi.with_suffix(".bc"))], check=True, capture_output=True)
        libs = [BITCODE / "ocml.bc", BITCODE / "ockl.bc", abi.with_suffix(".bc")]
        self.libraries, self._inputs = libs, None
        self.bitcode_flags = [f for lib in libs for f in ("-Xclang", "-mlink-builtin-bitcode", "-Xclang", str(lib))]
        self.prelude = tmp / "hip_prelude.h"
        self.prelude.write_text("#include <hip/hip_runtime.h>\n#include <hip/hip_fp16.h>\n#include <hip/hip_bf16.h>\n")
        self._pch, self._locks, self._lock = {}, {}, threading.Lock()
        listed = subprocess.run([CLANG, "--target=amdgcn-amd-amdhsa", "-print-supported-cpus"],
                                capture_output=True, text=True)
        listed = listed.stdout + listed.stderr
        self.known = set(re.findall(r"^\s+(gfx\w+)\s*$", listed, re.M))
        self.version = subprocess.run([CLANG, "--version"], capture_output=True, text=True).stdout.splitlines()[0]

    def base(self, target: str) -> list[str]:
        wave = targets.family(target).wave
        return [CLANG, "-x", "hip", "--cuda-device-only", "-nogpulib", f"--rocm-path={self.rocm}", "--hip-version=6.3",
                *hiprtc_options(target, {}), f"-D__AMDGCN_WAVEFRONT_SIZE={wave}",
                "-fno-crash-diagnostics"]

    def pch_path(self, target: str) -> Path:
        """Where the target's precompiled header goes (made by pch() before its first compile)."""
        return self.tmp / f"prelude-{target}.pch"

    def pch(self, target: str) -> Path:
        with self._lock:
            lock = self._locks.setdefault(target, threading.Lock())
        with lock:
            if target not in self._pch:
                out = self.pch_path(target)
                subprocess.run([*self.base(target), "-S", "-Xclang", "-emit-pch", "-fpch-instantiate-templates",
                                "-o", str(out), str(self.prelude)], check=True, capture_output=True)
                self._pch[target] = out
        return self._pch[target]

    def compile(self, target: str, b: Build, text: str | None = None) -> Compiled:
        path = SHADERS / b.source
        if text is not None:                     # a modified copy (the planted faults)
            path = self.tmp / f"{hashlib.sha1(text.encode()).hexdigest()[:12]}-{b.source}"
            path.write_text(text)
        command = clang_command(target, b, path, self)
        k = self.cache_key(command, path.read_text() if text is None else text)
        if (found := isa_cache.lookup(k)) is not None:
            return Compiled(target, b, found.asm, found.error, 0.0, cached=found.where)
        self.pch(target)
        t0 = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        error = "" if done.returncode == 0 else (done.stderr or f"exit {done.returncode}")
        isa_cache.store(k, done.stdout, error)
        return Compiled(target, b, done.stdout, error, time.perf_counter() - t0)

    def cache_key(self, command: list[str], source: str) -> str:
        """The compile's key in tests/isa_cache.py: the compiler, the headers and device library,
        the source, and the command with this session's folders named, not spelled."""
        if self._inputs is None:
            self._inputs = hashlib.sha256(b"".join(hashlib.sha256(p.read_bytes()).digest()
                                                   for p in (HEADERS, *self.libraries[:2]))).hexdigest()
        included = "".join(h.read_text() for h in sorted(SHADERS.glob("*.h")))   # a local header a source includes
        return isa_cache.key(self.version, self._inputs + included, source, command,
                             {str(self.tmp): "<tmp>", str(SHADERS): "<shaders>"})


class Census:
    """Every compile of the session, once: a target's kernels are all queued on its first request."""

    def __init__(self, tools: Toolchain, pool: ThreadPoolExecutor):
        self.tools, self.pool = tools, pool
        self.jobs: dict[tuple, Future] = {}
        self.cells: dict[str, dict[str, str]] = {}
        self._queued: set[str] = set()

    def get(self, target: str, b: Build) -> Compiled:
        if target in NOT_IN_LLVM or target not in self.tools.known:
            pytest.skip(NOT_IN_LLVM.get(target, f"{self.tools.version} has no {target} target"))
        if target not in self._queued:
            self._queued.add(target)
            for other in target_builds(target):
                self._submit(target, other)
        return self._submit(target, b).result()

    def _submit(self, target: str, b: Build, text: str | None = None) -> Future:
        key = (target, b, text)
        if key not in self.jobs:
            self.jobs[key] = self.pool.submit(self.tools.compile, target, b, text)
        return self.jobs[key]

    def modified(self, target: str, b: Build, text: str) -> Compiled:
        return self._submit(target, b, text).result()

    def note(self, target: str, test: str, text: str) -> None:
        self.cells.setdefault(target, {})[test] = text

    def record(self) -> dict:
        kernels = []
        for (target, b, text), job in self.jobs.items():
            if text is not None or not job.done() or job.cancelled() or job.exception():
                continue
            c = job.result()
            row = {"target": target, "source": b.source, "entry": b.entry, "defines": dict(b.defines),
                   "compiled": c.ok, "seconds": round(c.seconds, 2), "cached": c.cached}
            if c.ok:
                k = amdgpu.parse(c.asm).get(b.entry)
                r = k.resources
                row.update(vgprs=r.vgprs, agprs=r.agprs, sgprs=r.sgprs, vgpr_spills=r.vgpr_spills,
                           sgpr_spills=r.sgpr_spills, scratch_bytes=r.scratch_bytes, lds_bytes=r.lds_bytes,
                           wave=r.wave, occupancy=amdgpu.occupancy(target, r), clang_occupancy=k.compiler_occupancy,
                           loop=k.mix(in_loop=True, top=6))
            else:
                row["error"] = first_error(c.error)
            kernels.append(row)
        return {"compiler": self.tools.version, "cells": self.cells, "kernels": kernels}


def first_error(text: str) -> str:
    """The compiler's first error line (else its first line)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return next((ln for ln in lines if "error" in ln), lines[0] if lines else "")


@pytest.fixture(scope="module")
def census(tmp_path_factory):
    reason = missing()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("rocm-isa")
    t0 = time.perf_counter()
    with ThreadPoolExecutor(WORKERS) as pool:
        c = Census(Toolchain(tmp), pool)
        yield c
        pool.shutdown(wait=True, cancel_futures=True)
    report = c.record()
    (tmp / "census.json").write_text(json.dumps(report, indent=1))
    where = Counter(k["cached"] or "compiled" for k in report["kernels"])
    print(f"\n{report['compiler']}: {len(report['kernels'])} compiles ({dict(where)}) in {time.perf_counter() - t0:.0f} s; "
          f"census {tmp / 'census.json'}\n{summary(report)}")


def summary(report: dict) -> str:
    """Each cell's finding once, with the targets that share it; then, per target, the kernel that
    allows the fewest waves and any that spill."""
    by_cell: dict[tuple[str, str], list[str]] = {}
    for target, cells in report["cells"].items():
        for test, text in cells.items():
            by_cell.setdefault((test, text), []).append(target)
    lines = [f"{test:22} {text}  [{' '.join(ts)}]" for (test, text), ts in sorted(by_cell.items())]
    lines.append("no kernel, not compiled: " + ", ".join(t.name for t in CATALOG.tests
                                                         if t.family == "compute" and not t.kernel))
    rows: dict[str, list[dict]] = {}
    for k in report["kernels"]:
        if k["compiled"]:
            rows.setdefault(k["target"], []).append(k)
    for target, ks in rows.items():
        low = min(ks, key=lambda k: k["occupancy"])
        spills = [f"{k['source']} {k['defines']}: {k['vgpr_spills']} VGPR, {k['sgpr_spills']} SGPR spills"
                  for k in ks if k["vgpr_spills"] or k["sgpr_spills"]]
        lines.append(f"{target:8} fewest waves {low['occupancy']} ({low['vgprs']} VGPRs, {low['source']} "
                     f"{low['defines']})" + ("; " + "; ".join(spills) if spills else ""))
    return "\n".join(lines)


# -- the cells ----------------------------------------------------------------------------------
def table_opcodes(text: str) -> tuple[tuple[str, ...], bool]:
    """The instructions of a table entry and whether a step needs all of them ("a + b") or any
    ("a / b"): "v_mul_lo_u32 + v_add_u32 (no ...)" -> ((v_mul_lo_u32, v_add_u32), True)."""
    head = text.split("(")[0]
    return tuple(re.findall(r"\bv_[a-z0-9_]+", head)), " + " in head


def alu_check(kernel: amdgpu.Kernel, test: Spec, variant: Variant, instruction: str) -> str | None:
    """The loop does the work the catalog counts with the table's instruction(s)."""
    opcodes, every = table_opcodes(instruction)
    per_lane = variant.ops_per_step // variant.width      # ops of one lane in one step: FMA 2, a 4x8 dot word 8
    lanes = variant.unroll * test.accumulators * variant.ops_per_step // per_lane
    for group in ([(o,) for o in opcodes] if every else [opcodes]):
        if failure := amdgpu.check_instruction(kernel, group, lanes):
            return failure
    return None


_BF16_ARITH = re.compile(r"^v_(?:pk_)?(?:fma|fmac|mad|mac|mul|add|sub|min|max|dot\d+c?)_\w*bf16")


def bf16_check(kernel: amdgpu.Kernel) -> str | None:
    """BF16 __hfma2 emulated: no BF16 arithmetic in the loop, FP32 FMAs, each result rounded back
    to BF16 by integer instructions (v_bfe_u32 takes the rounding bit) or by a conversion."""
    native = sorted(op for op in kernel.loop_counts if _BF16_ARITH.match(op))
    if native:
        return f"{kernel.name}: native BF16 arithmetic in the loop: {native}"
    fmas = amdgpu.loop_lanes(kernel, ("v_fma_f32", "v_pk_fma_f32"))
    rounded = kernel.loop_counts["v_bfe_u32"] + sum(
        n * 2 for op, n in kernel.loop_counts.items() if re.match(r"v_cvt_pk_bf16_f32", op))
    if not fmas or rounded != fmas:
        return f"{kernel.name}: {fmas} FP32 FMA lanes and {rounded} roundings to BF16 in the loop"
    return None


def stream_check(kernel: amdgpu.Kernel, test: Spec, variant: Variant) -> str | None:
    """Every vector access 128-bit, and `unroll` of them in flight: those of the loop where it
    has them (the chunk and stride reads), else those of the kernel (rows, tiles)."""
    if failure := amdgpu.check_wide_memory(kernel):
        return failure
    for kind, streams in (("load", test.reads), ("store", test.writes)):     # the descriptor's streams
        if not streams:                 # a read stores its sums once, after the loop
            continue
        ops = [m for m in kernel.memory(in_loop=True) if m.unit == "vector" and m.kind == kind] \
            or [m for m in kernel.memory() if m.unit == "vector" and m.kind == kind]
        if len(ops) != streams * variant.unroll:
            return f"{kernel.name}: {len(ops)} 128-bit {kind}s in flight, expected {streams * variant.unroll}"
    return None


def short(kernel: amdgpu.Kernel, opcodes) -> str:
    """'512 v_pk_fma_f16': the loop's counts of `opcodes`, the three most frequent."""
    found = sorted(((n, op) for op, n in kernel.loop_counts.items() if op in opcodes), reverse=True)[:3]
    return " + ".join(f"{n} {op}" for n, op in found) or "none"


@pytest.mark.parametrize("target, test", cell_params(ALU_TESTS))
def test_vector_alu_cell(census, target, test):
    reason = targets.alu_reason(target, test.name)
    instruction = targets.alu_instruction(target, test.name) if reason is None else None
    notes, failures = [], []
    for variant in variants(test):
        kernel = census.get(target, build(test, variant)).kernel()
        if instruction:
            opcodes, _ = table_opcodes(instruction)
            failure = alu_check(kernel, test, variant, instruction)
            shown = set(opcodes) | {amdgpu.accumulate_form(o) for o in opcodes} if not failure else \
                {op for op in kernel.loop_counts if op.startswith("v_")}
        else:
            failure = bf16_check(kernel) if test.dtype == "bf16" else f"no check for {reason}"
            shown = {"v_fma_f32", "v_fmac_f32", "v_pk_fma_f32", "v_bfe_u32", "v_add3_u32", "v_cvt_pk_bf16_f32"}
        notes.append(f"{variant.name} {short(kernel, shown)}")
        failures += [failure] if failure else []
    census.note(target, test.name, ", ".join(notes) + ("" if reason is None else " (emulated)"))
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("target, test", cell_params(MATRIX_TESTS))
def test_matrix_cell(census, target, test):
    forms = targets.matrix_forms(target, test.name)
    notes = []
    if forms:
        for f in forms:
            variant = variants(test, f)[0]
            kernel = census.get(target, build(test, variant, f)).kernel()
            expected = variant.unroll * (variant.accumulators or test.accumulators)
            failure = amdgpu.check_count(kernel, f.issued_by, expected, f.mnemonic)
            notes.append(short(kernel, {op for op in kernel.loop_counts if f.issued_by(op)}))
            census.note(target, test.name, ", ".join(notes) if not failure else f"FAIL {failure}")
            assert failure is None, failure
        return
    for f in candidate_forms(test.name):
        c = census.get(target, build(test, variants(test, f)[0], f))
        if c.ok:
            issued = [op for op in c.kernel().loop_counts if f.issued_by(op)]
            assert not issued, f"{target} compiled {f.builtin} to {issued}: the table says [hardware]"
            notes.append(f"{f.form} compiled without it")
            continue
        why = first_error(c.error)
        refused = re.search(r"needs target feature (\S+)|Cannot select: intrinsic %llvm\.amdgcn\.", why)
        assert refused, f"{f.form} on {target} failed for another reason: {why}"
        notes.append(f"{f.form}: " + (f"needs {refused.group(1)}" if refused.group(1) else "cannot select"))
    census.note(target, test.name, "refused: " + "; ".join(notes))


STREAM_PARAMS = [pytest.param(target, test, v, id=f"{target}-{test.name}-{v.name}")
                 for target in TARGETS for test in STREAM_TESTS for v in test.variants]


@pytest.mark.parametrize("target, test, variant", STREAM_PARAMS)
def test_stream_moves_128_bits_per_access(census, target, test, variant):
    kernel = census.get(target, build(test, variant)).kernel()
    failure = stream_check(kernel, test, variant)
    # the work guard a HIP run applies: the bytes the code object moves are those the host counts
    failure = failure or guards.moved(test, variant, amdgpu.memory_census(kernel), variant.unroll)[0]
    mem = sorted({m.opcode for m in kernel.memory() if m.unit == "vector"})
    census.note(target, f"{test.name}.{variant.name}", "/".join(mem) if not failure else f"FAIL {failure}")
    assert failure is None, failure


L2_PARAMS = [pytest.param(target, v, id=f"{target}-{v.name}") for target in TARGETS for v in L2_TEST.variants]


@pytest.mark.parametrize("target, variant", L2_PARAMS)
def test_the_l2_read_moves_the_bytes_the_catalog_counts(census, target, variant):
    """memory.l2's loop, as the work guard of a HIP run reads it: unroll 16-byte loads a pass."""
    kernel = census.get(target, build(L2_TEST, variant)).kernel()
    found = amdgpu.memory_census(kernel)
    failure, evidence = guards.moved(L2_TEST, variant, found, variant.unroll)
    census.note(target, f"memory.l2.{variant.name}", ", ".join(found.ops) if not failure else f"FAIL {failure}")
    assert failure is None, failure
    assert evidence["bytes_loaded"] == 16 * variant.unroll, evidence


@pytest.mark.parametrize("target", TARGETS)
def test_the_shared_read_loads_the_bytes_the_catalog_counts(census, target):
    """memory.shared's pass loop, as the work guard of a HIP run reads it: unroll ds_read_b128 a pass."""
    variant = SHARED_TEST.variants[0]
    kernel = census.get(target, build(SHARED_TEST, variant)).kernel()
    found = amdgpu.memory_census(kernel, space="shared")
    failure, evidence = guards.moved(SHARED_TEST, variant, found, variant.unroll)
    census.note(target, "memory.shared", ", ".join(found.ops) if not failure else f"FAIL {failure}")
    assert failure is None, failure
    assert evidence["bytes_loaded"] == 16 * variant.unroll, evidence


@pytest.mark.parametrize("target", TARGETS)
def test_stream_fill_moves_128_bits_per_store(census, target):
    test = STREAM_TESTS[0]
    kernel = census.get(target, build(test, test.variants[0], fill=True)).kernel()
    assert amdgpu.check_wide_memory(kernel) is None, amdgpu.check_wide_memory(kernel)


@pytest.mark.parametrize("target", TARGETS)
def test_chase_loads_through_vector_memory(census, target):
    kernel = census.get(target, build(CHASE_TEST, None)).kernel()
    failure = amdgpu.check_vector_chase(kernel)
    loads = [m.opcode for m in kernel.memory(in_loop=True) if m.kind == "load"]
    census.note(target, "latency", f"{len(loads)} {'/'.join(sorted(set(loads)))} in the loop" if not failure
                else f"FAIL {failure}")
    assert failure is None, failure


@pytest.mark.parametrize("target", TARGETS)
def test_every_kernel_has_registers_no_scratch_and_clangs_occupancy(census, target):
    """The metadata is there for every kernel, nothing spills to memory, and amdgpu.occupancy agrees
    with the occupancy clang reports for the kernel (VGPRs bound all of these kernels)."""
    problems = []
    for b in target_builds(target):
        c = census.get(target, b)
        if not c.ok:
            continue
        k = c.kernel()
        r = k.resources
        if r is None:
            problems.append(f"{b}: no register metadata")
            continue
        if r.scratch_bytes:         # spills to memory (gfx908 may spill VGPRs to AGPRs: no scratch)
            problems.append(f"{dict(b.defines)}: {r.vgpr_spills} VGPR, {r.sgpr_spills} SGPR spills, "
                            f"{r.scratch_bytes} B scratch")
        if k.compiler_occupancy is not None and amdgpu.occupancy(target, r) != k.compiler_occupancy:
            problems.append(f"{dict(b.defines)}: {r.vgprs} VGPRs -> amdgpu.occupancy {amdgpu.occupancy(target, r)}, "
                            f"clang {k.compiler_occupancy}")
    assert not problems, "\n".join(problems)


def test_the_precompiled_header_changes_nothing(census):
    """A kernel compiled through the target's precompiled header is the kernel compiled with the
    headers included as text (the object's unique id aside)."""
    test, target = CATALOG.get("compute.bf16"), "gfx942"
    b = build(test, variants(test)[0])
    tools = census.tools
    textual = [*tools.base(target), "-include", str(tools.prelude), *tools.bitcode_flags, "-S", "-o", "-",
               *(f"-D{k}={v}" for k, v in b.defines), str(SHADERS / b.source)]
    plain = subprocess.run(textual, capture_output=True, text=True, check=True).stdout
    unique = re.compile(r"^.*__hip_cuid_\w+.*$", re.M)
    assert unique.sub("", plain) == unique.sub("", census.get(target, b).asm)


def test_a_cached_compile_is_the_compile_and_any_change_misses(census, tmp_path, monkeypatch):
    """The assembly cache returns what clang printed for the same command and source, and every
    input that decides the assembly (the source, a define, the target) is another key."""
    monkeypatch.setattr(isa_cache, "FOLDER", str(tmp_path / "isa"))
    monkeypatch.setattr(isa_cache, "_archive", {})
    test, target = CATALOG.get("compute.fp32"), "gfx1100"
    b = build(test, variants(test)[0])
    tools = census.tools
    first, again = tools.compile(target, b), tools.compile(target, b)
    assert first.ok and not first.cached and again.cached == "folder" and again.asm == first.asm
    source = (SHADERS / b.source).read_text()
    other = Build(b.source, b.entry, tuple((k, 8 if k == "UNROLL" else v) for k, v in b.defines))
    keys = {tools.cache_key(clang_command(target, b, SHADERS / b.source, tools), source),
            tools.cache_key(clang_command(target, b, SHADERS / b.source, tools), source + "\n"),
            tools.cache_key(clang_command(target, other, SHADERS / b.source, tools), source),
            tools.cache_key(clang_command("gfx1101", b, SHADERS / b.source, tools), source)}
    assert len(keys) == 4
    failed = tools.compile(target, b, source.replace("UNROLL", "UNROLL +"))       # a compile error is kept too
    assert not failed.ok and tools.compile(target, b, source.replace("UNROLL", "UNROLL +")).error == failed.error


def test_the_committed_cache_holds_clangs_output(tmp_path_factory):
    """A sample of the committed archive's entries, compiled again here, is what clang prints now
    (only where the archive was made by this compiler: other keys are never looked up)."""
    reason = missing()
    if reason:
        pytest.skip(reason)
    entries = isa_cache._load_archive()
    if not entries:
        pytest.skip(f"no {isa_cache.ARCHIVE.name} (PEAKBENCH_ISA_CACHE_PACK=1 makes one)")
    tools = Toolchain(tmp_path_factory.mktemp("isa-sample"))
    samples = [("gfx942", build(CATALOG.get("compute.fp16"), CATALOG.get("compute.fp16").variants[0])),
               ("gfx1100", build(CHASE_TEST, None)),
               ("gfx90a", build(STREAM_TESTS[0], STREAM_TESTS[0].variants[0]))]
    checked = 0
    unique = re.compile(r"^.*__hip_cuid_\w+.*$", re.M)
    for target, b in samples:
        command = clang_command(target, b, SHADERS / b.source, tools)
        entry = entries.get(tools.cache_key(command, (SHADERS / b.source).read_text()))
        if entry is None:
            continue                   # changed since the archive was made: compiled anyway
        tools.pch(target)
        fresh = subprocess.run(command, capture_output=True, text=True)
        assert unique.sub("", fresh.stdout) == unique.sub("", entry["asm"]), f"{b} on {target}"
        checked += 1
    if not checked:
        pytest.skip("the archive holds none of the sampled compiles (another compiler, or changed sources)")


def test_llvm_knows_every_target_of_the_table_but_the_two_it_dropped(census):
    unknown = {t for t in TARGETS if t not in census.tools.known}
    assert unknown == set(NOT_IN_LLVM), f"{census.tools.version} does not know {sorted(unknown)}"


# -- planted faults: each check must catch its fault ---------------------------------------------
def planted(path: str, old: str, new: str) -> str:
    text = (SHADERS / path).read_text()
    assert text.count(old) == 1, f"the fault's anchor is not once in {path}: {old!r}"
    return text.replace(old, new)


def test_a_scalar_fp16_fma_in_the_packed_path_fails_the_check(census):
    test, target = CATALOG.get("compute.fp16"), "gfx942"
    variant = variants(test)[0]
    b = build(test, variant)
    good = census.get(target, b).kernel()
    instruction = targets.alu_instruction(target, test.name)
    assert alu_check(good, test, variant, instruction) is None
    text = planted("alu.cu", "{ return __hfma2(x, b, c); }\n__device__ __forceinline__ bfloat162",
                   "{ return __halves2half2(__hfma(__low2half(x), __low2half(b), __low2half(c)), "
                   "__high2half(x)); }\n__device__ __forceinline__ bfloat162")
    bad = census.modified(target, b, text).kernel()
    failure = alu_check(bad, test, variant, instruction)
    assert failure and "v_pk_fma_f16" in failure, failure
    assert bad.loop_counts["v_fma_f16"] + bad.loop_counts["v_fmac_f16"] > 0, bad.mix(in_loop=True)


def test_a_load_narrowed_to_64_bits_fails_the_check(census):
    test, target = CATALOG.get("memory.read"), "gfx942"
    variant = next(v for v in test.variants if v.name == "chunk")
    b = build(test, variant)
    assert stream_check(census.get(target, b).kernel(), test, variant) is None
    text = planted("mem.cu", "uint4 v = src[(base + i + u * lane) & mask];",
                   "const uint2 h = ((const uint2*)src)[2 * ((base + i + u * lane) & mask)]; "
                   "uint4 v = make_uint4(h.x, h.y, h.y, h.x);")
    failure = stream_check(census.modified(target, b, text).kernel(), test, variant)
    assert failure and "global_load_dwordx2" in failure, failure


def test_a_chase_whose_address_is_uniform_fails_the_check(census):
    target = "gfx90a"
    b = build(CHASE_TEST, None)
    assert amdgpu.check_vector_chase(census.get(target, b).kernel()) is None
    text = planted("mem.cu", 'asm volatile("" : "+v"(p));', "")
    failure = amdgpu.check_vector_chase(census.modified(target, b, text).kernel())
    assert failure and "s_load" in failure, failure


# -- run time: the same census from a code object's disassembly ----------------------------------
@pytest.mark.parametrize("target, test_name", [("gfx942", "compute.fp16"), ("gfx1201", "matrix.fp16.fp32"),
                                               ("gfx90a", "latency.l1"), ("gfx1100", "memory.read")])
def test_the_objdump_listing_of_a_code_object_gives_the_same_census(census, tmp_path, target, test_name):
    """What the backend reads on a ROCm machine (llvm-objdump -d of hiprtc's code object, with
    llvm-readelf --notes for the metadata) parses to the census of the assembly it came from."""
    tools = {n: shutil.which(f"{n}-{LLVM}") for n in ("llvm-mc", "llvm-objdump", "llvm-readelf")}
    if not all(tools.values()):
        pytest.skip(f"needs llvm-mc, llvm-objdump and llvm-readelf {LLVM} (Debian package llvm-{LLVM})")
    test = CATALOG.get(test_name)
    form = next(iter(targets.matrix_forms(target, test_name)), None)
    b = build(test, variants(test, form)[-1], form)
    c = census.get(target, b)
    (tmp_path / "kernel.s").write_text(c.asm)
    obj = str(tmp_path / "kernel.o")

    def run(*cmd: str) -> str:
        return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout

    run(tools["llvm-mc"], "-triple=amdgcn-amd-amdhsa", f"-mcpu={target}", "-filetype=obj",
        str(tmp_path / "kernel.s"), "-o", obj)
    listing = run(tools["llvm-objdump"], "-d", f"--mcpu={target}", obj) + run(tools["llvm-readelf"], "--notes", obj)
    from_asm, from_dump = c.kernel(), amdgpu.parse(listing)[b.entry]
    assert from_dump.loop and from_dump.loop_counts == from_asm.loop_counts
    assert from_dump.counts == from_asm.counts
    assert from_dump.resources == from_asm.resources
    assert amdgpu.occupancy(target, from_dump.resources) == from_asm.compiler_occupancy


# -- the reader itself, without a compiler -------------------------------------------------------
DUMP = """
kernel.o:\tfile format elf64-amdgpu

Disassembly of section .text:

0000000000000000 <alu>:
\ts_load_dword s4, s[2:3], 0x10                              // 000000000000: C0020101 00000010
\tglobal_load_dwordx2 v[0:1], v0, s[6:7]                     // 000000000008: DC548000 00060000
\ts_waitcnt vmcnt(0)                                         // 000000000010: BF8C0F70
\tv_pk_fma_f16 v0, v0, s2, v3                                // 000000000014: D38E4000 1C0C0500
\tv_pk_fma_f16 v1, v1, s2, v3                                // 00000000001C: D38E4001 1C0C0501
\ts_add_i32 s4, s4, -1                                       // 000000000024: 8104C104
\ts_cmp_lg_u32 s4, 0                                         // 000000000028: BF078004
\ts_cbranch_scc1 65531                                       // 00000000002C: BF85FFFB <alu+0x1c>
\tglobal_store_dwordx2 v[2:3], v[0:1], off                   // 000000000030: DC748000 007F0002
\ts_endpgm                                                   // 000000000038: BF810000
"""


def test_a_listing_splits_into_its_loop_from_the_branch_target():
    k = amdgpu.parse(DUMP)["alu"]
    assert [i.opcode for i in k.loop][0] == "v_pk_fma_f16" and k.loop[-1].opcode == "s_cbranch_scc1"
    assert k.loop_counts["v_pk_fma_f16"] == 1 and k.counts["v_pk_fma_f16"] == 2
    assert amdgpu.check_instruction(k, ("v_pk_fma_f16",), 2) is None
    assert "expected 4" in amdgpu.check_instruction(k, ("v_pk_fma_f16",), 4)
    # Without the <alu+0x1c> annotation the target comes from the branch's own offset (-5 words).
    k = amdgpu.parse(DUMP.replace(" <alu+0x1c>", ""))["alu"]
    assert [i.opcode for i in k.loop] == ["v_pk_fma_f16", "s_add_i32", "s_cmp_lg_u32", "s_cbranch_scc1"]
    assert amdgpu.check_wide_memory(k) == "alu: global_load_dwordx2, global_store_dwordx2 (not 128-bit)"


def test_memory_instructions_are_classified_by_unit_and_width():
    cases = {"global_load_dwordx4": ("vector", "load", 128), "global_load_b128": ("vector", "load", 128),
             "global_load_dwordx3": ("vector", "load", 96), "global_store_b64": ("vector", "store", 64),
             "buffer_load_dword": ("vector", "load", 32), "flat_load_ushort": ("vector", "load", 16),
             "s_load_dwordx2": ("scalar", "load", 64), "s_load_b32": ("scalar", "load", 32),
             "s_buffer_load_dword": ("scalar", "load", 32), "ds_read_b128": ("lds", "load", 128),
             "scratch_store_dword": ("scratch", "store", 32), "global_atomic_add_f32": ("vector", "atomic", None)}
    for op, want in cases.items():
        m = amdgpu.memory_op(op)
        assert (m.unit, m.kind, m.bits) == want, op
    assert amdgpu.memory_op("v_pk_fma_f16") is None and amdgpu.memory_op("s_waitcnt") is None


def test_accumulate_twins_and_packed_lanes():
    assert amdgpu.accumulate_form("v_fma_f32") == "v_fmac_f32"
    assert amdgpu.accumulate_form("v_dot4_i32_i8") == "v_dot4c_i32_i8"
    assert amdgpu.accumulate_form("v_pk_fma_f16") == "v_pk_fmac_f16"
    assert amdgpu.base("v_add_u32_e32") == "v_add_u32" and amdgpu.lanes("v_pk_mad_u16") == 2


@pytest.mark.parametrize("target, vgprs, waves", [
    # clang-22's own "; Occupancy:" for kernels of this suite with these VGPR counts
    ("gfx908", 150, 1), ("gfx908", 52, 4), ("gfx90a", 155, 3), ("gfx90a", 75, 6), ("gfx942", 19, 8),
    ("gfx950", 210, 2), ("gfx1030", 78, 12), ("gfx1100", 135, 10), ("gfx1102", 135, 7), ("gfx1151", 102, 12),
    ("gfx1201", 105, 12), ("gfx1201", 73, 16)])
def test_occupancy_follows_the_register_file_of_each_target(target, vgprs, waves):
    wave = targets.family(target).wave
    assert amdgpu.occupancy(target, amdgpu.Resources(vgprs=vgprs, wave=wave)) == waves

"""shaders/matrix_amd.cu against the capability table (peakbench/rocm/targets.py), without ROCm:
every form the table names exists and calls the table's builtin with the table's shape, its op
comment is 2*M*N*K, its fragment facts follow the instruction family's rule, and no form is
unused. Where clang-tidy is installed (pip install clang-tidy), each form is also put through
clang's front end for its own target: builtin names, argument counts and operand sizes are checked
(clang checks a builtin's target feature only in code generation, which needs ROCm)."""
from __future__ import annotations

import os
import shutil
import re
import subprocess
from pathlib import Path

import pytest

from helpers import clang_tidy
from peakbench.rocm import targets

SOURCE = Path(__file__).resolve().parents[1] / "shaders" / "matrix_amd.cu"
FORM = re.compile(r"#(?:el)?if defined\(FORM_(\w+)\)\s*//\s*2\*(\d+)\*(\d+)\*(\d+) = (\d+) ops[^\n]*\n"
                  r"MMA_FORM\(([^\n]*)\n\s*__builtin_amdgcn_(\w+)\(")
FIELDS = ("m", "n", "k", "kp", "bits", "layout", "ct", "nc", "cs", "words", "cv")


def forms() -> dict[str, dict]:
    out = {}
    for match in FORM.finditer(SOURCE.read_text()):
        name, m, n, k, ops, args, builtin = match.groups()
        values = dict(zip(FIELDS, (a.strip() for a in args.rstrip(",").split(","))))
        out[name] = {"comment": (int(m), int(n), int(k), int(ops)), "builtin": builtin, **values}
    return out


def table_forms() -> dict[str, tuple[targets.Family, targets.Mma]]:
    return {f.form: (fam, f) for fam in targets.FAMILIES for fs in fam.matrix.values() for f in fs}


def test_the_source_parses_into_forms():
    found = forms()
    assert len(found) >= 30, sorted(found)
    assert SOURCE.read_text().count("MMA_FORM(") == len(found) + 1, "every form has its #if and op comment"


def test_every_table_form_is_in_the_source_with_its_builtin_and_shape():
    found = forms()
    for name, (fam, f) in table_forms().items():
        assert name in found, f"{fam.name}: FORM_{name} is not in {SOURCE.name}"
        src = found[name]
        assert src["builtin"] == f.builtin, (name, src["builtin"], f.builtin)
        assert (int(src["m"]), int(src["n"]), int(src["k"])) == f.shape, name
        m, n, k, ops = src["comment"]
        assert (m, n, k) == f.shape and ops == 2 * m * n * k, f"{name}: op comment"


def test_no_form_is_unused():
    assert set(forms()) == set(table_forms()), "a form no target runs"


def test_fragment_facts_follow_the_instruction_family():
    for name, src in forms().items():
        fam, f = table_forms()[name]
        m, k, kp = f.m, f.k, int(src["kp"])
        if f.builtin.startswith("mfma"):
            assert kp == m * k // 64, f"{name}: an MFMA lane holds M*K/64 values of A"
            layout = "C_F64" if src["ct"] == "double" else f"C_MFMA{m}"
        elif f.builtin.endswith("_gfx12"):
            assert kp == m * k // 32, f"{name}: a gfx12 WMMA lane holds half a row of A"
            layout = "C_WMMA12"
        else:
            assert kp == k, f"{name}: a gfx11 WMMA lane holds a whole row of A (replicated)"
            layout = "C_WMMA11"
        assert src["layout"] == layout, name
        assert int(src["nc"]) * fam.wave == f.m * f.n, f"{name}: the wave holds the tile once"
        if src["bits"].isdigit():       # f8f6f4 forms take their width from FMT
            assert int(src["words"]) * 32 == kp * int(src["bits"]), f"{name}: operand words"
        # gfx11 returns 16-bit results in the low half of each 32-bit register: every other element
        gfx11_half = src["ct"] == "_Float16" and f.builtin.endswith("_w32")
        assert int(src["cs"]) == (2 if gfx11_half else 1), f"{name}: accumulator stride"


# clang's HIP keywords and built-in variables come from the HIP headers; these stand-ins are all the
# source needs to go through the front end without ROCm.
PRELUDE = """#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(n) __attribute__((amdgpu_flat_work_group_size(1, n)))
struct __pb_dim { unsigned x, y, z; };
__device__ extern const __pb_dim threadIdx, blockIdx;
typedef __SIZE_TYPE__ size_t;
__device__ inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
"""
TARGET = {"CDNA1": "gfx908", "CDNA2": "gfx90a", "CDNA3": "gfx942", "CDNA4": "gfx950", "RDNA3": "gfx1100",
          "RDNA4": "gfx1201"}
CASES = sorted({(fam.name, f.form, f.fmt) for fam in targets.FAMILIES for fs in fam.matrix.values() for f in fs})


@pytest.mark.skipif(clang_tidy() is None, reason="clang-tidy is not installed (pip install clang-tidy)")
@pytest.mark.parametrize("family, form, fmt", CASES, ids=[f"{a}-{b}" + (f"-fmt{c}" if c is not None else "")
                                                            for a, b, c in CASES])
def test_each_form_passes_clang_for_its_target(tmp_path, family, form, fmt):
    prelude = tmp_path / "prelude.h"
    prelude.write_text(PRELUDE)
    wave = next(f.wave for f in targets.FAMILIES if f.name == family)
    flags = ["-x", "hip", "--cuda-device-only", "-nogpulib", "-nogpuinc", "-std=c++17", "-include", str(prelude),
             f"--offload-arch={TARGET[family]}", f"-DFORM_{form}", "-DACC=8", "-DUNROLL=4", "-DWAVES=4", f"-DWAVE={wave}"]
    if fmt is not None:
        flags.append(f"-DFMT={fmt}")
    done = subprocess.run([clang_tidy(), "--allow-no-checks", "--checks=-*", str(SOURCE), "--", *flags],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    errors = [line for line in (done.stdout + done.stderr).splitlines() if "error:" in line]
    assert done.returncode == 0 and not errors, "\n".join(errors or [done.stderr[-2000:]])


@pytest.mark.skipif(clang_tidy() is None, reason="clang-tidy is not installed (pip install clang-tidy)")
def test_the_clang_check_catches_a_wrong_wave(tmp_path):
    """The front-end check has teeth: an MFMA form compiled as wave32 fails its static_assert."""
    prelude = tmp_path / "prelude.h"
    prelude.write_text(PRELUDE)
    done = subprocess.run([clang_tidy(), "--allow-no-checks", "--checks=-*", str(SOURCE), "--", "-x", "hip",
                           "--cuda-device-only", "-nogpulib", "-nogpuinc", "-std=c++17", "-include", str(prelude),
                           "--offload-arch=gfx942", "-DFORM_MfmaFp8_32x32x16", "-DACC=8", "-DUNROLL=4",
                           "-DWAVES=4", "-DWAVE=32"], capture_output=True, text=True, timeout=120)
    assert "the wave holds the whole tile, once" in done.stdout + done.stderr


# -- sparse forms (SMFMAC, peakbench/rocm/matrix.py SPARSE_FORMS) ------------------------------

SPARSE_FORM = re.compile(r"#elif defined\(FORM_(\w+)\)\s*//\s*2\*(\d+)\*(\d+)\*(\d+) = (\d+) ops[^\n]*\n"
                         r"SPARSE_FORM\(([^\n]*)\n\s*__builtin_amdgcn_(\w+)\(a, b, c, idx, 0, 0\)\)")
CLANG = shutil.which("clang-22")


def sparse_forms() -> dict[str, dict]:
    out = {}
    for match in SPARSE_FORM.finditer(SOURCE.read_text()):
        name, m, n, k, ops, args, builtin = match.groups()
        values = dict(zip(FIELDS, (a.strip() for a in args.rstrip(",").split(","))))
        out[name] = {"comment": (int(m), int(n), int(k), int(ops)), "builtin": builtin, **values}
    return out


def sparse_table() -> dict:
    from peakbench.rocm import matrix
    return {f.form: f for table in matrix.SPARSE_FORMS.values() for fs in table.values() for f in fs}


def test_every_sparse_form_is_in_the_source_with_its_builtin_shape_and_fragments():
    found, table = sparse_forms(), sparse_table()
    assert SOURCE.read_text().count("SPARSE_FORM(") == len(found) + 1
    assert set(found) == set(table), "a sparse form no target runs, or one the source lacks"
    for name, f in table.items():
        src = found[name]
        assert src["builtin"] == f.builtin and (int(src["m"]), int(src["n"]), int(src["k"])) == f.shape, name
        m, n, k, ops = src["comment"]
        assert (m, n, k) == f.shape and ops == 2 * m * n * k, f"{name}: dense-equivalent op comment"
        kp, bits = int(src["kp"]), int(src["bits"])
        assert kp == k * n // 64, f"{name}: a wave64 lane holds K*N/64 values of B"
        assert int(src["words"]) * 32 == kp * bits, f"{name}: B words (A holds half)"
        assert src["layout"] == f"C_MFMA{m}" and int(src["nc"]) * 64 == m * n, name


def smfmac_asm(tmp_path, target: str, form: str) -> subprocess.CompletedProcess:
    prelude = tmp_path / "prelude.h"
    prelude.write_text(PRELUDE)
    return subprocess.run([CLANG, "-x", "hip", "--cuda-device-only", "-nogpulib", "-nogpuinc", "-std=c++17", "-O3",
                           "-fno-crash-diagnostics", "-include", str(prelude), f"--offload-arch={target}", f"-DFORM_{form}", "-DACC=8",
                           "-DUNROLL=4", "-DWAVES=4", "-DWAVE=64", "-S", "-o", "-", str(SOURCE)],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(CLANG is None, reason="clang-22 is not installed")
@pytest.mark.parametrize("target", ["gfx942", "gfx950"])
@pytest.mark.parametrize("form", sorted(sparse_table()))
def test_each_sparse_form_issues_its_smfmac_once_per_step(tmp_path, target, form):
    done = smfmac_asm(tmp_path, target, form)
    assert done.returncode == 0, done.stderr[-2000:]
    f = sparse_table()[form]
    issued = re.findall(r"^\s+(v_\w+)", done.stdout, re.M)
    assert sum(f.issued_by(op) for op in issued) == 4 * 8, f"{form}: UNROLL 4 x ACC 8 steps"
    assert not any(op.startswith("v_mfma") for op in issued), "no dense MFMA in a sparse kernel"


@pytest.mark.skipif(CLANG is None, reason="clang-22 is not installed")
def test_cdna2_cannot_select_smfmac(tmp_path):
    """Why gfx90a's sparse tests say [hardware]: its back end has no SMFMAC."""
    done = smfmac_asm(tmp_path, "gfx90a", "SmfmacF16_16x16x32")
    assert done.returncode != 0 and "Cannot select: intrinsic %llvm.amdgcn.smfmac" in done.stderr

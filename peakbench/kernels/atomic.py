"""Atomic adds on CUDA and HIP: shaders/atomic.cu, u32 everywhere, f32 where the hardware adds
floats natively (compiler-checked with nvcc 13 for sm_90a and clang-22 for the ROCm targets,
tests/test_shaders_atomic.py): NVIDIA adds floats in global memory (REDG.E.ADD.F32) but not in
shared memory, where atomicAdd(float) is a compare-and-swap loop; AMD adds floats in LDS
(ds_add_f32) everywhere and in global memory from gfx90a (global_atomic_add_f32) and on RDNA3/4,
not on RDNA2, where it is a compare-and-swap loop."""
from __future__ import annotations

from peakbench.workloads.atomic import AtomicKernel, AtomicWorkload

NO_SHARED_FLOAT = ("[hardware] NVIDIA GPUs have no shared-memory float atomic add: atomicAdd(float) on "
                   "shared memory compiles to a compare-and-swap loop (LDS, FADD, ATOMS.CAS; nvcc 13, sm_90a)")
NO_GLOBAL_FLOAT = ("[hardware] {target} (RDNA2) has no global-memory float atomic add: atomicAdd(float) "
                   "compiles to a compare-and-swap loop (global_atomic_cmpswap; clang-22)")
# The opcode each kind of atomic must show, by dialect and memory (a prefix of the mnemonic).
INSTRUCTION = {"cuda": {"global": "RED", "shared": "ATOMS.ADD"},
               "hip": {"global": "global_atomic_add", "shared": "ds_add"}}


def support(test, rt) -> str | None:
    return None


def missing(test, rt) -> dict[str, str]:
    """The catalog's variants this device cannot run, with their reasons."""
    if rt.dialect == "cuda" and test.space == "shared":
        return {"f32": NO_SHARED_FLOAT}
    if rt.dialect == "hip" and test.space == "global":
        if rt.family == "RDNA2":
            return {"f32": NO_GLOBAL_FLOAT.format(target=rt.arch)}
    return {}


def variants(test, rt) -> tuple:
    gone = missing(test, rt)
    return tuple(v for v in test.variants if v.name not in gone)


def workload(test, variant, rt) -> AtomicWorkload:
    kernel = AtomicKernel("atomic.cu", "atomic", {}, INSTRUCTION[rt.dialect][test.space],
                          {"kernel": f"atomic.cu ({test.space}{', contended' if test.contended else ''})"},
                          missing=missing(test, rt))
    return AtomicWorkload(test, variant, rt, kernel)

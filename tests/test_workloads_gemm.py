"""The vendor GEMM written once (peakbench.workloads.gemm) and its BLASLt calls (peakbench.kernels.
gemm), against a fake BLASLt library at its C boundary (tests/fake_blaslt.py) with cuBLASLt's
numbers: every gemm test verifies at a small shape, a wrong entry and a skipped GEMM are caught,
the fastest heuristic candidate is kept, a type with no algorithm is unsupported, a failing call
names itself; and Vulkan says why it has none."""
from __future__ import annotations

import ctypes
import dataclasses

import numpy as np
import pytest

from fake_blaslt import FakeLt, HostGemm, fill_words
from peakbench.backend import Unsupported
from peakbench.catalog import default_catalog
from peakbench.catalog.gemm import SIZE, TESTS, shape
from peakbench.kernels import gemm as lt
from peakbench.kernels.gemm import SEARCH_S, TRIAL_ROUNDS, trial_gemms, trial_rounds
from peakbench.workloads import gemm as shared

CATALOG = default_catalog()
CUDA_KINDS = {2: "fp16", 14: "bf16", 0: "fp32", 1: "fp64", 3: "int8", 10: "int32", 28: "fp8_e4m3"}
SMALL = shape(96, 80, 64)


def cuda_api():
    from peakbench.cuda.gemm import API
    return API


def workload(test, lib=None, variant=SMALL, gemm_class=HostGemm):
    lib = lib or FakeLt(cuda_api(), CUDA_KINDS)
    return shared.GemmWorkload(test, variant, gemm_class(cuda_api(), lib), "cuBLASLt"), lib


def test_the_catalog_has_the_six_gemm_tests_beside_their_matrix_tests():
    names = [t.name for t in TESTS]
    assert names == ["gemm.fp16.fp32", "gemm.bf16.fp32", "gemm.tf32.fp32", "gemm.fp8_e4m3.fp32",
                     "gemm.int8.int32", "gemm.fp64.fp64"]
    for t in TESTS:
        assert CATALOG.get(t.name) is t and CATALOG.get(t.matrix).family == "matrix"
        assert t.unit == ("TOPS" if t.name.startswith("gemm.int8") else "TFLOPS")
        (v,) = t.variants
        assert v.shape == (SIZE, SIZE, SIZE) and t.per_item(v) == 2 * SIZE ** 3


# Of 4096 elements, at least this many distinct values: FP8 E4M3 has 64 in +-[1/8, 2) (sign, four
# exponents, 3 mantissa bits), BF16 1024, FP16 8192 (4096 draws: about 3200); TF32 and FP64 far
# more than 4096.
DISTINCT = {"fp8_e4m3": 64, "bf16": 900, "fp16": 3000, "tf32": 4000, "fp64": 4090}


@pytest.mark.parametrize("kind", sorted(DISTINCT))
def test_operands_are_exact_values_in_their_range_with_random_mantissas(kind):
    values = shared.decode(kind, shared.Operand(kind, 64, 64, shared.OFFSETS["a"]).host_rows(np.arange(64)))
    assert np.all((np.abs(values) >= 1 / 8) & (np.abs(values) < 2)), kind
    for low in (1 / 8, 1 / 4, 1 / 2, 1):                   # each of the four exponents drawn
        assert ((np.abs(values) >= low) & (np.abs(values) < 2 * low)).mean() > 0.2, (kind, low)
    assert 0.45 < (values < 0).mean() < 0.55 and len(np.unique(values)) >= DISTINCT[kind], kind


def test_int8_operands_take_every_bit_pattern():
    ints = shared.Operand("int8", 64, 64, 0).host_rows(np.arange(64))
    assert ints.dtype == np.int8 and len(np.unique(ints)) == 256


@pytest.mark.parametrize("kind", ["fp16", "tf32", "fp64", "fp8_e4m3", "int8"])
def test_the_host_rows_are_the_rows_the_fill_kernel_makes(kind):
    """The rows the check decodes equal those rows of what gemm_fill.cu writes (modelled apart in
    fake_blaslt.fill_words): row offsets, word parity and masks agree."""
    op = shared.Operand(kind, 24, 40, shared.OFFSETS["b"])
    form = op.form()
    whole = fill_words(op.words, op.offset, form.keep, form.set, form.add).view(shared.STORAGE[kind]).reshape(24, 40)
    rows = np.array([0, 7, 23, 7])
    assert np.array_equal(op.host_rows(rows).view(np.uint8), whole[rows].view(np.uint8))


def test_the_two_operands_differ():
    a, b = (shared.Operand("fp16", 8, 64, shared.OFFSETS[x]).host_rows(np.arange(8)) for x in "ab")
    assert not np.array_equal(a.view(np.uint16), b.view(np.uint16))


def test_an_operand_the_fill_cannot_make_is_refused():
    with pytest.raises(ValueError, match="8-byte pairs"):
        shared.Operand("fp16", 4, 3, 0)
    with pytest.raises(ValueError, match="2\\*\\*31"):
        shared.Operand("fp64", 1 << 15, 1 << 15, 0)


def test_fp8_and_bf16_decode_by_their_formats():
    assert shared.decode("fp8_e4m3", np.array([0x38, 0x7E, 0x01, 0xB8, 0x7F], np.uint8))[:4].tolist() == \
        [1.0, 448.0, 2.0 ** -9, -1.0]
    assert np.isnan(shared.E4M3[0x7F]) and np.isnan(shared.E4M3[0xFF])
    assert shared.decode("bf16", np.array([0x3F80, 0xC040], np.uint16)).tolist() == [1.0, -3.0]


@pytest.mark.parametrize("test", TESTS, ids=lambda t: t.name)
def test_every_gemm_test_verifies_and_counts_one_item_per_gemm(test):
    w, lib = workload(test)
    assert w.verify() is None, w.evidence
    assert "checked at 1 and 2" in w.evidence["guards"]["iterations"]["why"]
    assert w.run(5) == pytest.approx(5e-3) and w.items(5) == 5
    assert w.params["m"] == 96 and w.params["output"] == test.output
    desc = next(o for o in lib.objects.values() if o["kind"] == "desc")
    api = cuda_api()
    assert desc["compute"] == api.compute[test.types[0]][0]
    assert desc["attrs"][api.transa] == api.op_t and desc["attrs"][api.transb] == api.op_n
    layouts = [o for o in lib.objects.values() if o["kind"] == "layout"]
    assert [(o["rows"], o["cols"], o["ld"]) for o in layouts] == [(64, 96, 64), (64, 80, 64), (96, 80, 96)]
    w.close()
    assert not lib.objects, "close() destroys every descriptor and the handle"


def test_fp8_passes_unit_scales_to_the_library():
    w, lib = workload(CATALOG.get("gemm.fp8_e4m3.fp32"))
    desc = next(o for o in lib.objects.values() if o["kind"] == "desc")
    api = cuda_api()
    a_scale, b_scale = desc["attrs"][api.a_scale], desc["attrs"][api.b_scale]
    assert b_scale == a_scale + lt.SCALE_STRIDE
    assert lib._array(a_scale, "fp32", 1).tolist() == lib._array(b_scale, "fp32", 1).tolist() == [1.0]


def first_sample(m=96, n=80) -> tuple[int, int]:
    """The first (row, column) of D the workload samples."""
    rng = np.random.default_rng(shared.SEED + 1)
    return int(rng.integers(0, m, shared.SAMPLES)[0]), int(rng.integers(0, n, shared.SAMPLES)[0])


def test_a_wrong_entry_of_d_fails_verification_naming_it():
    lib = FakeLt(cuda_api(), CUDA_KINDS)
    w, _ = workload(CATALOG.get("gemm.bf16.fp32"), lib)
    lib.corrupt = first_sample()
    problem = w.verify()
    assert problem and f"D[{lib.corrupt[0]}, {lib.corrupt[1]}]" in problem and "float64" in problem


def test_int8_is_checked_exactly():
    lib = FakeLt(cuda_api(), CUDA_KINDS)
    w, _ = workload(CATALOG.get("gemm.int8.int32"), lib)
    lib.corrupt = first_sample()
    assert "1 of 64 sampled entries off" in w.verify()


def test_a_library_that_runs_only_one_of_the_accumulated_gemms_is_caught():
    lib = FakeLt(cuda_api(), CUDA_KINDS)
    lib.once = True
    w, _ = workload(CATALOG.get("gemm.fp16.fp32"), lib)
    problem = w.verify()
    assert problem.startswith("guard iterations: output after 2 accumulated GEMMs"), problem


class RankedGemm(HostGemm):
    """Candidate 2 (the third) is the fastest."""
    def timed(self, calls):
        calls()
        return {1: 3e-3, 2: 2e-3, 3: 1e-3}[self.lib.last_algo] * 2


def test_the_fastest_heuristic_candidate_is_kept_and_every_one_is_listed():
    w, lib = workload(CATALOG.get("gemm.bf16.fp32"), gemm_class=RankedGemm)
    assert w.gemm.algo == 2 and "candidate 2 of 3" in w.evidence["chosen"]
    assert len(w.evidence["algorithms"]) == 3
    w.run(1)
    assert lib.last_algo == 3



class DippedGemm(HostGemm):
    """Candidate 2 (the second) is the fastest, 1% ahead of the first, but its first timed round
    ran 5% slow (the clock dipped), as one pass of a few GEMMs each can catch a candidate."""
    def __init__(self, api, lib):
        super().__init__(api, lib)
        self.seen: dict[int, int] = {}

    def timed(self, calls):
        calls()
        algo = self.lib.last_algo
        self.seen[algo] = self.seen.get(algo, 0) + 1
        dip = 1.05 if algo == 2 and self.seen[algo] == 2 else 1.0       # call 1 is its untimed GEMM
        return {1: 1.00e-3, 2: 0.99e-3, 3: 1.02e-3}[algo] * dip * 3


def test_a_candidate_is_ranked_by_its_best_round_in_alternating_order():
    w, lib = workload(CATALOG.get("gemm.bf16.fp32"), gemm_class=DippedGemm)
    assert w.gemm.algo == 1 and "candidate 1 of 3" in w.evidence["chosen"], w.evidence
    assert w.gemm.seen == {1: 1 + TRIAL_ROUNDS, 2: 1 + TRIAL_ROUNDS, 3: 1 + TRIAL_ROUNDS}
    first, second = (float(x) for x in w.evidence["rounds"][1].removeprefix("1: ").removesuffix(" ms").split(", ")[:2])
    assert first > second, "the dipped round is listed, and passed over"

class SlowGemm(HostGemm):
    """Each GEMM takes 25 ms of GPU time: longer than TRIAL_S."""
    def timed(self, calls):
        before = self.lib.calls.count("Matmul")
        calls()
        return 25e-3 * (self.lib.calls.count("Matmul") - before)


def test_a_candidate_is_timed_by_fewer_gemms_where_three_would_be_long():
    assert [trial_gemms(s) for s in (1.4e-3, 8e-3, 19e-3, 30e-3, 0.0)] == [3, 2, 1, 1, 3]
    w, lib = workload(CATALOG.get("gemm.fp64.fp64"), gemm_class=SlowGemm)
    assert "(fastest best round of 1, 1 GEMM each, in alternating order)" in w.evidence["chosen"]
    # 1 untimed and 1 timed each: one round of 25 ms GEMMs passes SEARCH_S
    assert lib.calls.count("Matmul") == 2 * len(w.evidence["algorithms"])


def test_rounds_fit_the_search_time():
    assert [trial_rounds(SEARCH_S * f) for f in (0.15, 0.3, 0.45, 0.6, 1.4)] == [TRIAL_ROUNDS, TRIAL_ROUNDS, 2, 1, 1]
    assert trial_rounds(0.0) == TRIAL_ROUNDS


class SetUpGemm(HostGemm):
    """A candidate's first GEMM takes 60 ms (its kernel's set-up), every later one 1 ms, as the
    untimed first GEMMs on the GPU carry their set-up."""
    def __init__(self, api, lib):
        super().__init__(api, lib)
        self.seen: set[int] = set()

    def timed(self, calls):
        before = self.lib.calls.count("Matmul")
        calls()
        algo, first = self.lib.last_algo, self.lib.last_algo not in self.seen
        self.seen.add(algo)
        return 60e-3 if first else 1e-3 * (self.lib.calls.count("Matmul") - before)


def test_the_rounds_fit_the_timed_round_not_the_set_up():
    w, lib = workload(CATALOG.get("gemm.bf16.fp32"), gemm_class=SetUpGemm)
    assert f"(fastest best round of {TRIAL_ROUNDS}, 1 GEMM each" in w.evidence["chosen"], w.evidence["chosen"]
    assert all(len(line.split(", ")) == TRIAL_ROUNDS for line in w.evidence["rounds"])


def test_no_algorithm_for_the_types_is_unsupported_api():
    lib = FakeLt(cuda_api(), CUDA_KINDS)
    lib.heuristic_status = cuda_api().not_supported
    with pytest.raises(Unsupported, match=r"^\[api\] cuBLASLt offers no algorithm for fp64"):
        workload(CATALOG.get("gemm.fp64.fp64"), lib)
    lib = FakeLt(cuda_api(), CUDA_KINDS, algorithms=0)
    with pytest.raises(Unsupported, match=r"^\[api\]"):
        workload(CATALOG.get("gemm.fp64.fp64"), lib)


@pytest.mark.parametrize("call", ["Create", "MatmulDescCreate", "MatmulDescSetAttribute", "MatrixLayoutCreate",
                                  "MatmulAlgoGetHeuristic", "Matmul"])
def test_a_failing_call_raises_naming_the_call_and_its_status(call):
    lib = FakeLt(cuda_api(), CUDA_KINDS)
    lib.fail[call] = 7
    with pytest.raises(lt.LtError, match=f"cublasLt{call} returned 7 \\(INVALID_VALUE\\)"):
        w, _ = workload(CATALOG.get("gemm.bf16.fp32"), lib)
        w.verify()


def test_a_missing_library_is_unsupported_toolchain_naming_what_was_tried():
    api = dataclasses.replace(cuda_api(), sonames=("libcublasLt.so.99",))
    with pytest.raises(Unsupported, match=r"^\[toolchain\] cuBLASLt is not installed .*libcublasLt.so.99"):
        lt.load(api)


def test_the_heuristic_result_size_matches_each_library_header():
    # cublasLtMatmulHeuristicResult_t: algo (uint64_t[8]), size_t, status, float, int[4]
    class Cuda(ctypes.Structure):
        _fields_ = [("algo", ctypes.c_uint64 * 8), ("ws", ctypes.c_size_t), ("state", ctypes.c_int),
                    ("waves", ctypes.c_float), ("reserved", ctypes.c_int * 4)]

    # hipblasLtMatmulHeuristicResult_t: algo (uint8_t[16], size_t), size_t, status, float, int[4]
    class Hip(ctypes.Structure):
        _fields_ = [("algo", ctypes.c_uint8 * 16), ("max_ws", ctypes.c_size_t), ("ws", ctypes.c_size_t),
                    ("state", ctypes.c_int), ("waves", ctypes.c_float), ("reserved", ctypes.c_int * 4)]

    from peakbench.rocm.gemm import API as HIP
    assert ctypes.sizeof(Cuda) == cuda_api().algo_bytes + 32
    assert ctypes.sizeof(Hip) == HIP.algo_bytes + 32
    assert Cuda.state.offset == cuda_api().algo_bytes + 8 and Hip.state.offset == HIP.algo_bytes + 8


def test_vulkan_reports_every_gemm_test_unsupported_api():
    from peakbench.vulkan import capabilities
    for test in TESTS:
        assert capabilities.TABLE.support(test, None).startswith("[api] Vulkan has no vendor GEMM library")

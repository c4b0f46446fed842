"""The vendor GEMM through the API that cuBLASLt and hipBLASLt share (hipBLASLt is a port of
cuBLASLt: the same calls under another prefix, with its own enum values and structure sizes),
called through ctypes: CuPy binds cuBLAS but not cuBLASLt, and hip-python binds neither library.

`Api` is one library's names and numbers (cuda/gemm.py, rocm/gemm.py); `Lt` makes its calls;
`LtGemm` is the GEMM object workloads/gemm.py drives, over a backend's memory and timer hooks.
The algorithm: the library's heuristic offers up to CANDIDATES for the shape; each is timed for
a few GEMMs in each of TRIAL_ROUNDS rounds, the rounds in alternating order, and the one whose
best round was fastest is kept (evidence["algorithms"] lists them all). One round in candidate
order missed the fastest burst on an H100 (fp16: 783 TFLOPS kept, 795 offered; PERFORMANCE_ANALYSIS.md,
"GEMM bursts by candidate"): a few GEMMs each, in one pass, rank candidates 1-2% apart by the
clock's and the power's moment as much as by the kernel.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from peakbench.backend import Unsupported
from peakbench.workloads.gemm import STORAGE, OperandFill

CANDIDATES = 8            # algorithms asked of the heuristic
TRIAL_GEMMS = 3           # GEMMs timed per candidate (after one untimed)...
TRIAL_S = 0.02            # ...fewer where those would pass this: an FP64 GEMM of 8192 took 19-23 ms (H100)
TRIAL_ROUNDS = 3          # rounds over the candidates, alternating order; each candidate's best round counts...
SEARCH_S = 0.12           # ...fewer where they would pass this: a round of FP64's 4 candidates took ~88 ms (H100)
WORKSPACE = 32 << 20      # bytes: NVIDIA recommends 32 MiB of workspace on Hopper (cuBLAS docs, cublasSetWorkspace)
SCALE_STRIDE = 16          # bytes between the A and B scale factors (each 16-byte aligned)
SCALE_CT = {"f32": ctypes.c_float, "f64": ctypes.c_double, "i32": ctypes.c_int32}


@dataclass(frozen=True)
class Api:
    """One BLASLt library: its name, C prefix, the shared objects to try, and its numbers."""
    name: str                    # "cuBLASLt"
    prefix: str                  # "cublasLt"
    sonames: tuple[str, ...]
    data: dict                   # peakbench type -> the library's data-type enum
    compute: dict                # operand type -> (compute-type enum, scale type "f32" | "f64" | "i32")
    scale_data: dict             # scale type -> data-type enum
    op_n: int
    op_t: int
    transa: int                  # matmul-descriptor attributes
    transb: int
    a_scale: int
    b_scale: int
    workspace_pref: int          # the preference attribute for the workspace limit
    algo_bytes: int              # sizeof(the library's MatmulAlgo_t)
    status: dict                 # status code -> name
    not_supported: int


class LtError(RuntimeError):
    pass


def load(api: Api, loader=ctypes.CDLL):
    """The library, or Unsupported([toolchain]) naming what was tried."""
    for name in api.sonames:
        try:
            return loader(name)
        except OSError:
            continue
    raise Unsupported(f"[toolchain] {api.name} is not installed or not on the library path"
                      f" (tried {', '.join(api.sonames)})")


class Lt:
    """The BLASLt calls, each checked: a failing call raises naming itself and its status;
    NOT_SUPPORTED from the heuristic (no kernel for these types here) is Unsupported([api])."""

    def __init__(self, api: Api, lib):
        self.api, self.lib = api, lib
        self._objects = []        # (destroy function, descriptor) in creation order
        self.handle = ctypes.c_void_p()
        self.call("Create", ctypes.byref(self.handle))

    def call(self, fn: str, *args) -> None:
        status = getattr(self.lib, self.api.prefix + fn)(*args)
        if status:
            name = self.api.status.get(status, "unknown status")
            raise LtError(f"{self.api.prefix}{fn} returned {status} ({name})")

    def _create(self, kind: str, *args) -> ctypes.c_void_p:
        out = ctypes.c_void_p()
        self.call(f"{kind}Create", ctypes.byref(out), *args)
        self._objects.append((f"{kind}Destroy", out))
        return out

    def _set(self, fn: str, obj, attr: int, value) -> None:
        self.call(fn, obj, ctypes.c_int(attr), ctypes.byref(value), ctypes.c_size_t(ctypes.sizeof(value)))

    def layout(self, kind: str, rows: int, cols: int) -> ctypes.c_void_p:
        """A column-major rows x cols matrix of `kind`, leading dimension rows."""
        return self._create("MatrixLayout", ctypes.c_int(self.api.data[kind]), ctypes.c_uint64(rows),
                            ctypes.c_uint64(cols), ctypes.c_int64(rows))

    def plan(self, types, m: int, n: int, k: int, scales: tuple[int, int] | None) -> "Plan":
        """The descriptors of D = op(A) op(B), TN, and the heuristic's algorithms for them."""
        api = self.api
        compute, scale = api.compute[types.operand]
        desc = self._create("MatmulDesc", ctypes.c_int(compute), ctypes.c_int(api.scale_data[scale]))
        self._set("MatmulDescSetAttribute", desc, api.transa, ctypes.c_int32(api.op_t))
        self._set("MatmulDescSetAttribute", desc, api.transb, ctypes.c_int32(api.op_n))
        if scales:        # FP8: the per-tensor scale factors (device floats of 1.0)
            self._set("MatmulDescSetAttribute", desc, api.a_scale, ctypes.c_void_p(scales[0]))
            self._set("MatmulDescSetAttribute", desc, api.b_scale, ctypes.c_void_p(scales[1]))
        a, b = self.layout(types.operand, k, m), self.layout(types.operand, k, n)
        d = self.layout(types.output, m, n)
        pref = self._create("MatmulPreference")
        self._set("MatmulPreferenceSetAttribute", pref, api.workspace_pref, ctypes.c_uint64(WORKSPACE))
        result = ctypes.c_uint8 * (api.algo_bytes + 32)    # HeuristicResult: algo, size_t, status, float, int[4]
        results, found = (result * CANDIDATES)(), ctypes.c_int(0)
        try:
            self.call("MatmulAlgoGetHeuristic", self.handle, desc, a, b, d, d, pref, ctypes.c_int(CANDIDATES),
                      results, ctypes.byref(found))
        except LtError as e:
            if f"returned {api.not_supported} " not in str(e):
                raise
            found.value = 0
        algos = [bytes(r) for r in results[:found.value] if _state(r, api) == 0]
        if not algos:
            raise Unsupported(f"[api] {api.name} offers no algorithm for {types.operand} x {types.operand}"
                              f" -> {types.output} ({types.accumulator} accumulate) on this GPU")
        return Plan(desc, a, b, d, algos, SCALE_CT[scale])

    def bind(self, plan: "Plan", algo: int, a: int, b: int, d: int, accumulate: bool, workspace: int,
             stream: int):
        """One GEMM, D = A x B (+ D when accumulating), as a call with its arguments made once."""
        alpha, beta = plan.scalar(1), plan.scalar(1 if accumulate else 0)
        chosen = (ctypes.c_uint8 * self.api.algo_bytes).from_buffer_copy(plan.algos[algo][:self.api.algo_bytes])
        args = (self.handle, plan.desc, ctypes.byref(alpha), ctypes.c_void_p(a), plan.a, ctypes.c_void_p(b), plan.b,
                ctypes.byref(beta), ctypes.c_void_p(d), plan.d, ctypes.c_void_p(d), plan.d, ctypes.byref(chosen),
                ctypes.c_void_p(workspace), ctypes.c_size_t(WORKSPACE), ctypes.c_void_p(stream))
        return lambda: self.call("Matmul", *args)

    def close(self) -> None:
        for fn, obj in reversed(self._objects):
            getattr(self.lib, self.api.prefix + fn)(obj)
        self._objects.clear()
        if self.handle:
            getattr(self.lib, self.api.prefix + "Destroy")(self.handle)
            self.handle = ctypes.c_void_p()


def _state(result, api: Api) -> int:
    """A HeuristicResult's status field (after the algo and the size_t workspace size)."""
    return int.from_bytes(bytes(result)[api.algo_bytes + 8:api.algo_bytes + 12], "little", signed=True)


@dataclass
class Plan:
    desc: ctypes.c_void_p
    a: ctypes.c_void_p
    b: ctypes.c_void_p
    d: ctypes.c_void_p
    algos: list                  # each candidate's HeuristicResult, as bytes
    scalar: type                 # the ctypes type of alpha and beta


def trial_rounds(round_s: float) -> int:
    """Rounds over the candidates, given the GPU seconds the first (timed) round took."""
    return max(1, min(TRIAL_ROUNDS, int(SEARCH_S / round_s))) if round_s > 0 else TRIAL_ROUNDS


def trial_gemms(first_s: float) -> int:
    """GEMMs to time a candidate by, given the seconds its untimed first one took."""
    return max(1, min(TRIAL_GEMMS, int(TRIAL_S / first_s))) if first_s > 0 else TRIAL_GEMMS


class LtGemm:
    """The GEMM object of workloads/gemm.py over one BLASLt library, on a runtime `rt` whose
    buffers (alloc, upload, free) the library addresses and whose kernels make the operands
    (fill). A backend supplies the hooks: pointer(buffer) -> int, zero(buffer), timed(calls) ->
    GPU seconds of calls() on `stream`, read(buffer, indices, dtype); and form(operand) where the
    library reads an operand's words otherwise. (The tests' host GEMM has no runtime and
    replaces the buffer methods and fill.)"""
    stream = 0

    def __init__(self, api: Api, lib, rt=None):
        self.api, self.lib, self.lt, self.buffers, self.rt = api, lib, None, {}, rt
        self.algo = 0
        self._fill = OperandFill(rt) if rt is not None else None

    def prepare(self, types, m: int, n: int, k: int, a, b) -> dict:
        """`a`, `b`: the operands (workloads/gemm.py Operand), made in device buffers by fill()."""
        self.types, self.m = types, m
        self.lt = Lt(self.api, self.lib)
        out_bytes = np.dtype(STORAGE[types.output]).itemsize * m * n
        for name, nbytes in (("a", a.nbytes), ("b", b.nbytes), ("d", out_bytes), ("workspace", WORKSPACE)):
            self.buffers[name] = self.alloc(nbytes)
        self.fill(self.buffers["a"], a)
        self.fill(self.buffers["b"], b)
        scales = None
        if types.operand.startswith("fp8"):
            self.buffers["scales"] = self.alloc(SCALE_STRIDE * 2)
            self.upload(self.buffers["scales"], np.ones(SCALE_STRIDE // 2, np.float32))
            base = self.pointer(self.buffers["scales"])
            scales = (base, base + SCALE_STRIDE)
        self.plan = self.lt.plan(types, m, n, k, scales)
        candidates = range(len(self.plan.algos))
        counts = []
        for i in candidates:          # one untimed GEMM each: its set-up, and the count its time allows
            self.algo = i
            counts.append(trial_gemms(self.run(1)))
        rounds: list[list[float]] = [[] for _ in candidates]

        def timed_round(order) -> None:
            for i in order:
                self.algo = i
                rounds[i].append(self.run(counts[i]) / counts[i])
        timed_round(candidates)
        # the rounds after the first fit what it took (the untimed GEMMs' times carry their set-up)
        passes = trial_rounds(sum(each[0] * count for each, count in zip(rounds, counts)))
        for r in range(1, passes):
            timed_round(reversed(candidates) if r % 2 else candidates)
        times = [min(t) for t in rounds]
        self.algo = min(candidates, key=times.__getitem__)
        each = "-".join(map(str, sorted(set(counts))))
        return {"library": self.version(), "algorithm": self.describe(self.algo),
                "algorithms": [f"{i}: {self.describe(i)}: {t * 1e3:.3f} ms" for i, t in enumerate(times)],
                "rounds": [f"{i}: " + ", ".join(f"{t * 1e3:.3f}" for t in ts) + " ms" for i, ts in enumerate(rounds)],
                "chosen": f"candidate {self.algo} of {len(times)} the heuristic offered (fastest best round of"
                          f" {passes}, {each} GEMM{'' if each == '1' else 's'} each, in alternating order)",
                "workspace_bytes": WORKSPACE}

    def run(self, count: int, accumulate: bool = False) -> float:
        ptr = {name: self.pointer(buf) for name, buf in self.buffers.items()}
        gemm = self.lt.bind(self.plan, self.algo, ptr["a"], ptr["b"], ptr["d"], accumulate, ptr["workspace"],
                            self.stream)

        def calls():
            for _ in range(count):
                gemm()
        return self.timed(calls)

    def clear(self) -> None:
        self.zero(self.buffers["d"])

    def output(self, rows, cols) -> np.ndarray:
        """D[rows[i], cols[i]] (column-major: element rows[i] + cols[i] * M)."""
        index = np.asarray(rows, np.int64) + np.asarray(cols, np.int64) * self.m
        return self.read(self.buffers["d"], index, STORAGE[self.types.output])

    def alloc(self, nbytes: int):
        return self.rt.alloc(nbytes)

    def upload(self, buf, values: np.ndarray) -> None:
        self.rt.upload(buf, np.ascontiguousarray(values))

    def free(self, buf) -> None:
        self.rt.free(buf)

    def form(self, operand):
        """The operand's words as the library reads them (the host's encoding unless a backend differs)."""
        return operand.form()

    def fill(self, buf, operand) -> None:
        """The operand made in `buf` by the runtime's fill kernel, in the library's encoding."""
        self._fill(buf, operand, self.form(operand))

    def version(self) -> str:
        return self.api.name

    def describe(self, i: int) -> str:
        return f"heuristic candidate {i}"

    def close(self) -> None:
        try:
            if self.lt:
                self.lt.close()
        finally:
            self.lt = None
            for buf in self.buffers.values():
                self.free(buf)
            self.buffers.clear()
            if self._fill is not None:
                self._fill.close()

"""A BLASLt library (cuBLASLt or hipBLASLt) at its C boundary, for peakbench.kernels.gemm: each
function takes the ctypes arguments the real one would, records the call, and Matmul computes
D = alpha op(A) op(B) + beta C with numpy on host memory addressed by the pointers it is given.
`HostGemm` is an LtGemm whose buffers are numpy arrays (their addresses are the pointers), its
operands made by `fill_words`, a model of shaders/gemm_fill.cu written apart from the workload's
own host rows; `gemm_fill_player` plays that kernel on the fake HIP runtime."""
from __future__ import annotations

import ctypes

import numpy as np

from peakbench.kernels import gemm as lt
from peakbench.workloads import gemm as shared


def _value(arg):
    """The value behind a ctypes argument or a byref() of one."""
    obj = getattr(arg, "_obj", arg)
    return obj.value if hasattr(obj, "value") else obj


class FakeLt:
    def __init__(self, api: lt.Api, kinds: dict, algorithms: int = 3, memory: dict | None = None):
        self.api, self.kinds = api, kinds          # kinds: the library's data-type enum -> peakbench type
        self.algorithms, self.memory = algorithms, memory if memory is not None else {}
        self.calls, self.objects, self.fail, self.heuristic_status = [], {}, {}, 0
        self.corrupt = None          # (row, col): D there is off by one after every Matmul
        self.once = False            # Matmul does its work only the first time after D was zeroed
        self._serial = 0x100
        for fn in ("Create", "Destroy", "MatmulDescCreate", "MatmulDescDestroy", "MatmulDescSetAttribute",
                   "MatrixLayoutCreate", "MatrixLayoutDestroy", "MatmulPreferenceCreate",
                   "MatmulPreferenceDestroy", "MatmulPreferenceSetAttribute", "MatmulAlgoGetHeuristic", "Matmul"):
            setattr(self, api.prefix + fn, self._wrap(fn, getattr(self, "_" + fn)))

    def _wrap(self, name, fn):
        def call(*args):
            self.calls.append(name)
            if name in self.fail:
                return self.fail[name]
            return fn(*args) or 0
        return call

    def names(self) -> list[str]:
        return list(self.calls)

    def _new(self, out, **info):
        self._serial += 1
        getattr(out, "_obj").value = self._serial
        self.objects[self._serial] = info

    def _Create(self, out):
        self._new(out, kind="handle")

    def _Destroy(self, handle):
        self.objects.pop(_value(handle))

    def _MatmulDescCreate(self, out, compute, scale):
        self._new(out, kind="desc", compute=_value(compute), scale=_value(scale), attrs={})

    def _MatmulDescSetAttribute(self, desc, attr, buf, size):
        assert _value(size) == ctypes.sizeof(buf._obj)
        self.objects[_value(desc)]["attrs"][_value(attr)] = _value(buf)

    def _MatrixLayoutCreate(self, out, kind, rows, cols, ld):
        self._new(out, kind="layout", type=_value(kind), rows=_value(rows), cols=_value(cols), ld=_value(ld))

    def _MatmulPreferenceCreate(self, out):
        self._new(out, kind="pref", attrs={})

    def _MatmulPreferenceSetAttribute(self, pref, attr, buf, size):
        self.objects[_value(pref)]["attrs"][_value(attr)] = _value(buf)

    def _destroy(self, obj):
        self.objects.pop(_value(obj))

    _MatmulDescDestroy = _MatrixLayoutDestroy = _MatmulPreferenceDestroy = _destroy

    def _MatmulAlgoGetHeuristic(self, handle, desc, a, b, c, d, pref, requested, results, found):
        if self.heuristic_status:
            return self.heuristic_status
        n = min(self.algorithms, _value(requested))
        for i in range(n):
            raw = bytearray(ctypes.sizeof(results[i]))
            raw[0] = i + 1                        # the algorithm's identity in its first byte
            results[i][:] = list(raw)
        getattr(found, "_obj").value = n
        return 0

    def _Matmul(self, handle, desc, alpha, a, adesc, b, bdesc, beta, c, cdesc, d, ddesc, algo, ws, ws_size, stream):
        info = self.objects[_value(desc)]
        la, lb, ld = (self.objects[_value(x)] for x in (adesc, bdesc, ddesc))
        assert _value(c) == _value(d) and _value(cdesc) == _value(ddesc)
        assert info["attrs"][self.api.transa] == self.api.op_t and info["attrs"][self.api.transb] == self.api.op_n
        kind, out = self.kinds[la["type"]], self.kinds[ld["type"]]
        k, m = la["rows"], la["cols"]
        n = lb["cols"]
        self.last_algo = bytes(algo._obj)[0]
        dview = self._array(_value(d), out, m * n)
        if self.once and not getattr(self, "_zeroed", True):
            return 0
        self._zeroed = False
        a_val = decode(kind, self._array(_value(a), kind, m * k)).reshape(m, k)
        b_val = decode(kind, self._array(_value(b), kind, n * k)).reshape(n, k)
        result = _value(alpha) * (a_val @ b_val.T) + _value(beta) * shared.decode(out, dview).reshape(n, m).T
        if self.corrupt:
            result[self.corrupt] += 1
        dview[:] = encode(out, result.T.reshape(-1))
        return 0

    def _array(self, address: int, kind: str, count: int) -> np.ndarray:
        base = max(a for a in self.memory if a <= address)
        raw = np.frombuffer(self.memory[base], np.uint8)       # numpy arrays and fake_hip's bytearrays
        return raw[address - base:].view(shared.STORAGE[kind.removesuffix("_fnuz")])[:count]

    def zeroed(self):
        self._zeroed = True


def fill_words(words: int, offset: int, keep: tuple, set_: tuple, add: tuple) -> np.ndarray:
    """What gemm_fill.cu writes: word w = ((lowbias32(offset + w) & keep) | set) + add, the pair
    picked by w's parity; in uint64 arithmetic, reduced mod 2**32 at each step as the kernel's
    32-bit one is."""
    m = np.uint64(0xFFFFFFFF)
    w = np.arange(words, dtype=np.uint64)
    x = (w + np.uint64(offset)) & m
    x ^= x >> np.uint64(16)
    x = (x * np.uint64(0x7FEB352D)) & m
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(0x846CA68B)) & m
    x ^= x >> np.uint64(16)
    odd = (w & np.uint64(1)).astype(bool)
    pick = lambda pair: np.where(odd, np.uint64(pair[1]), np.uint64(pair[0]))
    return ((((x & pick(keep)) | pick(set_)) + pick(add)) & m).astype(np.uint32)


def gemm_fill_player(fake, launch):
    """shaders/gemm_fill.cu on the fake HIP runtime's memory."""
    dst, words, offset, keep0, set0, add0, keep1, set1, add1 = (
        a if i == 0 else a.value for i, a in enumerate(launch["extra"]))
    raw = fill_words(words, offset, (keep0, keep1), (set0, set1), (add0, add1))
    np.frombuffer(fake.buffer(dst), np.uint32)[:words] = raw


def decode(kind: str, raw: np.ndarray) -> np.ndarray:
    """As workloads.gemm.decode, and FNUZ E4M3 (bias 8) for the normal values the workload makes."""
    if kind == "fp8_e4m3_fnuz":
        return shared.E4M3[raw - np.uint8(0x08)]
    return shared.decode(kind, raw)


def encode(kind: str, values: np.ndarray) -> np.ndarray:
    """float64 values in `kind`'s storage (bf16 rounded to nearest even)."""
    if kind == "bf16":
        bits = values.astype(np.float32).view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return values.astype(shared.STORAGE[kind])


class HostGemm(lt.LtGemm):
    """An LtGemm on host memory: every GEMM 'takes' `seconds`."""
    seconds = 1e-3

    def __init__(self, api, lib: FakeLt):
        super().__init__(api, lib)
        self.timed_counts = []

    def alloc(self, nbytes):
        buf = np.zeros(nbytes, np.uint8)
        self.lib.memory[buf.ctypes.data] = buf
        return buf

    def pointer(self, buf):
        return buf.ctypes.data

    def upload(self, buf, values):
        raw = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
        buf[:raw.size] = raw

    def fill(self, buf, operand):
        form = self.form(operand)
        buf.view(np.uint32)[:operand.words] = fill_words(operand.words, operand.offset, form.keep, form.set, form.add)

    def zero(self, buf):
        buf[:] = 0
        self.lib.zeroed()

    def timed(self, calls):
        before = self.lib.calls.count("Matmul")
        calls()
        count = self.lib.calls.count("Matmul") - before
        self.timed_counts.append(count)
        return count * self.seconds

    def read(self, buf, index, dtype):
        return buf.view(dtype)[index]

    def free(self, buf):
        self.lib.memory.pop(buf.ctypes.data, None)

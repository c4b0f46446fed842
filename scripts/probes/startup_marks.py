"""Run peakbench's CLI with marks on stderr, `TL <seconds since the process started> <label>`, at
the imports, the backend's opening, compile-ahead, the first test, the end of the tests, the
device's closing, the outputs and atexit: where a run's seconds outside its tests
go. `python3 scripts/probes/startup_marks.py --backend cuda --quick` (PERFORMANCE_ANALYSIS.md,
"Start-up, sixth round")."""
import os, sys, time, functools, atexit
def since_exec():
    tck = os.sysconf("SC_CLK_TCK")
    start = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]) / tck
    return float(open("/proc/uptime").read().split()[0]) - start
T0 = time.perf_counter() - since_exec()
def mark(label):
    print(f"TL {time.perf_counter() - T0:7.3f} {label}", file=sys.stderr, flush=True)
mark("python up")
atexit.register(lambda: mark("atexit"))
def wrap(owner, name, label):
    f = getattr(owner, name)
    @functools.wraps(f)
    def w(*a, **k):
        mark(f"{label} >")
        try:
            return f(*a, **k)
        finally:
            mark(f"{label} <")
    setattr(owner, name, w)
import numpy; mark("numpy imported")
if "cuda" in sys.argv:
    import cupy; mark("cupy imported")
from peakbench import cli; mark("cli imported")
from peakbench.harness import ahead, session
from peakbench import telemetry
wrap(cli, "open_backends", "open_backends")
wrap(telemetry, "health", "health")
wrap(ahead, "start", "compile-ahead started")
wrap(ahead.Pending, "finish", "compile-ahead drained")
wrap(session.Session, "write_outputs", "write_outputs")
wrap(session.Session, "measure", "measure")
wrap(telemetry.Sampler, "close", "telemetry closed")
from peakbench.workloads import Device
wrap(Device, "close", "device close")
orig = session.run_test
first = [True]
def run_test(*a, **k):
    if first[0]:
        mark("first test"); first[0] = False
    return orig(*a, **k)
session.run_test = run_test
if "cuda" in sys.argv:
    from peakbench.cuda import backend as cb
    wrap(cb.CudaBackend, "__init__", "CudaBackend.__init__")
    wrap(cb.CudaBackend, "open", "CudaBackend.open")
rc = cli.main(sys.argv[1:])
mark("main returned")
# the atexit mark is the last one: the interpreter's own teardown (modules, CuPy's pools, the
# driver's context) follows it, so the caller's wall time less that mark is the teardown
sys.exit(rc)

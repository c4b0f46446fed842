"""`peakbench ray [--address ADDR] [--timeout S] [run options]`: every GPU of a Ray cluster, then the fleet report.

One Ray task per GPU of every alive node (num_gpus=1, pinned to its node), each running
`peakbench --device 0 --json -` in a process of its own: Ray sets CUDA_VISIBLE_DEVICES (and
ROCR_VISIBLE_DEVICES) to the task's GPU, which the CUDA and ROCm backends honour and Vulkan follows
by UUID (peakbench.harness.visible), so device 0 is the task's GPU for every backend. Every record
is gathered and judged as `peakbench fleet` judges files. A task that fails, or runs past
--timeout, is that GPU's `failed` verdict and never stops the others.

Exit status: as `peakbench fleet`: 0 no GPU flagged, 1 a GPU flagged or failed, 2 bad input or no
cluster (Ray not installed, no address to reach, no GPU in the cluster).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from peakbench import selection
from peakbench.interrupts import signal_of
from peakbench.report import fleet
from peakbench.report.result import ResultFileError, check_writable, dumps, refuse_inputs
from peakbench.specs import SpecError, resolve

EXIT_USAGE = 2
GRACE_S = 30          # past the task's own timeout, before the driver gives up on it
STOP_S = 15           # a hung run's time to write what it has after SIGTERM, before SIGKILL
REACH_S = 5.0         # how long the cluster's address may take to accept a connection


class RayError(Exception):
    """The cluster cannot be used: the message says why."""


def build_parser() -> fleet.Parser:
    p = fleet.Parser(prog="peakbench ray", description="one task per GPU on every node of a Ray cluster, "
                     "then the fleet report: exit 0 none flagged, 1 some flagged or failed, 2 bad input")
    p.add_argument("--address", help="the cluster (ray.init's address; default: RAY_ADDRESS, else a local one)")
    p.add_argument("--timeout", type=fleet._positive, default=600.0, metavar="S",
                   help="seconds a GPU's run may take before it is reported hung (default 600)")
    p.add_argument("--results", metavar="DIR", help="also write each GPU's record to DIR/<host>-gpu<N>.json")
    p.add_argument("--json", metavar="F", help="write the fleet report (schema peakbench.fleet/1); - for stdout")
    for option in ("--floor", "--baseline"):
        p.add_argument(option, metavar="FILE", help=f"as peakbench fleet {option}")
    p.add_argument("--backend", help="as peakbench --backend (default: all)")
    p.add_argument("--tests", help="as peakbench --tests")
    p.add_argument("--spec", help="as peakbench --spec (a file must exist on every node)")
    p.add_argument("--quick", action="store_true", help="as peakbench --quick")
    return p


def run_options(args) -> list[str]:
    options = []
    for name in ("backend", "tests", "spec"):
        if getattr(args, name) is not None:
            options += [f"--{name}", getattr(args, name)]
    return options + (["--quick"] if args.quick else [])


def measure_gpu(options: list[str], timeout: float) -> dict:
    """In a Ray task holding one GPU: peakbench on it. {"doc", "host", "gpu", "code", "error"}."""
    import ray
    gpu = ",".join(str(g) for g in ray.get_gpu_ids())
    out = {"host": socket.gethostname(), "node": ray.get_runtime_context().get_node_id(), "gpu": gpu,
           "doc": None, "code": None, "error": None}
    command = [sys.executable, "-m", "peakbench", *options, "--device", "0", "--json", "-"]
    try:
        p = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL)
    except OSError as e:
        out["error"] = f"cannot start peakbench: {e}"
        return out
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # SIGTERM first, so the run writes what it has (interrupted) and removes its temporary
        # folders; SIGKILL only if it does not end.
        out["error"] = f"hung: still running after the {timeout:g} s timeout"
        p.terminate()
        try:
            stdout, stderr = p.communicate(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            p.kill()
            stdout, stderr = p.communicate()
    out["code"] = p.returncode
    try:
        out["doc"] = json.loads(stdout)
    except ValueError:
        if out["error"] is None:
            last = (stderr.strip().splitlines() or ["no message"])[-1]
            out["error"] = f"peakbench exited with status {p.returncode}: {last}"
    return out


def gpu_nodes(ray) -> list[tuple[str, int]]:
    """(node id, GPU count) of every alive node with GPUs."""
    return [(n["NodeID"], int(n["Resources"].get("GPU", 0))) for n in ray.nodes()
            if n.get("Alive") and int(n.get("Resources", {}).get("GPU", 0)) > 0]


def run_cluster(args, progress) -> list[dict]:
    """Every GPU's task's outcome (see measure_gpu), one per GPU, in node order."""
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError:
        raise RayError("Python package 'ray' is not installed (pip install 'peakbench[ray]')") from None
    address = cluster_address(args.address)
    if address is not None:
        check_reachable(address)
    try:
        with kept_signals():      # ray.init sets a SIGTERM handler of its own: ours stay in force
            ray.init(address=args.address, logging_level="ERROR", log_to_driver=False)
    except Exception as e:
        raise RayError(f"cannot reach the Ray cluster{f' at {address}' if address else ''}: "
                       f"{fleet_line(e)}") from None
    try:
        nodes = gpu_nodes(ray)
        if not nodes:
            raise RayError("the Ray cluster has no node with a GPU resource")
        task = ray.remote(num_gpus=1, max_retries=0)(measure_gpu)
        pending = {}
        for node, count in nodes:
            strategy = NodeAffinitySchedulingStrategy(node, soft=False)
            for n in range(count):
                ref = task.options(scheduling_strategy=strategy).remote(run_options(args), args.timeout)
                pending[ref] = {"node": node, "slot": n}
        progress(f"peakbench ray: {len(pending)} GPUs on {len(nodes)} nodes")
        outcomes = {ref: None for ref in pending}
        deadline = time.monotonic() + args.timeout + GRACE_S
        waiting = list(pending)
        while waiting and time.monotonic() < deadline:
            # Short waits: Python's signal handlers run only between them.
            ready, waiting = ray.wait(waiting, num_returns=1, timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            for ref in ready:
                try:
                    outcomes[ref] = ray.get(ref)
                except Exception as e:       # the task, its worker or its node died
                    outcomes[ref] = {**pending[ref], "doc": None, "error": f"task failed: {fleet_line(e)}"}
                progress(f"peakbench ray: {len(pending) - len(waiting)}/{len(pending)} done")
        for ref in waiting:                 # never scheduled or never answered
            ray.cancel(ref, force=True)
            outcomes[ref] = {**pending[ref], "doc": None,
                             "error": f"hung: no answer {args.timeout + GRACE_S:g} s after it was submitted"}
        return [outcomes[ref] | {"node": outcomes[ref].get("node") or pending[ref]["node"]} for ref in pending]
    finally:
        ray.shutdown()


def cluster_address(option: str | None) -> str | None:
    """The HOST:PORT that ray.init will connect to, found as Ray finds it (--address, else
    RAY_ADDRESS, else the cluster last started on this machine), or None where it will start a
    local one. RayError for an address that is not HOST:PORT, or 'auto' with no cluster to find."""
    given = option if option is not None else os.environ.get("RAY_ADDRESS") or None
    source = "--address" if option is not None else "RAY_ADDRESS"
    if given is not None and given.startswith("ray://"):
        given = given.removeprefix("ray://")
    elif given is None or given in ("auto", "local"):
        if given == "local":
            return None
        try:
            from ray._private import services
            found = services.get_ray_address_from_environment(given, None)
        except Exception as e:           # "auto" with no running cluster, say
            if given is None:
                return None
            raise RayError(f"no Ray cluster to connect to ({source} 'auto'): {fleet_line(e)}") from None
        if found in (None, "local", "auto"):
            return None
        given, source = found, "the address of the cluster last started here"
    host, _, port = given.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or any(c.isspace() for c in given):
        raise RayError(f"{source} {given!r}: not a cluster address (HOST:PORT expected)")
    return given


@contextlib.contextmanager
def kept_signals():
    """The SIGINT and SIGTERM handlers as they were before, once the block is left."""
    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        yield
    finally:
        for s, h in previous.items():
            if h is not None:
                signal.signal(s, h)


# The HTTP/2 connection preface and an empty SETTINGS frame: a gRPC server (Ray's GCS and its
# client server both are) answers with a SETTINGS frame of its own at once.
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
SETTINGS = 4


def check_reachable(address: str, timeout: float = REACH_S) -> None:
    """An address that accepts no connection, or accepts one and does not answer as a gRPC server,
    fails now and in seconds: Ray's own connect retries for most of a minute in native code, where
    no Python signal handler (SIGTERM's included) can run."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as conn:
            conn.sendall(PREFACE)
            header = b""
            while len(header) < 9:
                chunk = conn.recv(9 - len(header))
                if not chunk:
                    break
                header += chunk
    except socket.timeout:
        raise RayError(f"cannot reach the Ray cluster at {address}: no answer within {timeout:g} s "
                       "(something listens there, but not Ray)") from None
    except OSError as e:
        raise RayError(f"cannot reach the Ray cluster at {address}: {e.strerror or e}") from None
    if len(header) < 9 or header[3] != SETTINGS:
        raise RayError(f"cannot reach the Ray cluster at {address}: what answers there is not Ray "
                       "(no gRPC server)")


def check_run_options(args) -> None:
    """Every option the tasks will pass on, checked here first: a bad one is one usage line, not
    a failed GPU on every node."""
    if args.backend is not None:
        selection.parse_backends(args.backend)
    selection.select_tests(args.tests)
    selection.check_shaders()
    if args.spec is not None:
        if not args.spec.strip():
            raise selection.UsageError("--spec needs a name or a file")
        resolve(args.spec)


def fleet_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def label(outcome: dict, shared: set) -> str:
    """The host name the report gives a GPU: the node's, with its Ray node id where several nodes
    share one host name (a test cluster on one machine)."""
    host = outcome.get("host") or "?"
    return f"{host}:{outcome['node'][:8]}" if host in shared else host


def gather(outcomes: list[dict], results: str | None) -> tuple[list, list[fleet.Gpu]]:
    """(file name, document) pairs of the records, and a failed Gpu for each task that brought none."""
    hosts = {}
    for o in outcomes:
        hosts.setdefault(o.get("host") or "?", set()).add(o["node"])
    shared = {h for h, nodes in hosts.items() if len(nodes) > 1}
    docs, failed = [], []
    for o in outcomes:
        host, gpu = label(o, shared), o.get("gpu") or o.get("slot", "?")
        name = f"{host}-gpu{gpu}".replace("/", "_").replace(":", "_")
        if o.get("doc") and isinstance(o["doc"].get("runs"), list) and not o.get("error"):
            doc = o["doc"]
            doc.setdefault("host", {})["hostname"] = host
            doc["host"]["ray_node"] = o["node"]
            source = f"{name}.json"
            if results:
                source = str(Path(results) / source)
                Path(source).write_text(dumps(doc) + "\n")
            docs.append((source, doc))
        else:
            why = o.get("error") or "no record"
            if o.get("doc") and isinstance(o["doc"].get("runs"), list):   # what a hung run wrote when stopped
                kept = sum(len(r.get("results", [])) for r in o["doc"]["runs"] if isinstance(r, dict))
                why += f" (stopped, its record holds {kept} result{'s' if kept != 1 else ''})"
            g = fleet.Gpu(host, "", None, None, "?", "?", f"ray task on GPU {gpu}", "", {}, failed=True)
            g.flagged.append({"test": "-", "value": None, "median": None, "ratio": None, "reason": f"GPU {gpu}: {why}"})
            failed.append(g)
    return docs, failed


def main(argv: list[str]) -> int:
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as e:           # --help
            return e.code if isinstance(e.code, int) else 0
        check_run_options(args)
        if args.json is not None and not args.json.strip():
            raise RayError("--json needs a file name")
        out = check_writable(args.json) if args.json is not None else None
        if out is not None:
            refuse_inputs({"--json": out}, {**({"the --floor file": args.floor} if args.floor else {}),
                                            **({"the --baseline report": args.baseline} if args.baseline else {})})
        floors = fleet.load_floors(args.floor) if args.floor else fleet.Floors()
        baseline = fleet.load_baseline(args.baseline) if args.baseline else {}
        if args.results:
            if not Path(args.results).is_dir():
                raise RayError(f"--results {args.results}: not a folder")
            if not os.access(args.results, os.W_OK):
                raise RayError(f"--results {args.results}: cannot write there")
        progress = lambda text: print(text, file=sys.stderr, flush=True)
        docs, failed = gather(run_cluster(args, progress), args.results)
        gpus, notes = fleet.gpus_of(docs) if docs else ([], [])
        report = fleet.judge(gpus + failed, floors, baseline, notes=notes)
        tables = sys.stderr if out is not None and out.fd == 1 else sys.stdout
        print(fleet.render(report), file=tables, flush=True)
        if out is not None:
            out.write(dumps(fleet.to_json(report)) + "\n")
        return report.exit_code
    except (RayError, fleet.FleetError, ResultFileError, selection.UsageError, SpecError) as e:
        print(f"peakbench ray: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as e:        # SIGINT or SIGTERM while the tasks ran
        signum = signal_of(e)
        print(f"peakbench ray: interrupted ({signal.Signals(signum).name})", file=sys.stderr)
        return 128 + signum
    except Exception as e:                # a bug: one line, not a traceback
        print(f"peakbench ray: error: {fleet_line(e)}", file=sys.stderr)
        return EXIT_USAGE

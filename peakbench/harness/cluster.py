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
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from peakbench.report import fleet
from peakbench.report.result import ResultFileError, check_writable

EXIT_USAGE = 2
GRACE_S = 30          # past the task's own timeout, before the driver gives up on it


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
        p = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        out["error"] = f"hung: still running after the {timeout:g} s timeout"
        return out
    except OSError as e:
        out["error"] = f"cannot start peakbench: {e}"
        return out
    out["code"] = p.returncode
    try:
        out["doc"] = json.loads(p.stdout)
    except ValueError:
        last = (p.stderr.strip().splitlines() or ["no message"])[-1]
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
    check_reachable(args.address)
    try:
        ray.init(address=args.address, logging_level="ERROR", log_to_driver=False)
    except Exception as e:
        raise RayError(f"cannot reach the Ray cluster{f' at {args.address}' if args.address else ''}: "
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
            ready, waiting = ray.wait(waiting, num_returns=1, timeout=max(0.1, deadline - time.monotonic()))
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


def check_reachable(address: str | None, timeout: float = 5.0) -> None:
    """A HOST:PORT that accepts no connection fails now, not after Ray's minute of retries."""
    host, _, port = (address or "").rpartition(":")
    if not host or not port.isdigit() or "://" in address:
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise RayError(f"cannot reach the Ray cluster at {address}: {e.strerror or e}") from None


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
        if o.get("doc") and isinstance(o["doc"].get("runs"), list):
            doc = o["doc"]
            doc.setdefault("host", {})["hostname"] = host
            doc["host"]["ray_node"] = o["node"]
            source = f"{name}.json"
            if results:
                source = str(Path(results) / source)
                Path(source).write_text(json.dumps(doc, indent=2) + "\n")
            docs.append((source, doc))
        else:
            why = o.get("error") or "no record"
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
        out = check_writable(args.json) if args.json is not None else None
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
            out.write(json.dumps(fleet.to_json(report), indent=2) + "\n")
        return report.exit_code
    except (RayError, fleet.FleetError, ResultFileError) as e:
        print(f"peakbench ray: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:                # a bug: one line, not a traceback
        print(f"peakbench ray: error: {fleet_line(e)}", file=sys.stderr)
        return EXIT_USAGE

"""`--device all`: every GPU of the node measured at the same time, one process per GPU.

The planned (backend, device) pairs are grouped by GPU (its UUID; a device without one is a GPU of
its own), and each group runs in a process of its own, `peakbench --backend B --device N --json
FILE` once per backend of that GPU, one after another, while the other GPUs' groups run alongside:
GPUs of one node share power and cooling, and the slowest sets a job's pace, so they are measured
loaded together. Each process writes its own record; they are merged into one document, a run per
device, in the order planned. A process that ends without a record fails its device's tests with
its exit status and last line; SIGINT or SIGTERM is passed on to every process, and what they
measured is kept.

A test of the node rather than of one GPU (NODE_TESTS: transfer.p2p copies between every pair) is
left out of those processes and measured once per backend after they have all ended, from that
backend's first device, in a process of its own: run from every GPU at once, each process would
copy over the same links at the same time, and the pairs' rates would be each other's load.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import fields
from types import SimpleNamespace
from pathlib import Path

import peakbench
from peakbench.report.result import Result, Run

RESULT_FIELDS = {f.name for f in fields(Result)}
NODE_TESTS = ("transfer.p2p",)


def with_tests(options: list[str], names: list[str]) -> list[str]:
    """The child options with `--tests` naming exactly `names`."""
    out, skip = [], False
    for option in options:
        if skip:
            skip = False
        elif option == "--tests":
            skip = True
        else:
            out.append(option)
    return ["--tests", ",".join(names), *out]


def gpu_groups(plans: list) -> list[list]:
    """The (backend, index) plans grouped by GPU, in the order first planned."""
    groups: dict = {}
    for backend, index in plans:
        info = backend.devices()[index]
        uuid = info.uuid.lower().strip()
        key = uuid if uuid.strip("0-") else (backend.name, index)
        groups.setdefault(key, []).append((backend, index))
    return list(groups.values())


def child_command(backend: str, index: int, json_path: str, options: list[str]) -> list[str]:
    return [sys.executable, "-m", "peakbench", *options, "--backend", backend, "--device", str(index),
            "--json", json_path]


def _env() -> dict:
    """The environment of a child: ours, with this peakbench importable (a checkout need not be installed)."""
    root = str(Path(peakbench.__file__).resolve().parents[1])
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def run_from_json(run: dict) -> Run:
    results = [Result(**{k: v for k, v in r.items() if k in RESULT_FIELDS}) for r in run["results"]]
    return Run(run["backend"], run["device"], run.get("spec"), results)


class Child:
    """One backend on one GPU in a process of its own; its stderr goes to ours, line by line."""

    def __init__(self, backend, index: int, options: list[str], folder: str, progress):
        self.backend, self.index, self.progress = backend, index, progress
        self.json = os.path.join(folder, f"{backend.name}-{index}.json")
        self.last_line = ""
        self.proc = subprocess.Popen(child_command(backend.name, index, self.json, options), env=_env(),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        self._reader = threading.Thread(target=self._relay, daemon=True)
        self._reader.start()

    def _relay(self) -> None:
        prefix = f"[{self.backend.name}:{self.index}]"
        for line in self.proc.stderr:
            line = line.rstrip("\n")
            if line.strip():
                self.last_line = line.strip()
                self.progress(line if line.startswith("[") else f"{prefix} {line}")

    def wait(self) -> int:
        code = self.proc.wait()
        self._reader.join()
        return code

    def runs(self, tests, code: int, fill: bool = True) -> list[Run]:
        """What the process recorded; with `fill`, each selected test it has no result for (it
        recorded nothing, or was killed part-way) failed with the process's end as the reason.
        A run we interrupted ourselves keeps only what finished."""
        status = f"signal {-code}" if code < 0 else f"status {code}"
        reason = f"the process measuring this device ended with {status}: {self.last_line or 'no message'}"
        try:
            runs = [run_from_json(r) for r in json.loads(Path(self.json).read_text())["runs"]]
        except (OSError, ValueError, KeyError, TypeError):
            runs = []
        if not runs:
            info = self.backend.devices()[self.index]
            runs = [Run(self.backend.name, info.as_json(), None)]
        for run in runs if fill else []:
            measured = {r.test for r in run.results}
            run.results += [Result(t.name, "failed", t.unit, reason=reason) for t in tests if t.name not in measured]
        return [run for run in runs if run.results]


def measure_all(session, plans: list, tests, options: list[str], alone_first: bool = False) -> None:
    """Every GPU's group in parallel (see the module), the runs into `session`, saving as each ends;
    then the node tests. `alone_first`: each GPU's group alone before, one after another, and each
    result of the run together gets its alone value (with_alone)."""
    node = [t for t in tests if t.name in NODE_TESTS]
    per_gpu = [t for t in tests if t.name not in NODE_TESTS]
    if per_gpu:
        options_ = with_tests(options, [t.name for t in per_gpu])
        alone = _alone(session, plans, per_gpu, options_) if alone_first else None
        if session.signum is None:
            _parallel(session, plans, per_gpu, options_)
        if alone is not None:
            with_alone(session.runs, alone)
            session.save()
    if node and session.signum is None:
        _node_tests(session, plans, node, with_tests(options, [t.name for t in node]))
    session.failed |= any(r.status == "failed" for run in session.runs for r in run.results)


def _alone(session, plans: list, tests, options: list[str]) -> list[Run]:
    """Each GPU's group measured with no other GPU busy: the groups one after another, each as
    _parallel runs it (its own process), their runs kept apart from the session's."""
    runs: list[Run] = []
    for group in gpu_groups(plans):
        shim = SimpleNamespace(progress=session.progress, runs=[], save=lambda: None, failed=False, signum=None)
        session.progress(f"alone: {', '.join(f'{b.name}:{i}' for b, i in group)}")
        _parallel(shim, group, tests, options)
        runs += shim.runs
        if shim.signum is not None:
            session.signum = shim.signum
            break
    return runs


def with_alone(together: list[Run], alone: list[Run]) -> None:
    """Each ok result of a run together gets evidence.alone: its GPU's value alone, the ratio of
    together to alone, and the comparison's word (report/verdict.py word): shared power, a shared
    PCIe switch or NUMA node show as a ratio under 1 (over 1 for times)."""
    from dataclasses import asdict, replace
    from peakbench.report.verdict import word
    by_device = {(r.backend, r.device.get("index")): {x.test: x for x in r.results} for r in alone}
    for run in together:
        found = by_device.get((run.backend, run.device.get("index")), {})
        for i, result in enumerate(run.results):
            first = found.get(result.test)
            if first is None or first.status != "ok" or result.status != "ok" or not first.value:
                continue
            alone_ = {"value": first.value, "ratio": round(result.value / first.value, 4),
                      "word": word(asdict(first), asdict(result))}
            # a new result, not an edited one: the session's documents convert each result once
            run.results[i] = replace(result, evidence={**result.evidence, "alone": alone_})


def _node_tests(session, plans: list, tests, options: list[str]) -> None:
    """The node tests from each backend's first planned device, one process each, in turn; their
    results join that device's run."""
    firsts = {}
    for backend, index in plans:
        firsts.setdefault(backend.name, (backend, index))
    with tempfile.TemporaryDirectory(prefix="peakbench-node-") as folder:
        for backend, index in firsts.values():
            child = Child(backend, index, options, folder, session.progress)
            try:
                code = child.wait()
            except KeyboardInterrupt as e:
                session.signum = getattr(e, "signum", signal.SIGINT)
                if child.proc.poll() is None:
                    child.proc.send_signal(session.signum)
                child.wait()
                code = None
            for found in child.runs(tests, code if code is not None else -session.signum, fill=code is not None):
                run = next((r for r in session.runs if r.backend == found.backend
                            and r.device.get("index") == found.device.get("index")), None)
                if run is None:
                    session.runs.append(found)
                else:
                    run.results += found.results
            session.save()
            if session.signum is not None:
                return


def _parallel(session, plans: list, tests, options: list[str]) -> None:
    groups = gpu_groups(plans)
    done: dict[int, list[Run]] = {}
    children: list[Child] = []
    lock = threading.Lock()
    stop = threading.Event()

    def run_group(n: int, group: list, folder: str) -> None:
        runs = []
        for backend, index in group:
            if stop.is_set():
                break
            with lock:
                child = Child(backend, index, options, folder, session.progress)
                children.append(child)
            code = child.wait()
            runs += child.runs(tests, code, fill=not stop.is_set())
            if code not in (0, 1) and not stop.is_set():
                session.failed = True
        with lock:
            done[n] = runs
            session.runs = [r for k in sorted(done) for r in done[k]]
            session.save()

    def wait() -> None:
        # A sleep, not Thread.join: a signal that interrupts a join can leave the thread looking ended.
        while len(done) < len(groups):
            time.sleep(0.1)

    with tempfile.TemporaryDirectory(prefix="peakbench-devices-") as folder:
        for n, g in enumerate(groups):
            threading.Thread(target=run_group, args=(n, g, folder), daemon=True).start()
        try:
            wait()
        except KeyboardInterrupt as e:
            session.signum = getattr(e, "signum", signal.SIGINT)
            session.progress(f"interrupted ({signal.Signals(session.signum).name}): "
                             "stopping every device, keeping what each measured")
            stop.set()
            with lock:
                for child in children:
                    if child.proc.poll() is None:
                        child.proc.send_signal(session.signum)
            wait()
    session.runs = [r for k in sorted(done) for r in done[k]]

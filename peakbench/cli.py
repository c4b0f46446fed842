"""Command line: argument parsing, option checks, output resolution, subcommand dispatch and exit
codes; the run itself (the devices x tests loop, saving, the outputs) is peakbench.harness.session.

Exit status: 0 when every test ran (ok or unsupported); 1 when any failed, or after the run
started something else did (an output or a plot that could not be written, an unexpected error:
what was measured is still written); 2 for a usage error or when nothing could run (every check
of the options and output paths happens before the first test); 128 + the signal when SIGINT
(130) or SIGTERM (143) ended the run, after the results so far were printed and written.

Progress goes to stderr, tables to stdout, except when an output is `-` (or /dev/stdout): then
standard output carries that output alone and the tables go to stderr.
"""
from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from peakbench import __version__
from peakbench import streams
from peakbench.interrupts import signal_of, signals_interrupt
from peakbench.backend import BackendUnavailable, error_text, load
from peakbench.catalog import default_catalog
from peakbench.harness import visible
from peakbench.harness.runner import BURN_IN_S, PROFILES, Settings
from peakbench.harness.session import Session, describe
from peakbench.report import compare as compare_mod
from peakbench.report.result import (Output, ResultFileError, check_writable, document, load_json, new_document,
                                     refuse_inputs, unfinished)
from peakbench.selection import UsageError, check_shaders, parse_backends, select_tests
from peakbench.specs import SpecError, load_database, resolve, find

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
LIST_WIDTH = 100
RUN_OPTIONS = ("backend", "device", "sequential", "alone_first", "tests", "quick", "profile", "duration", "json", "csv", "markdown",
               "prometheus", "history", "plot", "html", "spec")


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so errors stay one line."""

    def error(self, message):
        raise UsageError(message)


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def build_parser() -> Parser:
    p = Parser(prog="peakbench", description="GPU peak throughput, next to the vendor's spec sheet. "
               "Subcommands: `peakbench compare A.json B.json ...`, `peakbench explain RESULT.json [TEST ...]`, "
               "`peakbench specs [NAME]`, "
               "`peakbench fleet RESULT.json ...`, `peakbench ray [--address ADDR] [run options]`, "
               "`peakbench report RESULT.json ... --html FILE`.")
    p.add_argument("--backend", default="all",
                   help="vulkan, cuda, rocm, all (those that are available), or a comma list (default: all)")
    p.add_argument("--device", default="0", help="device index N, or all: every device at the same time, "
                   "one process each (default: 0)")
    p.add_argument("--sequential", action="store_true", help="with --device all: one device after another, "
                   "in this process")
    p.add_argument("--alone-first", action="store_true", help="with --device all: each GPU alone first, one "
                   "after another, then all at once; each result keeps its GPU's alone value and the ratio")
    p.add_argument("--tests", help="comma list of globs on test names, e.g. 'compute.*,memory.read'")
    p.add_argument("--quick", action="store_true", help="the screening profile: one variant a test, shorter and fewer samples, no size sweeps (--profile prolog)")
    p.add_argument("--profile", choices=PROFILES, help="prolog (--quick: seconds, for a job's prolog), default "
                   "(the full suite), burn-in (each test under sustained load for its share of --duration, "
                   "with a time series and a stability summary)")
    p.add_argument("--duration", type=float, metavar="S", help="burn-in: seconds in all, shared by the selected tests "
                   "(default 60)")
    p.add_argument("--json", metavar="FILE", help="write results as JSON (updated after each test)")
    p.add_argument("--csv", metavar="FILE", help="write results as CSV")
    p.add_argument("--markdown", metavar="FILE", help="write results as Markdown tables")
    p.add_argument("--prometheus", metavar="FILE", help="write results in Prometheus' text format, for "
                   "node_exporter's textfile collector (needs prometheus_client)")
    p.add_argument("--history", metavar="DIR", help="keep each GPU's record under DIR/<UUID>/ for "
                   "`peakbench fleet --history DIR` (never overwrites)")
    p.add_argument("--plot", metavar="DIR", help="write PNG charts of the latency and bandwidth sweeps (needs matplotlib)")
    p.add_argument("--html", metavar="FILE", help="write the run as one self-contained HTML page, at the end "
                   "(needs the [report] extra)")
    p.add_argument("--spec", metavar="NAME|FILE", help="use this spec database entry, or add GPUs from a file")
    p.add_argument("--list-devices", action="store_true", help="list the devices of each backend")
    p.add_argument("--list-tests", action="store_true", help="list the test catalog")
    p.add_argument("--version", action="version", version=f"peakbench {__version__}")
    return p


def open_backends(text: str) -> list:
    names, optional = parse_backends(text)
    backends, why = [], []
    for name in names:
        try:
            backends.append(visible.limited(load(name)))
        except BackendUnavailable as e:
            if not optional:
                for b in backends:
                    b.close()
                raise
            why.append(error_text(e))
    if not backends:
        raise BackendUnavailable("no backend could run: " + "; ".join(why))
    for reason in why:
        progress(f"note: {reason}")
    return backends


def device_indices(option: str, count: int, backend: str) -> list[int]:
    if option == "all":
        return list(range(count))
    try:
        index = int(option)
    except ValueError:
        raise UsageError(f"--device must be an index or 'all', not '{option}'") from None
    if not 0 <= index < count:
        raise UsageError(f"{backend}: no device {index} (this backend has {count}: 0..{count - 1}; see --list-devices)")
    return [index]


def cmd_list_tests() -> int:
    rows = [(t.name, t.unit, ", ".join(v.name for v in t.variants)
             or ("the device's shapes" if t.kernel == "mma" else "-"), t.description)
            for t in default_catalog().tests]
    from tabulate import tabulate
    # Fit a terminal (or 100 columns into a pipe): the variants and descriptions wrap.
    width = shutil.get_terminal_size((LIST_WIDTH, 24)).columns if sys.stdout.isatty() else LIST_WIDTH
    fixed = max(len(r[0]) for r in rows) + max(len(r[1]) for r in rows) + 6
    variants = 24
    described = max(24, max(width, 80) - fixed - variants - 4)
    print(tabulate(rows, ("test", "unit", "variants", "what it measures"), tablefmt="simple",
                   maxcolwidths=[None, None, variants, described]))
    return EXIT_OK


def cmd_list_devices(args) -> int:
    from tabulate import tabulate
    for backend in open_backends(args.backend):
        try:
            rows = [(d.index, d.name, d.kind, d.driver, d.api, f"0x{d.vendor_id:04x}:0x{d.device_id:04x}",
                     d.units or "") for d in backend.devices()]
            print(f"{backend.name}:")
            print(tabulate(rows, ("index", "name", "type", "driver", "API", "PCI ID", "units"), tablefmt="simple"))
        finally:
            backend.close()
    return EXIT_OK


def cmd_specs(argv: list[str]) -> int:
    p = Parser(prog="peakbench specs", description="show the spec database")
    p.add_argument("name", nargs="?", help="one GPU (exact or unique partial name)")
    p.add_argument("--spec", metavar="FILE", help="add GPUs from a file")
    args = p.parse_args(argv)
    specs = load_database(args.spec)
    from tabulate import tabulate
    if args.name:
        s = find(specs, args.name)
        print(f"{s.name}  (boost {s.boost_clock_mhz:.0f} MHz)\nsource: {s.source}")
        fields = [(k, v) for k, v in s.data.items() if not isinstance(v, (dict, list))]
        print(tabulate(fields, tablefmt="plain"))
        from peakbench.catalog import default_catalog
        # the derived peaks too: gemm.* from matrix.*, transfer.* from the host link
        print(tabulate(sorted(s.peaks_of(default_catalog().names()).items()), ("test", "peak"), tablefmt="simple"))
        return EXIT_OK
    rows = [(s.name, s.data.get("units", ""), f"{s.boost_clock_mhz:.0f}", s.peak("compute.fp32") or "",
             s.peak("matrix.fp16.fp32") or "", s.data.get("memory_bandwidth_gbs", "")) for s in specs]
    print(tabulate(rows, ("GPU", "units", "boost MHz", "FP32 TFLOPS", "FP16 matrix", "GB/s"), tablefmt="simple"))
    return EXIT_OK


def cmd_compare(argv: list[str]) -> int:
    p = Parser(prog="peakbench compare", description="result files side by side, with ratios")
    p.add_argument("files", nargs="+", help="peakbench --json outputs")
    args = p.parse_args(argv)
    docs = [(f, load_json(f)) for f in args.files]
    print(compare_mod.compare(docs))
    # A record that did not finish is a failed run for its GPUs: shown, said, and the exit status.
    problems = [(f, why) for f, doc in docs if (why := unfinished(doc))]
    for f, why in problems:
        print(f"peakbench compare: {f}: failed: {why}", file=sys.stderr)
    return EXIT_FAILED if problems else EXIT_OK


def cmd_report(argv: list[str]) -> int:
    """`peakbench report FILE... --html PAGE`: the files as one page (report/html.py says which
    page); written whole or not at all. Exit 0 when written, whatever the page shows."""
    from peakbench.report import html
    p = Parser(prog="peakbench report", description="result files as one self-contained HTML page: one run, "
               "runs side by side, or a fleet's heat map (3 or more GPUs of one model and backend)")
    p.add_argument("files", nargs="+", metavar="RESULT.json", help="peakbench --json outputs")
    p.add_argument("--html", metavar="FILE", required=True, help="the page to write; - for standard output")
    args = p.parse_args(argv)
    out = html_output(args.html)
    refuse_inputs({"--html": out}, {f"the input {f}": f for f in args.files})
    docs = [(f, load_json(f)) for f in args.files]
    page = html.report(docs, [html.file_source(f, doc) for f, doc in docs])
    out.write(page)
    if out.fd is None:
        progress(f"html: {args.html} ({html.page_kind(docs)} page)")
    return EXIT_OK


def html_output(name: str) -> Output:
    """--html's target, checked before anything is read or run; the [report] extra must be there."""
    from peakbench.report import html
    if problem := html.available():
        raise UsageError(problem)
    if not name.strip():
        raise UsageError("--html needs a file name")
    return check_writable(name)


def write_html(session: Session, out: Output, json_out: Output | None) -> bool:
    """The run's page, from the document --json writes at the end (the same bytes, so the page's
    sha256 names that file); one line and False when it cannot be made or written."""
    from peakbench.report import html, verdict
    doc = document(session.runs, session.base, session.signum is not None, complete=session.complete)
    verdict.refine(doc["runs"])
    try:
        out.write(html.run_report(doc, json_out.name if json_out is not None and json_out.fd is None else None))
    except ResultFileError as e:
        progress(f"peakbench: error: {e}")
        return False
    except Exception as e:       # drawing or templating: the run's other outputs are written already
        progress(f"peakbench: error: --html {out.name}: {describe(e)}")
        return False
    if out.fd is None:
        progress(f"html: {out.name}")
    return True


def cmd_explain(argv: list[str]) -> int:
    from peakbench.report import explain
    p = Parser(prog="peakbench explain", description="why each result is what it is: the chain behind its limit")
    p.add_argument("file", help="a peakbench --json output")
    p.add_argument("tests", nargs="*", help="globs on test names (all without)")
    args = p.parse_args(argv)
    print(explain.chains(load_json(args.file), args.tests))
    return EXIT_OK


def resolve_outputs(args) -> dict[str, Output]:
    """Each output's target, checked writable; two options that write one file are a usage error."""
    outputs: dict[str, Output] = {}
    for option in ("--json", "--csv", "--markdown", "--prometheus", "--html"):
        name = getattr(args, option[2:])
        if name is None:
            continue
        out = html_output(name) if option == "--html" else check_writable(name)
        for other, seen in outputs.items():
            if seen.key == out.key:
                raise UsageError(f"{other} {seen.name} and {option} {name} are the same file")
        outputs[option] = out
    return outputs


def check_plot_folder(folder: str) -> None:
    """Create the folder now and write a file into it, so a plot that cannot be saved fails
    before the run, not after it."""
    from peakbench.report import plots
    if plots.available():
        raise UsageError(plots.available())
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise UsageError(f"--plot {folder}: cannot write there: {error_text(e)}") from None


def child_options(args) -> list[str]:
    """The options a per-device process of `--device all` takes from ours (it writes only its JSON)."""
    options = ["--tests", args.tests] if args.tests is not None else []
    options += ["--spec", args.spec] if args.spec is not None else []
    options += ["--profile", args.profile] if args.profile is not None else []
    options += ["--duration", str(args.duration)] if args.duration is not None else []
    return options + (["--quick"] if args.quick else [])


def profile_of(args) -> str:
    """The profile a run asked for: --profile, or --quick (prolog), else default; --duration only
    with burn-in."""
    if args.quick and args.profile not in (None, "prolog"):
        raise UsageError(f"--quick is the prolog profile: it cannot go with --profile {args.profile}")
    profile = "prolog" if args.quick else args.profile or "default"
    if args.duration is not None and profile != "burn-in":
        raise UsageError("--duration needs --profile burn-in")
    if args.duration is not None and not args.duration > 0:
        raise UsageError(f"--duration {args.duration:g}: needs a number of seconds above 0")
    return profile


def settings_of(profile: str, duration: float | None, tests: int) -> Settings:
    """A profile's settings; a burn-in shares its duration among the selected tests."""
    if profile == "prolog":
        return Settings.quick()
    if profile == "burn-in":
        return Settings.burn(max(1.0, (duration or BURN_IN_S) / max(1, tests)))
    return Settings.full()


def cmd_run(args) -> int:
    tests = select_tests(args.tests)
    profile_of(args)
    check_shaders()
    if args.sequential and args.device != "all":
        raise UsageError("--sequential needs --device all (one device is always measured alone)")
    if args.alone_first and (args.device != "all" or args.sequential):
        raise UsageError("--alone-first needs --device all without --sequential (it compares each GPU alone"
                         " with all of them at once)")
    for option, path in (("--json", args.json), ("--csv", args.csv), ("--markdown", args.markdown),
                         ("--prometheus", args.prometheus), ("--plot", args.plot), ("--html", args.html),
                         ("--spec", args.spec)):
        if path is not None and not path.strip():
            raise UsageError(f"{option} needs a file name")
    if args.history is not None:
        from peakbench.report import history
        if problem := history.writable(args.history):
            raise UsageError(problem)
    if args.prometheus is not None:
        from peakbench.report import prometheus
        if not prometheus.available():
            raise UsageError(prometheus.MISSING)
    outputs = resolve_outputs(args)
    if args.spec is not None:
        refuse_inputs(outputs, {f"the --spec file {args.spec}": args.spec})
    if args.plot is not None:
        check_plot_folder(args.plot)
        if args.quick:
            progress(f"note: --quick takes no size sweeps, so --plot {args.plot} will get no chart")
    specs, forced = resolve(args.spec)
    settings = settings_of(profile_of(args), args.duration, len(tests))
    # An output on standard output gets it alone: the tables go to stderr, after the progress.
    tables = sys.stderr if any(out.fd == 1 for out in outputs.values()) else sys.stdout
    session = Session(new_document({name: getattr(args, name) for name in RUN_OPTIONS}), outputs, progress)
    backends = open_backends(args.backend)
    try:
        plans = []
        for backend in backends:
            infos = backend.devices()
            plans += [(backend, i) for i in device_indices(args.device, len(infos), backend.name)]
        session.plan(plans, tests)
        if args.device == "all" and not args.sequential:
            from peakbench.harness import parallel
            parallel.measure_all(session, plans, tests, child_options(args), alone_first=args.alone_first)
        else:
            session.measure(plans, tests, settings, specs, forced)
    finally:
        for b in backends:
            b.close()
    session.write_outputs(tables, args.plot)
    if "--html" in outputs and not write_html(session, outputs["--html"], outputs.get("--json")):
        session.failed = True
    if session.signum is not None:
        return 128 + session.signum
    return EXIT_FAILED if session.failed else EXIT_OK


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with streams.guarded():
        return _main(argv)


def _main(argv: list[str]) -> int:
    try:
        with signals_interrupt():
            if argv and argv[0] == "compare":
                return cmd_compare(argv[1:])
            if argv and argv[0] == "explain":
                return cmd_explain(argv[1:])
            if argv and argv[0] == "report":
                return cmd_report(argv[1:])
            if argv and argv[0] == "fleet":
                from peakbench.report import fleet
                return fleet.main(argv[1:])
            if argv and argv[0] == "ray":
                from peakbench.harness import cluster
                return cluster.main(argv[1:])
            if argv and argv[0] == "specs":
                return cmd_specs(argv[1:])
            args = build_parser().parse_args(argv)
            if args.list_tests:
                return cmd_list_tests()
            if args.list_devices:
                return cmd_list_devices(args)
            return cmd_run(args)
    except (UsageError, BackendUnavailable, SpecError, ResultFileError) as e:
        print(f"peakbench: error: {error_text(e)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as e:        # before the first test, or while the outputs were written
        signum = signal_of(e)
        print(f"peakbench: interrupted ({signal.Signals(signum).name})", file=sys.stderr)
        return 128 + signum
    except Exception as e:                # a bug before any test ran: one line, not a traceback
        print(f"peakbench: error: {describe(e)}", file=sys.stderr)
        return EXIT_USAGE

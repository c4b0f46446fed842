"""Command line: a thin dispatcher over the harness and the pure formatters.

Exit status: 0 when every test ran (ok or unsupported), 1 when any failed, 2 for a usage error or
when nothing could run. Progress goes to stderr, tables to stdout.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from peakbench import __version__
from peakbench.backend import BACKENDS, BackendUnavailable, load
from peakbench.catalog import default_catalog
from peakbench.harness.runner import Settings
from peakbench.harness.session import run_test, with_spec
from peakbench.report import compare as compare_mod
from peakbench.report import render
from peakbench.report.result import (Result, ResultFileError, Run, check_writable, document, load_json,
                                     new_document, save_json, write_atomic)
from peakbench.specs import SpecError, load_database, match, resolve, find

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so errors stay one line."""

    def error(self, message):
        raise UsageError(message)


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def build_parser() -> Parser:
    p = Parser(prog="peakbench", description="GPU peak throughput, next to the vendor's spec sheet. "
               "Subcommands: `peakbench compare A.json B.json ...`, `peakbench specs [NAME]`.")
    p.add_argument("--backend", default="all",
                   help="vulkan, cuda, rocm, all (those that are available), or a comma list (default: all)")
    p.add_argument("--device", default="0", help="device index N, or all (default: 0)")
    p.add_argument("--tests", help="comma list of globs on test names, e.g. 'compute.*,memory.read'")
    p.add_argument("--quick", action="store_true", help="shorter samples and fewer of them")
    p.add_argument("--json", metavar="FILE", help="write results as JSON (updated after each test)")
    p.add_argument("--csv", metavar="FILE", help="write results as CSV")
    p.add_argument("--markdown", metavar="FILE", help="write results as Markdown tables")
    p.add_argument("--plot", metavar="DIR", help="write PNG charts of the latency and bandwidth sweeps (needs matplotlib)")
    p.add_argument("--spec", metavar="NAME|FILE", help="use this spec database entry, or add GPUs from a file")
    p.add_argument("--list-devices", action="store_true", help="list the devices of each backend")
    p.add_argument("--list-tests", action="store_true", help="list the test catalog")
    p.add_argument("--version", action="version", version=f"peakbench {__version__}")
    return p


def parse_backends(text: str) -> tuple[list[str], bool]:
    """The backends asked for, and whether missing ones may be skipped (only for `all`)."""
    if text == "all":
        return list(BACKENDS), True
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in BACKENDS]
    if unknown or not names:
        raise UsageError(f"unknown backend '{','.join(unknown) or text}' (choose from {', '.join(BACKENDS)}, all)")
    return names, False


def open_backends(text: str) -> list:
    names, optional = parse_backends(text)
    backends, why = [], []
    for name in names:
        try:
            backends.append(load(name))
        except BackendUnavailable as e:
            if not optional:
                for b in backends:
                    b.close()
                raise
            why.append(str(e))
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
    print(tabulate(rows, ("test", "unit", "variants", "what it measures"), tablefmt="simple"))
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
        print(tabulate(sorted(s.peaks.items()), ("test", "peak"), tablefmt="simple"))
        return EXIT_OK
    rows = [(s.name, s.data.get("units", ""), f"{s.boost_clock_mhz:.0f}", s.peak("compute.fp32") or "",
             s.peak("matrix.fp16.fp32") or "", s.data.get("memory_bandwidth_gbs", "")) for s in specs]
    print(tabulate(rows, ("GPU", "units", "boost MHz", "FP32 TFLOPS", "FP16 matrix", "GB/s"), tablefmt="simple"))
    return EXIT_OK


def cmd_compare(argv: list[str]) -> int:
    p = Parser(prog="peakbench compare", description="result files side by side, with ratios")
    p.add_argument("files", nargs="+", help="peakbench --json outputs")
    args = p.parse_args(argv)
    docs = [(Path(f).stem, load_json(f)) for f in args.files]
    print(compare_mod.compare(docs))
    return EXIT_OK


def cmd_run(args) -> int:
    catalog = default_catalog()
    patterns = None
    if args.tests is not None:
        patterns = [p.strip() for p in args.tests.split(",") if p.strip()]
        if not patterns:
            raise UsageError("--tests is empty (see --list-tests)")
    tests = catalog.select(patterns)
    if not tests:
        raise UsageError(f"--tests '{args.tests}' matches no test (see --list-tests)")
    for option, path in (("--json", args.json), ("--csv", args.csv), ("--markdown", args.markdown),
                         ("--plot", args.plot), ("--spec", args.spec)):
        if path is not None and not path.strip():
            raise UsageError(f"{option} needs a file name")
    for path in (args.json, args.csv, args.markdown):
        if path:
            check_writable(path)
    if args.plot is not None:
        from peakbench.report import plots
        if plots.available():
            raise UsageError(plots.available())
        try:
            Path(args.plot).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"--plot {args.plot}: {e.strerror or e}") from None
    specs, forced = resolve(args.spec)
    settings = Settings.quick() if args.quick else Settings()
    backends = open_backends(args.backend)
    runs: list[Run] = []
    base = new_document()
    failed = False

    def save():
        if args.json:
            save_json(args.json, document(runs, base))

    try:
        plans = []
        for backend in backends:
            infos = backend.devices()
            plans += [(backend, i) for i in device_indices(args.device, len(infos), backend.name)]
        for backend, index in plans:
            info = backend.devices()[index]
            spec = forced or match(specs, info.name, info.vendor_id, info.device_id)
            run = Run(backend.name, info.as_json(), spec.as_json() if spec else None)
            runs.append(run)
            progress(f"[{backend.name}:{index}] {info.name} ({info.driver}); "
                     f"spec: {spec.name if spec else 'none matched'}")
            try:
                device = backend.open(index)
            except Exception as e:   # the device cannot be opened: its tests fail, the run goes on
                failed = True
                reason = f"cannot open the device: {type(e).__name__}: {e}"
                progress(f"  {reason}")
                run.results += [Result(t.name, "failed", t.unit, reason=reason) for t in tests]
                save()
                continue
            try:
                for test in tests:
                    progress(f"[{backend.name}:{index}] {test.name} ...")
                    result = run_test(device, test, settings, progress, spec)
                    try:
                        result = with_spec(result, spec)
                    except Exception as e:       # a spec entry that cannot be applied: say so, go on
                        progress(f"  {test.name}: spec '{spec.name}' not applied: {type(e).__name__}: {e}")
                    failed |= result.status == "failed"
                    if result.status != "ok":
                        progress(f"  {test.name}: {result.status}: {result.reason}")
                    run.results.append(result)
                    save()
            finally:
                try:
                    device.close()
                except Exception as e:     # e.g. a kernel fault reported at the last synchronize
                    failed = True
                    progress(f"[{backend.name}:{index}] closing the device failed: {type(e).__name__}: {e}")
    except KeyboardInterrupt:
        progress("interrupted: keeping the results measured so far")
        save()
        failed = True
    finally:
        for b in backends:
            b.close()
    docs = document(runs, base)["runs"]
    for run in docs:
        print(render.table(run))
        print()
    for heading, text in compare_mod.side_by_side(docs):
        print(f"{heading}\n{text}\n")
    save()
    if args.csv:
        write_atomic(args.csv, render.csv_text(docs))
    if args.markdown:
        both = "".join(f"\n### {heading}\n\n{text}\n" for heading, text in compare_mod.side_by_side(docs, "github"))
        write_atomic(args.markdown, render.markdown(docs) + both)
    if args.plot:
        for path in plots.write(docs, args.plot):
            progress(f"plot: {path}")
    return EXIT_FAILED if failed else EXIT_OK


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv and argv[0] == "compare":
            return cmd_compare(argv[1:])
        if argv and argv[0] == "specs":
            return cmd_specs(argv[1:])
        args = build_parser().parse_args(argv)
        if args.list_tests:
            return cmd_list_tests()
        if args.list_devices:
            return cmd_list_devices(args)
        return cmd_run(args)
    except (UsageError, BackendUnavailable, SpecError, ResultFileError) as e:
        print(f"peakbench: error: {e}", file=sys.stderr)
        return EXIT_USAGE

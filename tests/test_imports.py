"""The package's import rules (docs/architecture.md), read from the source: no module outside a
backend imports a backend, no backend imports another, and the module graph, imports inside
functions included, has no circle. Module names written as strings for importlib count too."""
from __future__ import annotations

import ast
import re

from helpers import ROOT

PACKAGE = ROOT / "peakbench"
BACKENDS = {"vulkan", "cuda", "rocm"}


def module_name(path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported(name: str, path, tree) -> set[str]:
    """The peakbench modules a module imports: `from P import m` is an import of P.m where P.m is
    a module, else of P; a string naming a module counts as an import of it."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"peakbench(\.\w+)+", node.value):
            targets = [node.value]
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: imported(name, path, ast.parse(path.read_text())) for name, path in MODULES.items()}


def backend_of(name: str) -> str | None:
    part = name.split(".")[1] if "." in name else ""
    return part if part in BACKENDS else None


def test_the_reader_sees_the_package():
    assert {"peakbench.cli", "peakbench.evidence.sass", "peakbench.vulkan.instance"} <= set(MODULES)
    assert "peakbench.evidence.sass" in GRAPH["peakbench.cuda.runtime"]
    assert "peakbench.rocm.matrix" in GRAPH["peakbench.rocm.capabilities"]        # a module named as a string


def crossings(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a backend from outside it (backend.load imports the one asked for, by name)."""
    return sorted(f"{name} -> {target}" for name, targets in graph.items() for target in targets
                  if backend_of(target) and backend_of(target) != backend_of(name) and name != "peakbench.backend")


def test_only_a_backend_imports_itself():
    assert crossings(GRAPH) == []


def test_the_crossing_check_finds_planted_imports():
    planted = {k: set(v) for k, v in GRAPH.items()}
    planted["peakbench.cuda.runtime"].add("peakbench.vulkan.probe")
    planted["peakbench.harness.guards"].add("peakbench.rocm.targets")
    assert crossings(planted) == ["peakbench.cuda.runtime -> peakbench.vulkan.probe",
                                  "peakbench.harness.guards -> peakbench.rocm.targets"]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_has_no_circle():
    assert cycles(GRAPH) == []


def test_the_circle_check_finds_a_planted_circle():
    planted = {k: set(v) for k, v in GRAPH.items()}
    planted["peakbench.catalog.descriptors"].add("peakbench.catalog")
    assert any({"peakbench.catalog", "peakbench.catalog.descriptors"} <= set(c) for c in cycles(planted))

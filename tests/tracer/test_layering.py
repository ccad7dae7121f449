"""The tracer's imports point one way: each module imports only modules below it (imports
inside functions and under TYPE_CHECKING count, as a reader follows them). The value table
and the handlers' context sit at the bottom; the value families register their kinds when
the translator imports them (values/families.py), so the table never imports them back.

The arrows are those of the shared layout check (../shared/tools/import_circles.py): `from
pkg import sub` is an arrow to the submodule, `from mod import name` to the module, and an
arrow to a package's short __init__ (one that only hands names on) is not followed."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import compiler

ROOT = Path(compiler.__file__).parent.parent
PACKAGES = ("compiler", "jupyter_compile")


def _modules() -> dict[str, Path]:
    mods = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = path
    return mods


def _targets(mods: dict[str, Path], module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    package: list[str] = []
    if node.level:  # relative: from the importing module's package upwards
        package = module.split(".")
        keep = len(package) - node.level + (1 if mods[module].name == "__init__.py" else 0)
        package = package[:keep]
    prefix = ".".join(package + ([node.module] if node.module else []))
    return [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in mods else prefix for a in node.names]


def _is_face(path: Path) -> bool:
    """A package __init__ short enough to only hand names on."""
    return path.name == "__init__.py" and len(path.read_text().splitlines()) < 40


def import_graph(follow_faces: bool = False) -> nx.DiGraph:
    """Module -> imported module, over compiler/ and jupyter_compile/."""
    mods = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(mods)
    for module, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _targets(mods, module, node):
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != module and (follow_faces or not _is_face(mods[target])):
                    graph.add_edge(module, target)
    return graph


def _circles(graph: nx.DiGraph) -> list[list[str]]:
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


def test_no_import_circle_in_the_repository():
    assert _circles(import_graph()) == []


def test_no_import_circle_in_the_tracer_through_package_faces():
    # Importing compiler/tracer/opcodes/ registers every opcode family: an arrow to the
    # package is an arrow to all of them, so here the faces are followed too.
    graph = import_graph(follow_faces=True)
    tracer = graph.subgraph(m for m in graph if m.startswith("compiler.tracer"))
    assert _circles(tracer) == []


def test_the_value_table_and_the_context_are_at_the_bottom():
    graph = import_graph(follow_faces=True)
    for low in ("compiler.tracer.values.table", "compiler.tracer.context"):
        below = nx.descendants(graph, low)
        above = {m for m in below if m.startswith("compiler.tracer.values.")}
        assert above == set() and "compiler.tracer.translator" not in below, (low, sorted(below))

"""The backend's layering: compiler/runtime/ and compiler/support/ sit under every stage and
import none of them (imports inside functions count, as a reader follows them), so a stage
can use them without an import circle, and the driver sits above the stages it calls."""

from __future__ import annotations

import ast
from pathlib import Path

import compiler

ROOT = Path(compiler.__file__).parent

# What each floor may import from compiler/: itself, the floors under it, and the record
# dataclasses and settings (compiler/records.py imports only compiler/support/).
ALLOWED = {
    "support": ("compiler.support",),
    "runtime": ("compiler.runtime", "compiler.support", "compiler.records", "compiler.config"),
}


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "compiler":
                out += [f"compiler.{a.name}" for a in node.names]
            else:
                out.append(node.module)
    return [m for m in out if m == "compiler" or m.startswith("compiler.")]


def test_the_floors_import_nothing_above_them():
    above = {}
    for floor, allowed in ALLOWED.items():
        for path in sorted((ROOT / floor).rglob("*.py")):
            bad = [m for m in _imports(path) if not m.startswith(allowed)]
            if bad:
                above[str(path.relative_to(ROOT))] = bad
    assert above == {}


def test_records_import_only_the_support_floor():
    imports = _imports(ROOT / "records.py")
    assert all(m.startswith("compiler.support") for m in imports), imports


def test_the_driver_is_above_the_stages_and_no_stage_imports_it():
    assert (ROOT / "backends" / "inductor.py").is_file()
    users = [
        str(p.relative_to(ROOT))
        for stage in ("aot", "lowering", "scheduler", "codegen", "ir", "runtime", "support")
        for p in sorted((ROOT / stage).rglob("*.py"))
        if any(m.startswith("compiler.backends") for m in _imports(p))
    ]
    assert users == []

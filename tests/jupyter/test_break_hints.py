"""A fix for every break: each graph-break record carries a kind and that kind's hint
(category, suggestion, snippet), the kinds raised in the tracer all have one, and the views
(`%explain`, the inspector's Overview, explain()'s text) show it, escaped."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import numpy as np
import pytest
import torch

import compiler
from compiler.tracer import hints
from jupyter_compile.explain import render
from tests.tracer.helpers import make

TRACER = Path(compiler.__file__).parent / "tracer"
CATEGORIES = {hints.USER, hints.FUNDAMENTAL, hints.NOT_YET}
# The tracer suite's differential programs (each module's `case` list).
CASE_MODULES = (
    "test_breaks",
    "test_exceptions",
    "test_python",
    "test_objects",
    "test_nn",
    "test_ops",
)


def test_every_hint_is_complete() -> None:
    for kind, hint in hints.HINTS.items():
        assert hint.category in CATEGORIES, kind
        assert hint.suggestion.strip() and hint.snippet.strip(), kind


def _kinds_raised() -> set[str]:
    """The kinds the tracer's source names where it raises a break: the constant second
    argument (or `kind=`) of Break/InlineBreak, and the kinds of hints' own tables."""
    found = set(hints._TENSOR_METHOD_KINDS.values()) | {"numpy", "library_code", "c_function"}
    for path in TRACER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Break"):
                continue
            kind = node.args[1] if len(node.args) > 1 else None
            kind = next((k.value for k in node.keywords if k.arg == "kind"), kind)
            if isinstance(kind, ast.Constant):
                found.add(kind.value)
    return found


def test_every_kind_the_tracer_raises_has_a_hint() -> None:
    kinds = _kinds_raised()
    assert len(kinds) > 10
    assert kinds <= set(hints.HINTS), kinds - set(hints.HINTS)


def _suite_programs() -> list:
    out = []
    for name in CASE_MODULES:
        module = importlib.import_module(f"tests.tracer.{name}")
        out.extend(p.values for p in module.case)
    return out


def test_no_break_in_the_suites_programs_goes_without_a_hint() -> None:
    seen: dict[str, int] = {}
    for fn, factories, kwargs in _suite_programs():
        compiled = compiler.compile(fn, backend="eager")
        try:
            compiled(*make(list(factories)), **make(dict(kwargs.get("kwargs") or {})))
        except Exception:  # the programs that raise as eager raises: their breaks count too
            pass
        for brk in (b for f in compiler.inspect(compiled).functions for b in f.breaks):
            assert brk.kind in hints.HINTS, (fn.__name__, brk.kind, brk.reason)
            assert brk.hint is hints.HINTS[brk.kind], (fn.__name__, brk.reason)
            seen[brk.kind] = seen.get(brk.kind, 0) + 1
    assert len(seen) >= 5 and sum(seen.values()) > 30, seen


def item_read(x):
    return x * x.sum().item()


def branch(x):
    if x.sum() > 0:
        return x + 1
    return x - 1


def printing(x):
    y = x + 1
    print("y is ready")
    return y * 2


def numpy_call(x):
    return torch.from_numpy(np.sin(x.numpy())) + 1


def global_write(x):
    global LAST
    LAST = x.sum()
    return x * 2


def disabled(x):
    y = x.cos()
    _disabled_helper(y)
    return y + 1


@compiler.disable
def _disabled_helper(y):
    return y


def c_function(x):
    y = x + 1
    return torch.tensor(zlib_crc(y)) + y


def zlib_crc(y):
    import zlib

    return zlib.crc32(b"abc") % 7


@pytest.mark.parametrize(
    "fn,kind,category",
    [
        (item_read, "tensor_to_python", hints.FUNDAMENTAL),
        (branch, "data_dependent_branch", hints.FUNDAMENTAL),
        (printing, "print", hints.USER),
        (numpy_call, "numpy", hints.FUNDAMENTAL),
        (global_write, "global_write", hints.USER),
        (disabled, "disabled", hints.USER),
        (c_function, "c_function", hints.NOT_YET),
    ],
    ids=lambda v: getattr(v, "__name__", None) or str(v),
)
def test_the_kind_of_common_breaks(fn, kind: str, category: str) -> None:
    x = torch.randn(4)
    expected = fn(x.clone())
    compiled = compiler.compile(fn, backend="eager")
    torch.testing.assert_close(compiled(x.clone()), expected)
    kinds = [b.kind for f in compiler.inspect(compiled).functions for b in f.breaks]
    assert kind in kinds, kinds
    brk = next(b for f in compiler.inspect(compiled).functions for b in f.breaks if b.kind == kind)
    assert brk.hint.category == category
    out = compiler.explain(fn)(x.clone())
    assert f"Fix ({category})" in str(out) and brk.hint.snippet.splitlines()[0] in str(out)


def test_hints_show_escaped_in_explain_html(monkeypatch: pytest.MonkeyPatch) -> None:
    evil = hints.BreakHint(hints.USER, "use <b>this</b> & that", "y = x <script>")
    monkeypatch.setitem(hints.HINTS, "data_dependent_branch", evil)
    out = compiler.explain(branch)(torch.randn(4))
    markup = render(out, "branch")
    assert 'class="jc-hint"' in markup and "how to avoid it" in markup
    assert "use &lt;b&gt;this&lt;/b&gt; &amp; that" in markup and "<script>" not in markup
    assert "&lt;script&gt;" in markup


def test_the_inspector_overview_shows_the_fix_under_the_break(ipython) -> None:
    from tests.jupyter.conftest import run

    run(ipython, "import torch")
    out = run(
        ipython,
        "%%compile --backend eager\n"
        "def step(x):\n"
        "    y = x * 2\n"
        "    return y * y.sum().item()\n"
        "step(torch.randn(3))\n",
    )
    assert out.result.success, out.stdout + out.stderr
    twin = out.twins()[0]
    row = twin.index('data-line="3"')
    brk = twin.index('class="jc-break"', row)
    fix = twin.index('class="jc-fix"', brk)
    assert "keep the value a tensor" in twin[fix:].lower()
    assert "fix</b> (fundamental)" in twin[fix:]


def test_fullgraph_error_carries_the_fix() -> None:
    with pytest.raises(compiler.Unsupported) as raised:
        compiler.compile(branch, fullgraph=True, backend="eager")(torch.randn(4))
    assert raised.value.hint is hints.HINTS["data_dependent_branch"]
    assert "fix (fundamental)" in str(raised.value) and "torch.where" in str(raised.value)

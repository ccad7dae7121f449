"""The magics' mechanics through a real IPython shell, against a stand-in compiler (so these
tests check the extension alone and stay fast): rebinding, decorators, module classes,
errors, live updates, progress and timing."""

from __future__ import annotations

import html

import pytest
import torch

import jupyter_compile
from jupyter_compile import progress
from jupyter_compile.inspector import WIDGET_MIME
from tests.jupyter.conftest import run
from tests.jupyter.fake_compiler import FakeCompiler


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeCompiler:
    compiler = FakeCompiler()
    compiler.install(monkeypatch)
    return compiler


@pytest.fixture
def shell(ipython, fake):
    ipython.run_cell("import torch")
    return ipython


def magics(shell):
    return jupyter_compile._installed[id(shell)]["magics"]


def test_load_ext_twice_and_reload_keep_one_registration(shell) -> None:
    shell.run_line_magic("load_ext", "jupyter_compile")
    jupyter_compile.load_ipython_extension(shell)
    assert shell.events.callbacks["post_run_cell"].count(jupyter_compile.refresh_stale) == 1
    shell.run_line_magic("reload_ext", "jupyter_compile")
    assert shell.events.callbacks["post_run_cell"].count(jupyter_compile.refresh_stale) == 1
    assert "compile" in shell.magics_manager.magics["cell"]
    assert "explain" in shell.magics_manager.magics["line"]


def test_magic_help_comes_from_the_argument_definitions(shell) -> None:
    doc = shell.find_cell_magic("compile").__doc__
    for option in ("--backend", "--mode", "--fullgraph", "--dynamic", "--compare", "--no-inspect"):
        assert option in doc
    assert "-o" in shell.find_line_magic("explain").__doc__
    # under the names users type (`%%compile?`, `%explain?`), not the methods' names
    assert "%%compile [--backend" in doc and "compile_cell" not in doc
    explain = shell.find_line_magic("explain").__doc__
    assert "%explain [-o]" in explain and "explain_line" not in explain


def test_functions_are_compiled_before_later_calls_in_the_same_cell(shell, fake) -> None:
    out = run(
        shell,
        "%%compile --backend eager\ndef f(x):\n    return torch.sin(x) + 1\ny = f(torch.ones(3))\n",
    )
    assert out.result.success, out.stdout
    f = shell.user_ns["f"]
    assert f.__name__ == "f" and f.__jupyter_compile__.compiled.calls == 1
    assert fake.compiled[0].options["backend"] == "eager"
    assert torch.allclose(shell.user_ns["y"], torch.ones(3).sin() + 1)
    views = [b for b in out.bundles() if WIDGET_MIME in b]
    assert len(views) == 1 and "function · backend=eager" in out.twins()[0]


def test_decorators_are_kept_and_the_decorated_result_compiled(shell, fake) -> None:
    out = run(
        shell,
        "%%compile --no-inspect\n"
        "import functools\n"
        "def twice(fn):\n"
        "    @functools.wraps(fn)\n"
        "    def inner(x):\n"
        "        return fn(fn(x))\n"
        "    return inner\n"
        "@twice\n"
        "def g(x):\n"
        "    return x * 3\n"
        "r = g(torch.tensor(1.0))\n",
    )
    assert out.result.success, out.stdout
    assert shell.user_ns["r"].item() == 9.0
    # twice itself was compiled too (a top-level def), and g's compiled object is the decorated one
    g_target = shell.user_ns["g"].__jupyter_compile__
    assert g_target.original.__wrapped__.__name__ == "g" and g_target.compiled.calls == 1
    assert not [b for b in out.bundles() if WIDGET_MIME in b]  # --no-inspect


def test_module_classes_keep_their_identity_and_compile_instance_calls(shell, fake) -> None:
    out = run(
        shell,
        "%%compile\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(4, 2)\n"
        "    def forward(self, x):\n"
        "        return self.lin(x).relu()\n"
        "net = Net()\n"
        "y = net(torch.randn(3, 4))\n",
    )
    assert out.result.success, out.stdout
    net, Net = shell.user_ns["net"], shell.user_ns["Net"]
    assert type(net) is Net and isinstance(net, torch.nn.Module)
    assert list(net.state_dict()) == ["lin.weight", "lin.bias"]
    assert len(list(net.parameters())) == 2 and net.lin.in_features == 4
    assert shell.user_ns["y"].shape == (3, 2)
    compiled = [c for c in fake.compiled if c.record.name == "forward"]
    assert len(compiled) == 1 and compiled[0].calls == 1
    assert "nn.Module class" in out.html()


def test_a_subclass_of_a_compiled_class_compiles_the_inherited_forward(shell, fake) -> None:
    run(
        shell,
        "%%compile --no-inspect\n"
        "class Base(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x + 1\n",
    )
    out = run(
        shell, "%%compile --no-inspect\nclass Child(Base):\n    pass\ny = Child()(torch.zeros(2))\n"
    )
    assert out.result.success, out.stdout + out.stderr
    assert shell.user_ns["y"].tolist() == [1.0, 1.0]
    child_target = shell.user_ns["Child"].forward.__jupyter_compile__
    assert child_target.forward is shell.user_ns["Base"].forward.__jupyter_compile__.forward
    assert fake.compiled[-1].fn.__func__ is child_target.forward  # the user's forward, bound


def test_bad_option_is_a_usage_error_and_the_shell_lives(shell) -> None:
    out = run(shell, "%%compile --bogus\ndef f(x):\n    return x\n")
    assert not out.result.success and "UsageError" in out.stderr
    out = run(shell, "%%compile --compare eager,jax\ndef f(x):\n    return x\n")
    assert "--compare takes" in out.stderr and "jax" in out.stderr
    out = run(shell, "%%compile --backend nope\ndef f(x):\n    return x\n")
    assert "unknown backend 'nope'" in out.stderr and "inductor" in out.stderr
    assert run(shell, "1 + 1").result.result == 2


def test_a_custom_backend_function_from_the_notebook_is_accepted(shell, fake) -> None:
    run(shell, "def my_backend(gm, example_inputs):\n    return gm.forward\n")
    out = run(shell, "%%compile --backend my_backend --no-inspect\ndef f(x):\n    return x\n")
    assert out.result.success, out.stderr
    assert fake.compiled[-1].options["backend"] is shell.user_ns["my_backend"]


def test_a_name_that_is_not_callable_is_left_alone_with_a_message(shell) -> None:
    out = run(
        shell,
        "%%compile\n"
        "def constant(fn):\n"
        "    return 42\n"
        "@constant\n"
        "def h(x):\n"
        "    return x\n"
        "class Plain:\n"
        "    pass\n",
    )
    assert out.result.success
    assert shell.user_ns["h"] == 42
    assert "left h uncompiled: not callable after its decorators (it is a int)" in out.texts()
    assert "left Plain uncompiled: a class that is not a torch.nn.Module subclass" in out.texts()


def test_a_raising_cell_shows_the_user_traceback_and_keeps_the_shell(shell) -> None:
    out = run(
        shell,
        "%%compile\ndef f(x):\n    return x + 1\nf(torch.ones(1))\nraise ValueError('boom <b>')\n",
    )
    assert not out.result.success
    assert isinstance(out.result.error_in_exec, ValueError)  # itself, not a UsageError
    assert "ValueError" in out.stdout and "boom <b>" in out.stdout  # IPython's traceback
    assert "raise ValueError('boom <b>')" in out.stdout  # with the cell's own line
    assert out.stdout.count("Traceback") == 1 and "UsageError" not in out.stdout + out.stderr
    assert [b for b in out.bundles() if WIDGET_MIME in b]  # f's inspector is still shown
    assert run(shell, "f(torch.ones(1)).item()").result.result == 2.0


def test_a_syntax_error_is_reported_like_any_cell(shell) -> None:
    out = run(shell, "%%compile\ndef f(x):\n    return x +\n")
    assert not out.result.success and "SyntaxError" in out.stdout + out.stderr
    assert run(shell, "2 + 2").result.result == 4


def test_the_inspector_follows_calls_from_later_cells(shell) -> None:
    out = run(shell, "%%compile\ndef f(x):\n    return torch.cos(x)\nf(torch.ones(2))\n")
    inspector = magics(shell).inspectors["f"]
    assert len(inspector.state.report.entries) == 1
    run(shell, "f(torch.ones(5))")  # a new shape: the stand-in records a recompile
    assert len(inspector.state.report.entries) == 2
    assert "L['x'].size() == (2,)" in html.unescape(inspector.static_html())
    assert "recompiles: <b>1</b>" in inspector.header.value
    assert out.result.success


def test_redefining_a_function_retires_the_old_inspector(shell) -> None:
    run(shell, "%%compile\ndef f(x):\n    return x\n")
    first = magics(shell).inspectors["f"]
    run(shell, "%%compile\ndef f(x):\n    return -x\n")
    assert magics(shell).inspectors["f"] is not first
    assert first not in jupyter_compile.inspector._LIVE


def test_a_slow_first_call_shows_a_progress_note(shell, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "DELAY_S", 0.05)
    out = run(
        shell,
        "%%compile --no-inspect\n"
        "import time\n"
        "def slow(x):\n"
        "    time.sleep(0.3)\n"
        "    return x\n"
        "slow(torch.ones(1))\n"
        "slow(torch.ones(1))\n",  # same signature: no second note
    )
    assert out.result.success
    notes = [b["text/html"] for b in out.bundles() if "jc-progress" in b.get("text/html", "")]
    # one note, shown while running and then updated in place; none for the repeated call
    assert len(notes) == 2
    assert (
        "compiling slow for new inputs" in notes[0]
        and "slow: compiled for these inputs" in notes[1]
    )


def test_compare_eager_times_the_last_call_after_the_cell(shell) -> None:
    out = run(
        shell,
        "%%compile --compare eager\ndef f(x):\n    return x * 2\nf(torch.ones(16))\n",
    )
    assert out.result.success, out.stdout
    timing = magics(shell).inspectors["f"].state.timing
    assert [m.label for m in timing.measurements] == ["eager", "compiled"]
    assert all(m.samples_ms and m.error is None for m in timing.measurements)
    assert "speedup vs eager" in out.html()


def test_compare_without_a_call_says_there_is_nothing_to_time(shell) -> None:
    out = run(shell, "%%compile --compare eager\ndef f(x):\n    return x\n")
    assert "f was not called in the cell" in out.texts()


def test_the_timing_button_runs_with_the_last_arguments(shell) -> None:
    run(shell, "%%compile\ndef f(x):\n    return x + 1\n")
    view = magics(shell).inspectors["f"].views[4]
    assert view.button.disabled
    run(shell, "f(torch.ones(4))")
    assert not view.button.disabled
    view.button.click()
    assert "per call on cpu" in view.body.value and view.status.value == ""


def test_explain_magic_renders_and_returns_with_o(shell, monkeypatch: pytest.MonkeyPatch) -> None:
    import compiler

    seen = {}

    def explain(fn):
        def run_it(*args, **kwargs):
            seen["call"] = (fn, args, kwargs)
            return type(
                "Out", (), {"graph_count": 1, "graph_break_count": 0, "ops_per_graph": [[]]}
            )()

        return run_it

    monkeypatch.setattr(compiler, "explain", explain, raising=False)
    run(shell, "%%compile --no-inspect\ndef bar(a, b=1):\n    return a * b\n")
    out = run(shell, "%explain bar(torch.ones(2), b=3)")
    assert out.result.success and "%explain bar" in out.html()
    fn, args, kwargs = seen["call"]
    assert fn is shell.user_ns["bar"].__jupyter_compile__.original  # the user's function
    assert kwargs == {"b": 3} and args[0].shape == (2,)
    out = run(shell, "e = %explain -o bar(torch.ones(2))")
    assert shell.user_ns["e"].graph_count == 1


def test_explain_usage_errors(shell) -> None:
    assert "needs a function or a call" in run(shell, "%explain 1 +").stderr
    assert "needs a function or a call" in run(shell, "%explain").stderr
    assert "42 is not callable (it is a int)" in run(shell, "%explain 42").stderr
    assert "torch is not callable (it is a module)" in run(shell, "%explain torch").stderr
    run(shell, "n = 3")
    assert "n is not callable (it is a int)" in run(shell, "%explain n(1)").stderr
    out = run(shell, "%explain undefined_fn(1)")
    assert "NameError" in out.stdout + out.stderr
    assert run(shell, "3 + 3").result.result == 6

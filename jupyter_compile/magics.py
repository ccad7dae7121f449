"""`%%compile` and `%explain`: thin magics over the compiler's public API.

Options are declared with `@magic_arguments`, so `%%compile?` and `%explain?` document
themselves and a bad option is a `UsageError` (one line, the kernel unharmed). The work is
elsewhere: `cell` runs the cell and rebinds what it defines, `targets` wraps the compiled
objects, `inspector` draws them, `explain` draws an explain result.
"""

from __future__ import annotations

import ast
import html
import sys
import types
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

import compiler
from compiler.explain import explain_records
from jupyter_compile.cell import CellRun, run_transformed
from jupyter_compile.explain import ExplainView
from jupyter_compile.inspector import Inspector
from jupyter_compile.targets import (
    CompileOptions,
    FunctionTarget,
    ModuleClassTarget,
    is_module_class,
)

COMPARE_CHOICES = ("eager", "torch")


def message(text: str, level: str = "info") -> None:
    """A short note under the cell, as text and as (escaped) HTML."""
    color = {"info": "#555", "warning": "#8a6d3b", "error": "#a94442"}[level]
    body = html.escape(text)
    display(
        {
            "text/plain": f"%%compile: {text}",
            "text/html": f'<div class="jc-message" style="color: {color};">%%compile: {body}</div>',
        },
        raw=True,
    )


def raise_shown(shell: Any, error: BaseException) -> None:
    """Raise the cell's own exception from the magic, so that the cell fails with it (nbclient,
    papermill and nbval read its type), without a second traceback: the inner run already
    showed it, from the user's line, and the outer run's display of it is skipped once."""
    own = shell.__dict__.get("showtraceback")

    def showtraceback(*args: Any, **kwargs: Any) -> None:
        if own is None:
            shell.__dict__.pop("showtraceback", None)
        else:
            shell.showtraceback = own
        if sys.exc_info()[1] is not error:
            shell.showtraceback(*args, **kwargs)

    shell.showtraceback = showtraceback
    raise error.with_traceback(None)


def _settings(pairs: list[str]) -> tuple[tuple[str, Any], ...]:
    """`--config NAME=VALUE` options as (name, value) pairs; a value is a Python literal
    (16, False, 'x'), else the text itself. An unknown name is refused by config.patch."""
    out = []
    for pair in pairs:
        name, eq, text = pair.partition("=")
        if not eq or not name.strip():
            raise UsageError(f"--config takes NAME=VALUE, e.g. cache_size_limit=16; got {pair!r}")
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            value = text.strip()
        out.append((name.strip(), value))
    try:
        compiler.config.patch(dict(out))
    except AttributeError as exc:
        raise UsageError(f"--config: {exc}") from None
    return tuple(out)


def _probe() -> None:
    """The function compiled to validate options before the cell runs."""


@magics_class
class CompileMagics(Magics):
    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        # The latest inspector per name: redefining a function retires the old one's updates.
        self.inspectors: dict[str, Inspector] = {}

    # -- %%compile ------------------------------------------------------------------------------

    def _backend(self, name: str) -> Any:
        """A registered backend name as is; else a callable of that name from the user's
        namespace (a custom backend defined in an earlier cell)."""
        try:
            compiler.lookup_backend(name)
            return name
        except Exception:
            pass
        candidate = self.shell.user_ns.get(name)
        if callable(candidate):
            return candidate
        known = ", ".join(sorted(compiler.list_backends()))
        raise UsageError(f"unknown backend {name!r}; registered backends: {known}")

    def _options(self, args: Any) -> tuple[CompileOptions, set[str]]:
        compare = {c.strip() for c in (args.compare or "").split(",") if c.strip()}
        unknown = compare - set(COMPARE_CHOICES)
        if unknown:
            raise UsageError(
                f"--compare takes a comma-separated list of {', '.join(COMPARE_CHOICES)}; "
                f"got {', '.join(sorted(unknown))}"
            )
        options = CompileOptions(
            backend=self._backend(args.backend),
            mode=args.mode,
            fullgraph=args.fullgraph,
            dynamic=True if args.dynamic else None,
            config=_settings(args.config),
            verify=args.verify,
        )
        try:  # compile is lazy, so this only checks the options (e.g. an unknown mode)
            compiler.compile(_probe, **options.kwargs())
        except (ValueError, TypeError) as exc:
            raise UsageError(f"bad compile options: {exc}") from None
        return options, compare

    def _hook(self, options: CompileOptions, run: CellRun, obj: Any, name: str) -> Any:
        """Called by the transformed cell right after `name` was defined."""
        try:
            if is_module_class(obj):
                run.compiled[name] = ModuleClassTarget(name, obj, options)
                return obj
            if isinstance(obj, type):
                run.skipped.append((name, "a class that is not a torch.nn.Module subclass"))
                return obj
            if not callable(obj):
                kind = type(obj).__name__
                run.skipped.append((name, f"not callable after its decorators (it is a {kind})"))
                return obj
            if compiler.controls.is_disabled(obj):
                run.skipped.append((name, "disabled with compiler.disable: it runs eagerly"))
                return obj
            target = FunctionTarget(name, obj, options)
        except Exception as exc:  # compile() refused it: the cell goes on with the original
            run.skipped.append((name, f"compiler.compile failed: {type(exc).__name__}: {exc}"))
            return obj
        run.compiled[name] = target
        return target.callable

    @magic_arguments("%compile")  # shown as `%%compile` by `%%compile?` (IPython adds a %)
    @argument(
        "--backend",
        "-b",
        default="inductor",
        help="compiler backend: a registered name (see compiler.list_backends()) or the name "
        "of a backend function defined in the notebook (default: inductor)",
    )
    @argument("--mode", "-m", default=None, help="compile mode, e.g. reduce-overhead, max-autotune")
    @argument("--fullgraph", action="store_true", help="fail on a graph break instead of splitting")
    @argument("--dynamic", action="store_true", help="compile with dynamic shapes")
    @argument(
        "--compare",
        default="",
        metavar="eager,torch",
        help="after the cell, time the last call of each compiled function against eager "
        "(and against torch.compile with 'torch', shown as a separate labelled column)",
    )
    @argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a compiler.config setting for this cell's functions (repeatable), e.g. "
        "--config cache_size_limit=16 --config automatic_dynamic_shapes=False",
    )
    @argument(
        "--verify",
        action="store_true",
        help="check every call against eager (float64 and the inputs' dtypes); a mismatch "
        "warns naming the first diverging graph node and marks its line red in the inspector",
    )
    @argument("--no-inspect", action="store_true", help="do not show inspectors under the cell")
    @cell_magic("compile")
    def compile_cell(self, line: str, cell: str) -> None:
        """Run the cell, compiling every function and nn.Module class it defines.

        Right after each top-level `def` or `class` statement the name is rebound to its
        compiled version, so later calls in the same cell already go through the compiler.
        Decorators are kept (the decorated result is compiled); nn.Module classes stay the
        same class, with instance calls compiled. Under the cell, one inspector per compiled
        function follows it as later cells call it.
        """
        args = parse_argstring(self.compile_cell, line)
        options, compare = self._options(args)
        run = CellRun()
        result = run_transformed(
            self.shell, cell, lambda obj, name: self._hook(options, run, obj, name)
        )

        for name, reason in run.skipped:
            message(f"left {name} uncompiled: {reason}", "warning")
        for name, target in run.compiled.items():
            if name in self.inspectors:
                self.inspectors.pop(name).detach()
            if args.no_inspect:
                continue
            inspector = Inspector(
                title=name,
                fetch=target.report,
                target=target,
                compare_torch="torch" in compare,
                subtitle=f"{target.kind} · {options.describe()}",
            )
            self.inspectors[name] = inspector
            if compare and result.success:
                self._time(inspector, name)
            inspector.show()

        error = result.error_before_exec or result.error_in_exec
        if error is not None:
            raise_shown(self.shell, error)
        if not run.compiled and not run.skipped:
            message("the cell defines no top-level function or nn.Module class to compile")

    def _time(self, inspector: Inspector, name: str) -> None:
        target = inspector.state.target
        if target is None or target.timing_inputs() is None:
            message(f"{name} was not called in the cell, so there is nothing to time yet")
            return
        try:
            inspector.run_timing()
        except Exception as exc:
            message(f"timing {name} failed: {type(exc).__name__}: {exc}", "error")
            return
        blocked = inspector.state.timing.blocked if inspector.state.timing else None
        if blocked is not None:
            message(
                f"{name} was not re-run for --compare: timing needs a side-effect-free call, "
                f"and {blocked}; the Timing tab shows the calls you made",
                "warning",
            )

    # -- %explain -------------------------------------------------------------------------------

    def _unwrap(self, fn: Any) -> Any:
        """What to hand to compiler.explain: the user's own function, not our wrappers."""
        target = getattr(fn, "__jupyter_compile__", None)
        if isinstance(target, FunctionTarget):
            return target.original
        forward = getattr(type(fn), "forward", None)
        target = getattr(forward, "__jupyter_compile__", None)
        if isinstance(fn, types.MethodType) or not isinstance(target, ModuleClassTarget):
            return fn
        return types.MethodType(target.forward, fn)

    def _parse(self, text: str) -> tuple[Any, ast.expr | None, str]:
        """`fn` or `fn(args...)`: the callable, the call node (None for a bare name) and the
        text naming the callable."""
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise UsageError(
                f"%explain needs a function or a call, e.g. %explain fn: {exc.msg}"
            ) from None
        node = tree.body
        call = node if isinstance(node, ast.Call) else None
        fn_node = call.func if call is not None else node
        fn_expr = ast.unparse(fn_node)
        fn = eval(compile(ast.Expression(fn_node), "<%explain>", "eval"), self.shell.user_ns)
        if not callable(fn):
            raise UsageError(f"{fn_expr} is not callable (it is a {type(fn).__name__})")
        return fn, call, fn_expr

    def _call_args(self, call: ast.Call) -> tuple[tuple, dict]:
        collect = ast.Call(ast.Name("__jc_collect__", ast.Load()), call.args, call.keywords)
        expr = ast.fix_missing_locations(ast.Expression(collect))
        helper = {"__jc_collect__": lambda *a, **k: (a, k)}
        return eval(compile(expr, "<%explain>", "eval"), self.shell.user_ns, helper)

    def _recorded(self, fn: Any, title: str) -> Any:
        """The explain result of the calls already made to `fn`, from its records."""
        target = getattr(fn, "__jupyter_compile__", None)
        if target is None:  # an instance or a class of a compiled nn.Module class
            cls = fn if isinstance(fn, type) else type(fn)
            target = getattr(getattr(cls, "forward", None), "__jupyter_compile__", None)
        if isinstance(target, ModuleClassTarget) and not isinstance(fn, type):
            report = compiler.inspect(target.compiled_for(fn))
        elif target is not None:
            report = target.report()
        else:
            try:
                report = compiler.inspect(fn)
            except TypeError:
                raise UsageError(
                    f"{title} was not compiled by %%compile or compiler.compile, so no calls "
                    f"are recorded; %explain {title}(args...) compiles and runs it once"
                ) from None
        if report is None or not report.entries:
            raise UsageError(
                f"{title} has not been called yet, so no calls are recorded: call it, or use "
                f"%explain {title}(args...)"
            )
        return explain_records(report.functions)

    @magic_arguments("explain")
    @argument("-o", "--output", action="store_true", help="return the ExplainOutput object")
    @line_magic("explain")
    def explain_line(self, line: str) -> Any:
        """%explain [-o] fn  or  %explain [-o] fn(args...): the graph count, each graph break
        with its reason, a suggested fix and its source line, the ops of each graph, the guards
        and the recompiles. A bare name explains the calls already made to a compiled
        function; a call runs compiler.explain(fn)(args...) once."""
        options, rest = [], line.strip()
        while rest.startswith("-"):
            token, _, rest = rest.partition(" ")
            options.append(token)
            rest = rest.strip()
        opts = parse_argstring(self.explain_line, " ".join(options))
        if not rest:
            raise UsageError("%explain needs a function or a call, e.g. %explain fn")
        fn, call, title = self._parse(rest)
        if call is None:
            out = self._recorded(fn, title)
        else:
            args, kwargs = self._call_args(call)
            out = compiler.explain(self._unwrap(fn))(*args, **kwargs)
        display(ExplainView(out, title))
        return out if opts.output else None

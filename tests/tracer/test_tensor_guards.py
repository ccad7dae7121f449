"""Tensor guards under change, with the tensor checks in C++ (compiler/runtime/cpp_ext.py)
and in Python: every changed tensor property recompiles (or runs eagerly), never reuses a
stale entry, and the recompile reasons are the same both ways.

Each scenario is a list of steps; a step changes the inputs or the module and calls the
compiled function against eager. The scenario runs once per guard path (the `guard_path`
fixture) for the differential check, and once more each way to compare the reasons."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import compiler
from compiler.runtime import cpp_ext
from compiler.tracer.guards import GuardSet, compile_guards

from .helpers import RecordingBackend, assert_same, assert_same_exception, run


class Affine(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))
        self.register_buffer("shift", torch.randn(4))

    def forward(self, x):
        return x @ self.weight + self.shift


class Tagged(torch.Tensor):
    """A tensor subclass with nothing of its own: its exact type is still guarded."""


class Plain(torch.Tensor):
    """A subclass without `__torch_function__`, traced as a tensor: its checks stay Python."""

    __torch_function__ = torch._C._disabled_torch_function_impl


def scale(x, y):
    return x * 2 + y


def call_both(fn, compiled, *args):
    """Eager and compiled on the same arguments (nothing here mutates them; a clone would
    make a strided slice contiguous)."""
    e_out, e_err = run(fn, list(args), {})
    c_out, c_err = run(compiled, list(args), {})
    assert_same_exception(e_err, c_err)
    if e_err is None:
        assert_same(e_out, c_out)


def fn_steps(*arg_lists):
    """Calls of `scale` with these arguments, each a step."""
    return scale, [lambda _m, args=args: args for args in arg_lists]


def module_steps(*changes):
    """Calls of one Affine module with x = randn(3, 4) after each change to the module."""

    def step(change):
        def apply(m):
            with torch.no_grad():
                change(m)
            return (torch.randn(3, 4),)

        return apply

    return Affine, [step(c) for c in changes]


def same(m):
    pass


def replace_weight(m):
    m.weight = nn.Parameter(torch.randn(4, 4))


def replace_weight_other_shape(m):
    m.weight = nn.Parameter(torch.randn(4, 2))


def data_other_shape(m):
    m.weight.data = torch.randn(4, 2)


def data_transposed(m):
    m.weight.data = torch.randn(4, 4).t()


def weight_no_grad(m):
    m.weight.requires_grad_(False)


def weight_double(m):
    m.weight.data = m.weight.data.double()


def shift_other_shape(m):
    m.shift = torch.randn(1)


def weight_a_tensor(m):
    del m.weight
    m.weight = torch.randn(4, 4)  # a buffer-like plain attribute, not a Parameter


SCENARIOS = {
    "dtype": fn_steps(
        (torch.randn(3), torch.randn(3)), (torch.randn(3).double(), torch.randn(3).double())
    ),
    "shape": fn_steps((torch.randn(3), torch.randn(3)), (torch.randn(5), torch.randn(5))),
    "stride": fn_steps(
        (torch.randn(3, 4), torch.randn(3, 4)), (torch.randn(4, 3).t(), torch.randn(3, 4))
    ),
    "contiguity": fn_steps(
        (torch.randn(3, 4), torch.randn(3, 4)), (torch.randn(3, 8)[:, ::2], torch.randn(3, 4))
    ),
    "channels last": fn_steps(
        (torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4)),
        (torch.randn(2, 3, 4, 4).to(memory_format=torch.channels_last), torch.randn(2, 3, 4, 4)),
    ),
    "requires_grad": fn_steps(
        (torch.randn(3), torch.randn(3)), (torch.randn(3, requires_grad=True), torch.randn(3))
    ),
    "device": fn_steps(
        (torch.randn(3), torch.randn(3)),
        (torch.randn(3, device="meta"), torch.randn(3, device="meta")),
    ),
    "subclass": fn_steps(
        (torch.randn(3), torch.randn(3)), (torch.randn(3).as_subclass(Tagged), torch.randn(3))
    ),
    "plain subclass": fn_steps(
        (torch.randn(3), torch.randn(3)), (torch.randn(3).as_subclass(Plain), torch.randn(3))
    ),
    "subclass then tensor": fn_steps(
        (torch.randn(3).as_subclass(Tagged), torch.randn(3)), (torch.randn(3), torch.randn(3))
    ),
    "parameter for tensor": fn_steps(
        (torch.randn(3), torch.randn(3)),
        (nn.Parameter(torch.randn(3), requires_grad=False), torch.randn(3)),
    ),
    "a float for a tensor": fn_steps((torch.randn(3), torch.randn(3)), (2.5, torch.randn(3))),
    "a list for a tensor": fn_steps(
        (torch.randn(3), torch.randn(3)), ([1.0, 2.0, 3.0], torch.randn(3))
    ),
    "parameter replaced, same metadata": module_steps(same, replace_weight),
    "parameter replaced, other shape": module_steps(same, replace_weight_other_shape),
    "p.data of another shape": module_steps(same, data_other_shape),
    "p.data transposed": module_steps(same, data_transposed),
    "p.data of another dtype": module_steps(same, weight_double),
    "requires_grad_(False) on a parameter": module_steps(same, weight_no_grad),
    "buffer of another shape": module_steps(same, shift_other_shape),
    "parameter becomes a plain tensor": module_steps(same, weight_a_tensor),
}


def run_scenario(name: str) -> list[str | None]:
    """Runs the scenario against eager, each step twice (the second must hit); returns the
    recompile reasons of the function's entries."""
    make, steps = SCENARIOS[name]
    torch.manual_seed(0)
    # a module is shared by eager and compiled (its forward changes nothing)
    module = make() if isinstance(make, type) else None
    eager = module if module is not None else make
    compiled = compiler.compile(eager, backend=RecordingBackend())
    for step in steps:
        args = step(module)
        for _ in range(2):
            call_both(eager, compiled, *args)
    own = compiler.inspect(compiled).functions[0]  # not the callees'
    return [e.recompile_reason for e in own.entries]


@pytest.mark.parametrize("name", SCENARIOS)
def test_changed_tensor_is_never_a_stale_hit(guard_path, name):
    reasons = run_scenario(name)
    if name == "parameter replaced, same metadata":
        assert len(reasons) == 1, reasons  # a parameter's metadata is guarded, not its identity
    else:  # entries after a graph break have no reason: they start elsewhere
        assert len(reasons) >= 2 and any(reasons[1:]), reasons


@pytest.mark.parametrize("name", SCENARIOS)
def test_recompile_reasons_are_the_same_both_ways(tensor_checker, monkeypatch, name):
    found = {}
    for path, checker in (("cpp", tensor_checker), ("python", None)):
        monkeypatch.setattr(cpp_ext, "checker_class", lambda checker=checker: checker)
        compiler.reset()
        found[path] = run_scenario(name)
    assert found["cpp"] == found["python"]


def test_cpp_path_is_used_for_parameters_and_inputs(tensor_checker, monkeypatch):
    monkeypatch.setattr(cpp_ext, "checker_class", lambda: tensor_checker)
    cmod = compiler.compile(Affine(), backend=RecordingBackend())
    cmod(torch.randn(3, 4))
    (entry,) = compiler.inspect(cmod).functions[0].entries
    assert "# tensor checks: C++" in entry.guard_source
    assert "# the 3 tensors marked [C++ ___tensors0] above" in entry.guard_source
    python_checks = [line for line in entry.guard_source.splitlines() if "if not (" in line]
    assert not [line for line in python_checks if "stride()" in line or ".dtype" in line]


def guard_function(tensors: dict, extra=()):
    """compile_guards over tensor guards for L = `tensors`, plus (kind, source, expr) guards."""
    guard_set = GuardSet()
    for name, t in tensors.items():
        guard_set.tensor(f"L[{name!r}]", t)
    for kind, source, expr in extra:
        guard_set.add(kind, source, expr, expr, None)
    return compile_guards(guard_set, "guard", dict(tensors), {})


def test_subclass_tensors_stay_in_python(tensor_checker, monkeypatch):
    """The tracer breaks on a tensor subclass, so only its type is guarded; were it traced,
    its metadata would be read in Python (its attributes may be its own)."""
    monkeypatch.setattr(cpp_ext, "checker_class", lambda: tensor_checker)
    x, y = torch.randn(3).as_subclass(Plain), torch.randn(3)
    guards = guard_function({"x": x, "y": y})
    assert "if not (type(L_x) is " in guards.source and "if not (L_x.dtype is " in guards.source
    assert "[C++ ___tensors0] type(L_y) is " in guards.source
    assert guards.check({"x": x, "y": y}, {})
    assert not guards.check({"x": torch.randn(3), "y": y}, {})
    assert not guards.check({"x": x, "y": y.as_subclass(Plain)}, {})


def test_a_read_from_a_tensor_waits_for_its_cpp_check(tensor_checker, monkeypatch):
    """A Python guard that reads a tensor (`.grad`, `.size(0)`) runs after the C++ call that
    checks the tensor's type: the read never reaches an object of another kind."""
    monkeypatch.setattr(cpp_ext, "checker_class", lambda: tensor_checker)
    x, y = torch.randn(3), torch.randn(2)
    guards = guard_function({"x": x, "y": y}, [("TENSOR_MATCH", "L['x']", "L['x'].size(0) == 3")])
    source = guards.source
    assert source.index("if not ___tensors0(") < source.index("L_x.size(0) == 3")
    assert source.count("if not ___tensors") == 1
    assert guards.check({"x": x, "y": y}, {})
    assert not guards.check({"x": torch.randn(4), "y": y}, {})
    assert [g.description for g in guards.failures({"x": torch.randn(4), "y": y}, {})] == [
        "L['x'] has shape [3]",
        "L['x'].size(0) == 3",
    ]


def test_dynamic_shapes_check_the_type_in_cpp_before_reading_sizes(tensor_checker, monkeypatch):
    """A tensor with symbolic sizes keeps its size guards in Python; its C++ call comes first,
    so `.size(0)` is only read from a tensor of the traced type."""
    monkeypatch.setattr(cpp_ext, "checker_class", lambda: tensor_checker)
    cf = compiler.compile(scale, backend=RecordingBackend(), dynamic=True)
    for n in (3, 5, 7):
        call_both(scale, cf, torch.randn(n), torch.randn(n))
    source = compiler.inspect(cf).functions[0].entries[-1].guard_source
    call = source.index("if not ___tensors0(")
    sizes = [i for i in range(len(source)) if source.startswith("if not (L_x.", i)]
    assert sizes and all(i > call for i in sizes), source


def list_guards(xs: list, extra=()):
    """compile_guards over a list of tensors at L['xs'] (its type, length and each tensor),
    plus (kind, source, expr) guards."""
    guard_set = GuardSet()
    guard_set.length("L['xs']", xs)
    for i, t in enumerate(xs):
        guard_set.tensor(f"L['xs'][{i}]", t)
    for kind, source, expr in extra:
        guard_set.add(kind, source, expr, expr, None)
    return compile_guards(guard_set, "guard", {"xs": xs}, {})


def _changed_lists(xs: list) -> dict:
    """Each way the list or one of its tensors can differ from `xs`."""
    a, b, c = xs
    other = torch.randn(2, 3)
    resized = a.clone()
    resized.set_(torch.randn(3, 2))  # metadata changed in place on a tensor object
    return {
        "dtype": [a, b.double(), c],
        "shape": [a, b, torch.randn(4)],
        "strides": [other.t().contiguous().t(), b, c],
        "requires_grad": [a, b.detach() if b.requires_grad else b.requires_grad_(), c],
        "subclass": [a, b, c.as_subclass(Tagged)],
        "a float": [a, 2.5, c],
        "longer": [a, b, c, c],
        "shorter": [a, b],
        "a tuple": (a, b, c),
        "metadata changed in place": [resized, b, c],
    }


def test_a_list_of_tensors_is_checked_as_a_whole(tensor_checker, monkeypatch):
    """A list whose elements only the C++ checker reads goes to it as `*L_xs` (no local per
    element), and every change to the list or to one of its tensors still fails the guard."""
    monkeypatch.setattr(cpp_ext, "checker_class", lambda: tensor_checker)
    xs = [torch.randn(2, 3), torch.randn(5, requires_grad=True), torch.randn(3)]
    guards = list_guards(xs)
    assert "        *L_xs,\n" in guards.source
    assert "L_xs_0 = " not in guards.source
    assert guards.check({"xs": list(xs)}, {})
    for why, changed in _changed_lists(xs).items():
        assert not guards.check({"xs": changed}, {}), why
        assert guards.failures({"xs": changed}, {}), why


def test_a_list_element_read_elsewhere_keeps_its_local(tensor_checker, monkeypatch):
    """Where a Python check reads one of the tensors, the list is passed element by element:
    the element's local is defined and checked in C++ before that read."""
    monkeypatch.setattr(cpp_ext, "checker_class", lambda: tensor_checker)
    xs = [torch.randn(3), torch.randn(4)]
    guards = list_guards(xs, [("TENSOR_MATCH", "L['xs'][1]", "L['xs'][1].size(0) == 4")])
    assert "*L_xs" not in guards.source and "L_xs_1 = L_xs[1]" in guards.source
    assert guards.source.index("if not ___tensors0(") < guards.source.index("L_xs_1.size(0)")
    assert guards.check({"xs": list(xs)}, {})
    assert not guards.check({"xs": [xs[0], torch.randn(5)]}, {})
    assert not guards.check({"xs": [xs[0].double(), xs[1]]}, {})


def sum_list(xs):
    return xs[0] + xs[1] * xs[2]


@pytest.mark.parametrize(
    "why", ["dtype", "shape", "strides", "requires_grad", "subclass", "longer", "a tuple"]
)
def test_a_list_of_tensors_input_recompiles_on_change(guard_path, why):
    """Compiled against eager: the graph's inputs are fetched from the list (`*L_xs` where the
    guard function spreads it), and a changed list or tensor recompiles."""
    torch.manual_seed(0)
    xs = [torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3)]
    compiled = compiler.compile(sum_list, backend=RecordingBackend())
    for args in (xs, xs, _changed_lists(xs)[why], _changed_lists(xs)[why]):
        call_both(sum_list, compiled, args)
    entries = compiler.inspect(compiled).functions[0].entries
    assert guard_path == "python" or "*L_xs," in entries[0].guard_source
    reasons = [e.recompile_reason for e in entries]
    assert len(reasons) >= 2 and any(reasons[1:]), reasons  # a subclass breaks the graph

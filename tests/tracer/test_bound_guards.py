"""Guards on objects no single read reaches twice the same way: a method bound anew at each
attribute read (guarded as the same function bound to the same object, not by identity) and
the closure cells of a function found on a class (guarded through the cell itself)."""

import torch

import compiler


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class _Holder:
    def __init__(self, k: float) -> None:
        self.k = k

    def scale(self, x):
        return x * self.k


_HOLDER = _Holder(3.0)


def _bound_methods(x):
    y = _Scale.apply(x)  # a new builtin method object at each read
    z = _HOLDER.scale(y)  # a new bound method at each read
    return z + x.__add__(1)  # a new method-wrapper at each read


def test_a_method_bound_at_each_read_does_not_recompile_every_call():
    """`Cls.apply`, `obj.method` and `x.__add__` are new objects at every read: guarded by
    identity they failed on every call (BLOOM's GeLUFunction.apply recompiled each forward
    until the cache limit sent it to eager). They are guarded as the same function bound to
    the same object."""
    compiled = compiler.compile(_bound_methods)
    for _ in range(4):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), _bound_methods(x))
    entries = compiler.inspect(compiled).entries
    assert all(e.recompile_reason is None for e in entries), [e.recompile_reason for e in entries]
    # Bound to another object, it is another method: the guard fails.
    global _HOLDER
    old, _HOLDER = _HOLDER, _Holder(5.0)
    try:
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), _bound_methods(x))
    finally:
        _HOLDER = old


def _property_closing_over(name: str, factor: int) -> property:
    """A property made by a function, closing over a string and a number, as
    torch.nn.utils.parametrize injects one per parametrized tensor."""

    def get(self):
        return getattr(self, name) * factor

    return property(get)


class _Injected(torch.nn.Module):
    scaled = _property_closing_over("base", 3)

    def __init__(self) -> None:
        super().__init__()
        self.base = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        return x + self.scaled


def test_the_cells_of_a_property_found_on_a_class_are_guarded_not_a_break():
    """A property's getter is found on the class: no local or global names its closure
    variables. They are read and guarded through their cells: one graph, no break
    (wav2vec2's weight-normed positional convolution broke at each parametrized read). A
    change to a cell's contents fails the guard."""
    model = _Injected()
    compiled = compiler.compile(model)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), model(x))
    report = compiler.inspect(compiled)
    assert not [e.graph_break for e in report.entries if e.graph_break]
    cell = next(c for c in _Injected.scaled.fget.__closure__ if c.cell_contents == 3)
    cell.cell_contents = 5
    try:
        torch.testing.assert_close(compiled(x), model(x))
    finally:
        cell.cell_contents = 3


def test_a_weight_normed_convolution_is_one_graph():
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 4, 3, padding=1))
    compiled = compiler.compile(conv)
    x = torch.randn(2, 4, 8)
    torch.testing.assert_close(compiled(x), conv(x))
    report = compiler.inspect(compiled)
    assert not [e.graph_break for e in report.entries if e.graph_break]
    assert len(report.graphs) == 1

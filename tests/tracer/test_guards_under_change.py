"""Guards under change through the whole stack: the same compiled function, compiled with
the code generator (`inductor`, C++ kernels here) and with `aot_eager`, called again with a
changed dtype, shape, stride, requires_grad, global, module attribute, training flag or grad
mode, and with inputs that alias one another, always gives eager's answer.

tests/tracer/test_guards.py checks the tracer's guards with a backend that runs the captured
graph as it is; here the compiled graph is specialised code (functional, with fixed layouts),
so a stale entry or a wrong assumption about its inputs shows as a wrong number.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import compiler

from .helpers import assert_same, assert_same_exception, clone, run

BACKENDS = ["inductor", "aot_eager"]


@pytest.fixture(autouse=True)
def own_cache(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "guards-cache"))
    monkeypatch.delenv("COMPILER_STRICT", raising=False)


def call_both(fn, compiled, *args, tol: float = 1e-5):
    """Eager and compiled on equal copies: outputs, errors and the inputs after the call."""
    e_args, c_args = clone(list(args)), clone(list(args))
    e_out, e_err = run(fn, e_args, {})
    c_out, c_err = run(compiled, c_args, {})
    assert_same_exception(e_err, c_err)
    if e_err is None:
        assert_same(e_out, c_out, rtol=tol, atol=tol)
    assert_same(e_args, c_args, "args after the call", rtol=tol, atol=tol)
    return c_out


def call_aliased(fn, compiled, make_args, base_shape=(4, 4)):
    """Eager and compiled on arguments made by `make_args(base)` from equal bases, so the
    arguments alias each other the same way on both sides; compares outputs and bases."""
    base = torch.randn(base_shape)
    e_base, c_base = base.clone(), base.clone()
    e_out, e_err = run(fn, make_args(e_base), {})
    c_out, c_err = run(compiled, make_args(c_base), {})
    assert_same_exception(e_err, c_err)
    if e_err is None:
        assert_same(e_out, c_out, rtol=1e-5, atol=1e-5)
    assert_same(e_base, c_base, "the shared base after the call", rtol=1e-5, atol=1e-5)


# ---- input aliasing and in-place updates ------------------------------------------------------


def add_then_read_other(a, b):
    a.add_(1)
    return b * 2


def scale_other_then_read(a, b):
    b.mul_(2)
    return a + 1, b.sum()


ALIASINGS = {
    "same tensor": lambda x: (x, x),
    "strided view": lambda x: (x, x[:, ::2]),
    "transposed view": lambda x: (x, x.t()),
    "overlapping slices": lambda x: (x[:3], x[1:]),
    "disjoint slices": lambda x: (x[:2], x[2:]),
    "distinct": lambda x: (x, x.clone()),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [add_then_read_other, scale_other_then_read])
def test_aliased_inputs_with_in_place_updates(backend, fn):
    """Found by writing these tests: the functional graph read `b` as it was before `a`'s
    update when `b` is a view of `a` (silently wrong); such calls now run the captured graph
    eagerly, and calls with distinct inputs keep using the compiled one."""
    compiled = compiler.compile(fn, backend=backend)
    for make in [*ALIASINGS.values(), *ALIASINGS.values()]:  # each after each other, twice
        call_aliased(fn, compiled, make)
    notes = [n for g in compiler.inspect(compiled).graphs for n in g.notes]
    assert any("share memory" in n for n in notes), notes


@pytest.mark.parametrize("backend", BACKENDS)
def test_input_aliasing_a_mutated_global(backend):
    state = torch.zeros(4)

    def bump(x):
        state.add_(x)
        return state * 2

    fresh = state.clone()
    eager_state = fresh.clone()

    def eager_bump(x):
        eager_state.add_(x)
        return eager_state * 2

    compiled = compiler.compile(bump, backend=backend)
    for _ in range(2):
        x = torch.randn(4)
        assert_same(eager_bump(x), compiled(x.clone()))
    # now the argument is the global itself
    assert_same(eager_bump(eager_state), compiled(state))
    assert_same(eager_state, state)


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_update_of_an_input_view_and_its_base(backend):
    def fn(x):
        row = x[0]
        row.mul_(10)
        x.add_(1)
        return row + x.sum()

    compiled = compiler.compile(fn, backend=backend)
    for shape in [(3, 4), (3, 4), (2, 5)]:
        call_both(fn, compiled, torch.randn(shape))
    call_both(fn, compiled, torch.randn(4, 3).t())


# ---- tensor properties ------------------------------------------------------------------------


def add_mul(x, y):
    return (x * 2 + y).sum(-1), torch.relu(x - y)


@pytest.mark.parametrize("backend", BACKENDS)
def test_changed_dtype_shape_and_layout(backend):
    compiled = compiler.compile(add_mul, backend=backend)
    base = torch.randn(6, 8)
    calls = [
        (torch.randn(3, 4), torch.randn(3, 4)),
        (torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)),
        (torch.randn(3, 4).half(), torch.randn(3, 4).half()),
        (torch.randint(-3, 4, (3, 4)), torch.randint(-3, 4, (3, 4))),
        (torch.randn(5, 2), torch.randn(5, 2)),  # new shape
        (torch.randn(0, 4), torch.randn(0, 4)),  # empty
        (torch.randn(3, 4), torch.randn(1, 4)),  # a new broadcast
        (torch.randn(4, 3).t(), torch.randn(3, 4)),  # transposed
        (base[::2, ::2], base[1::2, 1::2]),  # strided slices, storage offsets
        (torch.randn(1, 4).expand(3, 4), torch.randn(3, 4)),  # stride 0
        (torch.randn(3, 4), torch.randn(3, 4)),  # the first kind again: its entry
    ]
    for x, y in calls:
        tol = 1e-2 if x.dtype == torch.float16 else 1e-5
        call_both(add_mul, compiled, x, y, tol=tol)


@pytest.mark.parametrize("backend", BACKENDS)
def test_channels_last_input(backend):
    def fn(x):
        return x * 2 + x.mean(1, keepdim=True)

    compiled = compiler.compile(fn, backend=backend)
    x = torch.randn(2, 3, 4, 5)
    call_both(fn, compiled, x)
    call_both(fn, compiled, x.to(memory_format=torch.channels_last))


@pytest.mark.parametrize("backend", BACKENDS)
def test_changed_requires_grad_and_grad_mode(backend):
    def fn(x, w):
        return (x.sin() * w).sum(0)

    compiled = compiler.compile(fn, backend=backend)
    call_both(fn, compiled, torch.randn(3, 2), torch.randn(2))
    x, w = torch.randn(3, 2), torch.randn(2, requires_grad=True)
    out_e, out_c = fn(x, w), compiled(x, w)
    assert out_c.requires_grad
    (g_e,) = torch.autograd.grad(out_e.sum(), w)
    (g_c,) = torch.autograd.grad(out_c.sum(), w)
    torch.testing.assert_close(g_c, g_e)
    with torch.no_grad():
        out = call_both(fn, compiled, torch.randn(3, 2), torch.randn(2, requires_grad=True))
        assert not out.requires_grad
    out = compiled(torch.randn(3, 2), torch.randn(2, requires_grad=True))
    assert out.requires_grad


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("backend", BACKENDS)
def test_changed_device(backend):
    compiled = compiler.compile(add_mul, backend=backend)
    call_both(add_mul, compiled, torch.randn(3, 4), torch.randn(3, 4))
    call_both(add_mul, compiled, torch.randn(3, 4, device="cuda"), torch.randn(3, 4, device="cuda"))
    call_both(add_mul, compiled, torch.randn(3, 4), torch.randn(3, 4))


# ---- Python values ----------------------------------------------------------------------------

SCALE = 2.0
OFFSET = torch.ones(4)


def uses_globals(x, k):
    return x * SCALE + OFFSET * k


@pytest.mark.parametrize("backend", BACKENDS)
def test_changed_constants_and_globals(backend):
    global SCALE, OFFSET
    compiled = compiler.compile(uses_globals, backend=backend)
    old_scale, old_offset = SCALE, OFFSET
    try:
        call_both(uses_globals, compiled, torch.randn(4), 3)
        call_both(uses_globals, compiled, torch.randn(4), 5)  # a new int argument
        call_both(uses_globals, compiled, torch.randn(4), 0.5)  # a float
        SCALE = -1.0  # a mutated global constant
        call_both(uses_globals, compiled, torch.randn(4), 3)
        OFFSET.mul_(7)  # a global tensor updated in place: its new values are read
        call_both(uses_globals, compiled, torch.randn(4), 3)
        OFFSET = torch.full((4,), 2.5)  # rebound to another tensor of the same kind
        call_both(uses_globals, compiled, torch.randn(4), 3)
        OFFSET = torch.full((2, 4), 2.5, dtype=torch.float64)  # another shape and dtype
        call_both(uses_globals, compiled, torch.randn(4), 3)
    finally:
        SCALE, OFFSET = old_scale, old_offset


@pytest.mark.parametrize("backend", BACKENDS)
def test_changed_closure_cell(backend):
    k = 2.0
    w = torch.ones(3)

    def fn(x):
        return x * k + w

    compiled = compiler.compile(fn, backend=backend)
    call_both(fn, compiled, torch.randn(3))
    k = -4.0
    call_both(fn, compiled, torch.randn(3))
    w = torch.zeros(3)
    call_both(fn, compiled, torch.randn(3))


# ---- modules ----------------------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)
        self.act = nn.ReLU()
        self.scale = 2.0
        self.use_act = True

    def forward(self, x):
        y = self.norm(self.lin(x)) * self.scale
        if self.use_act:
            y = self.act(y)
        if self.training:
            y = y + 1
        return y


def module_pair(backend):
    torch.manual_seed(0)
    eager = Block()
    mine = copy.deepcopy(eager)
    return eager, mine, compiler.compile(mine, backend=backend)


def call_module(eager, mine, compiled):
    x = torch.randn(5, 4)
    with torch.no_grad():
        assert_same(eager(x), compiled(x.clone()), rtol=1e-5, atol=1e-5)
    assert_same(eager.state_dict(), mine.state_dict(), "module state", rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_changed_module_attribute_training_flag_and_submodule(backend):
    eager, mine, compiled = module_pair(backend)
    call_module(eager, mine, compiled)
    for change in (
        lambda m: setattr(m, "scale", -0.5),
        lambda m: setattr(m, "use_act", False),
        lambda m: m.eval(),
        lambda m: setattr(m, "act", nn.Tanh()),
        lambda m: m.train(),
        lambda m: setattr(m, "use_act", True),
    ):
        change(eager)
        change(mine)
        call_module(eager, mine, compiled)


@pytest.mark.parametrize("backend", BACKENDS)
def test_parameters_updated_or_replaced(backend):
    eager, mine, compiled = module_pair(backend)
    eager.eval(), mine.eval()
    call_module(eager, mine, compiled)
    with torch.no_grad():  # an optimizer step: the same tensors, new values
        for p_e, p_m in zip(eager.parameters(), mine.parameters()):
            p_e.mul_(-2)
            p_m.mul_(-2)
    call_module(eager, mine, compiled)
    weight = torch.randn(4, 4)
    eager.lin.weight = nn.Parameter(weight.clone())
    mine.lin.weight = nn.Parameter(weight.clone())
    call_module(eager, mine, compiled)


def test_entries_with_the_same_wrapper_text_keep_their_own_kernels():
    """Found by test_changed_dtype_shape_and_layout: two entries whose generated wrappers
    were the same text (same buffers) around different kernels (one broadcasts `y`) shared
    one wrapper module, and the second compile rebound the kernel the first one called: the
    first kind of call then gave wrong numbers."""
    compiled = compiler.compile(add_mul)
    for y_shape in [(3, 4), (1, 4), (3, 4), (1, 4)]:
        call_both(add_mul, compiled, torch.randn(3, 4), torch.randn(y_shape))
    wrappers = [g.wrapper_source for g in compiler.inspect(compiled).graphs]
    assert len(wrappers) == 2 and wrappers[0] == wrappers[1]


# ---- global objects and global state ----------------------------------------------------------


class Config:
    def __init__(self):
        self.scale = 2.0
        self.act = "relu"


CONFIG = Config()
TABLE = {"k": 2.0, "use": True}


def uses_config(x):
    y = x * CONFIG.scale * TABLE["k"]
    if TABLE["use"]:
        y = y + 1
    return torch.relu(y) if CONFIG.act == "relu" else torch.tanh(y)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mutated_attribute_of_a_global_object_and_a_global_dict(backend):
    compiled = compiler.compile(uses_config, backend=backend)
    changes = [
        lambda: setattr(CONFIG, "scale", -3.0),
        lambda: TABLE.__setitem__("k", 0.5),
        lambda: TABLE.__setitem__("use", False),
        lambda: setattr(CONFIG, "act", "tanh"),
        lambda: TABLE.__setitem__("extra", 1),
    ]
    try:
        call_both(uses_config, compiled, torch.randn(5))
        for change in changes:
            change()
            call_both(uses_config, compiled, torch.randn(5))
    finally:
        CONFIG.scale, CONFIG.act = 2.0, "relu"
        TABLE.clear()
        TABLE.update({"k": 2.0, "use": True})


def adds_a_new_tensor(x):
    return x + torch.ones(3)


def casts_like_a_new_tensor(x):
    y = torch.ones(3)
    return x.to(y.dtype) * 2


@pytest.mark.parametrize("backend", ["eager", *BACKENDS])
@pytest.mark.parametrize("fn", [adds_a_new_tensor, casts_like_a_new_tensor])
def test_changed_default_dtype(fn, backend):
    """A factory's dtype, read by the graph or by Python while tracing, follows the default
    dtype: the entries guard it (the code generator also compiles per default dtype)."""
    compiled = compiler.compile(fn, backend=backend)
    x = torch.randn(3, dtype=torch.float16)
    call_both(fn, compiled, x, tol=1e-3)
    torch.set_default_dtype(torch.float64)
    try:
        call_both(fn, compiled, x, tol=1e-3)
    finally:
        torch.set_default_dtype(torch.float32)
    call_both(fn, compiled, x, tol=1e-3)


@pytest.mark.parametrize("backend", ["eager", *BACKENDS])
def test_autocast_on_and_off(backend):
    """Found by writing this test: a graph compiled by inductor without autocast and run
    under it read the bfloat16 result of its (extern) matmul as float32: garbage (~1e27).
    The code generator compiles per autocast state, and the entries guard it: a graph keeps
    no casts of another call's state."""

    def mm(x, w):
        return x @ w + 1

    x, w = torch.randn(2, 4), torch.randn(4, 3)
    for first_under_autocast in (False, True):
        compiler.reset()
        compiled = compiler.compile(mm, backend=backend)
        for autocast in (first_under_autocast, not first_under_autocast, first_under_autocast):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                call_both(mm, compiled, x, w, tol=1e-2)

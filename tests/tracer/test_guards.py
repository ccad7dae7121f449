"""Guards under change: the same compiled function called with a changed dtype, shape,
stride, requires_grad, Python constant, global, module attribute, training flag or grad mode
always gives eager's answer, by a recompile that `compiler.inspect` records with its reason.
After 8 entries for one code object the function runs eagerly with one warning."""

import types
import warnings
from collections import OrderedDict

import pytest
import torch
from torch import nn

import compiler

from .helpers import RecordingBackend, assert_same, assert_same_exception, clone, run

# Each test runs with the tensor checks in C++ and in Python (conftest.py's guard_path).
pytestmark = pytest.mark.usefixtures("guard_path")


def call_both(fn, compiled, *args, **kwargs):
    """One differential call: eager and compiled on clones, outputs and inputs compared."""
    e_args, c_args = clone(list(args)), clone(list(args))
    e_out, e_err = run(fn, e_args, kwargs)
    c_out, c_err = run(compiled, c_args, kwargs)
    assert_same_exception(e_err, c_err)
    if e_err is None:
        assert_same(e_out, c_out)
    assert_same(e_args, c_args, "args after the call")
    return c_out


def own_entries(compiled):
    """The cache entries of the compiled function's own code object (callees excluded)."""
    return compiler.inspect(compiled).functions[0].entries


def assert_recompiled(compiled, n_entries):
    entries = own_entries(compiled)
    assert len(entries) == n_entries, f"{len(entries)} entries, expected {n_entries}: " + repr(
        [e.recompile_reason for e in entries]
    )
    assert entries[0].recompile_reason is None, entries[0].recompile_reason
    for e in entries[1:]:
        assert isinstance(e.recompile_reason, str) and e.recompile_reason.strip(), (
            "a recompiled entry must say which guard failed"
        )
    return entries


def compiled_with_recorder(fn):
    backend = RecordingBackend()
    return compiler.compile(fn, backend=backend), backend


def add_mul(x, y):
    return x * 2 + y


# ---- tensor properties ------------------------------------------------------------------


def test_same_kind_of_input_reuses_the_entry():
    cf, backend = compiled_with_recorder(add_mul)
    for _ in range(5):
        call_both(add_mul, cf, torch.randn(3), torch.randn(3))
    assert backend.count == 1
    (entry,) = assert_recompiled(cf, 1)
    assert entry.hits >= 4


def test_changed_dtype_recompiles():
    cf, backend = compiled_with_recorder(add_mul)
    call_both(add_mul, cf, torch.randn(3), torch.randn(3))
    call_both(add_mul, cf, torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64))
    call_both(add_mul, cf, torch.randint(0, 5, (3,)), torch.randint(0, 5, (3,)))
    assert backend.count == 3
    entries = assert_recompiled(cf, 3)
    assert "dtype" in entries[1].recompile_reason or "float" in entries[1].recompile_reason


def test_changed_shape_recompiles_and_old_shape_still_hits():
    cf, backend = compiled_with_recorder(add_mul)
    call_both(add_mul, cf, torch.randn(3), torch.randn(3))
    call_both(add_mul, cf, torch.randn(4, 2), torch.randn(4, 2))
    call_both(add_mul, cf, torch.randn(3), torch.randn(3))
    assert backend.count == 2
    assert_recompiled(cf, 2)


def test_changed_broadcasting_pattern():
    cf, _ = compiled_with_recorder(add_mul)
    call_both(add_mul, cf, torch.randn(3, 4), torch.randn(3, 4))
    call_both(add_mul, cf, torch.randn(3, 4), torch.randn(1, 4))
    call_both(add_mul, cf, torch.randn(3, 1), torch.randn(1, 4))


def test_changed_strides_give_eager_answer():
    def f(x):
        return x.view(-1) if x.is_contiguous() else x.reshape(-1) * 2

    cf, _ = compiled_with_recorder(f)
    base = torch.randn(3, 4)
    call_both(f, cf, base)
    call_both(f, cf, base.t())
    call_both(f, cf, torch.randn(4, 6)[:, ::2])


def test_changed_requires_grad_recompiles():
    def f(x):
        return x.sin() * 2

    cf, backend = compiled_with_recorder(f)
    call_both(f, cf, torch.randn(3))
    out = call_both(f, cf, torch.randn(3, requires_grad=True))
    assert out.requires_grad
    assert backend.count == 2
    assert_recompiled(cf, 2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_changed_device_recompiles():
    cf, backend = compiled_with_recorder(add_mul)
    call_both(add_mul, cf, torch.randn(3), torch.randn(3))
    call_both(add_mul, cf, torch.randn(3, device="cuda"), torch.randn(3, device="cuda"))
    assert backend.count == 2


def test_same_tensor_twice_then_distinct_tensors():
    def f(a, b):
        a.add_(1)
        return a * b

    cf, _ = compiled_with_recorder(f)
    x_e = torch.randn(3)
    x_c = x_e.clone()
    assert_same(f(x_e, x_e), cf(x_c, x_c))
    assert_same(x_e, x_c)
    call_both(f, cf, torch.randn(3), torch.randn(3))
    x_e = torch.randn(3)
    x_c = x_e.clone()
    assert_same(f(x_e, x_e), cf(x_c, x_c))


# ---- Python values ------------------------------------------------------------------------


def scale_by(x, k):
    return x * k + k


def test_changed_int_constant_recompiles():
    cf, backend = compiled_with_recorder(scale_by)
    call_both(scale_by, cf, torch.randn(3), 2)
    call_both(scale_by, cf, torch.randn(3), 3)
    call_both(scale_by, cf, torch.randn(3), 2)
    assert backend.count == 2
    assert_recompiled(cf, 2)


def test_changed_constant_type_recompiles():
    cf, _ = compiled_with_recorder(scale_by)
    call_both(scale_by, cf, torch.randn(3), 2)
    call_both(scale_by, cf, torch.randn(3), 2.0)
    call_both(scale_by, cf, torch.randn(3), True)
    call_both(scale_by, cf, torch.randn(3), torch.tensor(2.0))


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.factors = (2, (3, 0.5))

    def forward(self, x):
        a, (b, c) = self.factors
        return x * a + b * c + torch.full_like(x, a, dtype=torch.float64)


def test_constant_tuple_attribute_is_one_guard_and_changes_recompile():
    """A module's tuple of constants (a convolution's stride) is guarded as one object: an
    equal tuple passes, a changed element or element type recompiles."""
    mod = _Scaled()
    cf, backend = compiled_with_recorder(mod)
    call_both(mod, cf, torch.randn(3))
    guard_source = own_entries(cf)[0].guard_source
    assert "___same_constant(" in guard_source and "len(" not in guard_source
    mod.factors = (2, (3, 0.5))  # another tuple object, equal: no recompile
    call_both(mod, cf, torch.randn(3))
    assert backend.count == 1
    mod.factors = (1, (3, 0.25))
    call_both(mod, cf, torch.randn(3))
    mod.factors = (True, (3, 0.25))  # equal to the last one, but a bool: another graph
    call_both(mod, cf, torch.randn(3))
    assert backend.count == 3
    assert_recompiled(cf, 3)


def test_changed_list_length_recompiles():
    def f(xs):
        return sum(xs) * len(xs)

    cf, _ = compiled_with_recorder(f)
    call_both(f, cf, [torch.randn(3), torch.randn(3)])
    call_both(f, cf, [torch.randn(3), torch.randn(3), torch.randn(3)])
    call_both(f, cf, [torch.randn(3)])


def test_changed_string_flag():
    def f(x, act):
        return torch.relu(x) if act == "relu" else torch.sigmoid(x)

    cf, _ = compiled_with_recorder(f)
    call_both(f, cf, torch.randn(3), "relu")
    call_both(f, cf, torch.randn(3), "sigmoid")
    assert_recompiled(cf, 2)


def test_changed_none_to_tensor():
    def f(x, bias=None):
        return x if bias is None else x + bias

    cf, _ = compiled_with_recorder(f)
    call_both(f, cf, torch.randn(3))
    call_both(f, cf, torch.randn(3), torch.randn(3))
    call_both(f, cf, torch.randn(3), None)


SCALE = 2
OFFSET = torch.ones(3)
TABLE = [1.0, 2.0]


def uses_globals(x):
    return x * SCALE + OFFSET + len(TABLE)


def test_mutated_global_constant():
    global SCALE
    cf, _ = compiled_with_recorder(uses_globals)
    call_both(uses_globals, cf, torch.randn(3))
    try:
        SCALE = 5
        call_both(uses_globals, cf, torch.randn(3))
        assert_recompiled(cf, 2)
    finally:
        SCALE = 2


def test_reassigned_global_tensor():
    global OFFSET
    cf, _ = compiled_with_recorder(uses_globals)
    call_both(uses_globals, cf, torch.randn(3))
    old = OFFSET
    try:
        OFFSET = torch.full((3,), 10.0)  # same metadata, new values: no stale constant
        call_both(uses_globals, cf, torch.randn(3))
        OFFSET = torch.zeros(4, 3)  # new shape: broadcasting changes the output
        call_both(uses_globals, cf, torch.randn(3))
    finally:
        OFFSET = old


def test_global_tensor_mutated_in_place():
    cf, _ = compiled_with_recorder(uses_globals)
    call_both(uses_globals, cf, torch.randn(3))
    OFFSET.mul_(3)
    try:
        call_both(uses_globals, cf, torch.randn(3))
    finally:
        OFFSET.div_(3)


def test_global_list_appended():
    cf, _ = compiled_with_recorder(uses_globals)
    call_both(uses_globals, cf, torch.randn(3))
    TABLE.append(3.0)
    try:
        call_both(uses_globals, cf, torch.randn(3))
    finally:
        TABLE.pop()


def _helper_a(t):
    return t + 1


def _helper_b(t):
    return t - 1


HELPER = _helper_a


def calls_global_helper(x):
    return HELPER(x) * 2


def test_reassigned_global_function():
    global HELPER
    cf, _ = compiled_with_recorder(calls_global_helper)
    call_both(calls_global_helper, cf, torch.randn(3))
    try:
        HELPER = _helper_b
        call_both(calls_global_helper, cf, torch.randn(3))
        assert_recompiled(cf, 2)
    finally:
        HELPER = _helper_a


def test_changed_closure_cell():
    k = 2

    def f(x):
        return x * k

    cf, _ = compiled_with_recorder(f)
    call_both(f, cf, torch.randn(3))
    k = 7
    call_both(f, cf, torch.randn(3))


# ---- modules ----------------------------------------------------------------------------


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.act = nn.ReLU()
        self.scale = 2.0
        self.use_act = True

    def forward(self, x):
        y = self.lin(x) * self.scale
        if self.use_act:
            y = self.act(y)
        if self.training:
            y = y + 1
        return y


def module_pair():
    torch.manual_seed(0)
    eager = Scaled()
    return eager, compiler.compile(eager, backend=RecordingBackend())


def test_changed_module_float_attribute():
    mod, cmod = module_pair()
    call_both(mod, cmod, torch.randn(2, 4))
    mod.scale = 3.5
    call_both(mod, cmod, torch.randn(2, 4))
    mod.use_act = False
    call_both(mod, cmod, torch.randn(2, 4))


def test_changed_training_flag():
    mod, cmod = module_pair()
    call_both(mod, cmod, torch.randn(2, 4))
    mod.eval()
    assert not cmod.training
    call_both(mod, cmod, torch.randn(2, 4))
    cmod.train()
    assert mod.training
    call_both(mod, cmod, torch.randn(2, 4))


def test_replaced_submodule():
    mod, cmod = module_pair()
    call_both(mod, cmod, torch.randn(2, 4))
    mod.act = nn.Tanh()
    call_both(mod, cmod, torch.randn(2, 4))


def test_parameter_updated_in_place_is_seen():
    mod, cmod = module_pair()
    call_both(mod, cmod, torch.randn(2, 4))
    with torch.no_grad():
        mod.lin.weight.mul_(-2)  # an optimizer step: same tensor, new values
    call_both(mod, cmod, torch.randn(2, 4))


def test_parameter_replaced():
    mod, cmod = module_pair()
    call_both(mod, cmod, torch.randn(2, 4))
    mod.lin.weight = nn.Parameter(torch.randn(4, 4))
    call_both(mod, cmod, torch.randn(2, 4))


def test_batchnorm_train_then_eval():
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    comp_mod = __import__("copy").deepcopy(eager)
    cmod = compiler.compile(comp_mod, backend=RecordingBackend())
    for train in (True, True, False, True):
        eager.train(train)
        comp_mod.train(train)
        x = torch.randn(5, 4)
        assert_same(eager(x), cmod(x.clone()))
        assert_same(eager.state_dict(), comp_mod.state_dict(), "running stats")


# ---- nested modules: children, parameters and buffers read from the module tables ---------


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)

    def forward(self, x):
        return self.norm(self.lin(x)).relu()


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(Block(), Block())
        self.heads = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.register_buffer("offset", torch.zeros(4))

    def forward(self, x):
        x = self.blocks(x) + self.offset
        for head in self.heads:
            x = head(x)
        return x


def stack_pair():
    torch.manual_seed(0)
    eager = Stack().eval()
    return eager, compiler.compile(eager, backend=RecordingBackend())


def changed_stack_recompiles(change, n_entries=2):
    """Call, apply `change` to the module (shared by both sides), call again: eager's answer,
    through a new entry whose recompile reason names the failing guard."""
    mod, cmod = stack_pair()
    call_both(mod, cmod, torch.randn(3, 4))
    change(mod)
    call_both(mod, cmod, torch.randn(3, 4))
    call_both(mod, cmod, torch.randn(3, 4))
    return assert_recompiled(cmod, n_entries)


def test_nested_submodule_attribute_replaced():
    def change(mod):
        mod.blocks[1].lin = nn.Linear(4, 4)

    changed_stack_recompiles(change)


def test_sequential_item_replaced():
    def change(mod):
        mod.blocks[0] = Block().eval()

    changed_stack_recompiles(change)


def test_parameter_replaced_by_another_parameter():
    def change(mod):
        mod.heads[0].weight = nn.Parameter(torch.randn(4, 4))

    changed_stack_recompiles(change, n_entries=1)  # same kind of tensor: the new one is read


def test_parameter_data_given_another_shape():
    def change(mod):
        mod.heads[1].weight.data = torch.randn(3, 4)  # same Parameter object, new shape
        mod.heads[1].bias.data = torch.randn(3)

    (_, entry) = changed_stack_recompiles(change)
    assert "shape" in entry.recompile_reason, entry.recompile_reason


def test_parameter_data_given_another_dtype():
    def change(mod):
        mod.heads[1].bias.data = mod.heads[1].bias.data.double()

    changed_stack_recompiles(change)


def test_parameter_requires_grad_flipped():
    def change(mod):
        mod.requires_grad_(False)

    (_, entry) = changed_stack_recompiles(change)
    assert "requires_grad" in entry.recompile_reason, entry.recompile_reason


def test_parameter_set_to_none():
    def change(mod):
        mod.heads[0].bias = None

    changed_stack_recompiles(change)


def test_buffer_replaced():
    mod, cmod = stack_pair()
    call_both(mod, cmod, torch.randn(3, 4))
    mod.offset = torch.full((4,), 3.0)  # same kind of tensor: the entry reads the new one
    call_both(mod, cmod, torch.randn(3, 4))
    assert_recompiled(cmod, 1)
    mod.offset = torch.full((3, 4), 2.0)  # another shape
    call_both(mod, cmod, torch.randn(3, 4))
    assert_recompiled(cmod, 2)


def test_buffer_becomes_a_parameter():
    def change(mod):
        mod.offset = nn.Parameter(torch.ones(4))  # moves from _buffers to _parameters

    (_, entry) = changed_stack_recompiles(change)
    assert "offset" in entry.recompile_reason, entry.recompile_reason


def test_nested_training_flag_flipped():
    def change(mod):
        mod.blocks[1].norm.train()

    changed_stack_recompiles(change)


def test_module_list_appended():
    def change(mod):
        mod.heads.append(nn.Linear(4, 2))

    changed_stack_recompiles(change)


def test_sequential_appended_then_item_deleted():
    mod, cmod = stack_pair()
    call_both(mod, cmod, torch.randn(3, 4))
    mod.blocks.append(Block().eval())
    call_both(mod, cmod, torch.randn(3, 4))
    del mod.blocks[0]  # renumbers the keys
    call_both(mod, cmod, torch.randn(3, 4))
    assert_recompiled(cmod, 3)


def test_parametrization_registered_after_compiling():
    class Doubled(nn.Module):
        def forward(self, w):
            return w * 2

    def change(mod):
        nn.utils.parametrize.register_parametrization(mod.heads[0], "weight", Doubled())

    mod, cmod = stack_pair()
    call_both(mod, cmod, torch.randn(3, 4))
    change(mod)  # swaps the class of heads[0] and moves its weight out of _parameters
    call_both(mod, cmod, torch.randn(3, 4))


class NegatedLinear(nn.Linear):
    def forward(self, x):
        return -super().forward(x)


def test_class_of_a_child_swapped():
    mod, cmod = stack_pair()
    call_both(mod, cmod, torch.randn(3, 4))
    mod.heads[0].__class__ = NegatedLinear  # same object, same tables, another forward
    call_both(mod, cmod, torch.randn(3, 4))
    assert_recompiled(cmod, 2)


class Picks(nn.Module):
    """Children reached by a constant index or key, not by iteration."""

    def __init__(self):
        super().__init__()
        self.named = nn.Sequential(OrderedDict(conv=nn.Linear(4, 4), act=nn.Tanh()))
        self.stages = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)])
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 4), "b": nn.Sigmoid()})

    def forward(self, x):
        x = self.named[1](self.named[0](x))
        x = self.stages[1](self.stages[0](x))
        x = self.layers[-1](self.layers[1](x))
        return self.heads["b"](self.heads["a"](x))


def test_children_by_index_and_key_follow_changes():
    torch.manual_seed(0)
    mod = Picks()
    cmod = compiler.compile(mod, backend=RecordingBackend())
    changes = [
        lambda: setattr(mod.named, "act", nn.Sigmoid()),
        # the same children in another order, behind Sequential's back: named[0] is the Sigmoid
        lambda: setattr(mod.named, "_modules", OrderedDict(reversed(mod.named._modules.items()))),
        lambda: mod.stages.insert(0, nn.Tanh()),  # stages[1] is now the Linear
        lambda: mod.layers.insert(0, nn.Tanh()),  # layers[-1] is the same, layers[1] is not
        lambda: mod.layers.pop(0),  # back to the layout of an earlier entry: no recompile
        lambda: mod.heads.update({"b": nn.Tanh()}),
        lambda: setattr(mod.layers, "2", nn.Linear(4, 4)),
    ]
    call_both(mod, cmod, torch.randn(2, 4))
    for change in changes:
        change()
        call_both(mod, cmod, torch.randn(2, 4))
        call_both(mod, cmod, torch.randn(2, 4))
    assert len(own_entries(cmod)) == len(changes)


# ---- grad mode ----------------------------------------------------------------------------


def test_grad_mode_on_off():
    def f(x):
        return x.exp() * 2

    cf, backend = compiled_with_recorder(f)
    x = torch.randn(3, requires_grad=True)
    out = call_both(f, cf, x)
    assert out.requires_grad
    with torch.no_grad():
        out = call_both(f, cf, x)
        assert not out.requires_grad
    out = call_both(f, cf, x)
    assert out.requires_grad
    assert backend.count == 2
    assert_recompiled(cf, 2)


def test_inference_mode_gives_eager_answer():
    def f(x):
        return x * 2

    cf, _ = compiled_with_recorder(f)
    call_both(f, cf, torch.randn(3, requires_grad=True))
    with torch.inference_mode():
        x = torch.randn(3)
        out_e, out_c = f(x), cf(x)
        assert_same(out_e, out_c)
        assert out_c.is_inference() == out_e.is_inference()


# ---- data-dependent paths over many calls ------------------------------------------------


def test_both_branches_over_many_calls():
    def bar(a, b):
        x = a / (torch.abs(a) + 1)
        if b.sum() < 0:
            b = b * -1
        return x * b

    cf, backend = compiled_with_recorder(bar)
    for _ in range(8):
        call_both(bar, cf, torch.randn(10), torch.randn(10))
    assert backend.count <= 3


# ---- the cache limit --------------------------------------------------------------------


def test_cache_limit_falls_back_to_eager_with_one_warning():
    def f(x, cfg):
        return x + cfg.scale

    cf, backend = compiled_with_recorder(f)
    # a float read as an attribute (a hyperparameter) specialises the graph on its value; a
    # changing int or float local would become a symbolic input at its second compile
    # (automatic dynamic), and stop recompiling
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning before the limit
        for n in range(8):
            call_both(f, cf, torch.randn(3), types.SimpleNamespace(scale=n + 0.5))
    assert backend.count == 8
    with pytest.warns(Warning) as caught:
        for n in range(8, 14):
            call_both(f, cf, torch.randn(3), types.SimpleNamespace(scale=n + 0.5))
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert backend.count == 8
    assert len(own_entries(cf)) == 8
    # the entries compiled before the limit are still used
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        call_both(f, cf, torch.randn(3), types.SimpleNamespace(scale=3.5))
    assert backend.count == 8


def test_cache_limit_is_per_code_object():
    def f(x, n):
        return x * n

    def g(x):
        return x - 1

    cf, _ = compiled_with_recorder(f)
    cg, g_backend = compiled_with_recorder(g)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in range(12):
            call_both(f, cf, torch.randn(3), n)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        call_both(g, cg, torch.randn(3))
    assert g_backend.count == 1


# ---- the guard records ------------------------------------------------------------------


def test_guards_are_recorded_as_runnable_python():
    cf, _ = compiled_with_recorder(scale_by)
    call_both(scale_by, cf, torch.randn(3), 2)
    (entry,) = own_entries(cf)
    kinds = {g.kind for g in entry.guards}
    assert "TENSOR_MATCH" in kinds, kinds
    sources = " ".join(g.source for g in entry.guards)
    assert "x" in sources and "k" in sources, sources
    assert entry.guard_source.strip()
    compile(entry.guard_source, "<guards>", "exec")  # straight-line Python that parses


def test_enum_member_attribute_guarded_by_equality():
    # A str/int Enum member is an instance of str/int, but its repr is not Python source:
    # the guard must compare it by reference (timm's PatchEmbed.output_fmt).
    import enum

    class Fmt(str, enum.Enum):
        NCHW = "NCHW"
        NHWC = "NHWC"

    class Level(enum.IntEnum):
        LOW = 1
        HIGH = 2

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fmt, self.level = Fmt.NHWC, Level.LOW

        def forward(self, x):
            if self.fmt == Fmt.NHWC:
                x = x.permute(0, 2, 3, 1)
            return x * self.level

    m = M()
    compiled = compiler.compile(m, fullgraph=True)
    x = torch.randn(2, 3, 4, 5)
    call_both(m, compiled, x)
    m.fmt, m.level = Fmt.NCHW, Level.HIGH
    call_both(m, compiled, x)
    assert_recompiled(compiled, 2)


def test_recompile_limit_warning_is_one_short_line():
    """A failing guard on a module names it by class: its repr (every layer) stays out."""

    def f(model, x):
        return model(x)

    cf = compiler.compile(f, backend="eager")
    with pytest.warns(compiler.CompilerWarning) as caught:
        for _ in range(10):
            cf(torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU()), torch.randn(2, 3))
    (message,) = [str(w.message) for w in caught if "recompiled" in str(w.message)]
    assert "\n" not in message and len(message) < 600, message
    assert "a Sequential module at 0x" in message, message

"""Guard and fetch functions read every source prefix once, into a local, and take module
children, parameters and buffers from the module's tables only where that is what attribute
access returns (the recompiles this relies on are in test_guards.py)."""

import gc
import re
import weakref

import pytest
import torch
from torch import nn

import compiler
from compiler.runtime import cpp_ext
from compiler.tracer.access import AccessPlan

from .helpers import RecordingBackend, assert_same


class Scale(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.register_buffer("k", torch.full((2,), k))

    def forward(self, x):
        return x * self.k


def guard_source(mod, *args):
    cmod = compiler.compile(mod, backend=RecordingBackend())
    assert_same(mod(*args), cmod(*args))
    return compiler.inspect(cmod).functions[0].entries[0].guard_source


def test_nested_sequential_reads_each_prefix_once(guard_path):
    net = nn.Sequential(nn.Sequential(Scale(2.0), Scale(3.0)), nn.ReLU())
    source = guard_source(net, torch.randn(2))
    # the full path (a call that finds the FrozenReads' dicts unchanged reads none of these)
    assignments = [
        line.strip()
        for line in source.splitlines()
        if re.match(r"        \w+ = ", line) and "___cached" not in line
    ]
    assert not re.findall(r"^            \w+ = ", source, flags=re.M)
    assert len(set(assignments)) == len(assignments)
    assert sorted(assignments) == sorted(
        [
            "L_self = L['self']",
            "L_self_0 = L_self._modules['0']",
            "L_self_1 = L_self._modules['1']",
            "L_input = L['input']",
            "L_self_0_0 = L_self_0._modules['0']",
            "L_self_0_1 = L_self_0._modules['1']",
            "L_self_0_0_k = L_self_0_0._buffers['k']",
            "L_self_0_1_k = L_self_0_1._buffers['k']",
            "globals2_F = ___globals2['F']",
            "L_self_1_inplace = L_self_1.inplace",
        ]
    )
    # every check reads locals: no chain is walked again from L
    checks = [line for line in source.splitlines() if line.strip().startswith("if not")]
    assert not [c for c in checks if "L[" in c or "][" in c], checks


PYTHON_TENSOR_CHECKS = (
    "        # L['self'][0].k is a Tensor\n"
    "        if not (type(L_self_0_k) is ___type):\n"
    "            return False\n"
    "        # L['self'][0].k has dtype torch.float32\n"
    "        if not (L_self_0_k.dtype is ___dtype):\n"
    "            return False\n"
    "        # L['self'][0].k is on cpu\n"
    "        if not (L_self_0_k.is_cpu):\n"
    "            return False\n"
    "        # L['self'][0].k has shape [2]\n"
    "        if not (L_self_0_k.shape == (2,)):\n"
    "            return False\n"
    "        # L['self'][0].k has strides (1,)\n"
    "        if not (L_self_0_k.stride() == (1,)):\n"
    "            return False\n"
    "        # L['self'][0].k.requires_grad is False\n"
    "        if not (L_self_0_k.requires_grad is False):\n"
    "            return False\n"
)
CPP_TENSOR_CHECKS = (
    "        # L['self'][0].k is a Tensor\n"
    "        # [C++ ___tensors] type(L_self_0_k) is ___type\n"
    "        # L['self'][0].k has dtype torch.float32\n"
    "        # [C++ ___tensors] L_self_0_k.dtype is ___dtype\n"
    "        # L['self'][0].k is on cpu\n"
    "        # [C++ ___tensors] L_self_0_k.is_cpu\n"
    "        # L['self'][0].k has shape [2]\n"
    "        # [C++ ___tensors] L_self_0_k.shape == (2,)\n"
    "        # L['self'][0].k has strides (1,)\n"
    "        # [C++ ___tensors] L_self_0_k.stride() == (1,)\n"
    "        # L['self'][0].k.requires_grad is False\n"
    "        # [C++ ___tensors] L_self_0_k.requires_grad is False\n"
    "        # the 1 tensors marked [C++ ___tensors] above: exact type, dtype, device, shape, strides, requires_grad\n"
    "        if not ___tensors(\n"
    "            L_self_0_k,\n"
    "        ):\n"
    "            return False\n"
)
# with C++ guards, a call that finds the reads from L['self'] unchanged checks only the tensor
CPP_FAST_PATH = (
    "        ___cached = ___frozen()\n"
    "        if ___cached is not None:\n"
    "            L_self_0, L_self_0_k, = ___cached\n"
    + "".join("    " + line + "\n" for line in CPP_TENSOR_CHECKS.splitlines())
    + "            return True\n"
)
CPP_REMEMBER = (
    "        ___frozen.remember(\n"
    "            L_self,\n"
    "            L_self._modules,\n"
    "            L_self_0,\n"
    "            L_self_0._buffers,\n"
    "            L_self_0_k,\n"
    "        )\n"
)


def test_guard_function_text_for_one_child(guard_path):
    source = guard_source(nn.Sequential(Scale(2.0)), torch.randn(2))
    source = re.sub(r"  \(.*:\d+\)$", "", source, flags=re.M)  # user lines: paths vary
    source = re.sub(r"___(\w+?)\d+", r"___\1", source)  # namespace numbering
    start = source.index(
        "        # L['self'][0] is a Scale"
        if guard_path == "cpp"
        else "        # Scale and its bases"
    )
    end = source.index("    except Exception")
    hides = "no class attribute or __dict__ entry hides 'k' (read from its tables)"
    if guard_path == "cpp":  # one C++ call: its type, its classes' lookups and its __dict__
        lookups = (
            f"        # L['self'][0] is a Scale, {hides}\n"
            "        if not (___lookups(L_self_0)):\n"
            "            return False\n"
        )
    else:  # its classes' lookups (once per class), then its type and __dict__
        lookups = (
            "        # Scale and its bases define what they did when traced (nothing that hides"
            " what its modules read from their tables)\n"
            "        if not (___attributes()):\n"
            "            return False\n"
            f"        # L['self'][0] is a Scale, {hides}\n"
            "        if not (type(L_self_0) is ___type and 'k' not in L_self_0.__dict__):\n"
            "            return False\n"
        )
    read = lookups + "        L_self_0_k = L_self_0._buffers['k']\n"
    if guard_path == "cpp" and cpp_ext.frozen_class() is None:
        # no dict version tags (3.13): no fast path, one C++ tensor call for the input and k
        assert source[start:end].startswith(read) and "___frozen" not in source
    else:
        assert source[start:end] == read + (
            CPP_TENSOR_CHECKS + CPP_REMEMBER if guard_path == "cpp" else PYTHON_TENSOR_CHECKS
        )
    if guard_path == "cpp" and cpp_ext.frozen_class() is not None:
        assert CPP_FAST_PATH in source
    path = "C++ (the C++ extension" if guard_path == "cpp" else "Python (the C++"
    assert f"    # tensor checks: {path}" in source


# ---- which steps take the short path ----------------------------------------------------


def plan_for(value, *sources):
    namespace = {}

    def ref(obj, hint):
        name = f"___{hint}{len(namespace)}"
        namespace[name] = obj
        return name

    return AccessPlan(list(sources), namespace, {"m": value}, {}, ref)


def path_of(plan, source):
    """The expression of the local holding `source` and the kinds of guards it relies on."""
    _, needs = plan.rewrite(source)
    local = needs[-1]
    # without the C++ extension the module's type is a check of its own (TYPE_MATCH)
    return local.expr, [g.kind for g in local.requires if g.kind != "TYPE_MATCH"]


class WithGetattr(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def __getattr__(self, name):
        return super().__getattr__(name)


class WithProperty(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    @property
    def weight(self):
        return self.lin.weight


@pytest.mark.parametrize(
    "module, source, expected",
    [
        (nn.Linear(2, 2), "L['m'].weight", ("L_m._parameters['weight']", ["CLASS_LOOKUPS"])),
        (
            nn.BatchNorm1d(2),
            "L['m'].running_mean",
            ("L_m._buffers['running_mean']", ["CLASS_LOOKUPS"]),
        ),
        (nn.BatchNorm1d(2), "L['m'].training", ("L_m.training", [])),  # in __dict__ already
        (WithGetattr(), "L['m'].lin", ("L_m.lin", [])),  # its own __getattr__
        (WithProperty(), "L['m'].weight", ("L_m.weight", [])),  # a class attribute
        (
            nn.Sequential(nn.ReLU(), nn.Tanh()),
            "L['m'][1]",
            ("L_m._modules['1']", ["CLASS_LOOKUPS", "DICT_KEYS"]),
        ),
        (
            nn.Sequential(nn.ReLU(), nn.Tanh()),
            "L['m'][-2]",
            ("L_m._modules['0']", ["CLASS_LOOKUPS", "DICT_KEYS"]),
        ),
        (
            nn.ModuleList([nn.ReLU(), nn.Tanh()]),
            "L['m'][-1]",
            ("L_m._modules['1']", ["CLASS_LOOKUPS", "DICT_KEYS"]),
        ),
        (nn.ModuleDict({"a": nn.ReLU()}), "L['m']['a']", ("L_m._modules['a']", ["CLASS_LOOKUPS"])),
        (nn.Sequential(nn.ReLU()), "L['m'][5]", ("L_m[5]", [])),  # out of range: Python's error
        ([nn.ReLU()], "L['m'][0]", ("L_m[0]", [])),  # not a module
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_short_paths(module, source, expected):
    assert path_of(plan_for(module, source), source) == expected


def test_named_sequential_item_is_read_by_its_key():
    seq = nn.Sequential(__import__("collections").OrderedDict(conv=nn.Linear(2, 2), act=nn.ReLU()))
    plan = plan_for(seq, "L['m'][1]", "L['m'][0].weight")
    assert path_of(plan, "L['m'][1]")[0] == "L_m._modules['act']"
    expr, needs = plan.rewrite("L['m'][0].weight.shape == (2, 2)")
    assert expr == "L_m_0_weight.shape == (2, 2)"
    assert [n.expr for n in needs] == [
        "L['m']",
        "L_m._modules['conv']",
        "L_m_0._parameters['weight']",
    ]


def test_local_names_do_not_collide():
    plan = plan_for({"a_b": 1, "a": {"b": 2}}, "L['m']['a_b']", "L['m']['a']['b']")
    names = [plan.rewrite(s)[0] for s in ("L['m']['a_b']", "L['m']['a']['b']")]
    assert len(set(names)) == 2, names


def test_entry_does_not_keep_its_first_inputs_alive():
    def f(x, y):
        return x * 2 + y

    cf = compiler.compile(f, backend="eager")
    x = torch.randn(3)
    cf(x, torch.randn(3))
    freed = weakref.ref(x)
    del x
    gc.collect()
    assert freed() is None


ODD_KEYS = ["it's", 'a"b', "x.y", "a]b", ("t", 1), 3, "ключ", ""]


def sum_of_values(d, xs):
    out = xs[-1] * 2
    for k in d:
        out = out + d[k]
    return out


def test_sources_with_odd_keys_read_the_same_values():
    cf = compiler.compile(sum_of_values, backend=RecordingBackend())
    for shape in [(3,), (3,), (2, 3)]:
        d = {k: torch.randn(shape) for k in ODD_KEYS}
        xs = [torch.randn(shape), torch.randn(shape)]
        assert_same(sum_of_values(d, xs), cf(d, xs))
    entries = compiler.inspect(cf).functions[0].entries
    assert len(entries) == 2, [e.recompile_reason for e in entries]
    assert "shape" in entries[1].recompile_reason

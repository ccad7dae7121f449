"""torch's TorchScript queries, profiler regions and random-generator state in traced code.

record_function regions and the TorchScript queries stay in one graph, as under
torch.compile. Seeding the global generator (manual_seed, seed, set_rng_state) breaks the
graph, as torch.compile does: it runs between graphs, and the random ops after it draw
eager's numbers from the global generator. The RNG tests below compare the exact values
with eager, from the same seed on both sides, and the generator's state after the call."""

import pytest
import torch
from torch.autograd.profiler import record_function

import compiler

from .helpers import Cases, RecordingBackend, T, assert_explain, assert_same, check

case = Cases()


@case(T(3), graphs=1, breaks=0)
def record_function_region(x):
    with record_function("my_region"):
        y = x + 1
    return y * 2


@case(T(3), graphs=1, breaks=0)
def nested_profiler_regions(x):
    with torch.profiler.record_function("outer"):
        with torch.autograd.profiler.record_function("inner"):
            x = x.sin()
        x = x * 3
    return x


@case(T(3), graphs=1, breaks=0)
def jit_queries_are_false(x):
    if torch.jit.is_scripting() or torch.jit.is_tracing():
        return x
    return x + 1


@case(T(3), graphs=1, breaks=0)
def jit_annotate_is_identity(x):
    y = torch.jit.annotate(torch.Tensor, x * 2)
    n = torch.jit.annotate(int, 3)
    return y + n


@case(T(3), graphs=1, breaks=0)
def jit_annotate_generic_type(x):
    z: list[torch.Tensor] = torch.jit.annotate(list[torch.Tensor], [])
    z.append(x * 2)
    return z[0] + 1


@case(T(3), graphs=1, breaks=0)
def no_tracing_state(x):
    if torch._C._get_tracing_state() is None:
        return x - 1
    return x


@pytest.mark.parametrize("fn,factories,expect", case)
def test_torch_state(fn, factories, expect):
    check(fn, *factories, **expect)


def test_record_function_is_recorded():
    def f(x):
        with record_function("region"):
            return x + 1

    compiled = compiler.compile(f, backend="eager")
    compiled(torch.randn(3))
    controls = [c for e in compiler.inspect(compiled).entries for c in e.controls]
    assert any(c.kind == "record_function" and c.target == "'region'" for c in controls)


# ---- the global random generator ----------------------------------------------------------


def _same_stream(fn, *shapes, graphs, breaks, backend=None, **tol):
    """`fn` compiled gives eager's random numbers from the same seed, and leaves the global
    generator where eager leaves it (the next draw after the call is the same)."""
    recording = RecordingBackend()
    compiled = compiler.compile(fn, backend=backend or recording)
    for call in range(2):
        x = [torch.randn(s) for s in shapes]
        torch.manual_seed(100 + call)
        expected, after = fn(*x), torch.rand(4)
        torch.manual_seed(100 + call)
        actual, actual_after = compiled(*x), torch.rand(4)
        assert_same(expected, actual, f"call {call}: out", **(tol or {"rtol": 0, "atol": 0}))
        assert torch.equal(after, actual_after), f"call {call}: the generator after the call"
    if backend is None:
        assert_explain(
            fn, [lambda s=s: torch.randn(s) for s in shapes], graphs=graphs, breaks=breaks
        )


def seed_then_rand(x):
    torch.manual_seed(0)
    return x + torch.rand(3)


def op_seed_rand(x):
    y = x * 2  # not random, but an op: the seed is not moved ahead of it
    torch.manual_seed(3)
    return y + torch.rand(3)


def seed_twice_then_rand(x):
    torch.manual_seed(5)
    torch.manual_seed(6)
    return x + torch.rand(3), torch.nn.functional.dropout(x, 0.5)


def rand_seed_rand(x):
    a = torch.rand(3)
    torch.random.manual_seed(1)
    return x + a * torch.randn(3), torch.rand(2)


def rng_state_restored(x):
    state = torch.get_rng_state()
    a = torch.rand(3)
    torch.set_rng_state(state)
    return x + a - torch.rand(3)


def rng_state_read(x):
    state = torch.get_rng_state()
    return x * torch.rand(3), state


def several_random_ops(x):
    a = torch.rand(3)
    b = torch.randn(3) * 2
    noise = torch.nn.functional.dropout(x, 0.5)
    return x + b, a, noise, torch.randint(0, 10, (4,))


@pytest.mark.parametrize(
    "fn,graphs,breaks",
    [
        (seed_then_rand, 1, 0),
        (seed_twice_then_rand, 1, 0),
        (op_seed_rand, 2, 1),
        (rand_seed_rand, 2, 1),
        (rng_state_restored, 2, 1),
        (rng_state_read, 1, 0),
        (several_random_ops, 1, 0),
    ],
)
def test_random_stream_matches_eager(fn, graphs, breaks):
    _same_stream(fn, (3,), graphs=graphs, breaks=breaks)


@pytest.mark.parametrize(
    "fn", [seed_then_rand, seed_twice_then_rand, rand_seed_rand, several_random_ops]
)
def test_random_stream_matches_eager_generated_code(fn):
    """The same through our code generator (random ops run as torch's kernels, in order);
    fused arithmetic around them may round differently, a draw from elsewhere would not."""
    _same_stream(fn, (3,), graphs=None, breaks=None, backend="inductor", rtol=1e-5, atol=1e-6)


def test_seed_break_names_the_global_state():
    out = compiler.explain(rand_seed_rand)(torch.randn(3))
    (reason,) = out.break_reasons
    assert reason.kind == "global_state"
    assert "random generator" in reason.reason


def test_seed_ahead_of_every_op_is_made_before_the_graph_and_recorded():
    compiled = compiler.compile(seed_then_rand)
    compiled(torch.randn(3))
    controls = [c for e in compiler.inspect(compiled).entries for c in e.controls]
    assert [(c.kind, c.target) for c in controls] == [("seed", "torch.manual_seed(0)")]
    assert compiled(torch.zeros(3)).equal(seed_then_rand(torch.zeros(3)))


def _seed_then_rand_cuda(x):
    torch.manual_seed(0)
    return x + torch.rand(3, device=x.device), torch.nn.functional.dropout(x, 0.5)


@pytest.mark.gpu
def test_seed_ahead_of_every_op_draws_eager_numbers_on_cuda():
    """The seed made before the graph reseeds CUDA's generator too; the generated code's
    random ops draw from it as eager's do."""
    compiled = compiler.compile(_seed_then_rand_cuda, backend="inductor")
    for call in range(2):
        x = torch.randn(3, device="cuda")
        torch.manual_seed(100 + call)
        expected, after = _seed_then_rand_cuda(x), torch.rand(4, device="cuda")
        torch.manual_seed(100 + call)
        actual, actual_after = compiled(x), torch.rand(4, device="cuda")
        assert_same(expected, actual, f"call {call}: out", rtol=1e-5, atol=1e-6)
        assert torch.equal(after, actual_after)


def test_export_refuses_a_seed_made_before_the_graph():
    """The exported graph would not reseed: export says so rather than drop the call."""
    with pytest.raises(compiler.Unsupported, match=r"torch\.manual_seed\(0\) is made before"):
        compiler.export(seed_then_rand, torch.randn(3))

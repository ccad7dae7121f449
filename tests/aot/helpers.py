"""The differential helper of the training tests: the same model trained for a few steps
eagerly and under compiler.compile, compared after every step (loss, every gradient,
every parameter and buffer)."""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch
import torch.fx

import compiler
from compiler.backends.inductor import compile_fx
from compiler.records import CompiledReport, GraphRecord, compiling_graph

Batch = Callable[[], tuple]


def seed_000_train(opt: torch.optim.Optimizer) -> Callable:
    """Seed 000's `train(mod, data)` step for `opt`: zero_grad, forward, loss, backward, step."""

    def train(mod, data):
        opt.zero_grad(True)
        pred = mod(data[0])
        loss = torch.nn.CrossEntropyLoss()(pred, data[1])
        loss.backward()
        opt.step()

    return train


def assert_state_close(
    eager: torch.nn.Module, comp: torch.nn.Module, what: str, **tol: Any
) -> None:
    for (name, p), (_, q) in zip(eager.named_parameters(), comp.named_parameters()):
        if p.grad is None:
            assert q.grad is None, f"{what}: {name}.grad should be None"
        else:
            assert q.grad is not None, f"{what}: {name}.grad is None, eager has one"
            torch.testing.assert_close(
                q.grad, p.grad, msg=lambda m, n=name: f"{what}: {n}.grad: {m}", **tol
            )
        torch.testing.assert_close(q, p, msg=lambda m, n=name: f"{what}: {n}: {m}", **tol)
    for (name, b), (_, c) in zip(eager.named_buffers(), comp.named_buffers()):
        torch.testing.assert_close(c, b, msg=lambda m, n=name: f"{what}: buffer {n}: {m}", **tol)


def train_and_compare(
    model: torch.nn.Module,
    batch: Batch,
    loss_fn: Callable[[Any, Any], torch.Tensor],
    steps: int = 3,
    optimizer: Callable = lambda params: torch.optim.SGD(params, lr=0.1),
    mode: str | None = None,
    backend: str = "inductor",
    **tol: Any,
) -> CompiledReport:
    """Train `model` and a copy of it for `steps` steps, the copy's forward compiled; the
    loss, gradients, parameters and buffers must match after each step. Returns the
    compiled function's report."""
    comp_model = copy.deepcopy(model)
    opt, comp_opt = optimizer(model.parameters()), optimizer(comp_model.parameters())

    def step(mod: Any, o: torch.optim.Optimizer, x: Any, y: Any) -> torch.Tensor:
        o.zero_grad(set_to_none=True)
        loss = loss_fn(mod(x), y)
        loss.backward()
        return loss

    compiled = compiler.compile(step, mode=mode, backend=backend)
    for k in range(steps):
        x, y = batch()
        expected = step(model, opt, x, y)
        got = compiled(comp_model, comp_opt, x, y)
        torch.testing.assert_close(got, expected, msg=f"loss of step {k}", **tol)
        assert_state_close(model, comp_model, f"after backward {k}", **tol)
        opt.step()
        comp_opt.step()
        assert_state_close(model, comp_model, f"after step {k}", **tol)
    return compiler.inspect(compiled)


def training_graphs(report: CompiledReport) -> list:
    """The report's graphs that were compiled with a backward."""
    return [g for g in report.graphs if g.partition is not None]


def compile_graph(fn: Callable, *inputs: Any) -> tuple[Callable, GraphRecord]:
    """`fn` symbolically traced and compiled by compile_fx for `inputs`, with its record."""
    gm = torch.fx.symbolic_trace(fn)
    record = GraphRecord(gm, gm.code, len(gm.graph.nodes))
    with compiling_graph(record):
        compiled = compile_fx(gm, list(inputs))
    return compiled, record

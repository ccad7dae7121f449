"""The differential helper of the model tests: a model compiled with compiler.compile against
eager, in eval mode (outputs under no_grad) or train mode (outputs, loss, every gradient and
every buffer after one forward+backward), from the same weights, on fresh random inputs;
the number of graphs is asserted from compiler.inspect."""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten

import compiler
from compiler.records import CompiledReport


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, dict):  # Hugging Face ModelOutput and plain dicts
        value = list(value.values())
    flat, _ = tree_flatten(value)
    return [t for t in flat if isinstance(t, torch.Tensor)]


def _loss(out: Any) -> torch.Tensor:
    """Outputs against fixed random weights: a plain mean of a normalised output would not
    depend on anything before the norm, leaving gradients that are rounding noise."""
    total = 0.0
    for i, t in enumerate(t for t in _tensors(out) if t.is_floating_point()):
        weights = torch.randn(t.shape, generator=torch.Generator().manual_seed(i))
        total = total + (t * weights.to(t.dtype)).float().mean()
    return total


def _run(model: torch.nn.Module, fn: Callable, inputs: tuple, train: bool) -> dict[str, Any]:
    if not train:
        with torch.no_grad():
            return {f"output {i}": t for i, t in enumerate(_tensors(fn(*inputs)))}
    out = fn(*inputs)
    loss = _loss(out)
    loss.backward()
    result = {f"output {i}": t.detach() for i, t in enumerate(_tensors(out))}
    result["loss"] = loss.detach()
    result.update({f"grad {n}": p.grad for n, p in model.named_parameters()})
    result.update({f"buffer {n}": b for n, b in model.named_buffers()})
    return result


def check_model(
    model: torch.nn.Module,
    make_inputs: Callable[[], tuple],
    *,
    train: bool = False,
    graphs: int = 1,
    calls: int = 2,
    atol: float = 1e-4,
    rtol: float = 1e-4,
) -> CompiledReport:
    """compiler.compile(model) == model on `calls` fresh inputs (the first compiles, the next
    reuse the entry), in train or eval mode; `graphs` graphs and no graph breaks beyond
    `graphs - 1`. Returns the compiled model's report."""
    torch.manual_seed(0)
    model = model.train(train)
    comp_model = copy.deepcopy(model)
    compiled = compiler.compile(comp_model)
    for k in range(calls):
        inputs = make_inputs()
        for m in (model, comp_model):
            for p in m.parameters():
                p.grad = None
        expected = _run(model, model, inputs, train)
        got = _run(comp_model, compiled, inputs, train)
        assert got.keys() == expected.keys()
        for name, e in expected.items():
            g = got[name]
            if e is None:
                assert g is None, f"call {k}: {name} should be None"
                continue
            torch.testing.assert_close(g, e, atol=atol, rtol=rtol, msg=f"call {k}: {name}")
    report = compiler.inspect(compiled)
    assert len(report.graphs) == graphs, [str(b) for b in _breaks(report)]
    assert not [g.fallback for g in report.graphs if g.fallback]
    return report


def _breaks(report: CompiledReport) -> list:
    return [e.graph_break for e in report.entries if e.graph_break is not None]

"""`compiler.compile(model)` for a model sharded with FSDP2's `fully_shard`.

Each module fully_shard manages (a "unit") gathers its parameters in a forward pre-hook
(all-gather), frees them in a forward hook, gathers them again before its backward, and
reduce-scatters their gradients after it, in hooks that talk to the process group. Those
hooks run as they are, eagerly; what is compiled is each unit's own forward, in between: the
unit's `forward` is replaced, on the unit itself, by the compiled one (as
`nn.Module.compile()` does, so the original model object runs compiled blocks too), and the
model's top-level forward is compiled as well. Where the top-level forward calls a unit the
tracer breaks the graph ("has hooks; calling it runs in Python"): the call runs the hooks and
re-enters the compiled unit forward. Each graph's record names the unit whose forward it is,
and which of the unit's gathered parameters it reads.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import torch
from torch.distributed.fsdp import FSDPModule

from compiler.records import current_graph
from compiler.tracer.evaluator import CompileConfig, CompileContext, run_function

CompileModule = Callable[[torch.nn.Module, CompileContext], torch.nn.Module]


def compile_fsdp(
    model: torch.nn.Module, config: CompileConfig, compile_module: CompileModule
) -> torch.nn.Module:
    """The model with every fully_shard unit's forward compiled in place, the model's own
    forward compiled as any module's; one compile context holds all of their records."""
    units = {name: m for name, m in model.named_modules() if isinstance(m, FSDPModule)}
    noted = dataclasses.replace(config, backend=_naming_units(config.backend, model, units))
    ctx = CompileContext(noted)
    for unit in units.values():
        if unit is not model:
            _compile_forward_in_place(unit, ctx)
    return compile_module(model, ctx)


def _compile_forward_in_place(unit: torch.nn.Module, ctx: CompileContext) -> None:
    forward = type(unit).forward

    def compiled_forward(*args: Any, **kwargs: Any) -> Any:
        return run_function(ctx, forward, (unit, *args), kwargs)

    unit.forward = compiled_forward  # an instance attribute: nn.Module.__call__ calls it


def _naming_units(
    backend: Callable, model: torch.nn.Module, units: dict[str, torch.nn.Module]
) -> Callable:
    """`backend`, noting in each graph's record the units whose parameters the graph reads.
    The parameters are looked up when the graph compiles, inside the unit's forward, where
    they are the gathered ones fully_shard registered for it."""

    def compile_noting(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
        record = current_graph()
        if record is not None:
            for note in _unit_notes(model, units, example_inputs):
                record.notes.append(note)
        return backend(gm, example_inputs)

    compile_noting.__name__ = getattr(backend, "__name__", "backend")
    return compile_noting


def _unit_notes(
    model: torch.nn.Module, units: dict[str, torch.nn.Module], example_inputs: Sequence[Any]
) -> list[str]:
    names = {id(p): name for name, p in model.named_parameters()}
    read: dict[str, list[str]] = {}
    for value in example_inputs:
        name = names.get(id(value))
        unit = _unit_of(name, units) if name is not None else None
        if unit is not None:  # None: a parameter no unit shards (the model is not one)
            read.setdefault(unit, []).append(name)
    return [
        f"FSDP2 unit {unit or '(root)'!r}: the graph reads its parameters {', '.join(params)}, "
        "all-gathered by the unit's forward pre-hook before it runs; their gradients are "
        "reduce-scattered by the unit's post-backward hook, eagerly, after its backward"
        for unit, params in read.items()
    ]


def _unit_of(param: str, units: dict[str, torch.nn.Module]) -> str | None:
    """The innermost unit whose path is a prefix of the parameter's ("" is the model)."""
    owners = [u for u in units if u == "" or param.startswith(u + ".")]
    return max(owners, key=len) if owners else None

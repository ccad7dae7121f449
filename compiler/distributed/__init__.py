"""Compiling models wrapped by torch.distributed: DistributedDataParallel (ddp.py, with the
graph split at gradient-bucket boundaries by buckets.py and split.py) and FSDP2's
fully_shard (fsdp.py). The collectives are torch.distributed's own, run by its hooks.

A graph is split for DDP whenever it is compiled inside a DDP forward, however the model
was compiled: `compiler.compile(DDP(model))` and `DDP(compiler.compile(model))` alike (DDP
marks the module whose forward runs, as torch.compile's DDPOptimizer reads it too)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable

import torch

from compiler.tracer.evaluator import CompileConfig, CompileContext

CompileModule = Callable[[torch.nn.Module, CompileContext], torch.nn.Module]


@dataclass(frozen=True)
class Wrapper:
    """A kind of torch.distributed model: the module defining it (no model can be of the kind
    before torch imported it, so other models are told apart without importing it), how to
    recognise one, and its compiler, imported on use."""

    module: str
    recognise: Callable[[torch.nn.Module], bool]
    compiler: Callable[[], Callable]


def compile_distributed(
    model: torch.nn.Module, config: CompileConfig, compile_module: CompileModule
) -> torch.nn.Module | None:
    """The compiled model when `model` is wrapped by torch.distributed, else None.
    `compile_module` compiles a plain module (api._compile_module)."""
    for wrapper in WRAPPERS.values():
        if wrapper.module in sys.modules and wrapper.recognise(model):
            return wrapper.compiler()(model, config, compile_module)
    return None


def ddp_aware(backend: Callable) -> Callable:
    """`backend`, splitting a graph at gradient-bucket boundaries when it is compiled inside
    a DistributedDataParallel forward."""

    def compile_graph(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        ddp = _active_ddp()
        if ddp is None:
            return backend(gm, example_inputs)
        from compiler.distributed.ddp import bucket_caps, reduced_param_ids
        from compiler.distributed.split import bucketed

        split = bucketed(backend, lambda: reduced_param_ids(ddp), bucket_caps(ddp))
        return split(gm, example_inputs)

    compile_graph.__name__ = getattr(backend, "__name__", "backend")
    return compile_graph


def _active_ddp() -> torch.nn.Module | None:
    if WRAPPERS["DistributedDataParallel"].module not in sys.modules:
        return None
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel._get_active_ddp_module()


def _is_ddp(model: torch.nn.Module) -> bool:
    from torch.nn.parallel import DistributedDataParallel

    return isinstance(model, DistributedDataParallel)


def _has_fsdp(model: torch.nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(m, FSDPModule) for m in model.modules())


def _ddp_compiler() -> Callable:
    from compiler.distributed.ddp import compile_ddp

    return compile_ddp


def _fsdp_compiler() -> Callable:
    from compiler.distributed.fsdp import compile_fsdp

    return compile_fsdp


WRAPPERS: dict[str, Wrapper] = {
    "DistributedDataParallel": Wrapper("torch.nn.parallel.distributed", _is_ddp, _ddp_compiler),
    "fully_shard (FSDP2)": Wrapper(
        "torch.distributed.fsdp._fully_shard._fully_shard", _has_fsdp, _fsdp_compiler
    ),
}

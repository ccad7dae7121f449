"""Compiling models wrapped by torch.distributed: DistributedDataParallel (ddp.py, with the
graph split at gradient-bucket boundaries by buckets.py and split.py) and FSDP2's
fully_shard (fsdp.py). The collectives are torch.distributed's own, run by its hooks."""

from __future__ import annotations

import sys
from typing import Callable

import torch

from compiler.tracer.evaluator import CompileConfig, CompileContext

CompileModule = Callable[[torch.nn.Module, CompileContext], torch.nn.Module]


def compile_distributed(
    model: torch.nn.Module, config: CompileConfig, compile_module: CompileModule
) -> torch.nn.Module | None:
    """The compiled model when `model` is wrapped by torch.distributed, else None.
    `compile_module` compiles a plain module (api._compile_module)."""
    for kind, (module_name, is_kind) in _KINDS.items():
        # a model of a kind is only possible once torch imported the kind's module
        if module_name in sys.modules and is_kind(model):
            return _COMPILERS[kind]()(model, config, compile_module)
    return None


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


_KINDS: dict[str, tuple[str, Callable[[torch.nn.Module], bool]]] = {
    "ddp": ("torch.nn.parallel.distributed", _is_ddp),
    "fsdp2": ("torch.distributed.fsdp._fully_shard._fully_shard", _has_fsdp),
}
_COMPILERS: dict[str, Callable[[], Callable]] = {"ddp": _ddp_compiler, "fsdp2": _fsdp_compiler}

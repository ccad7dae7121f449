"""`compiler.compile(DistributedDataParallel(model))`.

DDP's own forward runs as it is: its pre-forward bookkeeping (the reducer's
prepare_for_forward, bucket rebuilding, buffer broadcast, moving inputs to the device) and its
post-forward one (finding unused parameters, static_graph's first iteration) are Python that
talks to the C++ reducer and the process group; tracing it would only produce graph breaks.
The wrapped module's forward is what is compiled, in place of DDP's call of it; the reducer's
hooks on the parameters' gradient accumulators stay where they are, so they fire when a
compiled backward hands them a gradient. The graphs are compiled inside DDP's
`_inside_ddp_forward`, so the backend (api.py wraps every one with `ddp_aware`) cuts each at
DDP's gradient-bucket boundaries (split.py).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from compiler.distributed.buckets import BucketCaps
from compiler.support.sharing import sharing_state
from compiler.tracer.evaluator import CompileConfig, CompileContext

CompileModule = Callable[[torch.nn.Module, CompileContext], torch.nn.Module]


def compile_ddp(
    ddp: DistributedDataParallel, config: CompileConfig, compile_module: CompileModule
) -> torch.nn.Module:
    """A DDP object sharing `ddp`'s state (its __dict__ is `ddp`'s, so `no_sync()` on either
    holds for both) whose forward runs DDP's bookkeeping around the compiled inner module."""
    ctx = CompileContext(config)
    inner = compile_module(ddp.module, ctx)

    def _run_ddp_forward(self: DistributedDataParallel, *inputs: Any, **kwargs: Any) -> Any:
        # always inside: the backend splits graphs for the DDP module active while they compile
        with self._inside_ddp_forward():
            return inner(*inputs, **kwargs)

    return sharing_state(ddp, ctx, {"_run_ddp_forward": _run_ddp_forward})


def bucket_caps(ddp: DistributedDataParallel) -> BucketCaps:
    """DDP's bucket sizes: `bucket_cap_mb`, and its smaller first bucket when the cap is the
    default one (torch/nn/parallel/distributed.py; older torch keeps the two apart)."""
    config = getattr(ddp, "_bucket_config", None)
    if config is not None:
        return BucketCaps(first=config.first_bucket_bytes_cap, rest=config.bucket_bytes_cap)
    cap = ddp.bucket_bytes_cap
    if getattr(ddp, "bucket_bytes_cap_default", False):
        return BucketCaps(first=min(dist._DEFAULT_FIRST_BUCKET_BYTES, cap), rest=cap)
    return BucketCaps(first=cap, rest=cap)


def reduced_param_ids(ddp: DistributedDataParallel) -> set[int]:
    """The parameters DDP all-reduces: those that require grad, less the ignored ones."""
    ignored = ddp.parameters_to_ignore
    return {
        id(p)
        for name, p in ddp.module.named_parameters()
        if p.requires_grad and name not in ignored
    }

"""Compiled optimizer steps: `opt.step()` of torch.optim.SGD, Adam and AdamW, run by our own
pipeline instead of torch.optim's eager update.

    support     recognise a step call at a graph break; why a step must run eagerly
    step        create the state torch.optim would create, build the param groups' tensor
                lists (reused while what they came from is unchanged), and run the
                functional update through the frame evaluator
    zero_grad   `opt.zero_grad()` (set_to_none=True, torch's own) at a graph break, as one
                loop over the parameters
    functional  the updates themselves (torch.optim's single-tensor algorithms), which the
                tracer compiles like user code: tracer -> aot -> lowering -> scheduler ->
                Triton/C++ kernels, one kernel per parameter (the scheduler writes each
                updated tensor in place, compiler/scheduler/inplace.py)

`opt.step()` inside a compiled function ends the graph (compiler/tracer/calls.py says so in
its break reason); the frame evaluator then makes the call for real and hands it here
(compiler/tracer/evaluator.py, call_from_python). The update gets a function record of its
own (`sgd_step`, `adam_step`) in `compiler.inspect`: its graph, kernels and guards, and
the reasons of any step that ran torch.optim's update instead.
"""

from compiler.optim.step import run_step
from compiler.optim.support import StepCall, scheduled_optimizer, step_call, trace_reason
from compiler.optim.zero_grad import clear_grads, zero_grad_call

__all__ = [
    "StepCall",
    "clear_grads",
    "run_step",
    "scheduled_optimizer",
    "step_call",
    "trace_reason",
    "zero_grad_call",
]

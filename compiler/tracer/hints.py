"""A fix for every graph break: the table from a break's kind to what the user can change.

Every `Break` names its kind where it is raised (breaks.py; a break that names none is a
construct the tracer does not handle yet), and the entry's GraphBreak record carries the hint
of that kind, so `%explain`, the inspector and `explain()` show the same suggestion. The
kinds fall in three categories:

- "user code": the break is what the code asked for (compiler.disable, an exception it
  raises, a call eager rejects too); nothing to fix unless it is on the hot path.
- "fundamental": no graph can hold it (Python reading a tensor's value, output, autograd's
  engine); the code has to say it differently, and the suggestion shows how.
- "not yet supported": a construct this tracer does not handle yet; a control
  (compiler.allow_in_graph, compiler.disable) or moving the code out works around it.
"""

from __future__ import annotations

from typing import Any

from compiler.records import BreakHint

USER = "user code"
FUNDAMENTAL = "fundamental"
NOT_YET = "not yet supported"

HINTS: dict[str, BreakHint] = {
    "data_dependent_branch": BreakHint(
        FUNDAMENTAL,
        "The condition reads a tensor's value. Compute both branches and pick per element "
        "with torch.where, or use torch.cond when the branches do different work; a "
        "condition on shapes (x.shape[0] > 1) does not break.",
        "y = torch.where(x.sum() > 0, x * 2, -x)\n# not: y = x * 2 if x.sum() > 0 else -x",
    ),
    "tensor_to_python": BreakHint(
        FUNDAMENTAL,
        "Keep the value a tensor: .item(), .tolist(), int() and float() hand it to Python, "
        "which ends the graph. Use the 0-d tensor in tensor ops, and read it after the "
        "compiled function returns.",
        "scale = x.abs().max()  # a 0-d tensor, stays in the graph\n"
        "y = x / scale          # not: x / x.abs().max().item()",
    ),
    "data_dependent_output": BreakHint(
        FUNDAMENTAL,
        "The op's output size depends on the data (nonzero, boolean-mask indexing, unique). "
        "Keep the shape fixed: mask with torch.where instead of selecting.",
        "y = torch.where(mask, x, torch.zeros_like(x)).sum()\n# not: y = x[mask].sum()",
    ),
    "numpy": BreakHint(
        FUNDAMENTAL,
        "NumPy runs outside torch, so the graph ends around it. Use the torch op of the same "
        "name on the tensor; convert to NumPy after the compiled function returns.",
        "y = torch.sin(x).sum()     # not: np.sin(x.numpy()).sum()",
    ),
    "print": BreakHint(
        USER,
        "print() writes output, which no graph can do. Print the returned values outside "
        "the compiled function, or put the logging in a helper marked compiler.disable.",
        "@compiler.disable\ndef log(*values):\n    print(*values)",
    ),
    "c_function": BreakHint(
        NOT_YET,
        "The tracer cannot see inside this C function. If it only computes on tensors and "
        "returns tensors, compiler.allow_in_graph puts it in the graph as one opaque call.",
        "compiler.allow_in_graph(my_c_function)",
    ),
    "library_code": BreakHint(
        NOT_YET,
        "Library code is run as is, not traced. A helper that only computes on tensors can "
        "go in the graph with compiler.allow_in_graph; otherwise call it outside the "
        "compiled function.",
        "compiler.allow_in_graph(library_fn)",
    ),
    "disabled": BreakHint(
        USER,
        "The call was marked with compiler.disable or compiler.disallow_in_graph, so it "
        "runs eagerly by request. Remove the mark to have it traced.",
        "# remove: @compiler.disable",
    ),
    "autograd_engine": BreakHint(
        FUNDAMENTAL,
        "Autograd's engine runs in Python. Compile the forward and the loss, and call "
        "backward() outside: the compiled graph's own backward still runs compiled kernels.",
        "loss = compiled_loss(model, x, y)\nloss.backward()",
    ),
    "autograd_state": BreakHint(
        FUNDAMENTAL,
        "Hooks and requires_grad changes are autograd state outside any graph. Set them up "
        "before calling the compiled function.",
        "x.requires_grad_()\ny = compiled_fn(x)",
    ),
    "optimizer": BreakHint(
        FUNDAMENTAL,
        "torch.optim runs in Python between graphs. Compile the forward and loss, and call "
        "the optimizer outside the compiled function.",
        "loss = compiled_step(model, x, y)\nloss.backward()\nopt.step(); opt.zero_grad()",
    ),
    "global_state": BreakHint(
        FUNDAMENTAL,
        "The call changes torch's global state (seeds, files, synchronisation). Make it "
        "before calling the compiled function.",
        "torch.manual_seed(0)\ny = compiled_fn(x)",
    ),
    "global_write": BreakHint(
        USER,
        "Assigning a global runs in Python. Return the value and assign it in the caller.",
        "def f(x):\n    return x * 2, x.sum()\n\ny, total = f(x)",
    ),
    "exception": BreakHint(
        USER,
        "Your code raises here, so the error path runs in Python exactly as eagerly. "
        "Nothing to fix unless it is the usual path: check inputs before the compiled call.",
        "if x.dim() != 2:\n    raise ValueError('x must be 2-d')\ny = compiled_fn(x)",
    ),
    "user_error": BreakHint(
        USER,
        "The call fails as it would eagerly (wrong arguments, mismatched shapes); it runs "
        "in Python to raise the same error. Fix the call.",
        "y = f(x, w)  # with the arguments f takes, shapes that match",
    ),
    "module_hooks": BreakHint(
        NOT_YET,
        "Modules with hooks are called in Python. Remove the hooks while compiling, or "
        "compile the module's forward directly.",
        "handle.remove()\ncompiled = compiler.compile(model)",
    ),
    "logging": BreakHint(
        FUNDAMENTAL,
        "A log call or warning with a tensor argument formats the tensor's value, which only "
        "exists when the graph runs. Log constants and shapes (those are made after the "
        "graph without a break), or log the tensor after the compiled function returns.",
        "logger.info('batch of %d', x.shape[0])  # not: logger.info('loss %s', loss)",
    ),
    "autograd_function": BreakHint(
        NOT_YET,
        "The custom autograd Function's forward could not be traced (it reads a tensor's "
        "value, returns non-tensors, or uses ctx in a way the tracer does not follow). Keep "
        "forward to tensor ops on its tensor arguments; it then runs inside the graph with "
        "your backward.",
        "class Fn(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n        return x.clamp(-1, 1)",
    ),
    "context_manager": BreakHint(
        NOT_YET,
        "This `with` block's context manager is not traced. Enter it outside the compiled "
        "function, or use torch.no_grad / torch.enable_grad / torch.autocast, which are.",
        "with my_context():\n    y = compiled_fn(x)",
    ),
    "import": BreakHint(
        USER,
        "The import runs in Python the first time. Import at the top of the cell or module.",
        "import my_module  # at the top, not inside the function",
    ),
    "generator": BreakHint(
        NOT_YET,
        "A generator that outlives the graph or reads changing state runs in Python. "
        "Consume it fully where it is made (list(gen)), or use a list instead.",
        "items = list(make_items(x))\nfor item in items: ...",
    ),
    "long_loop": BreakHint(
        FUNDAMENTAL,
        "A Python loop over many iterations is unrolled into the graph until a limit. "
        "Vectorise it with tensor ops over a dimension.",
        "y = (x * w).sum(dim=0)     # not: sum(x[i] * w[i] for i in range(n))",
    ),
    "unsupported": BreakHint(
        NOT_YET,
        "The tracer does not handle this Python construct yet. Move it out of the compiled "
        "function, or into a helper marked compiler.disable so the break is explicit; a "
        "helper that only computes on tensors can stay in the graph with "
        "compiler.allow_in_graph.",
        "@compiler.disable\ndef helper(x):\n    ...  # the construct, run eagerly",
    ),
}

# Tensor methods that end the graph, by the kind of their break (calls.py).
_TENSOR_METHOD_KINDS = {
    "item": "tensor_to_python",
    "tolist": "tensor_to_python",
    "__bool__": "tensor_to_python",
    "__float__": "tensor_to_python",
    "__int__": "tensor_to_python",
    "__index__": "tensor_to_python",
    "numpy": "numpy",
    "__array__": "numpy",
    "backward": "autograd_engine",
    "register_hook": "autograd_state",
    "retain_grad": "autograd_state",
    "requires_grad_": "autograd_state",
}


def hint_for(kind: str) -> BreakHint:
    """The hint of a break's kind; an unknown kind gets the generic one (a test keeps every
    kind raised in the tracer in HINTS)."""
    return HINTS.get(kind, HINTS["unsupported"])


def tensor_method_kind(name: str) -> str:
    return _TENSOR_METHOD_KINDS.get(name, "unsupported")


def call_kind(value: Any, library: bool = False) -> str:
    """The kind of a break at a call the tracer cannot see into: NumPy, a C function, or
    Python library code (`library`), told apart by where the callee comes from."""
    module = getattr(value, "__module__", None) or getattr(type(value), "__module__", "")
    if module.split(".")[0] == "numpy":
        return "numpy"
    return "library_code" if library else "c_function"

"""Notebook 03: inside the compiler, told with its inspection records."""

from __future__ import annotations

from notebook_cells.common import BACKEND_NOTE, HELPERS, SETUP, code, inspector, md

INSIDE = [
    md("""
# Inside the compiler

What happens when a compiled function is called, told with the compiler's own inspection
records (`compiler.inspect`): guards and recompiles, dynamic shapes, `reduce-overhead`
(CUDA graphs), the kernels the code generator writes, and how a training graph's backward
pass is compiled. Everything shown here is public:
the same dataclasses the inspector under each `%%compile` cell renders.
"""),
    SETUP,
    BACKEND_NOTE,
    HELPERS,
    md("""
## Guards and recompiles

A compiled entry is only valid for inputs like the ones it was compiled for. The tracer
records *guards* while it traces: the dtype, device, shape and strides of each tensor, the
value of each Python constant the graph depends on, the identity of modules and functions,
the grad mode. A call whose guards fail is compiled again (a *recompile*), and the new entry
remembers which guard failed.
"""),
    inspector("""
%%compile
def scale(x, factor):
    return torch.relu(x) * factor + 1

x = torch.randn(8)
scale(x, 2.0)
"""),
    md("""
The guards of the first entry, as the straight-line Python the compiler generated: one check
per line under a comment that says why. Each value the checks read is fetched once into a
local (`L_x = L['x']`); in a module, children, parameters and buffers are read straight from
its `_modules`, `_parameters` and `_buffers` tables, under a guard that pins the module's type.
"""),
    code("""
entry = compiler.inspect(scale).functions[0].entries[0]
print(entry.guard_source)
for guard in entry.guards:
    print(f"{guard.kind:16} {guard.expr}")
"""),
    md("""
Each of the next calls breaks a different guard: another Python constant, another dtype,
another shape. Scroll back up: the inspector under the `%%compile` cell follows the function,
so the new entries and their reasons appear in its *Guards* tab.
"""),
    code("""
scale(x, 3.0)
scale(x.double(), 2.0)
scale(torch.randn(16), 2.0)

for entry in compiler.inspect(scale).functions[0].entries:
    print(entry.start_line, "|", entry.recompile_reason or "first compile")
"""),
    md("""
After 8 entries for one function the compiler stops compiling it and runs it eagerly, with
one warning that lists the failing guards, so a function called with ever-changing
constants does not compile forever.
"""),
    code("""
import warnings

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for k in range(10):
        scale(x, float(k))
for w in caught:
    print(w.message)
print(len(compiler.inspect(scale).functions[0].entries), "entries")
"""),
    md("""
## Dynamic shapes

With `dynamic=False` every tensor size is a constant of the compiled code, so each new size
is a recompile. `dynamic=True` asks the tracer to make sizes symbols instead, so that one entry
can serve every size. The output shows how many entries each version needed in this build and
why each recompile happened.
"""),
    code("""
def norm(x):
    return x / x.abs().sum()


static_norm = compiler.compile(norm, dynamic=False)
dynamic_norm = compiler.compile(norm, dynamic=True)
for size in (8, 16, 32):
    v = torch.randn(size)
    torch.testing.assert_close(static_norm(v), norm(v))
    torch.testing.assert_close(dynamic_norm(v), norm(v))

for label, fn in (("dynamic=False", static_norm), ("dynamic=True", dynamic_norm)):
    entries = compiler.inspect(fn).functions[0].entries
    print(f"{label}: {len(entries)} entries")
    for entry in entries:
        print("   ", entry.recompile_reason or "first compile")
"""),
    md("""
## Steering the compiler: `disable` and `mark_dynamic`

Code written for `torch.compile` steers it with `torch.compiler`'s controls; ours have the same
names. `compiler.disable` keeps a function out of the compiled code: reached from a compiled
function, the graph breaks around its call, the call runs eagerly, and nothing it calls is
compiled. Here it wraps a helper that reads tensor values into Python (`.item()`), which would
break the graph anyway; disabled, the break is one you chose, and the records say so.

`compiler.mark_dynamic(x, 0)` asks for dimension 0 of `x` to be a symbol from the first
compile, instead of waiting for a size change (the default, `dynamic=None`, specialises the
first call and makes a dimension symbolic when a recompile finds its size changed). One entry
then serves every batch size: its guards check size expressions, and the code generator,
which works on concrete sizes, specialises its kernels per size when the graph is called,
without recompiling the entry.
"""),
    code("""
stats = []


@compiler.disable
def log_stats(t):
    stats.append(round(t.mean().item(), 3))


def layer(x, w):
    h = torch.relu(x @ w)
    log_stats(h)
    return h / h.shape[0]


w = torch.randn(16, 16, device=device)
compiled_layer = compiler.compile(layer)
for rows in (8, 12, 20):
    x = torch.randn(rows, 16, device=device)
    compiler.mark_dynamic(x, 0)
    torch.testing.assert_close(compiled_layer(x, w), layer(x, w))

report = compiler.inspect(compiled_layer)
for entry in report.entries:
    print(f"entry from line {entry.start_line}: {entry.recompile_reason or 'first compile'}")
    for control in entry.controls:
        print(f"    {control.kind}: {control.target}: {control.detail}")
    notes = entry.graph.notes if entry.graph is not None else []
    for note in notes:
        if "per size" in note:
            print("   ", note)
"""),
    md("""
The part before the break was traced once, with a symbolic batch size, and served all three
sizes: its kernels were generated per size when it was called, without a recompile. The part
after the break is an entry of its own, whose input `h` was not marked: it was specialised at
the first call and recompiled with a symbolic size at the first size change (automatic
dynamic), so the third size needed no new entry either.
"""),
    md("The first entry's guards: the batch size is checked as an expression, not a constant:"),
    code("""
print(report.entries[0].guard_source)
"""),
    md("""
`%explain` lists the same controls with the graphs and breaks (the `log_stats` call is the
break; the dynamic size is a control).
"""),
    code("""
x = torch.randn(10, 16, device=device)
compiler.mark_dynamic(x, 0)
%explain layer(x, w)
"""),
    md("""
## `mode="reduce-overhead"`: CUDA graphs

Launching a kernel costs a few microseconds of CPU time; a model of many small kernels can
spend more time launching than computing. With `mode="reduce-overhead"` the compiled graph's
kernels are recorded once into a *CUDA graph* and replayed with a single launch; inputs are
copied into static buffers first, because a CUDA graph always reads the same addresses.

CUDA graphs exist only on CUDA devices. On a CPU the mode has nothing to capture, and the
compiled code should run as in the default mode. The cell prints what this build recorded for
the graph: its notes, and the reason if the backend fell back to running it eagerly.
"""),
    code("""
def mlp(x, w1, w2):
    return torch.relu(x @ w1) @ w2


w1 = torch.randn(32, 64, device=device)
w2 = torch.randn(64, 16, device=device)
fast_mlp = compiler.compile(mlp, mode="reduce-overhead")
for _ in range(3):
    inp = torch.randn(4, 32, device=device)
    torch.testing.assert_close(fast_mlp(inp, w1, w2), mlp(inp, w1, w2), rtol=1e-4, atol=1e-4)

report = compiler.inspect(fast_mlp)
print("mode:", report.mode)
for graph in report.functions[0].graphs:
    for note in graph.notes:
        print("note:", note)
    if graph.fallback:
        print("ran eagerly:", graph.fallback)
describe_run(fast_mlp)
"""),
    md("""
## Reading the generated kernels

One function, followed from Python bytecode to kernels. `softmax_scale` has a reduction
(`amax`, `sum`) and pointwise ops around it; the code generator fuses the pointwise work
into the reductions where it can.
"""),
    inspector("""
%%compile
def softmax_scale(x, scale):
    x = x * scale
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)

logits = torch.randn(4, 32, device=device)
probs = softmax_scale(logits, 0.5)
torch.testing.assert_close(probs, torch.softmax(logits * 0.5, dim=-1))
"""),
    md("The bytecode the tracer interprets (CPython's `dis`):"),
    code("""
import dis

dis.dis(getattr(softmax_scale, "__wrapped__", softmax_scale))  # the user function, not the wrapper
"""),
    md("The FX graph it captured, and the functional aten graph it was lowered from:"),
    code("""
graph = compiler.inspect(softmax_scale).functions[0].graphs[0]
print(graph.code)
for name, aot_code in graph.aot_graphs.items():
    print(f"--- {name} ---")
    print(aot_code)
"""),
    md("""
The kernels: each knows the FX nodes fused into it and the user lines they came from, which
is how the inspector links a source line to its kernel. The wrapper is the Python that
allocates buffers and launches the kernels in order.
"""),
    code("""
for kernel in graph.kernels:
    lines = ", ".join(f"line {line.lineno}" for line in kernel.source_lines)
    print(f"# {kernel.name} ({kernel.language}): nodes {', '.join(kernel.fused_nodes)}; {lines}")
    print(kernel.source)
print("# wrapper")
print(graph.wrapper_source)
for stage in graph.stage_times:
    print(f"{stage.stage:10} {stage.seconds * 1000:8.1f} ms")
describe_run(softmax_scale)
"""),
    md("""
## Fixing graph breaks

Every graph break carries a *kind* and a fix for it: whether the break is fundamental (no
graph can hold it: Python reading a tensor's value, output), what your code asked for
(`compiler.disable`, an exception it raises), or a construct this tracer does not support
yet, and a suggestion with a snippet. Here is a function with four breaks:
"""),
    inspector("""
%%compile --backend eager
import numpy as np

def normalize(x):
    scale = x.abs().max().item()          # a tensor's value read into Python
    y = x / scale
    print("normalized")                   # output
    if y.sum() > 0:                       # a branch on a tensor's value
        y = y * 2
    return torch.from_numpy(np.tanh(y.numpy()))  # NumPy

normalize(torch.randn(16))
"""),
    md("""
The Overview above shows each break with its fix under the line. `%explain` with the bare
name explains the calls already made, without calling the function again; the fixes are in
its *how to avoid it* column and in `compiler.explain`'s text.
"""),
    code("""
%explain normalize
"""),
    code("""
explanation = compiler.explain(normalize)(torch.randn(16))
for brk in explanation.break_reasons:
    print(f"{brk.kind:24} ({brk.hint.category}) line {brk.user_stack[-1].lineno}")
    print("   ", brk.hint.suggestion)
"""),
    md("""
Following the fixes: keep the scale a tensor, print outside, select with `torch.where`
instead of branching, and use torch's `tanh`. The function is now one graph, and gives the
same result.
"""),
    inspector("""
%%compile --backend eager
def normalize_fixed(x):
    scale = x.abs().max()
    y = x / scale
    y = torch.where(y.sum() > 0, y * 2, y)
    return torch.tanh(y)

x = torch.randn(16)
torch.testing.assert_close(normalize_fixed(x), normalize(x))
print(compiler.explain(normalize_fixed)(x).graph_break_count, "graph breaks")
"""),
    md("""
## Training: the backward pass, compiled

When a graph's inputs require grad, the code generator compiles its backward too. It traces
one *joint* graph through autograd: the forward's aten ops, then the ops autograd's engine
runs for the backward, each backward op labelled with the forward line it differentiates. A
partitioner splits that graph with a minimum cut: the forward *saves* what is cheap to keep
(here its input `x` and the `tanh` output) and the backward *recomputes* cheap pointwise work
(here tanh's derivative `1 - tanh²`) instead of keeping its result. Both halves become kernels, wrapped in an
`autograd.Function`: `loss.backward()` runs the backward kernels, and the gradients match
eager's.
"""),
    code("""
def mse_tanh(x, w):
    h = torch.tanh(x @ w)
    return (h * h).mean()


x = torch.randn(8, 32, device=device)
w = torch.randn(32, 16, device=device, requires_grad=True)
w_eager = w.detach().clone().requires_grad_()
compiled_loss = compiler.compile(mse_tanh)
compiled_loss(x, w).backward()
mse_tanh(x, w_eager).backward()
torch.testing.assert_close(w.grad, w_eager.grad)

graph = compiler.inspect(compiled_loss).functions[0].graphs[0]
print(graph.aot_graphs["backward"])
print("saved for the backward:", [(s.name, s.shape) for s in graph.partition.saved])
print("recomputed by the backward:", graph.partition.recomputed)
for kernel in graph.kernels:
    lines = ", ".join(f"line {n}" for n in sorted({line.lineno for line in kernel.source_lines}))
    print(f"{kernel.graph:8} {kernel.name} ({kernel.language}), from {lines or 'no user line'}")
describe_run(compiled_loss)
"""),
]

"""Writes the notebooks in this folder from the cell lists below, without outputs.

The .ipynb files are generated so that a change to a notebook is reviewed as a change to this
file. Run `python notebooks/build.py` after editing; `--check` exits 1 when a committed
notebook differs from what this file generates (tests/notebooks runs the same check).

Cells tagged "inspector" are `%%compile` cells: the notebook tests assert that each of them
displays an inspector with its static HTML fallback.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


@dataclass(frozen=True)
class Cell:
    kind: str  # "markdown" or "code"
    source: str
    tags: tuple[str, ...] = ()


def md(source: str) -> Cell:
    return Cell("markdown", source.strip("\n"))


def code(source: str, *tags: str) -> Cell:
    return Cell("code", source.strip("\n"), tags)


def inspector(source: str) -> Cell:
    return code(source, "inspector")


# Shared by every notebook: what the CPU runs at the time, said once and checked live.
BACKEND_NOTE = md("""
**Which backend runs here.** On a GPU our `inductor` backend generates Triton kernels (and
`mode="reduce-overhead"` adds CUDA graphs). On a CPU it generates C++ kernels when the C++
code generator is available; otherwise it runs its Triton kernels in Triton's interpreter
(`TRITON_INTERPRET=1`), which is only practical for the small shapes used in these notebooks.
Graphs it cannot generate code for run their torch ops eagerly, and the inspector says so.
The helper below reads a compiled function's records and says what this machine actually ran:
how many graphs, which kernel languages, and any part that fell back to eager.
""")

HELPERS = code('''
def describe_run(compiled_fn):
    """What the compiler made of `compiled_fn` on this machine, read from its records."""
    report = compiler.inspect(compiled_fn)
    graphs = [g for f in report.functions for g in f.graphs]
    languages = sorted({k.language for g in graphs for k in g.kernels})
    backward = sum(k.graph == "backward" for g in graphs for k in g.kernels)
    if not graphs:
        made = "no graphs captured, it ran eagerly"
    elif not languages:
        made = f"{len(graphs)} graph(s), run as torch ops (no kernels generated)"
    else:
        made = f"{len(graphs)} graph(s), kernels: {', '.join(languages)}"
        if backward:
            made += f" ({backward} of them run in the backward pass)"
    print(f"device: {device}; {made}")
    for g in graphs:
        if g.fallback:
            print(f"  a graph fell back to eager: {g.fallback}")
    for f in report.functions:
        for warning in f.warnings:
            print(f"  {f.qualname}: {warning}")
''')

SETUP = code("""
import torch

import compiler

%load_ext jupyter_compile

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
print("device:", device)
print("backends:", compiler.list_backends())
""")


GETTING_STARTED = [
    md("""
# Getting started with jupyter-compile

This notebook follows PyTorch's *Getting Started* tutorial for `torch.compile` (the seed
tutorials 001 and 003) with our own compiler: `compiler.compile` in place of `torch.compile`,
and the `%%compile` cell magic, which compiles every function a cell defines and shows an
inspector under the cell. The inspector has tabs for the source (graph regions and breaks
marked), the FX graphs, the guards, the generated kernels, and timings.

Everything here runs on a laptop CPU in a few minutes: the models are the tutorial's, with
random weights and smaller inputs (each cell says what the tutorial used).
"""),
    SETUP,
    BACKEND_NOTE,
    HELPERS,
    md("""
## A toy example: fusing `cos` and `sin`

`cos` and `sin` are pointwise ops: each element of the output depends on one element of the
input. Run eagerly, each op reads its input from memory and writes its result back. The most
important optimization of the code generator is *fusion*: both ops run in one kernel, so the
data is read once and written once, and the intermediate stays in registers.

The tutorial moves the results to the GPU with `.cuda()` inside `fn`; here the inputs are
already on `device`.
"""),
    inspector("""
%%compile
def fn(x, y):
    a = torch.cos(x)
    b = torch.sin(y)
    return a + b

input_tensor = torch.randn(10000, device=device)
a = fn(input_tensor, input_tensor)
torch.testing.assert_close(a, torch.cos(input_tensor) + torch.sin(input_tensor))
"""),
    md("""
The tutorial reads the generated kernel from `TORCH_COMPILE_DEBUG=1` dump files. Here the
same information is in the compiler's inspection records: `compiler.inspect(fn)` returns
dataclasses for every graph, with the kernels generated for it and the FX nodes fused into
each one. The *Kernels* tab of the inspector above shows the same source, highlighted.
"""),
    code("""
report = compiler.inspect(fn)
for graph in report.functions[0].graphs:
    for kernel in graph.kernels:
        print(f"# {kernel.name} ({kernel.language}) fuses: {', '.join(kernel.fused_nodes)}")
        print(kernel.source)
describe_run(fn)
"""),
    md("""
## A real model: ResNet-18

The tutorial loads a pretrained `resnet18` from `torch.hub` and calls it on a
`1x3x64x64` input. Weights do not change what is compiled, so we build it from torchvision
with random weights (no download). `%%compile` compiles the functions a cell defines, and the
compiler inlines the model's `forward` into the graph of `run_resnet`. To compile a module
object directly, `compiler.compile(model)` works as `torch.compile(model)` does.

The first call is slow because it compiles; later calls reuse the compiled code as long as
the guards hold (same shapes, dtypes, module).
"""),
    code("""
from torchvision.models import resnet18

model = resnet18().eval()
"""),
    inspector("""
%%compile
def run_resnet(x):
    return model(x)

x = torch.randn(1, 3, 64, 64)
with torch.no_grad():
    out = run_resnet(x)
    torch.testing.assert_close(out, model(x), rtol=1e-3, atol=1e-3)
print(out.shape)
"""),
    code("""
print(compiler.list_backends())
"""),
    md("""
`compiler.list_backends()` lists the backends a graph can be handed to, as
`torch._dynamo.list_backends()` does; any callable `(gm, example_inputs) -> callable` is a
backend too (see the tutorial notebook).

## Hugging Face models: BERT

The tutorial downloads `bert-base-uncased` and its tokenizer. To stay offline and fast on a
CPU we build a BERT from a small `BertConfig` (2 layers, hidden size 64) with random weights
and feed it random token ids; the code path through `BertModel.forward` is the same as
bert-base's.
"""),
    code("""
from transformers import BertConfig, BertModel

config = BertConfig(
    vocab_size=1000,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=128,
    max_position_embeddings=128,
)
bert = BertModel(config).eval()
seq_len = 16
encoded_input = {
    "input_ids": torch.randint(0, config.vocab_size, (1, seq_len)),
    "token_type_ids": torch.zeros(1, seq_len, dtype=torch.long),
    "attention_mask": torch.ones(1, seq_len, dtype=torch.long),
}
"""),
    inspector("""
%%compile
def run_bert(inputs):
    return bert(**inputs).last_hidden_state

with torch.no_grad():
    output = run_bert(encoded_input)
    expected = bert(**encoded_input).last_hidden_state
    torch.testing.assert_close(output, expected, rtol=1e-3, atol=1e-3)
print(output.shape)
"""),
    md("""
The *Overview* tab shows where the compiler had to break the graph inside the transformers
code, if anywhere, and why; the *Graphs* tab shows each captured graph.

## A TIMM model

The tutorial compiles `resnext101_32x8d` with pretrained weights on a `64x3x7x7` input. We
use timm's much smaller `resnet10t` with random weights (`pretrained=False`, no download) and
a batch of 8.
"""),
    code("""
import timm

timm_model = timm.create_model("resnet10t", pretrained=False, num_classes=2).eval()
"""),
    inspector("""
%%compile
def run_timm(x):
    return timm_model(x)

images = torch.randn(8, 3, 32, 32)
with torch.no_grad():
    logits = run_timm(images)
    torch.testing.assert_close(logits, timm_model(images), rtol=1e-3, atol=1e-3)
print(logits)
"""),
    code("""
for compiled in (fn, run_resnet, run_bert, run_timm):
    print(compiled.__name__, end=": ")
    describe_run(compiled)
"""),
    md("""
## Next

- `02_tutorial.ipynb`: speedups for inference and training, why a bytecode tracer beats
  TorchScript and FX tracing, custom backends, `%explain`, `fullgraph=True` and export.
- `03_inside_the_compiler.ipynb`: guards and recompiles, dynamic shapes, `reduce-overhead`,
  and reading generated kernels.
"""),
]


TUTORIAL = [
    md("""
# Tutorial: compiling PyTorch code with `compiler.compile`

This notebook follows the PyTorch tutorials *Introduction to torch.compile* and
*TorchDynamo and TorchInductor* (seeds 000 and 002), with `compiler.compile` in place of
`torch.compile` / `dynamo.optimize(...)`. We cover basic usage, speedups for inference and
training, the advantages over TorchScript and FX tracing, custom backends, graph breaks with
`%explain`, `fullgraph=True`, and export.

The tutorials time `densenet121`/`resnet18` on batches of 16 `128x128` images on an A100 or
H100. So that this notebook runs in minutes on a CPU, we use `resnet18` on a few `32x32`
images and a handful of iterations: the CPU numbers below show the method, not the speedup.
GPU measurements are in `BENCHMARKS.md`.
"""),
    SETUP,
    BACKEND_NOTE,
    HELPERS,
    md("""
## Basic usage

Any Python function can be compiled by passing it to `compiler.compile`; the returned function
is called in place of the original.
"""),
    code("""
def foo(x, y):
    a = torch.sin(x)
    b = torch.cos(y)
    return a + b

opt_foo1 = compiler.compile(foo)
print(opt_foo1(torch.randn(10, 10), torch.randn(10, 10)))
"""),
    md("Alternatively, decorate the function."),
    code("""
@compiler.compile
def opt_foo2(x, y):
    a = torch.sin(x)
    b = torch.cos(y)
    return a + b

print(opt_foo2(torch.randn(10, 10), torch.randn(10, 10)))
"""),
    md("`torch.nn.Module` instances can be compiled too."),
    code("""
class MyModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(100, 10)

    def forward(self, x):
        return torch.nn.functional.relu(self.lin(x))

mod = MyModule()
opt_mod = compiler.compile(mod)
print(opt_mod(torch.randn(10, 100)))
"""),
    md("""
In a notebook, `%%compile` does this for every function and module class the cell defines and
shows an inspector under the cell; `--compare eager` adds a timing run against eager.
"""),
    inspector("""
%%compile --compare eager
def foo3(x, y):
    a = torch.sin(x)
    b = torch.cos(y)
    return a + b

print(foo3(torch.randn(10, 10), torch.randn(10, 10)))
"""),
    md("""
## Demonstrating speedups

We compare eager mode and the compiled model by evaluating and training a torchvision model
on random data. `timed` uses CUDA events on a GPU, as the tutorial does, and
`time.perf_counter` on a CPU.

The tutorial passes `mode="reduce-overhead"`, which captures the compiled kernels into a CUDA
graph to remove launch overhead. CUDA graphs exist only on CUDA devices, so on a CPU we leave
the mode at its default (notebook 03 shows what happens if you pass it anyway).
"""),
    code("""
import time

import numpy as np
from torchvision.models import resnet18


def timed(fn):
    if device == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        result = fn()
        end.record()
        torch.cuda.synchronize()
        return result, start.elapsed_time(end) / 1000
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


BATCH, IMAGE = (16, 128) if device == "cuda" else (4, 32)
N_ITERS = 10 if device == "cuda" else 3
MODE = "reduce-overhead" if device == "cuda" else None


def generate_data(b):
    return (
        torch.randn(b, 3, IMAGE, IMAGE).to(torch.float32).to(device),
        torch.randint(1000, (b,)).to(device),
    )


def init_model():
    return resnet18().to(torch.float32).to(device)
"""),
    md("""
First, inference. The first compiled call takes much longer than eager because it compiles.
"""),
    code("""
model = init_model().eval()
compiler.reset()
model_opt = compiler.compile(model, mode=MODE)

inp = generate_data(BATCH)[0]
with torch.no_grad():
    print("eager:", timed(lambda: model(inp))[1])
    print("compile:", timed(lambda: model_opt(inp))[1])
"""),
    md("""
The structure of the model does not change between calls, so nothing recompiles, and later
calls run the compiled code directly.
"""),
    code("""
eager_times = []
for i in range(N_ITERS):
    inp = generate_data(BATCH)[0]
    with torch.no_grad():
        _, eager_time = timed(lambda: model(inp))
    eager_times.append(eager_time)
    print(f"eager eval time {i}: {eager_time}")
print("~" * 10)

compile_times = []
for i in range(N_ITERS):
    inp = generate_data(BATCH)[0]
    with torch.no_grad():
        _, compile_time = timed(lambda: model_opt(inp))
    compile_times.append(compile_time)
    print(f"compile eval time {i}: {compile_time}")
print("~" * 10)

eager_med = np.median(eager_times)
compile_med = np.median(compile_times)
speedup = eager_med / compile_med
print(f"(eval) eager median: {eager_med}, compile median: {compile_med}, speedup: {speedup}x")
describe_run(model_opt)
"""),
    md("""
Now training. As in the older tutorial (seed 002), `train` holds the forward pass, the loss
and `loss.backward()`, and the optimizer steps run outside it. The compiler captures the
forward and the loss as one graph and compiles it *with its backward*: it traces the joint
forward+backward graph through autograd, a partitioner splits it into a forward graph and a
backward graph (keeping the convolution outputs for the backward, recomputing cheap
BatchNorm and ReLU work instead of saving it), and both become kernels. `loss.backward()`
itself ends the graph, because autograd's engine runs in Python; the engine then runs our
backward kernels, and the gradients land in `.grad` as in eager.
"""),
    code("""
model = init_model()
opt = torch.optim.Adam(model.parameters())


def train(mod, data):
    pred = mod(data[0])
    loss = torch.nn.CrossEntropyLoss()(pred, data[1])
    loss.backward()


eager_times = []
for i in range(N_ITERS):
    inp = generate_data(BATCH)
    opt.zero_grad(True)
    _, eager_time = timed(lambda: train(model, inp))
    opt.step()
    eager_times.append(eager_time)
    print(f"eager train time {i}: {eager_time}")
print("~" * 10)

model = init_model()
opt = torch.optim.Adam(model.parameters())
train_opt = compiler.compile(train, mode=MODE)

compile_times = []
for i in range(N_ITERS):
    inp = generate_data(BATCH)
    opt.zero_grad(True)
    _, compile_time = timed(lambda: train_opt(model, inp))
    opt.step()
    compile_times.append(compile_time)
    print(f"compile train time {i}: {compile_time}")
print("~" * 10)

eager_med = np.median(eager_times)
compile_med = np.median(compile_times[1:])  # the first iteration includes compilation
speedup = eager_med / compile_med
print(f"(train) eager median: {eager_med}, compile median: {compile_med}, speedup: {speedup}x")
describe_run(train_opt)
"""),
    md("""
The newer tutorial (seed 000) puts `opt.zero_grad(True)` and `opt.step()` inside the compiled
function. That works here too, but the optimizer is not traced yet: each optimizer call ends
a graph and runs in Python (the Adam update runs eagerly, on the gradients our backward
kernels wrote). The records say so, call by call:
"""),
    code("""
model = init_model()
opt = torch.optim.Adam(model.parameters())


def train(mod, data):
    opt.zero_grad(True)
    pred = mod(data[0])
    loss = torch.nn.CrossEntropyLoss()(pred, data[1])
    loss.backward()
    opt.step()


train_opt = compiler.compile(train, mode=MODE)
compile_times = []
for i in range(N_ITERS):
    inp = generate_data(BATCH)
    _, compile_time = timed(lambda: train_opt(model, inp))
    compile_times.append(compile_time)
    print(f"compile train time {i}: {compile_time}")
print("~" * 10)

for entry in compiler.inspect(train_opt).functions[0].entries:
    graph = f"a graph of {entry.graph.op_count} ops" if entry.graph else "no graph"
    why = entry.graph_break.reason if entry.graph_break else "returns"
    print(f"from line {entry.start_line}: {graph}; then {why}")
describe_run(train_opt)
"""),
    md("""
## Comparison to TorchScript and FX tracing

The advantage of a bytecode tracer over earlier PyTorch compilers is that it handles
arbitrary Python with no changes to the code. One case other solutions struggle with is
data-dependent control flow (the `if x.sum() < 0:` line below).
"""),
    code("""
import traceback as tb
import warnings


def f1(x, y):
    if x.sum() < 0:
        return -y
    return y


# Test that `fn1` and `fn2` return the same result, given the same arguments `args`.
def test_fns(fn1, fn2, args):
    out1 = fn1(*args)
    out2 = fn2(*args)
    return torch.allclose(out1, out2)


inp1 = torch.randn(5, 5)
inp2 = torch.randn(5, 5)
"""),
    md("""
TorchScript tracing `f1` gives silently wrong results: only the path taken during tracing is
recorded. (TorchScript is deprecated in recent PyTorch; we silence its warnings.)
"""),
    code("""
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    traced_f1 = torch.jit.trace(f1, (inp1, inp2))
print("traced 1, 1:", test_fns(f1, traced_f1, (inp1, inp2)))
print("traced 1, 2:", test_fns(f1, traced_f1, (-inp1, inp2)))
"""),
    md("FX tracing `f1` raises an error because of the data-dependent control flow."),
    code("""
try:
    torch.fx.symbolic_trace(f1)
except Exception:
    tb.print_exc()
"""),
    md("""
Giving FX a concrete value for `x` removes the control flow, with the same problem as
TorchScript tracing.
"""),
    code("""
fx_f1 = torch.fx.symbolic_trace(f1, concrete_args={"x": inp1})
print("fx 1, 1:", test_fns(f1, fx_f1, (inp1, inp2)))
print("fx 1, 2:", test_fns(f1, fx_f1, (-inp1, inp2)))
"""),
    md("`compiler.compile` handles the data-dependent control flow correctly."),
    code("""
compiler.reset()
compile_f1 = compiler.compile(f1)
print("compile 1, 1:", test_fns(f1, compile_f1, (inp1, inp2)))
print("compile 1, 2:", test_fns(f1, compile_f1, (-inp1, inp2)))
print("~" * 10)
"""),
    md("""
TorchScript scripting handles control flow but needs type annotations and refuses
unsupported Python. Without annotations, `y` is assumed to be a tensor, so passing an `int`
fails.
"""),
    code("""
def f2(x, y):
    return x + y


inp1 = torch.randn(5, 5)
inp2 = 3

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    script_f2 = torch.jit.script(f2)
try:
    script_f2(inp1, inp2)
except Exception:
    tb.print_exc()
"""),
    code("""
compile_f2 = compiler.compile(f2)
print("compile 2:", test_fns(f2, compile_f2, (inp1, inp2)))
print("~" * 10)
"""),
    md("Calls to non-PyTorch functions are another case where the earlier solutions fail."),
    code("""
import scipy


def f3(x):
    x = x * 2
    x = scipy.fft.dct(x.numpy())
    x = torch.from_numpy(x)
    x = x * 2
    return x
"""),
    md("TorchScript tracing treats the result of the scipy call as a constant: silently wrong."),
    code("""
inp1 = torch.randn(5, 5)
inp2 = torch.randn(5, 5)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    traced_f3 = torch.jit.trace(f3, (inp1,))
print("traced 3:", test_fns(f3, traced_f3, (inp2,)))
"""),
    md("TorchScript scripting and FX tracing refuse the scipy call."),
    code("""
try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.script(f3)
except Exception:
    tb.print_exc()

try:
    torch.fx.symbolic_trace(f3)
except Exception:
    tb.print_exc()
"""),
    md("""
`compiler.compile` breaks the graph at the scipy call, runs it in Python, and compiles the
torch code before and after it.
"""),
    code("""
compile_f3 = compiler.compile(f3)
print("compile 3:", test_fns(f3, compile_f3, (inp2,)))
"""),
    md("""
## FX graphs and custom backends

The tracer outputs FX graphs; a backend turns each graph into something callable. To look at
the graphs, write a backend that prints the graph and returns its unoptimized `forward`.
"""),
    code("""
def custom_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):
    print("custom backend called with FX graph:")
    gm.graph.print_tabular()
    return gm.forward


compiler.reset()
opt_model = compiler.compile(init_model(), backend=custom_backend)
opt_model(generate_data(BATCH)[0]).shape
"""),
    md("""
With the custom backend we can see how the tracer handles data-dependent control flow in
`bar`, where `if b.sum() < 0` decides the path.
"""),
    code("""
def bar(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


opt_bar = compiler.compile(bar, backend=custom_backend)
inp1 = torch.randn(10)
inp2 = torch.randn(10)
opt_bar(inp1, inp2)
opt_bar(inp1, -inp2)
"""),
    md("""
Over the two calls the tracer extracted 3 graphs:

1. `x = a / (torch.abs(a) + 1)`, ending at the data-dependent `if`;
2. `b = b * -1; return x * b`, when `b.sum() < 0`;
3. `return x * b`, otherwise.

At an unsupported feature the tracer breaks the graph, lets Python run that instruction, and
resumes capturing after it. `%explain` shows where and why, with the source line; `-o`
returns the object that `compiler.explain` returns.
"""),
    code("""
%explain bar(torch.randn(10), torch.randn(10))
"""),
    code("""
explanation = compiler.explain(bar)(torch.randn(10), torch.randn(10))
print(explanation)
print("graphs:", explanation.graph_count, "breaks:", explanation.graph_break_count)
for reason in explanation.break_reasons:
    print(reason.reason)
"""),
    md("""
To get the most speedup, limit graph breaks. `fullgraph=True` (the tutorial's
`nopython=True`) raises at the first break instead.
"""),
    code("""
opt_bar = compiler.compile(bar, fullgraph=True)
try:
    opt_bar(torch.randn(10), torch.randn(10))
except Exception:
    tb.print_exc()
"""),
    md("""
The model above has no breaks, so `fullgraph=True` succeeds. We pass `backend="eager"`
because whether a function fits in one graph is decided by the tracer, and this skips
generating code for the model a second time.
"""),
    code("""
opt_model = compiler.compile(init_model(), fullgraph=True, backend="eager")
print(opt_model(generate_data(BATCH)[0]).shape)
"""),
    md("""
Finally, `compiler.export` returns the single FX graph of a function (and its guards) for use
elsewhere. Like `fullgraph=True`, it raises if the graph breaks.
"""),
    code("""
try:
    compiler.export(bar, torch.randn(10), torch.randn(10))
except Exception:
    tb.print_exc()

model = init_model().eval()
data = generate_data(BATCH)[0]
graph_module, guards = compiler.export(model, data)
torch.testing.assert_close(graph_module(data), model(data))
print(graph_module(data).shape)
print(f"{len(guards)} guards")
"""),
    md("""
## Conclusion

We covered basic usage, speedups over eager mode, the comparison with TorchScript and FX
tracing, and the FX graphs behind it all. `03_inside_the_compiler.ipynb` goes further:
guards and recompiles, dynamic shapes, CUDA graphs, and the generated kernels.
"""),
]


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


NOTEBOOKS = {
    "01_getting_started.ipynb": GETTING_STARTED,
    "02_tutorial.ipynb": TUTORIAL,
    "03_inside_the_compiler.ipynb": INSIDE,
}


def build(name: str, cells: list[Cell]) -> nbformat.NotebookNode:
    """A notebook without outputs, with stable cell ids so regeneration gives no diff."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.metadata["language_info"] = {"name": "python"}
    stem = name.removesuffix(".ipynb").replace("_", "-")
    for index, cell in enumerate(cells):
        if cell.kind == "markdown":
            node = nbformat.v4.new_markdown_cell(cell.source)
        else:
            node = nbformat.v4.new_code_cell(cell.source)
        node["id"] = f"{stem}-{index:02d}"
        if cell.tags:
            node.metadata["tags"] = list(cell.tags)
        nb.cells.append(node)
    nbformat.validate(nb)
    return nb


def render(name: str) -> str:
    return nbformat.writes(build(name, NOTEBOOKS[name])) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a notebook is stale")
    args = parser.parse_args(argv)
    stale = []
    for name in NOTEBOOKS:
        path = HERE / name
        text = render(name)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale notebooks (run python notebooks/build.py): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

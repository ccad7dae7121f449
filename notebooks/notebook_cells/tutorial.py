"""Notebook 02: the tutorial, compiling PyTorch code with compiler.compile."""

from __future__ import annotations

from notebook_cells.common import BACKEND_NOTE, HELPERS, SETUP, code, inspector, md

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
elsewhere. Like `fullgraph=True`, it raises if the graph breaks, naming the break and its kind.
The exported module is called as the function is: same parameters, same result structure.
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
Non-tensor arguments are baked into the graph as constants, and the module checks them on
every call; a tensor the function returns twice comes back as one object, and an input it
returns comes back as that input.
"""),
    code("""
def scale_and_split(x, parts, factor=2.0):
    y = x * factor
    return {"chunks": list(y.chunk(parts)), "input": x, "parts": parts}

gm, _ = compiler.export(scale_and_split, torch.randn(6), 3)
print(gm.code)
x = torch.randn(6)
out = gm(x, 3)
print(out["input"] is x, [c.shape for c in out["chunks"]])
try:
    gm(x, 2)
except ValueError as e:
    print(e)
"""),
    md("""
## Verify mode: is the compiled result right?

`%%compile --verify` (or `compiler.compile(fn, verify=True)`) checks every call against
eager. Each call also runs the function eagerly on copies of its inputs, once in float64
and once in the inputs' own dtype, and the compiled result is judged as torch's accuracy
checker judges it: close to eager's result, or at most about twice as far from the float64
result as eager itself is (a fused kernel may round differently, and is then not wrong).
When verify is off, nothing of it runs.
"""),
    inspector("""
%%compile --verify
def smooth_gate(x):
    return x * torch.sigmoid(1.702 * x) + 0.1 * torch.tanh(x)

smooth_gate(torch.randn(256, device=device))
"""),
    md("""
The inspector's badges count the verified graph runs and the mismatches (none). To see a
mismatch we need a compiler with a bug: here a backend of our own that rewrites `torch.sin`
into `torch.cos` before running the graph.
"""),
    code("""
def buggy_backend(gm, example_inputs):
    \"\"\"A backend with a bug: it runs cos where the program says sin.\"\"\"
    for node in gm.graph.nodes:
        if node.target is torch.sin:
            node.target = torch.cos
    gm.recompile()
    return gm.forward
"""),
    md("""
Verify mode replays the graph node by node (it compiles the graph cut after each candidate
node, by bisection) and names the first node whose value diverges, with its line: in a
`compiler.VerificationWarning` shown at that line, in red in the inspector's Overview, and
in the records.
"""),
    inspector("""
%%compile --backend buggy_backend --verify
def wave(x):
    y = x * 2
    z = torch.sin(y) + y
    return z.relu()

wave(torch.randn(64, device=device))
"""),
    code("""
for mismatch in compiler.inspect(wave).mismatches:
    print(mismatch)
    print("  the line:", mismatch.user_line.text.strip())
"""),
    md("""
## Conclusion

We covered basic usage, speedups over eager mode, the comparison with TorchScript and FX
tracing, and the FX graphs behind it all. `03_inside_the_compiler.ipynb` goes further:
guards and recompiles, dynamic shapes, CUDA graphs, and the generated kernels.
"""),
]

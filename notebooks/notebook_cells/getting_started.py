"""Notebook 01: getting started, after PyTorch's torch.compile tutorial."""

from __future__ import annotations

from notebook_cells.common import BACKEND_NOTE, HELPERS, SETUP, code, inspector, md

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

"""What every notebook shares: the cell kinds, the setup cell, the backend note and the
`describe_run` helper."""

from __future__ import annotations

from dataclasses import dataclass


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

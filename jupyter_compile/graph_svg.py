"""FX graphs drawn with graphviz, one page at a time.

A model's graph can have thousands of nodes; one `dot` layout of all of them takes minutes
and an SVG nobody can read. So the nodes (in graph order, which is topological) are cut into
pages of `PAGE_SIZE`; an edge from another page ends at a small dashed stub naming that page.
`dot` runs in a subprocess with a timeout, so a pathological layout costs seconds, never the
notebook.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass

import torch.fx

from jupyter_compile.html import note

PAGE_SIZE = 60
DOT_TIMEOUT_S = 10.0

_OP_STYLE = {
    "placeholder": 'shape=box, style="rounded,filled", fillcolor="#d9edf7"',
    "output": 'shape=box, style="rounded,filled", fillcolor="#dff0d8"',
    "get_attr": 'shape=box, style="filled", fillcolor="#fcf8e3"',
    "call_module": 'shape=box, style="filled", fillcolor="#e8e0f5"',
    "call_method": 'shape=box, style="filled", fillcolor="#ffffff"',
    "call_function": 'shape=box, style="filled", fillcolor="#ffffff"',
}


def dot_string(text: str) -> str:
    """A DOT quoted string showing `text` literally (backslashes and quotes included), with
    newlines as left-justified line breaks."""
    body = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + body.replace("\n", "\\l") + '\\l"'


def _target_name(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, str):
        return target
    return getattr(target, "__name__", None) or str(target)


def _short(value: object, limit: int = 24) -> str:
    text = value.name if isinstance(value, torch.fx.Node) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _meta(node: torch.fx.Node) -> str:
    """Shape and dtype when the tracer left them on the node (`val` or `tensor_meta`)."""
    value = node.meta.get("val", node.meta.get("example_value"))
    meta = node.meta.get("tensor_meta")
    shape = getattr(value, "shape", None) if value is not None else getattr(meta, "shape", None)
    dtype = getattr(value, "dtype", None) if value is not None else getattr(meta, "dtype", None)
    if shape is None:
        return ""
    dt = str(dtype).replace("torch.", "") if dtype is not None else ""
    return f"{dt}[{', '.join(str(s) for s in shape)}]"


def node_label(node: torch.fx.Node) -> str:
    if node.op in ("placeholder", "output", "get_attr"):
        head = f"{node.name}" if node.op != "get_attr" else f"{node.name} = {node.target}"
    else:
        args = ", ".join(_short(a) for a in node.args)
        kwargs = ", ".join(f"{k}={_short(v)}" for k, v in node.kwargs.items())
        head = f"{node.name} = {_target_name(node)}({', '.join(p for p in (args, kwargs) if p)})"
    meta = _meta(node)
    return head + (f"\n{meta}" if meta else "")


@dataclass(frozen=True)
class Page:
    index: int
    count: int
    dot: str
    node_count: int


def page_count(gm: torch.fx.GraphModule, page_size: int = PAGE_SIZE) -> int:
    n = len(gm.graph.nodes)
    return max(1, -(-n // page_size))


def graph_page(gm: torch.fx.GraphModule, index: int = 0, page_size: int = PAGE_SIZE) -> Page:
    """The DOT text of page `index`: its nodes, the edges among them, and stubs for edges that
    cross to other pages."""
    nodes = list(gm.graph.nodes)
    count = page_count(gm, page_size)
    index = min(max(index, 0), count - 1)
    page_of = {n: i // page_size for i, n in enumerate(nodes)}
    ids = {n: f"n{i}" for i, n in enumerate(nodes)}
    chunk = nodes[index * page_size : (index + 1) * page_size]
    lines = [
        "digraph G {",
        '  graph [rankdir=TB, fontname="Helvetica", nodesep=0.25, ranksep=0.3];',
        '  node [fontname="Helvetica", fontsize=10, margin="0.08,0.03", height=0.2];',
        '  edge [arrowsize=0.6, color="#666666"];',
    ]
    stubs: set[str] = set()
    for node in chunk:
        lines.append(
            f"  {ids[node]} [label={dot_string(node_label(node))}, {_OP_STYLE.get(node.op, '')}];"
        )
        for src in node.all_input_nodes:
            if page_of[src] == index:
                lines.append(f"  {ids[src]} -> {ids[node]};")
                continue
            stub = f"in_{ids[src]}"
            if stub not in stubs:
                stubs.add(stub)
                label = dot_string(f"{src.name} (page {page_of[src] + 1})")
                lines.append(
                    f'  {stub} [label={label}, shape=box, style=dashed, fontcolor="#888888"];'
                )
            lines.append(f"  {stub} -> {ids[node]} [style=dashed];")
        later = sorted({page_of[u] for u in node.users if page_of[u] != index})
        if later:
            stub = f"out_{ids[node]}"
            label = dot_string("to page " + ", ".join(str(p + 1) for p in later))
            lines.append(f'  {stub} [label={label}, shape=box, style=dashed, fontcolor="#888888"];')
            lines.append(f"  {ids[node]} -> {stub} [style=dashed];")
    lines.append("}")
    return Page(index=index, count=count, dot="\n".join(lines), node_count=len(chunk))


@functools.lru_cache(maxsize=1)
def dot_executable() -> str | None:
    return shutil.which("dot")


def render_svg(dot: str, timeout_s: float = DOT_TIMEOUT_S) -> str:
    """SVG markup for DOT text, or an HTML note saying why there is none. `dot` escapes label
    text into XML entities, so user strings in labels stay text."""
    exe = dot_executable()
    if exe is None:
        return note("graphviz is not installed (no `dot` on PATH): showing the graph as code only.")
    try:
        done = subprocess.run(
            [exe, "-Tsvg"], input=dot.encode(), capture_output=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        return note(
            f"graphviz took more than {timeout_s:.0f} s to lay out this page; see the code below."
        )
    if done.returncode != 0:
        return note("graphviz failed: " + done.stderr.decode(errors="replace")[:500])
    svg = done.stdout.decode(errors="replace")
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


@functools.lru_cache(maxsize=64)
def _cached_svg(dot: str) -> str:
    return render_svg(dot)


def page_svg(
    gm: torch.fx.GraphModule, index: int = 0, page_size: int = PAGE_SIZE
) -> tuple[str, Page]:
    """The rendered page and its description; layouts are cached by DOT text."""
    page = graph_page(gm, index, page_size)
    return _cached_svg(page.dot), page


def page_caption(page: Page) -> str:
    if page.count == 1:
        return f"{page.node_count} nodes"
    return (
        f"page {page.index + 1} of {page.count} ({page.node_count} nodes; "
        "dashed boxes link to other pages)"
    )


def svg_block(svg: str) -> str:
    style = "overflow: auto; max-height: 640px; border: 1px solid #e1e1e1;"
    return f'<div class="jc-graph" style="{style}">{svg}</div>'

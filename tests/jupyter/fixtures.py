"""Hand-made inspection records with real FX graphs, for testing the views without running
the compiler. User-derived text is deliberately hostile: names, source, constants, messages
and kernel code contain markup and quotes that must come out escaped."""

from __future__ import annotations

import torch
import torch.fx

from compiler.records import (
    CompiledReport,
    ControlRecord,
    EntryRecord,
    FunctionRecord,
    GraphBreak,
    GraphRecord,
    Guard,
    KernelRecord,
    SourceLine,
    StageTime,
)

EVIL = "<script>alert('x\"y')</script>"
FILENAME = "<ipython-input-7-evil>"
FIRSTLINE = 10
SOURCE = f'''def evil_fn(x):
    y = torch.sin(x) + 1.0
    print("{EVIL}")
    z = torch.nn.functional.gelu(y, approximate="tanh")
    return z * 2
'''


def first_graph(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) + 1.0


def _second(y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(y, approximate="tanh") * 2


def line(offset: int) -> SourceLine:
    return SourceLine(FILENAME, FIRSTLINE + offset, SOURCE.splitlines()[offset], "evil_fn")


def graph_record(fn, lines: list[int], backend: str = "eager") -> GraphRecord:
    gm = torch.fx.symbolic_trace(fn)
    return GraphRecord(
        graph_module=gm,
        code=gm.code,
        op_count=sum(1 for n in gm.graph.nodes if n.op.startswith("call")),
        source_lines=[line(i) for i in lines],
        backend=backend,
        example_inputs=["f32[8, 8]"],
        stage_times=[
            StageTime("trace", 0.010),
            StageTime("lower", 0.004),
            StageTime("codegen", 0.020),
        ],
        notes=[f"note with {EVIL}"],
    )


def make_report() -> CompiledReport:
    g0 = graph_record(first_graph, [1])
    g1 = graph_record(_second, [3, 4])
    # A hostile string constant in a node: it reaches the graphviz label.
    gelu = next(n for n in g1.graph_module.graph.nodes if "gelu" in str(n.target))
    gelu.kwargs = {"approximate": EVIL}
    g1.kernels = [
        KernelRecord(
            name="triton_poi_fused_sin_add_0",
            language="triton",
            source=(
                "@triton.jit\n"
                "def triton_poi_fused_sin_add_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):\n"
                f"    # {EVIL}\n    pass\n"
            ),
            fused_nodes=["sin", "add"],
            source_lines=[line(1)],
            grid="grid(64)",
            bytes_accessed=512,
            measured_ms=0.002,
        ),
        KernelRecord(
            name="cpp_fused_gelu_mul_1",
            language="cpp",
            source='extern "C" void kernel(const float* in_ptr0, float* out_ptr0) { /* <b> */ }\n',
            fused_nodes=["gelu", "mul"],
            source_lines=[line(3), line(4)],
            bytes_accessed=512,
        ),
    ]
    guards = [
        Guard(
            "TENSOR_MATCH",
            "L['x']",
            "check_tensor(L['x'], torch.float32, (8, 8))",
            "x is float32 of shape (8, 8)",
            line(0),
        ),
        Guard("CONSTANT_MATCH", "L['tag']", f"L['tag'] == {EVIL!r}", "tag is a constant string"),
    ]
    e0 = EntryRecord(
        "evil_fn",
        0,
        g0,
        guards=guards,
        guard_source="def guard(L, G):\n    return L['x'].dtype == torch.float32\n",
        graph_break=GraphBreak(f"call to builtin print with {EVIL}", [line(2)], "CALL"),
        compile_time_s=0.03,
        hits=3,
    )
    e1 = EntryRecord("evil_fn", 3, g1, guards=guards[:1], compile_time_s=0.05, hits=3)
    e2 = EntryRecord(
        "evil_fn",
        0,
        graph_record(first_graph, [1]),
        guards=guards[:1],
        compile_time_s=0.02,
        hits=1,
        recompile_reason="L['x'].size()[0] == 8",
        controls=[
            ControlRecord(
                "dynamic",
                "L['x'].size(0)",
                f"traced as the symbol s77 (size 9 in this call): changed {EVIL}",
                line(1),
            )
        ],
    )
    fn = FunctionRecord(
        name="evil_fn",
        qualname=f"evil_fn{EVIL}",
        filename=FILENAME,
        firstlineno=FIRSTLINE,
        source=SOURCE,
        entries=[e0, e1, e2],
        warnings=[f"fell back to eager for {EVIL}"],
        controls=[ControlRecord("stance", "eager_on_recompile", f"ran eagerly instead {EVIL}")],
    )
    return CompiledReport(functions=[fn], backend="eager")


def big_graph_module(n: int = 200) -> torch.fx.GraphModule:
    """A long chain, to check paging."""

    def chain(x: torch.Tensor) -> torch.Tensor:
        for _ in range(n):
            x = torch.sin(x)
        return x

    return torch.fx.symbolic_trace(chain)

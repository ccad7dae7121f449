"""The eager re-run of a graph after its compiled code raised (compiler/runtime/eager.py)."""

import pytest
import torch
import torch.fx

from compiler.runtime.eager import run_eagerly


def _aten_view_graph() -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    flat = graph.call_function(torch.ops.aten.view.default, (x, [6, 4]))
    graph.output(graph.call_function(torch.ops.aten.mul.Tensor, (flat, 2)))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def test_an_aot_halfs_view_of_tensors_in_other_strides_runs_as_a_reshape():
    # Traced on a contiguous [2, 3, 4]; given the same values in permuted strides, as a
    # backward is when the compiled forward saved a tensor channels-last.
    x = torch.randn(2, 4, 3).permute(0, 2, 1)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        x.view(6, 4)
    out = run_eagerly(_aten_view_graph(), [x])
    torch.testing.assert_close(out, x.reshape(6, 4) * 2)


def test_a_torch_level_view_error_is_still_the_users_error():
    def f(x):
        return x.view(6, 4)

    gm = torch.fx.symbolic_trace(f)
    x = torch.randn(2, 4, 3).permute(0, 2, 1)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        run_eagerly(gm, [x])

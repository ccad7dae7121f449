"""Views as index arithmetic, concatenation, padding and gathers vs eager."""

import pytest
import torch
import torch.nn.functional as F

from tests.codegen.helpers import DEVICE, check, rand


@pytest.fixture(autouse=True)
def triton_on_cpu(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("COMPILER_CPU_EMITTER", "triton")
    monkeypatch.setenv("COMPILER_STRICT", "1")
    monkeypatch.setenv("COMPILER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def test_views_fuse_without_copies():
    def fn(x):
        y = x.permute(0, 2, 1).reshape(2, 12) * 2
        z = x[:, 1:, ::2].unsqueeze(0).expand(3, 2, 2, 2).squeeze(0) + 1
        return (y, z, x.select(1, 2).t() - 1, x.transpose(0, 2).flatten())

    record = check(fn, rand(2, 3, 4))
    assert all(k.language != "extern" for k in record.kernels)  # no copies, no aten calls


def test_cat_and_pad():
    def fn(a, b, c):
        y = torch.cat([a, b * 2, c.relu()], 1)
        return (
            y,
            F.pad(a, (1, 2, 0, 3)),
            F.pad(b, (-1, 1)),
            torch.cat([a.reshape(12), c.reshape(-1)]),
        )

    record = check(fn, rand(3, 4), rand(3, 2), rand(3, 5))
    assert all(k.language != "extern" for k in record.kernels)  # no copies, no aten calls


def test_split_and_chunk():
    check(
        lambda x: (x.split([1, 3], 1)[0], x.split([1, 3], 1)[1] * 2, x.chunk(2, 0)[1]), rand(4, 4)
    )


def test_gathers():
    table = rand(10, 4)
    idx = torch.tensor([[1, 0, 9], [3, 3, 2]], device=DEVICE)
    check(
        lambda t, i: (
            F.embedding(i, t),
            t[i[0]],
            torch.gather(t, 1, i.t()[:, :1].expand(3, 4) % 4),
        ),
        table,
        idx,
    )


def test_arange_and_factories():
    check(
        lambda x: (
            x + torch.arange(5, device=x.device),
            torch.zeros_like(x) + 1,
            torch.full((2, 5), 3.0, device=x.device) * x,
        ),
        rand(2, 5),
    )


def test_views_of_outputs_and_inputs():
    x = rand(4, 6)
    check(lambda x: (x.t(), x, x[1:3]), x)

"""Gradient buckets of a traced graph (compiler/distributed/buckets.py), in one process: the
graph the tracer captures from an MLP, cut where DDP's buckets fill."""

from __future__ import annotations

import torch

import compiler
from compiler.distributed.buckets import BucketCaps, assign_buckets
from tests.distributed.models import MLP


def _captured(model: torch.nn.Module, x: torch.Tensor):
    seen = []

    def capture(gm, example_inputs):
        seen.append((gm, list(example_inputs)))
        return gm.forward

    compiler.compile(model, backend=capture)(x)
    return seen[0]


def _buckets(caps: BucketCaps, model: torch.nn.Module | None = None):
    model = model or MLP()
    gm, inputs = _captured(model, torch.randn(2, 16))
    ids = {id(p) for p in model.parameters()}
    return assign_buckets(gm, inputs, ids, caps)


def _names(buckets):
    return [[n.name for n in b.nodes] for b in buckets]


def test_each_bucket_closes_once_its_cap_is_reached() -> None:
    buckets = _buckets(BucketCaps(first=1000, rest=1000))
    assert _names(buckets) == [["linear", "relu"], ["linear_1", "tanh"], ["linear_2"]]
    assert [b.nbytes for b in buckets] == [2176, 4224, 1056]


def test_first_bucket_cap_applies_to_the_graphs_last_part() -> None:
    # fc3 (1056 B) alone fills a 1000 B first bucket; the 8000 B cap then takes fc2 and fc1
    buckets = _buckets(BucketCaps(first=1000, rest=8000))
    assert _names(buckets) == [["linear", "relu", "linear_1", "tanh"], ["linear_2"]]


def test_one_bucket_for_a_large_cap() -> None:
    buckets = _buckets(BucketCaps(first=2**20, rest=25 * 2**20))
    assert len(buckets) == 1 and len(buckets[0].params) == 6


def test_frozen_parameters_count_nothing() -> None:
    model = MLP()
    for p in model.fc2.parameters():
        p.requires_grad_(False)
    gm, inputs = _captured(model, torch.randn(2, 16))
    ids = {id(p) for p in model.parameters() if p.requires_grad}
    buckets = assign_buckets(gm, inputs, ids, BucketCaps(first=1000, rest=1000))
    assert _names(buckets) == [["linear", "relu", "linear_1", "tanh"], ["linear_2"]]
    assert [len(b.params) for b in buckets] == [2, 2]


class _Preamble(MLP):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward((x * 2).sin())


def test_nodes_before_the_first_parameter_join_the_first_part() -> None:
    buckets = _buckets(BucketCaps(first=1000, rest=1000), _Preamble())
    assert len(buckets) == 3 and buckets[0].params
    assert [n.name for n in buckets[0].nodes][:2] == ["mul", "sin"]

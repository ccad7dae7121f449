"""`EntryRecord.side_effects`: what a compiled call changes besides its result, as the records
tell tools that would re-run it (the notebook's timing). Conservative: empty only when the
call reads and returns."""

from __future__ import annotations

import torch

import compiler

LOG: list = []
COUNTS = {"n": 0}


class Box:
    pass


BOX = Box()


def effects(fn, *args) -> list[tuple[str, str]]:
    compiled = compiler.compile(fn, backend="eager")
    compiled(*args)
    report = compiler.inspect(compiled)
    return [(s.kind, s.target) for e in report.entries for s in e.side_effects]


def test_a_pure_function_has_none() -> None:
    assert effects(lambda x: x.sin() * 2 + x.cos(), torch.randn(4)) == []


def test_writes_to_an_argument_name_it_through_views() -> None:
    def bump_(x):
        return x.add_(1)

    def through_view(x):
        x.view(-1)[0] = 5
        return x

    assert effects(bump_, torch.zeros(4)) == [("tensor_write", "L['x']")]
    assert effects(through_view, torch.zeros(2, 2)) == [("tensor_write", "L['x']")]


def test_a_write_to_a_tensor_the_graph_made_names_nothing() -> None:
    def fresh(x):
        y = torch.zeros(3)
        y.add_(x)
        return y

    assert effects(fresh, torch.ones(3)) == [("tensor_write", "")]


def test_globals_attributes_buffers_and_breaks_are_listed() -> None:
    def append(x):
        LOG.append(1)
        return x

    def count(x):
        COUNTS["n"] += 1
        return x

    def store(x):
        BOX.v = x
        return x

    def prints(x):
        print("")
        return x + 1

    bn = torch.nn.BatchNorm1d(3)
    assert effects(append, torch.ones(1)) == [("container", "G['LOG']")]
    assert effects(count, torch.ones(1)) == [("container", "G['COUNTS']")]
    assert effects(store, torch.ones(1)) == [("attribute", "G['BOX'].v")]
    assert ("python", "") in effects(prints, torch.ones(1))
    written = {t for k, t in effects(bn, torch.randn(4, 3)) if k == "tensor_write"}
    assert {"L['self'].running_mean", "L['self'].running_var"} <= written


def test_an_optimizer_step_is_listed() -> None:
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    assert effects(step, torch.randn(2, 3))

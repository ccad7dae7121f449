"""How the differential suites judge low-precision results against a more precise
reference: shared by the OpInfo suite (tests/codegen/opinfo_cases.py) and the code
generator's fuzzer (tests/codegen/test_fuzz_graphs.py)."""

from __future__ import annotations

import torch


def closer_by_rmse(
    actual: torch.Tensor, expected: torch.Tensor, ref: torch.Tensor, atol: float
) -> bool:
    """Inductor's own accuracy check: the root-mean-square error of `actual` against the
    precise reference `ref` is within twice eager's (`expected`) plus `atol`, over the
    elements where the reference and eager are finite (where they are not, the values
    must agree). An element rounded to the other side of eager's by a sharply peaked
    softmax, a long sum or a sine of a large argument is no error of the code generator."""
    a, e, r = actual.double(), expected.double(), ref.double().expand_as(expected)
    same = (a == e) | (a.isnan() & e.isnan())
    finite = r.isfinite() & e.isfinite()
    if not bool((same | finite).all()) or not bool(finite.any()):
        return False
    ours = (a - r)[finite].square().mean().sqrt().item()
    eager = (e - r)[finite].square().mean().sqrt().item()
    return ours <= 2 * eager + atol

"""Suite-wide fixtures: where tests leave artifacts, and skipping GPU-only tests on CPU."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture
def output_dir(request: pytest.FixtureRequest) -> Path:
    """A per-test folder under test-output/ (gitignored) for screenshots and dumps that a
    person may want to look at after the run; kept, unlike tmp_path."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)
    path = REPO_ROOT / "test-output" / name
    path.mkdir(parents=True, exist_ok=True)
    return path

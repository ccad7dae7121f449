import pytest
import torch

import compiler


@pytest.fixture(autouse=True)
def fresh_compiler():
    """Every test starts from empty caches, the default grad mode and a fixed seed."""
    compiler.reset()
    torch.manual_seed(0)
    with torch.enable_grad():
        yield
    compiler.reset()

import pytest
import torch

import compiler
from compiler.runtime import cpp_build, tensor_guards


@pytest.fixture(autouse=True)
def fresh_compiler():
    """Every test starts from empty caches, the default grad mode and a fixed seed."""
    compiler.reset()
    torch.manual_seed(0)
    with torch.enable_grad():
        yield
    compiler.reset()


@pytest.fixture(scope="session")
def tensor_checker(tmp_path_factory):
    """The C++ extension's TensorChecker, built once per session into a folder of its own."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMPILER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "tensor-guards"))
        try:
            lib = tensor_guards.build()
        except cpp_build.CppCompileError as e:
            pytest.skip(f"the tensor guard extension cannot be built here: {e}")
        return tensor_guards.load_library(lib).TensorChecker


@pytest.fixture(params=["cpp", "python"])
def guard_path(request, monkeypatch):
    """Tensor guards checked by the C++ extension, or all in Python as without it: tests
    that use this run once each way."""
    checker = request.getfixturevalue("tensor_checker") if request.param == "cpp" else None
    monkeypatch.setattr(tensor_guards, "checker_class", lambda: checker)
    return request.param

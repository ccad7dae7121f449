import pytest
import torch

import compiler
from compiler.runtime import cpp_build, cpp_ext


@pytest.fixture(autouse=True)
def fresh_compiler():
    """Every test starts from empty caches, the default grad mode and a fixed seed."""
    compiler.reset()
    torch.manual_seed(0)
    with torch.enable_grad():
        yield
    compiler.reset()


@pytest.fixture(scope="session")
def tensor_guard_module(tmp_path_factory):
    """The C++ extension, built once per session into a folder of its own."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMPILER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "tensor-guards"))
        try:
            lib = cpp_ext.build()
        except cpp_build.CppCompileError as e:
            pytest.skip(f"the tensor guard extension cannot be built here: {e}")
        return cpp_ext.load_library(lib)


@pytest.fixture(scope="session")
def tensor_checker(tensor_guard_module):
    return tensor_guard_module.TensorChecker


@pytest.fixture(params=["cpp", "python"])
def guard_path(request, monkeypatch):
    """Tensor guards checked by the C++ extension (with its `FrozenReads` where this Python
    has dict versions), or all in Python as without it: tests that use this run once each
    way."""
    module = request.getfixturevalue("tensor_guard_module") if request.param == "cpp" else None
    checker = module.TensorChecker if module is not None else None
    frozen = module.FrozenReads if module is not None and module.DICT_VERSIONS else None
    monkeypatch.setattr(cpp_ext, "checker_class", lambda: checker)
    monkeypatch.setattr(cpp_ext, "frozen_class", lambda: frozen)
    lookups = module.ClassLookups if module is not None else None
    monkeypatch.setattr(cpp_ext, "lookups_class", lambda: lookups)
    return request.param

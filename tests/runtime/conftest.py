import pytest

from compiler.runtime import cpp_build, tensor_guards


@pytest.fixture(scope="session")
def extension(tmp_path_factory):
    """The tensor_guards extension module, built once per session into a folder of its own."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMPILER_CACHE_DIR", str(tmp_path_factory.mktemp("guard-extension")))
        try:
            return tensor_guards.load_library(tensor_guards.build())
        except cpp_build.CppCompileError as e:
            pytest.skip(f"the tensor guard extension cannot be built here: {e}")

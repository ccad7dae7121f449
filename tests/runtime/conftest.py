import pytest

from compiler.runtime import cpp_build, cpp_ext


@pytest.fixture(scope="session")
def extension(tmp_path_factory):
    """The C++ extension module (compiler/runtime/cpp_ext.py), built once per session into a folder of its own."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMPILER_CACHE_DIR", str(tmp_path_factory.mktemp("guard-extension")))
        try:
            return cpp_ext.load_library(cpp_ext.build())
        except cpp_build.CppCompileError as e:
            pytest.skip(f"the tensor guard extension cannot be built here: {e}")

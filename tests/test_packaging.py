"""The distribution as a user installs it: both packages importable from the install, the
IPython extension hook present, and the torch pins in the Makefile and binder/ agreeing."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

from packaging.specifiers import SpecifierSet

from compiler.tracer.opcodes.registry import NEWEST, OLDEST

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_distribution_is_installed_with_both_packages() -> None:
    dist = importlib.metadata.distribution("jupyter-compile")
    requires = " ".join(dist.requires or [])
    assert "torch" in requires and "ipywidgets" in requires
    import compiler
    import jupyter_compile

    assert callable(compiler.compile)
    assert callable(jupyter_compile.load_ipython_extension)


def test_metadata_declares_python_and_dev_extra() -> None:
    meta = importlib.metadata.metadata("jupyter-compile")
    # the Pythons whose bytecode the tracer decodes; Binder pins one of them
    supported = f">={OLDEST[0]}.{OLDEST[1]},<{NEWEST[0]}.{NEWEST[1] + 1}"
    assert SpecifierSet(meta["Requires-Python"]) == SpecifierSet(supported)
    assert (REPO_ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"
    assert "dev" in meta.get_all("Provides-Extra")


def _pins(text: str) -> dict[str, str]:
    return dict(re.findall(r"\b(torch|torchvision)==([0-9][^\s+]*)", text))


def test_torch_pins_agree_between_makefile_and_binder() -> None:
    make_pins = _pins((REPO_ROOT / "Makefile").read_text())
    binder_pins = _pins((REPO_ROOT / "binder" / "requirements.txt").read_text())
    assert make_pins == {"torch": "2.14.1", "torchvision": "0.29.1"}
    assert binder_pins == make_pins

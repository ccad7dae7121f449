"""Every notebook in notebooks/ runs top to bottom on a CPU without errors, and the views the
extension draws under `%%compile` and `%explain` reach the saved notebook with their static
HTML fallback (what a reader without a kernel, or nbconvert, sees)."""

from __future__ import annotations

import html
import importlib.util
import json
import re
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO_ROOT / "notebooks"
NOTEBOOK_NAMES = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
KERNEL_NAME = "jupyter-compile-tests"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def _load_build_script():
    spec = importlib.util.spec_from_file_location("notebooks_build", NOTEBOOKS / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A kernelspec that starts this interpreter, so the notebooks run against the packages
    under test whatever other `python3` kernels the machine has registered."""
    data_dir = tmp_path_factory.mktemp("jupyter-data")
    spec_dir = data_dir / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "jupyter-compile tests",
        "language": "python",
        # the kernel imports this checkout's packages, not an installed copy's
        "env": {"PYTHONPATH": str(REPO_ROOT)},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    return {"JUPYTER_PATH": str(data_dir)}


def _html_outputs(cell: nbformat.NotebookNode) -> list[dict]:
    return [
        out.get("data", {})
        for out in cell.get("outputs", [])
        if out.output_type in ("display_data", "execute_result")
        and out.get("data", {}).get("text/html", "").strip()
    ]


def _visible_text(bundles: list[dict]) -> str:
    """The text a reader sees in the HTML fallbacks: tags dropped (highlighting splits source
    lines into spans), entities unescaped."""
    markup = "\n".join(data["text/html"] for data in bundles)
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def test_notebooks_match_build_script() -> None:
    build = _load_build_script()
    assert sorted(build.NOTEBOOKS) == NOTEBOOK_NAMES
    assert build.main(["--check"]) == 0, "run: python notebooks/build.py"


def test_committed_notebooks_have_no_outputs() -> None:
    for name in NOTEBOOK_NAMES:
        nb = nbformat.read(NOTEBOOKS / name, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{name}: {cell.id}"


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_notebook_executes_with_inspectors(
    name: str, kernel_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, output_dir: Path
) -> None:
    for key, value in kernel_env.items():
        monkeypatch.setenv(key, value)
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name=KERNEL_NAME,
        timeout=900,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    try:
        client.execute()  # raises CellExecutionError, with the cell and traceback, on an error
    finally:
        # Kept for a person to open: the executed notebook shows what the user would see.
        nbformat.write(nb, output_dir / name)

    inspector_cells = [c for c in nb.cells if "inspector" in c.metadata.get("tags", [])]
    assert inspector_cells, f"{name} has no %%compile cell"
    for cell in inspector_cells:
        defined = re.findall(r"^def (\w+)\(", cell.source, flags=re.MULTILINE)
        outputs = [o.get("data", {}) for o in cell.outputs]
        assert any(WIDGET_MIME in data for data in outputs), f"{name} cell {cell.id}: no widget"
        views = [d for d in _html_outputs(cell) if 'class="jc-twin-' in d["text/html"]]
        assert views, f"{name} cell {cell.id}: no static twin of the inspector"
        text = _visible_text(views)
        for fn_name in defined:
            assert fn_name in text, f"{name} cell {cell.id}: no view mentions {fn_name}"

    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith("%explain"):
            text = _visible_text(_html_outputs(cell))
            explained = re.match(r"%explain\s+(?:-o\s+)?(\w+)", cell.source).group(1)
            assert f"%explain {explained}" in text and "graph breaks" in text, (
                f"{name} cell {cell.id}: %explain did not render"
            )
            if explained == "bar":
                assert "if b.sum() < 0" in text, f"{name} cell {cell.id}: no break at the `if`"
            if "how to avoid it" in text:  # each break's fix, with its snippet
                assert "fix (" in text, f"{name} cell {cell.id}: a break without its fix"

"""Writes the notebooks in this folder from their cell lists, without outputs.

Each notebook's cells are a module of notebook_cells/ (getting_started, tutorial, inside; the
shared setup cells in common). The .ipynb files are generated so that a change to a notebook
is reviewed as a change to those modules. Run `python notebooks/build.py` after editing; `--check` exits 1 when a committed
notebook differs from what this file generates (tests/notebooks runs the same check).

Cells tagged "inspector" are `%%compile` cells: the notebook tests assert that each of them
displays an inspector with its static HTML fallback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}

# The cells live in notebook_cells/, one module per notebook, next to this file.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from notebook_cells.common import Cell  # noqa: E402
from notebook_cells.getting_started import GETTING_STARTED  # noqa: E402
from notebook_cells.inside import INSIDE  # noqa: E402
from notebook_cells.tutorial import TUTORIAL  # noqa: E402

NOTEBOOKS = {
    "01_getting_started.ipynb": GETTING_STARTED,
    "02_tutorial.ipynb": TUTORIAL,
    "03_inside_the_compiler.ipynb": INSIDE,
}


def build(name: str, cells: list[Cell]) -> nbformat.NotebookNode:
    """A notebook without outputs, with stable cell ids so regeneration gives no diff."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.metadata["language_info"] = {"name": "python"}
    stem = name.removesuffix(".ipynb").replace("_", "-")
    for index, cell in enumerate(cells):
        if cell.kind == "markdown":
            node = nbformat.v4.new_markdown_cell(cell.source)
        else:
            node = nbformat.v4.new_code_cell(cell.source)
        node["id"] = f"{stem}-{index:02d}"
        if cell.tags:
            node.metadata["tags"] = list(cell.tags)
        nb.cells.append(node)
    nbformat.validate(nb)
    return nb


def render(name: str) -> str:
    return nbformat.writes(build(name, NOTEBOOKS[name])) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a notebook is stale")
    args = parser.parse_args(argv)
    stale = []
    for name in NOTEBOOKS:
        path = HERE / name
        text = render(name)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale notebooks (run python notebooks/build.py): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

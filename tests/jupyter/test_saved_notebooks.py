"""A saved or shared notebook shows the static inspector: `%%compile` shows it as an output of
its own before the widget, with a stylesheet that shows exactly one of the two; exported to
HTML, the source keeps its indentation. (The browser test reopens a saved notebook in
JupyterLab and looks.)"""

from __future__ import annotations

import re

import nbformat
from IPython.utils.capture import capture_output
from nbconvert import HTMLExporter

from jupyter_compile.inspector import WIDGET_MIME, Inspector
from tests.jupyter.fixtures import make_report


def shown(inspector: Inspector) -> list[dict]:
    with capture_output() as io:
        inspector.show()
    return [o.data for o in io.outputs]


def test_the_twin_comes_first_and_the_widget_has_no_html_of_its_own(ipython) -> None:
    report = make_report()
    inspector = Inspector("evil_fn", lambda: report)
    twin, widget = shown(inspector)
    assert WIDGET_MIME not in twin and f'class="jc-twin-{inspector.uid}"' in twin["text/html"]
    assert WIDGET_MIME in widget and "text/html" not in widget  # untrusted views show the twin
    # the stylesheet: the twin hides while the widget after it is live, the widget otherwise
    style = re.search(r"<style>(.*?)</style>", twin["text/html"], re.S)[1]
    assert f":has(+ .jp-OutputArea-child .jc-live-{inspector.uid})" in style
    assert f":not(:has(.jc-live-{inspector.uid}))" in style
    assert f'class="jc-live-{inspector.uid}"' in inspector.header.value  # the live marker


def test_a_refresh_redraws_the_twin_in_place(ipython) -> None:
    report = make_report()
    inspector = Inspector("evil_fn", lambda: report)
    shown(inspector)
    updates = []
    inspector.handle.update = lambda data, raw=False: updates.append(data)
    inspector.refresh(force=True)
    assert len(updates) == 1 and f'class="jc-twin-{inspector.uid}"' in updates[0]["text/html"]


def test_the_html_export_keeps_the_source_indentation(ipython) -> None:
    report = make_report()
    inspector = Inspector("evil_fn", lambda: report)
    cell = nbformat.v4.new_code_cell("%%compile\n...")
    cell.outputs = [nbformat.v4.new_output("display_data", data=data) for data in shown(inspector)]
    nb = nbformat.v4.new_notebook(cells=[cell])
    body, _ = HTMLExporter().from_notebook_node(nb)
    rows = re.findall(r'<tr class="jc-line" data-line="\d+".*?</tr>', body, re.S)
    code = [re.sub(r"<[^>]+>", "", row.split("</td>", 1)[1]) for row in rows]
    assert code[0].startswith("def evil_fn(x):")
    assert len(code) == 5 and all(line.startswith("    ") for line in code[1:]), code

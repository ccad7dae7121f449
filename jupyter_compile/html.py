"""Static HTML building blocks shared by every view.

Everything here returns HTML strings with inline styles only, so the same markup works inside
an ipywidgets.HTML, in a notebook's `text/html` fallback, in an exported page and in a
notebook opened without its kernel (where <style> blocks may be stripped by the sanitizer).

The one rule: text that comes from user code (names, source, constants, messages, graph and
kernel code) goes through `esc` or `highlight`; only markup built here is trusted. `Raw`
marks a string that is already HTML so that `table` does not escape it twice.
"""

from __future__ import annotations

import html as _html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pygments
from pygments.formatters import HtmlFormatter
from pygments.lexers import CppLexer, PythonLexer, TextLexer

# Graph shades for the annotated source: light enough to read code on, distinct enough to tell
# neighbouring graphs apart.
SHADES = ["#dff0d8", "#d9edf7", "#fcf8e3", "#f2dede", "#e8e0f5", "#e0f2f1", "#fde8d7", "#eeeeee"]
BREAK_COLOR = "#c9302c"
MISMATCH_SHADE = "#f5b7b1"  # a line whose compiled result diverged (verify mode)
MONO = "font-family: SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px;"
# A long expression (a guard's) may break anywhere, so that the table fits its output area.
_MONO_CELL = f"{MONO} overflow-wrap: anywhere;"
_CODE_LINE = (
    f"{MONO} white-space: pre; margin: 0; padding: 0; border: 0; background: none; "
    "line-height: inherit; overflow: visible;"
)


@dataclass(frozen=True)
class Raw:
    """A string that is already HTML (built by this package), passed through unescaped."""

    html: str


def esc(text: object) -> str:
    """HTML-escape user-derived text, quotes included (it may land in an attribute)."""
    return _html.escape(str(text), quote=True)


def cell(value: object) -> str:
    return value.html if isinstance(value, Raw) else esc(value)


_LEXERS = {"python": PythonLexer, "triton": PythonLexer, "cpp": CppLexer, "c++": CppLexer}


def _formatter() -> HtmlFormatter:
    # Inline styles (noclasses) keep the colours when no stylesheet is around.
    return HtmlFormatter(nowrap=True, noclasses=True, style="default")


def highlight_lines(code: str, language: str = "python") -> list[str]:
    """Highlighted HTML, one string per source line. Pygments closes its spans at each line
    end, so lines can be placed in table rows independently."""
    lexer = _LEXERS.get(language.lower(), TextLexer)(stripnl=False, ensurenl=False)
    out = pygments.highlight(code, lexer, _formatter())
    lines = out.split("\n")
    wanted = len(code.split("\n"))
    return (lines + [""] * wanted)[:wanted]


MAX_CODE_LINES = 400


def highlight(
    code: str, language: str = "python", max_height: int = 420, max_lines: int = MAX_CODE_LINES
) -> str:
    """A scrollable highlighted code block (blank lines around the code dropped). Past
    `max_lines` the code is cut with a note: a model's guard function or graph can run to
    tens of thousands of lines, which would make the notebook slow to open; the full text
    stays in the records (`compiler.inspect`)."""
    lines = code.strip("\n").split("\n")
    cut = len(lines) - max_lines
    body = "\n".join(highlight_lines("\n".join(lines[:max_lines]), language))
    more = (
        f'<div style="color: #888; font-size: 12px;">… {cut} more lines not shown '
        "(the full text is in the records: compiler.inspect(fn))</div>"
        if cut > 0
        else ""
    )
    return (
        f'<pre style="{MONO} margin: 0; padding: 6px; background: #f8f8f8; overflow: auto; '
        f'max-height: {max_height}px; border: 1px solid #e1e1e1; line-height: 1.35;">{body}</pre>'
        + more
    )


@dataclass
class LineMark:
    """How one source line is annotated: a background shade and its tooltip, break notes,
    and tags shown at the line's right (the kernels generated from it)."""

    shade: str | None = None
    title: str = ""
    notes: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    hints: tuple[Raw, ...] = ()  # the fixes suggested for the breaks noted, built as HTML
    mismatch: str = ""  # verify mode found the compiled result diverging here (in red)


def annotated_source(source: str, firstlineno: int, marks: dict[int, LineMark]) -> str:
    """Source code with line numbers, shaded lines and break notes under their line, in the
    manner of Cython's annotate view. `marks` is keyed by absolute line number."""
    rows = []
    for offset, line_html in enumerate(highlight_lines(source.rstrip("\n"), "python")):
        lineno = firstlineno + offset
        mark = marks.get(lineno, LineMark())
        shade = MISMATCH_SHADE if mark.mismatch else mark.shade
        bg = f"background: {shade};" if shade else ""
        border = (
            f"border-left: 4px solid {BREAK_COLOR};"
            if mark.notes or mark.mismatch
            else "border-left: 4px solid transparent;"
        )
        row_class = "jc-line jc-mismatch-line" if mark.mismatch else "jc-line"
        title = f' title="{esc(mark.title)}"' if mark.title else ""
        rows.append(
            f'<tr class="{row_class}" data-line="{lineno}"{title} style="{bg}">'
            f'<td style="{MONO} color: #999; text-align: right; width: 1%; padding: 0 8px; '
            f'user-select: none; {border}">{lineno}</td>'
            # <pre>, not only `white-space: pre`: HTML tools that re-parse the markup (nbconvert's
            # export runs it through BeautifulSoup) collapse leading spaces outside <pre>.
            f'<td style="text-align: left; padding: 0 6px;"><pre style="{_CODE_LINE}">'
            f"{line_html or ' '}</pre></td>"
            f'<td class="jc-tags" style="{MONO} color: #777; font-size: 11px; text-align: right; '
            f'padding: 0 6px;">{" ".join(esc(t) for t in mark.tags)}</td></tr>'
        )
        for note in mark.notes:
            rows.append(
                f'<tr class="jc-break"><td style="border-left: 4px solid {BREAK_COLOR};"></td>'
                f'<td colspan="2" style="{MONO} color: {BREAK_COLOR}; text-align: left; '
                'padding: 1px 6px 3px 22px; white-space: pre-wrap;">'
                f"&#9888; graph break: {esc(note)}</td></tr>"
            )
        for hint in mark.hints:
            rows.append(
                f'<tr class="jc-fix"><td style="border-left: 4px solid {BREAK_COLOR};"></td>'
                f'<td colspan="2" style="text-align: left; padding: 0 6px 4px 22px;">'
                f"{hint.html}</td></tr>"
            )
        if mark.mismatch:
            rows.append(
                f'<tr class="jc-mismatch"><td style="border-left: 4px solid {BREAK_COLOR};"></td>'
                f'<td colspan="2" style="{MONO} color: {BREAK_COLOR}; font-weight: 600; '
                'text-align: left; padding: 1px 6px 3px 22px; white-space: pre-wrap;">'
                f"&#10007; verify: {esc(mark.mismatch)}</td></tr>"
            )
    return (
        '<table class="jc-source" style="border-collapse: collapse; width: 100%; '
        f'border: 1px solid #e1e1e1;">{"".join(rows)}</table>'
    )


def table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], mono_cols: Iterable[int] = ()
) -> str:
    """A compact table; cells are escaped unless wrapped in `Raw`."""
    mono = set(mono_cols)
    th = "".join(
        '<th style="text-align: left; padding: 3px 8px; border-bottom: 2px solid #ccc;">'
        f"{esc(h)}</th>"
        for h in headers
    )
    body = []
    for row in rows:
        tds = "".join(
            '<td style="padding: 2px 8px; border-bottom: 1px solid #eee; vertical-align: top; '
            f'text-align: left;{_MONO_CELL if i in mono else ""}">{cell(v)}</td>'
            for i, v in enumerate(row)
        )
        body.append(f"<tr>{tds}</tr>")
    # Long cells (a guard's expression) wrap, and a table still too wide scrolls inside its
    # own box: the output area clips whatever passes its right edge.
    return (
        '<div class="jc-table" style="max-width: 100%; overflow-x: auto;">'
        '<table style="border-collapse: collapse; margin: 4px 0; max-width: 100%;">'
        f"<thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


def note(text: str, color: str = "#555") -> str:
    return f'<p style="color: {color}; margin: 4px 0;">{esc(text)}</p>'


def heading(text: str, level: int = 4) -> str:
    return f'<h{level} style="margin: 8px 0 4px 0;">{esc(text)}</h{level}>'


def badge(label: str, value: object) -> str:
    return (
        '<span style="display: inline-block; margin: 2px 6px 2px 0; padding: 2px 8px; '
        f'border-radius: 10px; background: #eef2f7; font-size: 12px;">{esc(label)}: '
        f"<b>{esc(value)}</b></span>"
    )


def details(summary: str, body: str, open_: bool = False) -> str:
    flag = " open" if open_ else ""
    return (
        f'<details{flag} style="margin: 4px 0;">'
        '<summary style="cursor: pointer; font-weight: 600;">'
        f'{esc(summary)}</summary><div style="padding: 4px 0 4px 12px;">{body}</div></details>'
    )


def static_tabs(title: str, tabs: Sequence[tuple[str, str]]) -> str:
    """The no-kernel rendering of a tabbed view: a titled box with one <details> per tab, the
    first one open."""
    parts = [details(name, body, open_=(i == 0)) for i, (name, body) in enumerate(tabs)]
    return (
        '<div class="jc-static" style="border: 1px solid #d0d7de; border-radius: 6px; '
        f'padding: 6px 10px; margin: 4px 0;"><div style="font-weight: 700; margin-bottom: 4px;">'
        f"{esc(title)}</div>{''.join(parts)}</div>"
    )


def bar_chart(
    bars: Sequence[tuple[str, float, str]],
    unit: str,
    spread: Sequence[tuple[float, float]] | None = None,
) -> str:
    """A horizontal bar chart as inline SVG: one (label, value, colour) per bar and optional
    (low, high) whiskers. Small and dependency-free, so it survives static export."""
    if not bars:
        return ""
    label_w, bar_w, row_h = 170, 320, 22
    top = max([v for _, v, _ in bars] + [hi for _, hi in (spread or [])] + [1e-12])
    height = row_h * len(bars) + 6
    items = []
    for i, (label, value, color) in enumerate(bars):
        y = 3 + i * row_h
        w = max(1.0, bar_w * value / top)
        items.append(
            f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end" font-size="12">'
            f"{esc(label)}</text>"
            f'<rect x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{row_h - 6}" '
            f'fill="{esc(color)}"/>'
            f'<text x="{label_w + w + 4:.1f}" y="{y + 14}" font-size="11">'
            f"{value:.4g} {esc(unit)}</text>"
        )
        if spread:
            lo, hi = spread[i]
            x0, x1 = label_w + bar_w * lo / top, label_w + bar_w * hi / top
            mid = y + row_h / 2 - 1
            items.append(
                f'<line x1="{x0:.1f}" x2="{x1:.1f}" y1="{mid}" y2="{mid}" '
                'stroke="#333" stroke-width="1"/>'
            )
    width = label_w + bar_w + 90
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'class="jc-chart" style="font-family: sans-serif;">{"".join(items)}</svg>'
    )

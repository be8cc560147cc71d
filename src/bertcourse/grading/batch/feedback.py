"""Per-student feedback pages: the submitted notebook as one small, static, offline HTML page.

The page shows the student's own cells (markdown rendered, with its math drawn by matplotlib's mathtext as
inline SVG so that it reads without a network; code highlighted), what each code cell printed when it
was graded, a results box after each autograded cell (each check labelled by what it checks,
pass/fail, points, the check's one-line feedback and why it failed, a reason shared by several checks
said once) and a summary at the top. It never shows hidden test source: the checks live in `autograder/` and only their
student-safe fields (name made readable, `feedback`, `message`) are printed, never pytest's report
(`detail`). Any `### BEGIN HIDDEN TESTS` region in the notebook is cleared as nbgrader would.

A handwritten stylesheet keeps a page to a few kilobytes (nbconvert's lab template inlined ~280 KB
of CSS); a Content-Security-Policy forbids scripts and every network load, so a submission's markdown
can neither run code nor phone home from the page.

matplotlib, nbconvert, nbformat and nbgrader load slowly: they are imported when first needed, and
`warm_up` loads them in a batch's parent before its grading lanes fork, so that the lanes share them.
"""

from __future__ import annotations

import base64
import functools
import html
import io
import re
from pathlib import Path
from typing import Any

from pygments import lex
from pygments.lexers import PythonLexer
from pygments.token import STANDARD_TYPES

from bertcourse.folders import write_atomic
from bertcourse.grading.batch.records import Record
from bertcourse.grading.report import check_label, not_written, shared_messages, unwritten_summary, why_line
from bertcourse.grading.results import CellRecord

FEEDBACK_NAME = "feedback.html"
FEEDBACK_MODE = 0o644  # readable by everyone: pages are made to be shared (`--private-feedback`: 0600)
OUTPUT_SHOW_CHARS = 2000  # of what a cell printed when graded (the worker keeps about as much)

_CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; base-uri 'none'")

_STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; color: #222; max-width: 60em; margin: 1em auto; padding: 0 1em; }
pre, code { font: 13px/1.4 ui-monospace, Menlo, Consolas, monospace; }
pre { margin: 0; padding: 0.5em 0.8em; white-space: pre-wrap; overflow-wrap: anywhere; }
.md { margin: 0.8em 0; } .md pre { background: #f6f6f6; } .md table { border-collapse: collapse; }
.md td, .md th { border: 1px solid #ccc; padding: 0.2em 0.5em; } .md img { max-width: 100%; }
img.math { vertical-align: middle; } img.math.display { display: block; margin: 0.5em auto; }
.code { margin: 0.8em 0; border-left: 3px solid #9ab; background: #f7f9fb; }
.out { border-left: 3px solid #ddd; margin: -0.4em 0 0.8em 0; } .out pre { background: #fff; }
.lbl { font-size: 12px; color: #667; padding: 0.1em 0.8em; } .err { color: #b71c1c; padding: 0.2em 0.8em; }
math { font-size: 1.1em; } math[display="block"] { margin: 0.6em 0; } .tex { color: #555; }
.k, .ow, .nb, .bp { color: #00f; } .nf, .nc { color: #795e26; } .ne { color: #c00; } .s { color: #a31515; }
.c { color: #008000; font-style: italic; } .m { color: #098658; }
.bc-box { border: 2px solid #888; border-radius: 6px; padding: 0.6em 1em; margin: 0.5em 0 1em 0; }
.bc-full { border-color: #2e7d32; background: #f1f8f1; } .bc-part { border-color: #f9a825; background: #fffaf0; }
.bc-zero { border-color: #c62828; background: #fdf3f3; } .bc-box h2 { margin: 0.2em 0; font-size: 1.3em; }
.bc-box table { border-collapse: collapse; margin-top: 0.4em; }
.bc-box td, .bc-box th { padding: 0.15em 0.6em; text-align: left; vertical-align: top; }
.bc-pass { color: #2e7d32; font-weight: bold; } .bc-fail { color: #c62828; font-weight: bold; }
.pts { white-space: nowrap; }
"""

_renderer: Any = None


def warm_up() -> None:
    """Load the markdown, math and highlighting code now (before grading lanes fork, so they share it)."""
    _markdown("$x$")
    _code("x = 1")
    from nbgrader.preprocessors import ClearHiddenTests  # noqa: F401


def _escape(text: object) -> str:
    """`text` safe to put in HTML (a submission's text never becomes markup)."""
    return html.escape(str(text))


# ----------------------------------------------------------------------------- the student's cells

@functools.lru_cache(maxsize=512)
def math_html(tex: str, display: bool) -> str:
    """TeX drawn by matplotlib's mathtext as an inline SVG image: no script, no network, no extra
    dependency (a data: URL, so each formula's glyph ids stay its own). The TeX itself, escaped, when
    mathtext cannot read it."""
    from matplotlib import mathtext, rc_context

    delimited = f"${tex.strip()}$"
    svg = io.BytesIO()
    try:
        with rc_context({"svg.fonttype": "path", "svg.hashsalt": "bertcourse"}):  # local to this call
            mathtext.math_to_image(delimited, svg, format="svg", dpi=72)
    except Exception:  # mathtext's parse errors are of several kinds; unreadable TeX is shown as TeX
        delimiter = "$$" if display else "$"
        return f'<code class="tex">{_escape(delimiter + tex + delimiter)}</code>'
    text = re.sub(r"<\?xml.*?\?>|<!DOCTYPE.*?>|<metadata>.*?</metadata>", "", svg.getvalue().decode(), flags=re.S)
    text = re.sub(r">\s+<", "><", re.sub(r"\s+", " ", text)).strip()  # path data and markup keep their meaning
    data = base64.b64encode(text.encode()).decode("ascii")
    kind = "math display" if display else "math"
    return f'<img class="{kind}" alt="{_escape(tex.strip())}" src="data:image/svg+xml;base64,{data}">'


def _markdown_renderer() -> Any:
    global _renderer
    if _renderer is None:
        from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

        class Renderer(IPythonRenderer):
            """nbconvert's notebook markdown, with raw HTML escaped, math as SVG and images offline."""

            def block_math(self, body: str) -> str:
                return math_html(body, display=True)

            def inline_math(self, body: str) -> str:
                return math_html(body, display=False)

            def latex_environment(self, name: str, body: str) -> str:
                return math_html(f"\\begin{{{name}}}{body}\\end{{{name}}}", display=True)

            def multiline_math(self, text: str) -> str:
                return _escape(text)

            def image(self, text: str, url: str, title: str | None = None) -> str:
                if url.startswith("attachment:"):
                    try:
                        url = self._embed_image_or_attachment(url)
                    except Exception:  # a missing attachment: show the alt text
                        pass
                if url.startswith("data:image/"):
                    return super().image(text, url, title)
                return f"<span>[image: {text or _escape(url)}]</span>"  # the page loads nothing from elsewhere

        _renderer = (Renderer, MarkdownWithMath)
    return _renderer


def _markdown(source: str, attachments: dict | None = None) -> str:
    renderer_class, markdown_class = _markdown_renderer()
    renderer = renderer_class(escape=True, allow_harmful_protocols=False, exclude_anchor_links=True,
                              attachments=attachments or {})
    return markdown_class(renderer=renderer).render(source)


_COLOURED = ("k", "s", "c", "m", "nf", "nc", "nb", "bp", "ne", "ow")  # the token classes the stylesheet colours


def _code(source: str) -> str:
    """Python source highlighted with pygments, a span only where the stylesheet gives a colour
    (pygments' own formatter wraps every name and comma, doubling the size of a page)."""
    runs: list[list] = []  # [colour or None, text]: neighbours of one colour share a span
    for token, text in lex(source, PythonLexer()):
        while token not in STANDARD_TYPES:
            token = token.parent
        short = STANDARD_TYPES[token]
        colour = next((c for c in _COLOURED if short == c or (len(c) == 1 and short.startswith(c))), None)
        if runs and runs[-1][0] == colour:
            runs[-1][1] += text
        else:
            runs.append([colour, text])
    return "".join(f'<span class="{c}">{_escape(t)}</span>' if c else _escape(t) for c, t in runs)


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

_STATUS = {"error": "raised an error", "timeout": "ran out of time", "crashed": "crashed the process",
           "memory": "ran out of memory", "skipped": "was not run"}


def output_html(cell: CellRecord) -> str:
    """What a code cell printed when it was graded (escaped, capped), and how it ended if not well."""
    parts = []
    text = _ANSI.sub("", cell.output or "")
    if len(text) > OUTPUT_SHOW_CHARS:
        text = text[:OUTPUT_SHOW_CHARS] + "\n[... output cut]"
    if text.strip():
        parts.append(f'<div class="lbl">output when graded</div><pre>{_escape(text.rstrip())}</pre>')
    if cell.status != "ok":
        error = f": {cell.error}" if cell.error else ""
        parts.append(f'<div class="err">this cell {_STATUS.get(cell.status, cell.status)}{_escape(error)}</div>')
    return f'<div class="out">{"".join(parts)}</div>' if parts else ""


# ----------------------------------------------------------------------------- the results boxes


def _box_class(score: float, max_score: float) -> str:
    if max_score and score >= max_score:
        return "bc-full"
    return "bc-part" if score > 0 else "bc-zero"


def _said_once(messages: list[str]) -> list[str]:
    """The messages in order, each once, with how often it came when more than once."""
    counts = {m: messages.count(m) for m in messages}
    return [m + (f" ({counts[m]} times)" if counts[m] > 1 else "") for m in dict.fromkeys(messages)]


def _unconfined(record: Record) -> bool:
    return bool(record.notes_of_kind({"sandbox-unavailable"}))


def summary_html(record: Record) -> str:
    """The box at the top of the page: total, status and what went wrong."""
    rows = "".join(
        f"<tr><td>{_escape(cell)}</td><td>{record.parts.get(cell, 0.0):g} / {maximum:g}</td></tr>"
        for cell, maximum in record.part_max.items()
    )
    reasons = "".join(f"<li>{_escape(reason)}</li>" for reason in _said_once(list(record.reasons)))
    if _unconfined(record):
        reasons += "<li>what your cells printed is not shown: the grading machine could not confine them</li>"
    return (
        f'<div class="bc-box {_box_class(record.score, record.max_score)}">'
        f"<h2>{_escape(record.exercise)}: {record.score:g} / {record.max_score:g} points</h2>"
        f"<p>Student: {_escape(record.student)}. Status: {_escape(record.status)}.</p>"
        f"<table><tr><th>part</th><th>points</th></tr>{rows}</table>"
        + (f"<p>Notes:</p><ul>{reasons}</ul>" if reasons else "")
        + "</div>"
    )


def part_html(record: Record, cell: str) -> str:
    """The results box shown after one autograded cell; a part not written yet says so once."""
    checks = [c for c in record.result.checks if c.cell == cell]
    written = [c for c in checks if record.result.error or not not_written(c)]
    score, maximum = record.parts.get(cell, 0.0), record.part_max.get(cell, 0.0)
    shared = shared_messages(c.message for c in written if not c.passed)
    rows = []
    for check in written:
        if check.passed:
            mark, text = '<span class="bc-pass">passed</span>', ""
        else:
            mark = '<span class="bc-fail">failed</span>'
            text = _escape(check.feedback)
            if why_line(check) and check.message not in shared:
                text += f"<br><i>{_escape(why_line(check))}</i>"
        rows.append(f"<tr><td>{_escape(check_label(check.name))}</td><td>{mark}</td>"
                    f"<td class=pts>{check.points:g} / {check.max_points:g}</td><td>{text}</td></tr>")
    if len(written) < len(checks):
        rows.append(f'<tr><td colspan=4><span class="bc-fail">{_escape(unwritten_summary(checks))}</span></td></tr>')
    if not checks:
        rows.append("<tr><td colspan=4>not graded: see the notes at the top of the page</td></tr>")
    why = "".join(f"<p>{n} checks failed because: <i>{_escape(message)}</i></p>" for message, n in shared.items())
    notes = [n.message for n in record.result.notes if n.cell == cell]
    notes_html = "".join(f"<li>{_escape(n)}</li>" for n in _said_once(notes))
    return (
        f'<div class="bc-box {_box_class(score, maximum)}"><b>Autograder, part <code>{_escape(cell)}</code>: '
        f"{score:g} / {maximum:g} points</b><table>{''.join(rows)}</table>{why}"
        + (f"<ul>{notes_html}</ul>" if notes_html else "")
        + "</div>"
    )


# ----------------------------------------------------------------------------- the page


def _read(notebook: Path | None) -> Any:
    """The submitted notebook with nbgrader's hidden-test regions cleared; None when unreadable."""
    import nbformat

    if notebook is None:
        return None
    try:
        nb = nbformat.read(notebook, as_version=4)
    except Exception:  # an unreadable submission: the summary says why it was not graded
        return None
    from nbgrader.preprocessors import ClearHiddenTests

    nb, _ = ClearHiddenTests().preprocess(nb, {})
    return nb


def cell_html(cell: Any, graded: CellRecord | None) -> str:
    """One cell of the submission: markdown rendered, code highlighted with its graded output."""
    source = cell.get("source", "")
    source = "".join(source) if isinstance(source, list) else str(source)
    if cell.get("cell_type") == "markdown":
        return f'<div class="md">{_markdown(source, cell.get("attachments"))}</div>'
    if cell.get("cell_type") == "code":
        return f'<div class="code"><pre>{_code(source)}</pre></div>' + (output_html(graded) if graded else "")
    return f'<div class="code"><pre>{_escape(source)}</pre></div>'  # a raw cell, as text


def render_feedback(record: Record, notebook: Path | None) -> str:
    """The feedback page as HTML text (a summary alone when the notebook cannot be read)."""
    nb = _read(notebook)
    graded = {} if _unconfined(record) else {c.index: c for c in record.result.cells}
    body = [summary_html(record)]
    shown = set()
    for index, cell in enumerate(nb.cells if nb is not None else []):
        body.append(cell_html(cell, graded.get(index)))
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in record.part_max and grade_id not in shown:
            shown.add(grade_id)
            body.append(part_html(record, grade_id))
    for grade_id in record.part_max:  # parts whose cell the student deleted still get their box
        if grade_id not in shown:
            body.append(part_html(record, grade_id))
    title = f"{record.exercise} feedback: {record.student}"
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(body)
        + "\n</main>\n</body>\n</html>\n"
    )


def write_feedback(folder: Path, record: Record, notebook: Path | None, mode: int = FEEDBACK_MODE) -> Path:
    """Write the feedback page into `folder` (atomically, with permissions `mode`); its path."""
    path = folder / FEEDBACK_NAME
    write_atomic(path, render_feedback(record, notebook), mode=mode)
    return path


def feedback_exists(folder: Path) -> bool:
    """Whether `folder` holds a feedback page already."""
    return (folder / FEEDBACK_NAME).is_file()

"""Per-student feedback pages: the submitted notebook as HTML, with each graded part's results.

The page is nbconvert's rendering of the student's own notebook, with a results box after each
autograded cell (pass/fail per check, points, the check's one-line feedback and the reason it failed)
and a summary at the top. It never shows hidden test source: the checks live in `autograder/` and only
their student-safe fields (`feedback`, `message`) are printed, never pytest's report (`detail`) nor the
check's name. Any `### BEGIN HIDDEN TESTS` region in the notebook is cleared as nbgrader would.
"""

from __future__ import annotations

import html
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bertcourse.grading.batch import Record

FEEDBACK_NAME = "feedback.html"

_STYLE = """
<style>
.bc-box { border: 2px solid #888; border-radius: 6px; padding: 0.6em 1em; margin: 0.5em 0 1em 0;
          font-family: sans-serif; font-size: 14px; }
.bc-full { border-color: #2e7d32; background: #f1f8f1; }
.bc-part { border-color: #f9a825; background: #fffaf0; }
.bc-zero { border-color: #c62828; background: #fdf3f3; }
.bc-box table { border-collapse: collapse; margin-top: 0.4em; }
.bc-box td, .bc-box th { padding: 0.15em 0.6em; text-align: left; vertical-align: top; }
.bc-pass { color: #2e7d32; font-weight: bold; } .bc-fail { color: #c62828; font-weight: bold; }
</style>
"""

_NO_SCRIPTS = '<meta http-equiv="Content-Security-Policy" content="script-src \'none\'; object-src \'none\'">'

_exporter: Any = None  # one per process: building nbconvert's exporter loads its templates


def _html_exporter() -> Any:
    global _exporter
    if _exporter is None:
        from nbconvert import HTMLExporter

        _exporter = HTMLExporter()
    return _exporter


def warm_up() -> None:
    """Load nbconvert and its templates now (before grading lanes fork, so that they share them)."""
    _html_exporter()
    from nbgrader.preprocessors import ClearHiddenTests  # noqa: F401


def _e(text: object) -> str:
    return html.escape(str(text))


def _box_class(score: float, max_score: float) -> str:
    if max_score and score >= max_score:
        return "bc-full"
    return "bc-part" if score > 0 else "bc-zero"


def summary_html(record: Record) -> str:
    """The box at the top of the page: total, status and what went wrong."""
    rows = "".join(
        f"<tr><td>{_e(cell)}</td><td>{record.parts.get(cell, 0.0):g} / {maximum:g}</td></tr>"
        for cell, maximum in record.part_max.items()
    )
    reasons = "".join(f"<li>{_e(reason)}</li>" for reason in record.reasons)
    return (
        f'<div class="bc-box {_box_class(record.score, record.max_score)}">'
        f"<h2>{_e(record.exercise)}: {record.score:g} / {record.max_score:g} points</h2>"
        f"<p>Student: {_e(record.student)}. Status: {_e(record.status)}.</p>"
        f"<table><tr><th>part</th><th>points</th></tr>{rows}</table>"
        + (f"<p>Notes:</p><ul>{reasons}</ul>" if reasons else "")
        + "</div>"
    )


def part_html(record: Record, cell: str) -> str:
    """The results box shown after one autograded cell."""
    checks = [c for c in record.result.get("checks", []) if c.get("cell") == cell]
    score, maximum = record.parts.get(cell, 0.0), record.part_max.get(cell, 0.0)
    rows = []
    for number, check in enumerate(checks, 1):
        if check.get("passed"):
            mark, text = '<span class="bc-pass">passed</span>', ""
        else:
            mark = '<span class="bc-fail">failed</span>'
            text = _e(check.get("feedback", ""))
            if check.get("message"):
                text += f"<br><i>{_e(check['message'])}</i>"
        rows.append(f"<tr><td>check {number}</td><td>{mark}</td>"
                    f"<td>{check.get('points', 0):g} / {check.get('max_points', 0):g}</td><td>{text}</td></tr>")
    if not checks:
        rows.append("<tr><td colspan=4>not graded: see the notes at the top of the page</td></tr>")
    notes = [n["message"] for n in record.result.get("notes", []) if n.get("cell") == cell]
    notes_html = "".join(f"<li>{_e(n)}</li>" for n in notes)
    return (
        f'<div class="bc-box {_box_class(score, maximum)}"><b>Autograder, part <code>{_e(cell)}</code>: '
        f"{score:g} / {maximum:g} points</b><table>{''.join(rows)}</table>"
        + (f"<ul>{notes_html}</ul>" if notes_html else "")
        + "</div>"
    )


def render_feedback(record: Record, notebook: Path | None) -> str:
    """The feedback page as HTML text (a summary alone when the notebook cannot be read)."""
    import nbformat
    from nbformat.v4 import new_notebook, new_raw_cell

    nb = None
    if notebook is not None:
        try:
            nb = nbformat.read(notebook, as_version=4)
        except Exception:  # an unreadable submission: the summary says why it was not graded
            nb = None
    if nb is None:
        nb = new_notebook()
    else:
        from nbgrader.preprocessors import ClearHiddenTests

        nb, _ = ClearHiddenTests().preprocess(nb, {})
    # nbconvert cleans the HTML of raw cells (dropping headings and tables), so the boxes go in after
    # rendering, in place of plain-text markers no notebook can know in advance.
    nonce = secrets.token_hex(8)
    boxes: dict[str, str] = {}

    def marker_cell(box: str) -> Any:
        marker = f"BERTCOURSE-FEEDBACK-{nonce}-{len(boxes)}"
        boxes[marker] = box
        return new_raw_cell(marker, metadata={"format": "text/html"})

    cells = [marker_cell(summary_html(record))]
    shown = set()
    for cell in nb.cells:
        cells.append(cell)
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in record.part_max and grade_id not in shown:
            shown.add(grade_id)
            cells.append(marker_cell(part_html(record, grade_id)))
    for grade_id in record.part_max:  # parts whose cell the student deleted still get their box
        if grade_id not in shown:
            cells.append(marker_cell(part_html(record, grade_id)))
    nb.cells = cells
    nb.metadata.setdefault("kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"})
    body, _ = _html_exporter().from_notebook_node(nb, resources={"metadata": {"name": f"{record.exercise} feedback"}})
    for marker, box in boxes.items():
        body = body.replace(marker, box, 1)
    # A submission's outputs and markdown may carry scripts; the page is static, so none may run.
    return body.replace("<head>", "<head>\n" + _NO_SCRIPTS + _STYLE, 1)


def write_feedback(folder: Path, record: Record, notebook: Path | None) -> Path:
    from bertcourse.grading.batch import write_atomic

    path = folder / FEEDBACK_NAME
    write_atomic(path, render_feedback(record, notebook))
    return path


def feedback_exists(folder: Path) -> bool:
    return (folder / FEEDBACK_NAME).is_file()

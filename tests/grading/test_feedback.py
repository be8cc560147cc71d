"""Feedback pages as a student opens them: offline, small, each check named, outputs shown, a shared
reason said once, never a hidden check's source. The pages are those of the class batch that
`bertcourse autograde` grades for test_autograde too (tests/support/class_batch.py)."""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from batch_support import EXERCISE, hidden_source_lines

pytestmark = pytest.mark.slow

MAX_PAGE_BYTES = 20_000  # nbconvert's lab template made every page ~280 KB


@pytest.fixture(scope="module")
def pages(class_batch):
    """The pages of alice (right, printing), bob (the blank release) and carol (wrong, printing 100 000 characters)
    in the class batch, whose solution carries a markdown cell of mathematics."""
    folder = class_batch["course"].root / "feedback"
    paths = {s: folder / s / EXERCISE / "feedback.html" for s in ("alice", "bob", "carol")}
    return {"course": class_batch["course"], "paths": paths, **{s: path.read_text() for s, path in paths.items()}}


def _text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_checks_are_labelled_by_what_they_check(pages):
    carol = pages["carol"]
    for label in ("Add small integers", "Add negative and fractions", "Answer q1"):
        assert f"<td>{label}</td>" in carol
    assert "check 1" not in carol and "check 2" not in carol
    secret = hidden_source_lines(pages["course"])
    for student in ("alice", "bob", "carol"):
        assert not [line for line in secret if line in pages[student]], student
        assert "test_add_small_integers" not in pages[student]
        assert "hidden-check-source-must-never-reach-students" not in pages[student]


def _math_images(page: str) -> list[tuple[str, str]]:
    """(alt TeX, decoded SVG) of every formula drawn on the page."""
    found = re.findall(r'<img class="math[^"]*" alt="([^"]*)" src="data:image/svg\+xml;base64,([^"]+)">', page)
    return [(html.unescape(alt), base64.b64decode(data).decode()) for alt, data in found]


def test_math_is_drawn_offline_and_the_page_needs_no_network(pages):
    alice = pages["alice"]
    maths = _math_images(alice)
    assert len(maths) == 3 and all("<svg" in svg and "<path" in svg for _, svg in maths)
    assert any("\\frac" in alt for alt, _ in maths)  # the TeX is the image's alternative text
    assert "$$" not in alice and "<code class=\"tex\">" not in alice  # no TeX left for a script to typeset
    for student in ("alice", "bob", "carol"):
        page = pages[student]
        assert "<script" not in page.lower() and "<link" not in page.lower()
        assert "default-src 'none'" in page  # the browser itself refuses any load from elsewhere
        loads = re.sub(r'<a href="[^"]*"', "<a", page)  # links are followed by choice, not loaded
        loads = re.sub(r'src="data:[^"]*"', "src", loads)  # and images are inline data
        assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}(?:/|\s|\"|$)", loads, re.I), student


def test_math_does_not_touch_matplotlibs_global_state():
    import matplotlib

    from bertcourse.grading.batch.feedback import math_html

    backend, params = matplotlib.get_backend(), dict(matplotlib.rcParams)
    math_html("\\sum_{i=1}^{n} x_i^2 + \\operatorname{softmax}(q k^\\top)", display=True)
    assert matplotlib.get_backend() == backend and dict(matplotlib.rcParams) == params


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium (.ci/run installs it)")
def test_math_renders_in_headless_chromium_offline(pages, tmp_path):
    """Chromium decodes and lays out every formula image with no network at all."""
    page = pages["paths"]["alice"]
    probe = tmp_path / "probe.html"
    probe.write_text(
        f'<!DOCTYPE html><iframe id="f" src="{page.as_uri()}"></iframe><pre id="out">not loaded</pre><script>'
        'document.getElementById("f").onload = () => { const d = document.getElementById("f").contentDocument;'
        ' document.getElementById("out").textContent = JSON.stringify([...d.querySelectorAll("img.math")].map('
        "m => [m.complete, m.naturalWidth, m.getBoundingClientRect().width])); };</script>")
    proc = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="out">(.*?)</pre>', proc.stdout, re.S)
    assert found, proc.stdout[-2000:] + proc.stderr[-2000:]
    maths = json.loads(html.unescape(found.group(1)))
    assert len(maths) == 3
    for complete, natural_width, width in maths:
        assert complete and natural_width > 0 and width > 0


def test_outputs_of_the_graded_run_are_shown_escaped_and_capped(pages):
    alice, carol = pages["alice"], pages["carol"]
    assert "output when graded" in alice and "add(2, 3) = 5" in alice
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in alice and "<script>alert" not in alice
    text = _text(carol)
    assert "x" * 1000 in text and "x" * 2500 not in text and "output cut" in text


def test_a_part_not_written_yet_is_said_once_without_hints_for_mistakes_not_made(pages):
    bob, carol = _text(pages["bob"]), _text(pages["carol"])
    assert bob.count("still raises NotImplementedError") == 1, bob  # once for the part add_checks (q1: undefined)
    assert "not written yet: `add` still raises NotImplementedError; 2 checks (2 points)" in bob, bob
    assert "add() should return the sum of its two arguments" not in bob  # a hint about code that does not exist
    assert not re.search(r"NotImplementedError: ?(\n|$|<)", bob)  # no dangling colon after an empty message
    assert "(q1): NotImplementedError: not written yet" in bob  # the unwritten top-level answer cell
    assert "add() should return the sum of its two arguments" in carol  # code that exists keeps its hints


def test_pages_are_small(pages):
    for student in ("alice", "bob", "carol"):
        size = pages["paths"][student].stat().st_size
        assert size < MAX_PAGE_BYTES, (student, size)


# ----------------------------------------------------------------------------- without grading


def _record(**result):
    from bertcourse.grading.batch.records import Record
    from bertcourse.grading.results import NotebookResult

    return Record(student="zoe", exercise=EXERCISE, notebook="add", submission="", key="", status="graded",
                  score=0.0, max_score=3.0, parts={"add_checks": 0.0}, part_max={"add_checks": 2.0}, reasons=[],
                  result=NotebookResult.from_dict({"notebook": "add.ipynb", "exercise": EXERCISE, **result}))


def test_outputs_are_withheld_when_student_code_ran_unconfined():
    from bertcourse.grading.batch.feedback import render_feedback

    notebook = Path(__file__).resolve().parents[1] / "fixtures" / "course" / "solutions" / EXERCISE / "add.ipynb"
    cells = [{"index": 1, "grade_id": "add", "status": "ok", "error": "", "output": "SECRET-FROM-THE-CHECKS"}]
    confined = render_feedback(_record(cells=cells), notebook)
    assert "SECRET-FROM-THE-CHECKS" in confined
    notes = [{"kind": "sandbox-unavailable", "message": "no Landlock", "cell": None}]
    page = render_feedback(_record(cells=cells, notes=notes), notebook)
    assert "SECRET-FROM-THE-CHECKS" not in page and "could not confine" in page


def test_student_markdown_cannot_script_or_load_anything():
    from bertcourse.grading.batch.feedback import _markdown, math_html

    rendered = _markdown('<img src=x onerror="alert(1)"> [a](javascript:alert(1)) ![p](https://example.org/p.png)'
                         " $\\href{javascript:alert(2)}{x}$ $x^2$")
    assert "<img src" not in rendered
    assert not re.search(r"<[^>]+onerror=", rendered) and 'href="javascript' not in rendered
    assert "https://example.org" not in rendered
    assert rendered.count('<img class="math"') == 1  # $x^2$ drawn; the \href formula stays escaped text
    unreadable = math_html("<b>\\frac{1}{", display=False)
    assert unreadable.startswith('<code class="tex">') and "<b>" not in unreadable


def test_check_labels_and_bertcourse_grade_says_a_shared_reason_once():
    from bertcourse.grading.report import check_label, format_result
    from bertcourse.grading.results import CheckResult, NotebookResult

    assert check_label("test_new_mask_on_each_call") == "New mask on each call"
    assert check_label("check_q1_loss_positions") == "Q1 loss positions"
    result = NotebookResult(notebook="add.ipynb", exercise=EXERCISE, checks=[
        CheckResult(f"test_part_{i}", "add_checks", 0.0, 1.0, False, f"hint {i}",
                    "your code raised NotImplementedError in `add`") for i in range(12)]
        + [CheckResult("test_other", "add_checks", 0.0, 1.0, False, "hint", "`add` is not defined")]
        + [CheckResult(f"test_q{i}", "q1_checks", 0.0, 1.0, False, f"q hint {i}", "wrong answer") for i in range(2)])
    result.total()
    report = format_result(result)
    assert report.count("not written yet") == 1 and "TODO [add_checks] not written yet: `add` still" in report
    assert "hint " not in report.replace("q hint", "")  # no hint about code that is not there
    assert "why:  `add` is not defined" in report and report.count("q hint") == 2
    assert "2 checks failed because: wrong answer" in report


def test_a_why_line_says_what_the_check_name_does_not_or_is_left_out():
    """Issue 26: a reason that repeats the check's label ("a pass@k differs" under "Pass at k unbiased") or only
    says that the check failed is not printed; one that tells what the code did is (the instructor's feedback
    pages print `why_line` too)."""
    from bertcourse.grading.judge import BARE_ASSERT
    from bertcourse.grading.report import format_result, why_line
    from bertcourse.grading.results import CheckResult, NotebookResult

    told = "pass_at_k(5000, 300, 200) returned 0.9871"
    checks = [CheckResult("test_pass_at_k_unbiased", "pass_checks", 0.0, 1.0, False, "hint 1", "a pass@k differs"),
              CheckResult("test_pass_at_k_edge_cases", "pass_checks", 0.0, 1.0, False, "hint 2",
                          "an edge case of pass@k is wrong"),
              CheckResult("test_q1_loss_positions", "pass_checks", 0.0, 1.0, False, "hint 3", BARE_ASSERT),
              CheckResult("test_pass_at_k_large_n", "pass_checks", 0.0, 1.0, False, "hint 4", told),
              CheckResult("test_bootstrap_seed", "pass_checks", 0.0, 1.0, False, "hint 5",
                          "the same seed gave another interval")]
    result = NotebookResult(notebook="metrics.ipynb", exercise=EXERCISE, checks=checks)
    result.total()
    report = format_result(result)
    assert [line.strip() for line in report.splitlines() if "why:" in line] == [
        f"why:  {told}", "why:  the same seed gave another interval"], report
    assert all(f"hint: hint {i}" in report for i in range(1, 6))  # the hints stay
    assert [why_line(c) for c in checks] == ["", "", "", told, "the same seed gave another interval"]

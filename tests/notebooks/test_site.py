"""The course website (`make site`, bertcourse.authoring.site): built once here from the checkout, as CI builds it.

What a reader must get: a start page generated from course.yml, a page per lesson with its committed figures,
previous/next links, search, Colab and download buttons, no set-up cell; and what they must never get: a
solution cell or the source of a hidden check, on any page or in any file of the site. Where
$BERTCOURSE_REQUIRE_BROWSER is set (CI) a missing site extra, Playwright or Chromium fails instead of skipping.
"""

from __future__ import annotations

import functools
import html
import http.server
import json
import re
import threading
import warnings
from pathlib import Path

import pytest
from browser_support import missing

from bertcourse.authoring.site import site_notebooks, start_page
from bertcourse.course import load_course
from bertcourse.notebook import COLAB_SETUP_TAGS, colab_url, contents_table, lesson_number

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
COURSE = load_course(ROOT)
SOLUTION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)
MIN_LENGTH = 24  # a line this long is distinctive enough to stand for the file it comes from


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    try:
        import myst_nb  # noqa: F401
        import sphinx_book_theme  # noqa: F401
    except ImportError:
        missing("the site extra is not installed: pip install -e '.[site]'")
    from bertcourse.authoring.site import build_site

    base = tmp_path_factory.mktemp("site")
    with warnings.catch_warnings():  # the theme's and myst's calls of Sphinx APIs it deprecates: not ours to mend
        warnings.filterwarnings("ignore", message=r".*Check CHANGES for Sphinx API modifications")
        return build_site(ROOT, base / "_site", work=base / "work")


def _published_text(path: Path) -> str:
    """What a reader of `path` gets to see, as plain text: an HTML page without its tags (code is split into
    highlighting spans there), a notebook's cell sources and outputs, any other file as it is."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".html":
        return html.unescape(re.sub(r"<[^>]+>", "", text))
    if path.suffix == ".ipynb":
        cells = json.loads(text)["cells"]
        return "\n".join(json.dumps(cell) + "\n" + "".join(cell.get("source", "")) for cell in cells)
    return text


def leaks(site: Path, secrets: dict[str, str]) -> list[str]:
    """'FILE shows SECRET (from WHERE)' for each of `secrets` ({line: where it comes from}) found in `site`."""
    found = []
    for path in sorted(p for p in site.rglob("*") if p.is_file() and p.suffix not in (".png", ".svg", ".woff2")):
        text = _published_text(path)
        found += [f"{path.relative_to(site)} shows {line!r} (from {where})" for line, where in secrets.items()
                  if line in text]
    return found


def _distinctive(lines: list[str], published: str) -> list[str]:
    """The long lines of `lines` that nothing published (the lessons' and releases' sources) holds anyway."""
    return [line for line in dict.fromkeys(ln.strip() for ln in lines)
            if len(line) >= MIN_LENGTH and line not in published]


def _secrets() -> dict[str, str]:
    """{line: where it comes from}: the solution cells' lines and the hidden checks' lines, only those that
    the published notebooks do not hold too."""
    published = "\n".join(_published_text(ROOT / page) for page in site_notebooks(COURSE))
    secrets = {}
    for notebook in sorted((ROOT / "solutions").rglob("*.ipynb")):
        cells = json.loads(notebook.read_text())["cells"]
        for cell in cells:
            for block in SOLUTION.findall("".join(cell["source"])):
                for line in _distinctive(block.splitlines(), published):
                    secrets[line] = f"a solution cell of {notebook.relative_to(ROOT)}"
    for module in sorted((ROOT / "autograder" / "checks").glob("*.py")):
        for line in _distinctive(module.read_text().splitlines(), published):
            secrets[line] = str(module.relative_to(ROOT))
    return secrets


def test_the_leak_finder_sees_a_solution_line_split_by_highlighting(tmp_path):
    """The grep below can fail: a solution line in a highlighted code block (one span per token) is found."""
    line = "masked = torch.bernoulli(torch.full(shape, probability)).bool()"
    (tmp_path / "page.html").write_text('<pre><span class="n">masked</span> <span class="o">=</span> '
                                        + html.escape(line.split(" = ", 1)[1]) + "</pre>")
    assert leaks(tmp_path, {line: "a solution"}) == [f"page.html shows {line!r} (from a solution)"]
    assert leaks(tmp_path, {"never written anywhere in this page": "x"}) == []


def test_no_page_or_file_of_the_site_shows_a_solution_or_a_hidden_check(site):
    secrets = _secrets()
    from_solutions = [line for line, where in secrets.items() if where.startswith("a solution cell")]
    from_checks = [line for line, where in secrets.items() if where.startswith("autograder/")]
    assert len(from_solutions) >= 50 and len(from_checks) >= 200, "too few lines to look for: it would prove nothing"
    found = leaks(site, secrets)
    assert not found, "the website publishes what students must not see:\n" + "\n".join(found[:20])
    every_file = "\n".join(p.read_text(errors="replace") for p in site.rglob("*")
                           if p.suffix in (".html", ".ipynb", ".js"))
    assert "BEGIN SOLUTION" not in every_file and "BEGIN HIDDEN TESTS" not in every_file
    assert not (site / "solutions").exists() and not (site / "_sources" / "solutions").exists()


def test_a_page_per_lesson_and_exercise_and_a_start_page_from_course_yml(site):
    for notebook in site_notebooks(COURSE):
        page = site / Path(notebook).with_suffix(".html")
        assert page.is_file(), f"no page for {notebook}"
        shown = _published_text(page)
        assert "google.colab" not in shown and "Colab set-up" not in shown, (
            f"{page.name} shows the Colab set-up cell: it must carry the tags {COLAB_SETUP_TAGS}")
        assert f'href="{colab_url(notebook, COURSE.course.repository, COURSE.course.branch)}"' in page.read_text(), (
            f"{page.name} has no 'Open in Colab' link to {notebook}")
        download = site / "_sources" / notebook
        assert download.is_file() and json.loads(download.read_text())["cells"], f"no download of {notebook}"
    assert contents_table(ROOT) in start_page(COURSE), "the start page's table is the README's, from course.yml"
    assert (site / "searchindex.js").is_file() and (site / "search.html").is_file()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # the test's output stays the test's
        pass


@pytest.fixture(scope="module")
def served(site):
    """The site over HTTP on a free local port, as a reader's browser gets it."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    thread.join()


def _a_lesson_with_a_figure() -> tuple[str, str]:
    """(the first lesson, by number, whose committed outputs hold a figure; the lesson after it)."""
    lessons = sorted((lesson.notebook for lesson in COURSE.lessons), key=lesson_number)
    for this, after in zip(lessons, lessons[1:]):
        cells = json.loads((ROOT / this).read_text())["cells"]
        if any("image/png" in output.get("data", {}) for cell in cells for output in cell.get("outputs", [])):
            return this, after
    raise AssertionError("no committed lesson has a figure to show")


@pytest.mark.browser
def test_a_reader_goes_from_the_start_page_to_a_lesson_sees_its_figure_and_follows_next(browser, served):
    lesson, following = _a_lesson_with_a_figure()
    title = next(item.title for item in COURSE.lessons if item.notebook == lesson)
    page = browser.new_page()
    try:
        page.goto(served)
        assert page.locator("h1").first.inner_text().strip().startswith(COURSE.course.title)
        page.locator("article").get_by_role("link", name=title, exact=True).first.click()
        page.wait_for_url(f"**/{Path(lesson).with_suffix('.html')}")
        figures = page.locator(".cell_output img")
        assert figures.count() >= 1, f"{lesson}: no figure on its page"
        figures.first.scroll_into_view_if_needed()
        page.wait_for_function("(img) => img.complete && img.naturalWidth > 0", arg=figures.first.element_handle())
        assert page.locator(f'a[href="{colab_url(lesson, COURSE.course.repository, COURSE.course.branch)}"]').count()
        page.locator("a.right-next").click()
        page.wait_for_url(f"**/{Path(following).with_suffix('.html')}")
        assert page.locator("h1").first.inner_text().startswith(f"Lesson {lesson_number(following)}")
        page.goto(served + "search.html?q=masking")
        page.wait_for_selector("#search-results li a", timeout=15_000)
        assert page.locator("#search-results li a").count() >= 3, "search finds the lessons about masking"
    finally:
        page.close()

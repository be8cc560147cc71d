"""The README is the front door for three readers (a learner, an instructor, a contributor) and stays short;
everything else lives in docs/, one file per reader. Links between them must lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

from bertcourse.course import load_course
from bertcourse.notebook import colab_url

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
FIRST_SCREEN_LINES = 20
MAX_README_WORDS = 1250  # the "about 1,200", counted as rendered (link targets and comments left out)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def rendered_words(markdown: str) -> int:
    """Words a reader sees: no HTML comments, no link targets, no badge alt text."""
    text = re.sub(r"<!--.*?-->", "", markdown, flags=re.S)
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return len(text.split())


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces as hyphens,
    a repeated heading numbered."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", re.sub(r"```.*?```", "", markdown, flags=re.S), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return out


def test_each_reader_finds_a_first_command_on_the_first_screen():
    first_screen = "\n".join(README.read_text().splitlines()[:FIRST_SCREEN_LINES])
    lesson_0 = load_course(ROOT).lessons[0].notebook
    for wanted in (colab_url(lesson_0),  # a learner in the browser
                   "`make demo`", "`make lab`",  # a learner on their machine
                   "`make install-instructor`", "`bertcourse autograde submitted/`",  # an instructor
                   "`make test`"):  # a contributor, and CI's command (.ci/run)
        assert wanted in first_screen, f"{wanted!r} is not in the README's first {FIRST_SCREEN_LINES} lines"


def test_the_readme_stays_short():
    words = rendered_words(README.read_text())
    assert words <= MAX_README_WORDS, f"README.md has {words} words; move detail to docs/"


def test_the_readme_links_every_guide_in_docs():
    linked = set(LINK.findall(README.read_text()))
    missing = [page.relative_to(ROOT).as_posix() for page in PAGES[1:]
               if not any(target.split("#")[0] == page.relative_to(ROOT).as_posix() for target in linked)]
    assert not missing, f"docs no README link leads to: {missing}"


def test_links_between_the_pages_lead_somewhere():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):  # https:, mailto: ...: not checked offline
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_anchors_and_words_are_counted_as_github_shows_them():
    assert anchors("# A title\n## Colab: installing, a GPU\n## Notes\n## Notes\n```\n# not a heading\n```") == {
        "a-title", "colab-installing-a-gpu", "notes", "notes-1"}
    assert rendered_words("<!-- a comment -->[two words](https://example.org/a/b) ![badge](x.svg)") == 2

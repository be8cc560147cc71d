"""The course website (`make site`): the committed, executed lessons and the student exercises as static pages.

Nothing is executed: the lessons' pages show the outputs committed with them (`authoring.lesson_outputs`), the
exercises' pages the release students get (exercises/), never solutions/ or autograder/. Sphinx with myst-nb
and the book theme (the `site` extra) builds it from a staging folder holding only those notebooks, at their
paths in the repository (so the theme's "Open in Colab" button opens the notebook on GitHub), and a start page
generated from course.yml (`notebook.contents_table`, as the README's table). The set-up cell is left out of the
pages by its `remove-cell` tag (`notebook.COLAB_SETUP_TAGS`). Sphinx's configuration lives in site/conf.py.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from bertcourse.course import Course, load_course
from bertcourse.errors import BertcourseError
from bertcourse.notebook import contents_table, lesson_number

CONFIG_DIR = "site"  # site/conf.py, under the course root
SITE_DIR = "_site"  # what `make site` writes: the pages to publish
WORK_DIR = ".cache/site"  # staging, Sphinx's doctrees and myst-nb's notebook copies (it writes them beside the html)
RELEASE_DIR = "exercises"


def site_notebooks(course: Course) -> list[str]:
    """The notebooks the website shows, relative to the course root: the lessons in the order of their numbers
    (the pages' previous/next links follow it), then the exercises' releases in course.yml's order."""
    lessons = sorted((lesson.notebook for lesson in course.lessons), key=lesson_number)
    return lessons + [f"{RELEASE_DIR}/{exercise.notebook}" for exercise in course.exercises]


def start_page(course: Course) -> str:
    """The start page (MyST markdown): the course's title, the table of lessons and exercises, and the
    hidden tables of contents that give the sidebar and the previous/next links."""
    pages = site_notebooks(course)
    lessons = [page for page in pages if not page.startswith(f"{RELEASE_DIR}/")]
    exercises = pages[len(lessons):]

    def toctree(caption: str, entries: list[str]) -> str:
        lines = "\n".join(str(Path(entry).with_suffix("")) for entry in entries)
        return f"```{{toctree}}\n:caption: {caption}\n:hidden:\n\n{lines}\n```\n"

    repository = f"https://github.com/{course.course.repository}"
    return (f"# {course.course.title}\n\n"
            "The lessons as they ran, with their outputs and figures, and the exercises as students get them. "
            "Every page opens in Colab or downloads as a notebook (the buttons at its top); the course itself, "
            f"with the commands to run it on your machine and to grade, is at <{repository}>.\n\n"
            f"{contents_table(course.root)}\n\n{toctree('Lessons', lessons)}\n{toctree('Exercises', exercises)}")


def stage(course: Course, folder: Path) -> list[Path]:
    """Fill `folder` with the start page and the notebooks of `site_notebooks` (and nothing else); returns them.

    Copies keep their modification times, so Sphinx rebuilds only the pages whose notebook changed."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    staged = []
    for relative in site_notebooks(course):
        source = course.root / relative
        if not source.is_file():
            raise BertcourseError(f"the website's page {relative} is missing: course.yml names it "
                                  f"(run `bertcourse release` for an exercise)")
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        staged.append(Path(shutil.copy2(source, target)))
    (folder / "index.md").write_text(start_page(course), encoding="utf-8")
    return staged


def build_site(root: str | Path | None = None, out: str | Path | None = None, work: str | Path | None = None,
               quiet: bool = True) -> Path:
    """Build the website of the course at `root` into `out` (default `_site/` there), staging and caching in
    `work` (default `.cache/site/` there); returns `out`.

    Raises BertcourseError when the `site` extra is not installed or Sphinx reports a warning (a broken link,
    a notebook it cannot read): a site that builds only with warnings is a wrong site.
    """
    try:
        from sphinx.cmd.build import build_main
    except ImportError as exc:
        raise BertcourseError("building the website needs the site extra: pip install -e '.[site]' "
                              "(`make site` installs it)") from exc
    course = load_course(root)
    work = Path(work) if work is not None else course.root / WORK_DIR
    out = Path(out) if out is not None else course.root / SITE_DIR
    stage(course, work / "source")
    html = work / "html"  # myst-nb writes its notebook copies to html's parent: kept out of the published folder
    arguments = ["-b", "html", "-c", str(course.root / CONFIG_DIR), "-d", str(work / "doctrees"), "-W",
                 "--keep-going", *(["-q"] if quiet else []), str(work / "source"), str(html)]
    if build_main(arguments) != 0:
        raise BertcourseError(f"Sphinx could not build the website from {work / 'source'} (its messages are above)")
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(html, out, ignore=shutil.ignore_patterns(".buildinfo", ".doctrees"))
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m bertcourse.authoring.site [OUT]`: build the website (what `make site` runs)."""
    parser = argparse.ArgumentParser(prog="python -m bertcourse.authoring.site", description=main.__doc__)
    parser.add_argument("out", nargs="?", default=None, help=f"the folder to write (default: {SITE_DIR}/)")
    args = parser.parse_args(argv)
    try:
        out = build_site(out=args.out, quiet=True)
    except BertcourseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    pages = sum(1 for _ in out.rglob("*.html"))
    print(f"the course website: {out}/index.html ({pages} pages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Sphinx's configuration of the course website; `bertcourse.authoring.site.build_site` (`make site`) runs it.

Read, never run: myst-nb shows the outputs committed with the lessons (nb_execution_mode "off"). The theme's
buttons open each notebook in Colab from the course's repository (course.yml) and download it.
"""

from pathlib import Path

from bertcourse.course import load_course

course = load_course(Path(__file__).resolve().parents[1]).course

project = course.title
html_title = course.title
extensions = ["myst_nb"]
nb_execution_mode = "off"  # the lessons' committed outputs are the page; nothing runs at build time
myst_enable_extensions = ["dollarmath"]  # the lessons' $...$ formulas
html_theme = "sphinx_book_theme"
html_copy_source = True  # the notebooks themselves, for the "Download" button
html_theme_options = {
    "repository_url": f"https://github.com/{course.repository}",
    "repository_branch": course.branch,
    "path_to_docs": "",  # the staged notebooks keep their paths in the repository
    "use_repository_button": True,
    "use_download_button": True,
    "launch_buttons": {"colab_url": "https://colab.research.google.com"},
    "show_navbar_depth": 1,
    "home_page_in_toc": True,
}

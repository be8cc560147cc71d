"""nbgrader configuration of the course, read by `bertcourse release`, `autograde` and `validate`.

Plain `nbgrader` commands read `nbgrader_config.py` in the folder they run in; to use them from the
course root, put there a file holding the two lines
    c = get_config()
    load_subconfig("autograder/nbgrader_config.py")

The course keeps nbgrader's folder names meaningful to its readers: the instructor's notebooks with
solutions live in `solutions/` (nbgrader's source), the student release in `exercises/` (committed).
The hidden checks live next to this file in `autograder/checks/`: outside `solutions/`, so nbgrader
never copies them into a release, and outside `src/`, so an installed student copy cannot import them.
"""

import os

c = get_config()  # noqa: F821 (injected by traitlets when it runs this file)

COURSE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

c.CourseDirectory.course_id = "bertcourse"
c.CourseDirectory.root = COURSE_ROOT
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
# The gradebook: SQLite in the course folder unless BERTCOURSE_DB_URL names another database (any
# SQLAlchemy URL, e.g. postgresql://user@host/grades for several graders). `bertcourse autograde
# --db-url` overrides both.
c.CourseDirectory.db_url = os.environ.get(
    "BERTCOURSE_DB_URL", "sqlite:///" + os.path.join(COURSE_ROOT, "gradebook.db")
)
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".DS_Store"]

# The cell a student sees in place of a solution.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# nbgrader scores a test cell 0 when it writes anything to stderr. torch and transformers print
# harmless warnings (deprecations, tqdm bars on stderr), so only real errors count.
c.IgnorePattern.pattern = r"(?i)(warning|warn\(|tqdm|it/s\]|\d+%\|)"
c.IgnorePattern.enabled = True

# Per-cell execution limit when nbgrader itself runs a notebook (the bertcourse autograder has its
# own whole-notebook limits from course.yml).
c.ExecutePreprocessor.timeout = 300

# Feedback shows the student their notebook and scores, never hidden test source.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]

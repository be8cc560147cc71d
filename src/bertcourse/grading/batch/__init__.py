"""The batch front end, `bertcourse autograde`: a class's submissions graded by the engine (grading/)
into nbgrader's gradebook, a CSV, feedback pages and a class report.

    autograde.py     the command: what to grade, what is reused, who writes the gradebook
    layout.py        nbgrader's submitted/<student>/<exercise>/ layout, refused when it is not that
    lanes.py         the processes that grade submissions in parallel, each with its own engine
    records.py       what is kept per submission (a Record around the engine's NotebookResult) and grades.csv
    gradebook.py     nbgrader's configuration and gradebook, as the course uses them
    claims.py        several graders sharing one PostgreSQL gradebook
    feedback.py      the feedback page a student gets
    class_report.py  what the class got wrong, per check and misconception, for the instructor
"""

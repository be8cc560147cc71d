"""Tools for the course's authors, apart from grading: `bertcourse release` (release.py), `bertcourse
validate` (validation.py) and the proofs of hidden checks in the course's tests (proofs.py).

They use the grading engine (`bertcourse.grading`); nothing in grading uses them.
"""

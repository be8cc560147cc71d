"""The one base class for errors a user can fix: the command prints them as one line and exits 2."""


class BertcourseError(Exception):
    """Bad input (a file, a setting, a notebook) described with what was wrong and where."""

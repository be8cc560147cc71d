"""bertcourse: a hands-on course on BERT and masked language modelling, with graded exercises."""

__version__ = "0.1.0"

"""What came after BERT (lessons 6 and 7): its pretraining tasks, models, distillation and generation.

`runner` trains any variant for a budget of steps; it builds on `bertcourse.training`, never the reverse.
"""

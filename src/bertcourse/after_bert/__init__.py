"""What came after BERT (lesson 6): its pretraining tasks, models, distillation and generation.

`runner` trains any variant for a budget of steps; it builds on `bertcourse.training`, never the reverse.
"""

"""Numbers that an exercise's written contract states, defined once.

The notebook's self-checks and the hidden checks in `autograder/` both import them, so the two accept
exactly the same answers (tests/checks/test_checks_ex03.py proves it for every rule here).
"""

from __future__ import annotations

# ex03-tiny-bert, `extended_attention_mask`: the largest value a padded key may get. BERT's classic
# -10000.0 is accepted, and so is torch.finfo(torch.float32).min: added to scores of a tiny model,
# both leave a padded key a softmax weight of exactly 0 in float32 (and -10000 still fits float16).
PADDING_MASK_MAX: float = -1e4

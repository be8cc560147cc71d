"""Proof of the hidden checks of ex02-whole-word-masking: every misconception fails its check, and
several correct implementations (different budget loops and orders of random draws) pass every check."""

from __future__ import annotations

import pytest
from check_proofs import (
    assert_bundle_caught,
    assert_bundles_sound,
    assert_every_check_targeted,
    assert_passes_every_check,
    assert_release_scores_zero,
    assert_scores_zero,
    bundle_ids,
    bundle_misconceptions,
    checks_of,
    failure_message,
)

pytestmark = pytest.mark.slow  # every proof grades a notebook with the real engine

CHECKS = "autograder/checks/ex02_whole_word_masking.py"

# Correct 1: vectorised; random word order by argsort of uniform scores, prefix rule, one draw per word.
VECTORISED = '''
import torch

def whole_word_mask(input_ids, word_ids, *, mask_token_id, vocab_size, special_ids, generator,
                    select_prob=0.15, mask_prob=0.8, random_prob=0.1):
    valid = word_ids >= 0
    n_words = int(word_ids.max()) + 1
    index = word_ids.clamp(min=0)
    lengths = torch.zeros(input_ids.shape[0], n_words, dtype=torch.long).scatter_add_(1, index, valid.long())
    budget = (valid.sum(1) * select_prob).round().clamp(min=1).long().unsqueeze(1)
    scores = torch.rand(lengths.shape, generator=generator).masked_fill(lengths == 0, 2.0)
    order = scores.argsort(1)
    in_order = lengths.gather(1, order)
    take = (in_order.cumsum(1) <= budget) & (in_order > 0)
    chosen = torch.zeros_like(take).scatter(1, order, take)
    decision = torch.rand(lengths.shape, generator=generator)
    selected = chosen.gather(1, index) & valid
    as_mask = (chosen & (decision < mask_prob)).gather(1, index) & valid
    as_random = (chosen & (decision >= mask_prob) & (decision < mask_prob + random_prob)).gather(1, index) & valid
    special = torch.zeros(vocab_size, dtype=torch.bool)
    special[[i for i in special_ids if i < vocab_size]] = True
    regular = (~special).nonzero().squeeze(1)
    random_ids = regular[torch.randint(len(regular), input_ids.shape, generator=generator)]
    inputs = input_ids.clone()
    inputs[as_mask] = mask_token_id
    inputs[as_random] = random_ids[as_random]
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, -100))
    return inputs, labels
'''

# Correct 2: Google's loop: words shuffled with randperm, a word that does not fit is skipped.
GOOGLE_LOOP = '''
import torch

def whole_word_mask(input_ids, word_ids, *, mask_token_id, vocab_size, special_ids, generator,
                    select_prob=0.15, mask_prob=0.8, random_prob=0.1):
    inputs = input_ids.clone()
    labels = torch.full_like(input_ids, -100)
    regular = torch.tensor(sorted(set(range(vocab_size)) - set(special_ids)))
    for row in range(input_ids.shape[0]):
        words = {}
        for position, word in enumerate(word_ids[row].tolist()):
            if word >= 0:
                words.setdefault(word, []).append(position)
        groups = list(words.values())
        budget = max(1, round(select_prob * sum(len(g) for g in groups)))
        covered = 0
        for i in torch.randperm(len(groups), generator=generator).tolist():
            group = groups[i]
            if covered + len(group) > budget:
                continue
            covered += len(group)
            labels[row, group] = input_ids[row, group]
            u = float(torch.rand((), generator=generator))
            if u < mask_prob:
                inputs[row, group] = mask_token_id
            elif u < mask_prob + random_prob:
                inputs[row, group] = regular[torch.randint(len(regular), (len(group),), generator=generator)]
    return inputs, labels
'''

# Correct 3: the course's reference (words found as runs of equal ids; first word always taken).
REFERENCE = '''
from bertcourse.masking import whole_word_mask as reference

def whole_word_mask(input_ids, word_ids, *, mask_token_id, vocab_size, special_ids, generator,
                    select_prob=0.15, mask_prob=0.8, random_prob=0.1):
    return reference(input_ids, word_ids, mask_token_id=mask_token_id, vocab_size=vocab_size,
                     special_ids=special_ids, generator=generator, select_prob=select_prob,
                     mask_prob=mask_prob, random_prob=random_prob)
'''

# Correct 4: NumPy stream seeded from the generator; exact 80/10/10 word counts over the whole batch.
NUMPY_EXACT = '''
import numpy as np
import torch

def whole_word_mask(input_ids, word_ids, *, mask_token_id, vocab_size, special_ids, generator,
                    select_prob=0.15, mask_prob=0.8, random_prob=0.1):
    rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=generator)))
    ids, words = input_ids.numpy(), word_ids.numpy()
    chosen_words = []
    for row in range(ids.shape[0]):
        present = np.unique(words[row][words[row] >= 0])
        lengths = np.array([(words[row] == w).sum() for w in present])
        budget = max(1, round(select_prob * lengths.sum()))
        order = rng.permutation(len(present))
        total = np.cumsum(lengths[order])
        chosen_words += [(row, present[i]) for i, t in zip(order, total) if t <= budget]
    decisions = rng.permutation(len(chosen_words))
    n_mask, n_random = round(mask_prob * len(chosen_words)), round(random_prob * len(chosen_words))
    regular = np.setdiff1d(np.arange(vocab_size), list(special_ids))
    inputs, labels = ids.copy(), np.full_like(ids, -100)
    for rank, k in enumerate(decisions):
        row, word = chosen_words[k]
        at = words[row] == word
        labels[row, at] = ids[row, at]
        if rank < n_mask:
            inputs[row, at] = mask_token_id
        elif rank < n_mask + n_random:
            inputs[row, at] = rng.choice(regular, size=int(at.sum()))
    return torch.from_numpy(inputs), torch.from_numpy(labels)
'''

CORRECT = {"vectorised": VECTORISED, "google_loop": GOOGLE_LOOP, "reference": REFERENCE,
           "numpy_exact": NUMPY_EXACT}


def mutate(*replacements: tuple[str, str], base: str = VECTORISED) -> str:
    source = base
    for old, new in replacements:
        assert old in source, old
        source = source.replace(old, new)
    return source


PER_PIECE_DECISION = mutate(("decision = torch.rand(lengths.shape, generator=generator)",
                             "piece = torch.rand(input_ids.shape, generator=generator)"),
                            ("(chosen & (decision < mask_prob)).gather(1, index) & valid",
                             "chosen.gather(1, index) & valid & (piece < mask_prob)"),
                            ("(chosen & (decision >= mask_prob) & (decision < mask_prob + random_prob))"
                             ".gather(1, index) & valid",
                             "chosen.gather(1, index) & valid & (piece >= mask_prob) "
                             "& (piece < mask_prob + random_prob)"))

SIDE = {"test_returns_two_integer_tensors", "test_input_tensors_not_modified", "test_new_mask_on_each_call",
        "test_same_seed_same_mask"}
SCORES = "torch.rand(lengths.shape, generator=generator).masked_fill(lengths == 0, 2.0)"
DRAWS = "regular[torch.randint(len(regular), input_ids.shape, generator=generator)]"

# misconception -> (wrong source, the checks that must fail it[, checks it must still pass: independence])
WRONG = {
    "[MASK] written in as bert-base-uncased's 103": (
        mutate(("inputs[as_mask] = mask_token_id", "inputs[as_mask] = 103")),
        {"test_mask_token_id_and_special_ids_are_arguments"},
        {"test_word_treatment_shares", "test_random_replacements_are_never_special"},
    ),
    "bert-base-uncased's special ids written in": (
        mutate(("special[[i for i in special_ids if i < vocab_size]] = True",
                "special[[0, 100, 101, 102, 103]] = True")),
        {"test_mask_token_id_and_special_ids_are_arguments"},
        {"test_random_replacements_are_never_special", "test_random_replacements_are_uniform"},
    ),
    "padding and specials treated as a word": (
        mutate(("valid = word_ids >= 0", "valid = torch.ones_like(word_ids, dtype=torch.bool)"),
               ("index = word_ids.clamp(min=0)", "index = word_ids + 1"),
               ("n_words = int(word_ids.max()) + 1", "n_words = int(word_ids.max()) + 2")),
        {"test_special_positions_never_selected"},
    ),
    "token-level selection (words split)": (
        mutate(("selected = chosen.gather(1, index) & valid",
                "selected = (torch.rand(input_ids.shape, generator=generator) < select_prob) & valid"),
               ("(chosen & (decision < mask_prob)).gather(1, index) & valid",
                "selected & (torch.rand(input_ids.shape, generator=generator) < mask_prob)"),
               ("(chosen & (decision >= mask_prob) & (decision < mask_prob + random_prob)).gather(1, index) & valid",
                "selected & ~as_mask & (torch.rand(input_ids.shape, generator=generator) < 0.5)")),
        {"test_words_are_never_split"},
    ),
    "80/10/10 drawn per piece (Google's original)": (
        PER_PIECE_DECISION,
        {"test_one_decision_per_word"},
        {"test_words_are_never_split", "test_budget_per_row"},
    ),
    "[MASK] per word but random/keep per piece": (
        mutate(("as_random = (chosen & (decision >= mask_prob) & (decision < mask_prob + random_prob))"
                ".gather(1, index) & valid",
                "as_random = (chosen & (decision >= mask_prob)).gather(1, index) & valid "
                "& (torch.rand(input_ids.shape, generator=generator) < random_prob / (1 - mask_prob))")),
        {"test_one_decision_per_word"},
    ),
    "budget ignored: each word selected with probability select_prob": (
        mutate(("take = (in_order.cumsum(1) <= budget) & (in_order > 0)",
                "take = (torch.rand(in_order.shape, generator=generator) < select_prob) & (in_order > 0)")),
        {"test_budget_per_row"},
        {"test_words_taken_in_random_order", "test_words_are_never_split", "test_word_treatment_shares"},
    ),
    "budget counted in words, not tokens": (
        mutate(("take = (in_order.cumsum(1) <= budget) & (in_order > 0)",
                "n_present = (lengths > 0).sum(1, keepdim=True)\n"
                "    take = (torch.arange(n_words) < (select_prob * n_present).round()) & (in_order > 0)")),
        {"test_budget_per_row"},
    ),
    "pieces drawn at 15%, then the whole word masked (transformers 5)": (
        mutate(("take = (in_order.cumsum(1) <= budget) & (in_order > 0)",
                "hit = (torch.rand(input_ids.shape, generator=generator) < select_prob) & valid\n"
                "    word_hit = torch.zeros_like(lengths).scatter_add_(1, index, hit.long()) > 0\n"
                "    take = word_hit.gather(1, order)")),
        {"test_budget_per_row"},
    ),
    "random ids from the whole vocabulary": (
        mutate(("regular[torch.randint(len(regular), input_ids.shape, generator=generator)]",
                "torch.randint(vocab_size, input_ids.shape, generator=generator)")),
        {"test_random_replacements_are_never_special"},
        {"test_random_replacements_are_uniform", "test_word_treatment_shares"},
    ),
    "random ids drawn from the batch's own tokens": (
        mutate((DRAWS, "input_ids[valid][torch.randint(int(valid.sum()), input_ids.shape, generator=generator)]")),
        {"test_random_replacements_are_uniform"},
        {"test_random_replacements_are_never_special", "test_one_decision_per_word", "test_word_treatment_shares"},
    ),
    "one random id for all the pieces of a word": (
        mutate((DRAWS, "regular[torch.randint(len(regular), lengths.shape, generator=generator)].gather(1, index)")),
        {"test_random_replacements_are_uniform"},
        {"test_random_replacements_are_never_special", "test_one_decision_per_word", "test_word_treatment_shares"},
    ),
    "words taken in the order of the row": (
        mutate((SCORES, "torch.linspace(0, 1, n_words).expand(lengths.shape).masked_fill(lengths == 0, 2.0)")),
        {"test_words_taken_in_random_order"},  # and the same selection on every call: nothing random in it
        {"test_budget_per_row", "test_words_are_never_split", "test_word_treatment_shares",
         *(SIDE - {"test_new_mask_on_each_call"})},
    ),
    "one contiguous span of words from a random start": (
        mutate((SCORES, "((torch.arange(n_words) - torch.randint(n_words, (lengths.shape[0], 1), generator=generator))"
                        " % n_words).float().masked_fill(lengths == 0, 2.0 * n_words)")),
        {"test_words_taken_in_random_order"},
        {"test_budget_per_row", "test_words_are_never_split", "test_word_treatment_shares"},
    ),
    "budget without its minimum of 1": (
        mutate(("budget = (valid.sum(1) * select_prob).round().clamp(min=1).long().unsqueeze(1)",
                "budget = (valid.sum(1) * select_prob).round().long().unsqueeze(1)")),
        {"test_budget_per_row"},
        {"test_words_taken_in_random_order", "test_word_treatment_shares", "test_probabilities_are_arguments", *SIDE},
    ),
    "mask_prob ignored (80% [MASK] always)": (
        mutate(("(chosen & (decision < mask_prob))", "(chosen & (decision < 0.8))"),
               ("(decision >= mask_prob) & (decision < mask_prob + random_prob)",
                "(decision >= 0.8) & (decision < 0.8 + random_prob)")),
        {"test_probabilities_are_arguments"},
        {"test_random_replacements_are_never_special", "test_random_replacements_are_uniform", "test_budget_per_row",
         "test_word_treatment_shares"},
    ),
    "100% [MASK] (as transformers 5 forces)": (
        mutate(("(chosen & (decision < mask_prob))", "chosen")),
        {"test_word_treatment_shares"},
        {"test_budget_per_row", "test_one_decision_per_word"},
    ),
    "unchanged words left without labels": (
        mutate(("    return inputs, labels",
                "    labels = torch.where(inputs != input_ids, input_ids, torch.full_like(input_ids, -100))\n"
                "    return inputs, labels")),
        {"test_word_treatment_shares"},
        {"test_budget_per_row", "test_words_taken_in_random_order", "test_probabilities_are_arguments",
         "test_labels_hold_original_ids", "test_words_are_never_split"},
    ),
    "the same selection on every call": (
        mutate(("    valid = word_ids >= 0",
                "    generator = torch.Generator().manual_seed(0)\n    valid = word_ids >= 0")),
        {"test_new_mask_on_each_call"},
    ),
    "the global random stream instead of the generator": (
        mutate(("generator=generator", "generator=None")),
        {"test_same_seed_same_mask"},
        {"test_new_mask_on_each_call", "test_budget_per_row", "test_word_treatment_shares"},
    ),
    "input modified in place": (
        mutate(("inputs = input_ids.clone()", "inputs = input_ids")),
        {"test_input_tensors_not_modified"},
    ),
    "probabilities hard-coded": (
        mutate(("    valid = word_ids >= 0",
                "    select_prob, mask_prob, random_prob = 0.15, 0.8, 0.1\n    valid = word_ids >= 0")),
        {"test_probabilities_are_arguments"},
        {"test_budget_per_row", "test_word_treatment_shares", "test_random_replacements_are_uniform"},
    ),
    "labels returned as floats": (
        mutate(("    return inputs, labels", "    return inputs, labels.float()")),
        {"test_returns_two_integer_tensors"},
    ),
    "labels hold the input shown instead of the original": (
        mutate(("    return inputs, labels", "    return inputs, torch.where(labels != -100, inputs, labels)")),
        {"test_labels_hold_original_ids"},
    ),
    "nothing implemented": (
        "def whole_word_mask(*args, **kwargs):\n    raise NotImplementedError\n",
        set(checks_of(CHECKS)),
    ),
}

# Notebooks that do not do the work: each must score exactly 0 (issue 15: a stub earns nothing).
STUBS = {
    "region returns its input": {
        "whole_word_mask": "def whole_word_mask(input_ids, word_ids, **kwargs):\n    return input_ids\n"},
    "region raises NotImplementedError": {
        "whole_word_mask": "def whole_word_mask(*args, **kwargs):\n    raise NotImplementedError()\n"},
    "well-formed result that selects nothing": {
        "whole_word_mask": "import torch\n\ndef whole_word_mask(input_ids, word_ids, **kwargs):\n"
                           "    return input_ids.clone(), torch.full_like(input_ids, -100)\n"},
    "inputs returned as labels too": {
        "whole_word_mask": "def whole_word_mask(input_ids, word_ids, **kwargs):\n"
                           "    return input_ids.clone(), input_ids.clone()\n"},
}



@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_implementation_passes_every_check(name):
    assert_passes_every_check(CHECKS, CORRECT[name], name)


BUNDLES = bundle_misconceptions(CHECKS, WRONG, VECTORISED)


@pytest.mark.parametrize("bundle", BUNDLES, ids=bundle_ids(BUNDLES))
def test_misconception_fails_its_check(bundle):
    """Misconceptions that cannot move each other's checks, graded in one notebook (check_proofs.py)."""
    assert_bundle_caught(CHECKS, WRONG, VECTORISED, bundle)


def test_bundled_misconceptions_cannot_move_each_others_checks():
    assert_bundles_sound(CHECKS, WRONG, VECTORISED, BUNDLES)


def test_every_check_is_targeted_by_some_misconception_and_marked():
    assert_every_check_targeted(CHECKS, WRONG, {"whole_word_mask_checks"})


@pytest.mark.parametrize("stub", sorted(STUBS))
def test_stub_scores_zero(stub):
    assert_scores_zero(CHECKS, STUBS[stub], stub)


def test_release_scores_zero():
    assert_release_scores_zero("exercises/ex02-whole-word-masking/whole_word_masking.ipynb", "ex02-whole-word-masking")




def message(source: str, check: str) -> str:
    return failure_message(CHECKS, source, check)


def test_why_reports_what_was_observed():
    shares = message(WRONG["unchanged words left without labels"][0], "test_word_treatment_shares")
    assert "0 their own ids" in shares and "no word that shows its own ids carries labels" in shares, shares
    order = message(WRONG["words taken in the order of the row"][0], "test_words_taken_in_random_order")
    assert "first half" in order, order
    pieces = message(WRONG["one random id for all the pieces of a word"][0], "test_random_replacements_are_uniform")
    assert "the first two pieces got the same id" in pieces, pieces
    minimum = message(WRONG["budget without its minimum of 1"][0], "test_budget_per_row")
    assert "rows of 3 tokens" in minimum, minimum


def test_visible_bounds_contain_the_hidden_range():
    """Visible and hidden checks agree (issue 15, section 5): on the visible batch, every correct answer the
    hidden checks accept passes the visible budget, coverage and share tests."""
    import torch
    from check_proofs import assert_contains_hidden_range, visible_bounds, visible_cell

    source = visible_cell("solutions/ex02-whole-word-masking/whole_word_masking.ipynb", "whole_word_mask_checks")
    recipe = ("rows, width = 300, 64", "lengths = torch.randint(1, 4, (20,), generator=g)",
              "ids[r, 1:n + 1] = torch.randint(104, 5000, (n,), generator=g)",
              "budget = (n * 0.15).round().clamp(min=1)")
    assert all(line in source for line in recipe), "the visible batch changed: update this test"
    g = torch.Generator().manual_seed(0)
    sizes = []
    for _ in range(300):
        sizes.append(int(torch.randint(1, 4, (20,), generator=g).sum()))
        torch.randint(104, 5000, (sizes[-1],), generator=g)
    n = torch.tensor(sizes)
    visible_budget = (n * 0.15).round().clamp(min=1)  # as the visible cell computes it (float32)
    hidden_budget = torch.tensor([max(1, round(0.15 * k)) for k in sizes])  # the contract's rule, Python's round
    ties_up = torch.tensor([max(1, int(0.15 * k + 0.5)) for k in sizes])  # round half up is accepted too
    assert bool((visible_budget >= hidden_budget).all() and (visible_budget >= ties_up).all())
    # a correct selection stops only at a word (<= 3 pieces) that does not fit: it covers >= k - 2 tokens,
    # so at least ceil((k - 2) / 3) words
    covered = (hidden_budget - 2).clamp(min=1)
    coverage = float(covered.sum() / visible_budget.sum())
    threshold = float(source.split("budget.sum()) > ")[1].split(",")[0])
    assert coverage > threshold, f"a correct answer may cover only {coverage:.3f} of the budget"
    fewest_words = int(((hidden_budget - 2).clamp(min=1) + 2).div(3, rounding_mode="floor").sum())
    assert_contains_hidden_range(visible_bounds(source, "share"), fewest_words, 0.8)

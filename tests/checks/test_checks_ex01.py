"""Proof of the hidden checks of ex01-masking: every misconception fails its check, and several correct
implementations that draw their random numbers in different orders pass every check."""

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

CHECKS = "autograder/checks/ex01_masking.py"

ANSWERS = 'answer_q1, answer_q2, answer_q3, answer_q4 = "d", "a", "c", "b"\n'

LOSS = '''
import torch
import torch.nn.functional as F

def mlm_loss(logits, labels):
    flat_logits, flat_labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    return F.cross_entropy(flat_logits, flat_labels, ignore_index=-100)
'''

# Correct 1: a uniform draw for selection, another for the 80/10/10 choice, full-shape random ids.
THRESHOLDS = '''
import torch

def mask_tokens(input_ids, special_tokens_mask, *, mask_token_id, vocab_size, special_ids, generator,
                select_prob=0.15, mask_prob=0.8, random_prob=0.1):
    u = torch.rand(input_ids.shape, generator=generator)
    selected = (u < select_prob) & ~special_tokens_mask
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, -100))
    choice = torch.rand(input_ids.shape, generator=generator)
    as_mask = selected & (choice < mask_prob)
    as_random = selected & (choice >= mask_prob) & (choice < mask_prob + random_prob)
    special = torch.zeros(vocab_size, dtype=torch.bool)
    special[[i for i in special_ids if i < vocab_size]] = True
    regular = (~special).nonzero().squeeze(1)
    random_ids = regular[torch.randint(len(regular), input_ids.shape, generator=generator)]
    inputs = input_ids.clone()
    inputs[as_mask] = mask_token_id
    inputs[as_random] = random_ids[as_random]
    return inputs, labels
''' + LOSS + ANSWERS

# Correct 2: transformers-style Bernoulli draws with the conditional 0.1 / 0.2 rate, and rejection of
# special random ids by redrawing.
BERNOULLI = '''
import torch

def mask_tokens(input_ids, special_tokens_mask, *, mask_token_id, vocab_size, special_ids, generator,
                select_prob=0.15, mask_prob=0.8, random_prob=0.1):
    probability = torch.full(input_ids.shape, select_prob).masked_fill(special_tokens_mask, 0.0)
    selected = torch.bernoulli(probability, generator=generator).bool()
    labels = input_ids.clone()
    labels[~selected] = -100
    as_mask = torch.bernoulli(torch.full(input_ids.shape, mask_prob), generator=generator).bool() & selected
    rest = 1.0 - mask_prob
    scaled = random_prob / rest if rest > 0 else 0.0
    as_random = torch.bernoulli(torch.full(input_ids.shape, scaled), generator=generator).bool()
    as_random &= selected & ~as_mask
    specials = torch.tensor(list(special_ids))
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator)
    bad = torch.isin(random_ids, specials)
    while bool(bad.any()):
        random_ids[bad] = torch.randint(vocab_size, (int(bad.sum()),), generator=generator)
        bad = torch.isin(random_ids, specials)
    inputs = torch.where(as_mask, torch.tensor(mask_token_id), input_ids)
    inputs = torch.where(as_random, random_ids, inputs)
    return inputs, labels

import torch.nn.functional as F

def mlm_loss(logits, labels):
    losses = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none")  # 0 where label == -100
    return losses.sum() / (labels != -100).sum()
''' + ANSWERS

# Correct 3: exactly max(1, round(p * n)) positions per row by randperm (a loop over rows), then exact
# 80/10/10 counts over the batch's selected positions by another randperm.
EXACT_COUNTS = '''
import torch

def mask_tokens(input_ids, special_tokens_mask, *, mask_token_id, vocab_size, special_ids, generator,
                select_prob=0.15, mask_prob=0.8, random_prob=0.1):
    inputs = input_ids.clone()
    labels = torch.full_like(input_ids, -100)
    regular = torch.tensor([i for i in range(vocab_size) if i not in set(special_ids)])
    for row in range(input_ids.shape[0]):
        candidates = (~special_tokens_mask[row]).nonzero().squeeze(1)
        k = max(1, round(select_prob * len(candidates))) if len(candidates) else 0
        chosen = candidates[torch.randperm(len(candidates), generator=generator)[:k]]
        labels[row, chosen] = input_ids[row, chosen]
    selected = (labels != -100).flatten().nonzero().squeeze(1)
    order = selected[torch.randperm(len(selected), generator=generator)]
    n_mask, n_random = round(mask_prob * len(order)), round(random_prob * len(order))
    flat = inputs.view(-1)
    flat[order[:n_mask]] = mask_token_id
    draws = torch.randint(len(regular), (n_random,), generator=generator)
    flat[order[n_mask:n_mask + n_random]] = regular[draws]
    return inputs, labels

import torch

def mlm_loss(logits, labels):
    keep = labels != -100
    log_probs = torch.log_softmax(logits[keep], dim=-1)
    return -log_probs.gather(1, labels[keep].unsqueeze(1)).mean()
''' + ANSWERS

# Correct 4: the course's reference (one draw per position, at least one selected per row).
REFERENCE = '''
from bertcourse.masking import mask_tokens as reference, mlm_loss

def mask_tokens(input_ids, special_tokens_mask, *, mask_token_id, vocab_size, special_ids, generator,
                select_prob=0.15, mask_prob=0.8, random_prob=0.1):
    return reference(input_ids, special_tokens_mask, mask_token_id=mask_token_id, vocab_size=vocab_size,
                     special_ids=special_ids, generator=generator, select_prob=select_prob,
                     mask_prob=mask_prob, random_prob=random_prob)
''' + ANSWERS

# Correct 5: a NumPy stream seeded from the torch generator.
NUMPY = '''
import numpy as np
import torch

def mask_tokens(input_ids, special_tokens_mask, *, mask_token_id, vocab_size, special_ids, generator,
                select_prob=0.15, mask_prob=0.8, random_prob=0.1):
    rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=generator)))
    ids = input_ids.numpy()
    selected = (rng.random(ids.shape) < select_prob) & ~special_tokens_mask.numpy()
    action = rng.choice(3, size=ids.shape, p=[mask_prob, random_prob, 1 - mask_prob - random_prob])
    regular = np.setdiff1d(np.arange(vocab_size), np.array(list(special_ids)))
    inputs = ids.copy()
    inputs[selected & (action == 0)] = mask_token_id
    where_random = selected & (action == 1)
    inputs[where_random] = rng.choice(regular, size=int(where_random.sum()))
    labels = np.where(selected, ids, -100)
    return torch.from_numpy(inputs), torch.from_numpy(labels)
''' + LOSS + ANSWERS

CORRECT = {"thresholds": THRESHOLDS, "bernoulli": BERNOULLI, "exact_counts": EXACT_COUNTS,
           "reference": REFERENCE, "numpy": NUMPY}


def mutate(*replacements: tuple[str, str], base: str = THRESHOLDS) -> str:
    source = base
    for old, new in replacements:
        assert old in source, old
        source = source.replace(old, new)
    return source


SHARES = {"test_mask_share", "test_random_share", "test_kept_share"}
MASK_TOKENS_SIDE = {"test_returns_two_integer_tensors", "test_input_tensors_not_modified", "test_new_mask_on_each_call",
                    "test_same_seed_same_mask"}
DRAWS = "regular[torch.randint(len(regular), input_ids.shape, generator=generator)]"

# misconception -> (wrong source, the checks that must fail it[, checks it must still pass: independence])
WRONG = {
    "[MASK] written in as bert-base-uncased's 103": (
        mutate(("inputs[as_mask] = mask_token_id", "inputs[as_mask] = 103")),
        {"test_mask_token_id_and_special_ids_are_arguments"},
        {"test_mask_share", "test_random_replacements_are_never_special"},
    ),
    "bert-base-uncased's special ids written in": (
        mutate(("special[[i for i in special_ids if i < vocab_size]] = True",
                "special[[0, 100, 101, 102, 103]] = True")),
        {"test_mask_token_id_and_special_ids_are_arguments"},
        {"test_random_replacements_are_never_special", "test_random_replacements_are_uniform"},
    ),
    "specials and padding selected": (
        mutate(("selected = (u < select_prob) & ~special_tokens_mask", "selected = u < select_prob")),
        {"test_special_positions_never_selected"},
    ),
    "random ids from the whole vocabulary": (
        mutate((DRAWS, "torch.randint(vocab_size, input_ids.shape, generator=generator)")),
        {"test_random_replacements_are_never_special"},
        {"test_random_replacements_are_uniform", *SHARES},
    ),
    "random ids assume the specials come first": (
        mutate((DRAWS, "torch.randint(len(special_ids), vocab_size, input_ids.shape, generator=generator)")),
        {"test_random_replacements_are_never_special", "test_random_replacements_are_uniform"},  # and ids 1-4 never
    ),
    "random ids drawn from the batch's own tokens": (
        mutate((DRAWS, "input_ids[~special_tokens_mask][torch.randint(int((~special_tokens_mask).sum()), "
                       "input_ids.shape, generator=generator)]")),
        {"test_random_replacements_are_uniform"},
        {"test_random_replacements_are_never_special", *SHARES},
    ),
    "random ids only above the largest special id": (
        mutate((DRAWS, "torch.randint(max(special_ids) + 1, vocab_size, input_ids.shape, generator=generator)")),
        {"test_random_replacements_are_uniform"},
        {"test_random_replacements_are_never_special"},
    ),
    "random ids never the last id (off by one)": (
        mutate(("regular = (~special).nonzero().squeeze(1)", "regular = (~special).nonzero().squeeze(1)[:-1]")),
        {"test_random_replacements_are_uniform"},
        {"test_random_replacements_are_never_special"},
    ),
    "random ids from a fixed vocabulary size": (
        mutate(("special = torch.zeros(vocab_size, dtype=torch.bool)",
                "special = torch.zeros(30522, dtype=torch.bool)")),
        {"test_random_replacements_are_uniform"},
        {"test_random_replacements_are_never_special", *SHARES},
    ),
    "mask_prob ignored (80% [MASK] always)": (
        mutate(("as_mask = selected & (choice < mask_prob)", "as_mask = selected & (choice < 0.8)"),
               ("(choice >= mask_prob) & (choice < mask_prob + random_prob)",
                "(choice >= 0.8) & (choice < 0.8 + random_prob)")),
        {"test_probabilities_are_arguments"},
        {"test_random_replacements_are_never_special", "test_random_replacements_are_uniform", "test_selection_rate",
         *SHARES},
    ),
    "[MASK] wherever no random id is drawn (90/10/0)": (
        mutate(("as_mask = selected & (choice < mask_prob)", "as_mask = selected")),
        {"test_mask_share", "test_kept_share"},
        {"test_selection_rate", "test_random_share"},
    ),
    "100% [MASK]": (
        mutate(("as_mask = selected & (choice < mask_prob)", "as_mask = selected"),
               ("    inputs[as_random] = random_ids[as_random]\n", "")),
        {"test_mask_share", "test_random_share", "test_kept_share"},
        {"test_selection_rate", "test_probabilities_are_arguments"},
    ),
    "unconditional 10% random after [MASK] (2% overall)": (
        mutate(("as_random = selected & (choice >= mask_prob) & (choice < mask_prob + random_prob)",
                "as_random = selected & ~as_mask & (torch.rand(input_ids.shape, generator=generator) < random_prob)")),
        {"test_random_share"},
        {"test_mask_share", "test_selection_rate", "test_probabilities_are_arguments"},
    ),
    "90/5/5 instead of 80/10/10": (
        mutate(("as_mask = selected & (choice < mask_prob)", "as_mask = selected & (choice < 0.9)"),
               ("(choice >= mask_prob) & (choice < mask_prob + random_prob)", "(choice >= 0.9) & (choice < 0.95)")),
        SHARES,
        {"test_selection_rate"},
    ),
    "budget counted over the whole row, padding included": (
        mutate(("selected = (u < select_prob) & ~special_tokens_mask",
                "k = round(select_prob * input_ids.shape[1])\n"
                "    top = u.masked_fill(special_tokens_mask, 2.0).topk(k, dim=1, largest=False).indices\n"
                "    selected = torch.zeros_like(special_tokens_mask).scatter(1, top, True)")),
        {"test_selection_rate"},
        SHARES,
    ),
    "labels on every position": (
        mutate(("labels = torch.where(selected, input_ids, torch.full_like(input_ids, -100))",
                "labels = torch.where(special_tokens_mask, torch.full_like(input_ids, -100), input_ids)")),
        {"test_labels_hold_original_ids_at_selected_positions_only", "test_selection_rate"},
    ),
    "labels hold the input shown instead of the original": (
        mutate(("    return inputs, labels", "    return inputs, torch.where(labels != -100, inputs, labels)")),
        {"test_labels_hold_original_ids_at_selected_positions_only"},
        {"test_selection_rate", *SHARES, *MASK_TOKENS_SIDE},
    ),
    "unselected positions changed too": (
        mutate(("as_mask = selected & (choice < mask_prob)",
                "as_mask = (selected & (choice < mask_prob)) | ((u > 0.999) & ~special_tokens_mask)")),
        {"test_labels_hold_original_ids_at_selected_positions_only"},
        {"test_special_positions_never_selected", *MASK_TOKENS_SIDE},
    ),
    "labels only where the input changed": (
        mutate(("    return inputs, labels",
                "    labels = torch.where(inputs != input_ids, input_ids, torch.full_like(input_ids, -100))\n"
                "    return inputs, labels")),
        {"test_kept_share"},
        {"test_selection_rate", "test_mask_share", "test_random_share", "test_probabilities_are_arguments"},
    ),
    "the same mask on every call": (
        mutate(("    u = torch.rand(", "    generator = torch.Generator().manual_seed(0)\n    u = torch.rand(")),
        {"test_new_mask_on_each_call"},
        {"test_same_seed_same_mask", "test_selection_rate"},
    ),
    "the global random stream instead of the generator": (
        mutate(("generator=generator", "generator=None")),
        {"test_same_seed_same_mask"},
        {"test_new_mask_on_each_call", "test_selection_rate", *SHARES},
    ),
    "input modified in place": (
        mutate(("inputs = input_ids.clone()", "inputs = input_ids")),
        {"test_input_tensors_not_modified"},
    ),
    "probabilities hard-coded": (
        mutate(("    u = torch.rand(",
                "    select_prob, mask_prob, random_prob = 0.15, 0.8, 0.1\n    u = torch.rand(")),
        {"test_probabilities_are_arguments"},
        {"test_selection_rate", "test_random_replacements_are_never_special", "test_random_replacements_are_uniform",
         *SHARES},
    ),
    "labels returned as floats": (
        mutate(("    return inputs, labels", "    return inputs, labels.float()")),
        {"test_returns_two_integer_tensors"},
        {"test_labels_hold_original_ids_at_selected_positions_only", *SHARES},
    ),
    "loss averaged over all positions": (
        mutate(("    return F.cross_entropy(flat_logits, flat_labels, ignore_index=-100)",
                "    per_position = F.cross_entropy(flat_logits, flat_labels, ignore_index=-100, reduction='none')\n"
                "    return per_position.sum() / labels.numel()")),
        {"test_loss_is_mean_over_selected_positions", "test_loss_weights_every_selected_position_equally"},
        {"test_loss_is_a_0dim_tensor"},
    ),
    "loss over every position's original token": (
        mutate(("flat_labels, ignore_index=-100)", "flat_labels.clamp(min=0))")),
        {"test_loss_is_mean_over_selected_positions", "test_loss_weights_every_selected_position_equally"},
        {"test_loss_is_a_0dim_tensor"},
    ),
    "loss averaged per sequence, then over sequences": (
        mutate(("    return F.cross_entropy(flat_logits, flat_labels, ignore_index=-100)",
                "    rows = [F.cross_entropy(x, y, ignore_index=-100)\n"
                "            for x, y in zip(logits, labels, strict=True) if (y != -100).any()]\n"
                "    return torch.stack(rows).mean()")),
        {"test_loss_weights_every_selected_position_equally"},
        {"test_loss_is_a_0dim_tensor"},
    ),
    "loss returned as a Python float": (
        mutate(("    return F.cross_entropy(flat_logits, flat_labels, ignore_index=-100)",
                "    return F.cross_entropy(flat_logits, flat_labels, ignore_index=-100).item()")),
        {"test_loss_is_a_0dim_tensor"},
        {"test_loss_is_mean_over_selected_positions", "test_loss_weights_every_selected_position_equally"},
    ),
    "loss returned as a 1-element tensor": (
        mutate(("    return F.cross_entropy(flat_logits, flat_labels, ignore_index=-100)",
                "    return F.cross_entropy(flat_logits, flat_labels, ignore_index=-100).reshape(1)")),
        {"test_loss_is_a_0dim_tensor"},
        {"test_loss_is_mean_over_selected_positions", "test_loss_weights_every_selected_position_equally"},
    ),
    "loss detached from the logits": (
        mutate(("    return F.cross_entropy(flat_logits, flat_labels, ignore_index=-100)",
                "    return F.cross_entropy(flat_logits, flat_labels, ignore_index=-100).detach()")),
        {"test_loss_is_a_0dim_tensor"},
        {"test_loss_is_mean_over_selected_positions", "test_loss_weights_every_selected_position_equally"},
    ),
    "loss rebuilt from its value": (
        mutate(("    return F.cross_entropy(flat_logits, flat_labels, ignore_index=-100)",
                "    return torch.tensor(F.cross_entropy(flat_logits, flat_labels, ignore_index=-100).item())")),
        {"test_loss_is_a_0dim_tensor"},
        {"test_loss_is_mean_over_selected_positions", "test_loss_weights_every_selected_position_equally"},
    ),
    "concept answers wrong": (
        mutate((ANSWERS, 'answer_q1, answer_q2, answer_q3, answer_q4 = "a", "b", "b", "a"\n')),
        {"test_q1_labels_of_unselected_positions", "test_q2_random_and_unchanged", "test_q3_a_higher_selection_rate",
         "test_q4_dynamic_masking"},
    ),
    "nothing implemented": (
        "def mask_tokens(*args, **kwargs):\n    raise NotImplementedError\n"
        "def mlm_loss(*args, **kwargs):\n    raise NotImplementedError\n",
        set(checks_of(CHECKS)) - {"test_q1_labels_of_unselected_positions", "test_q2_random_and_unchanged",
                                  "test_q3_a_higher_selection_rate", "test_q4_dynamic_masking"},
    ),
}

# Notebooks that do not do the work: each must score exactly 0 (issue 15: a stub earns nothing).
STUBS = {
    "regions return their input": {
        "mask_tokens": "def mask_tokens(input_ids, special_tokens_mask, **kwargs):\n    return input_ids\n",
        "mlm_loss": "def mlm_loss(logits, labels):\n    return logits\n",
        "concepts": 'answer_q1 = answer_q2 = answer_q3 = answer_q4 = ""\n',
    },
    "regions raise NotImplementedError": {
        "mask_tokens": "def mask_tokens(*args, **kwargs):\n    raise NotImplementedError()\n",
        "mlm_loss": "def mlm_loss(*args, **kwargs):\n    raise NotImplementedError()\n",
        "concepts": "raise NotImplementedError()\n",
    },
    "well-formed results that select nothing": {
        "mask_tokens": "import torch\n\ndef mask_tokens(input_ids, special_tokens_mask, **kwargs):\n"
                       "    return input_ids.clone(), torch.full_like(input_ids, -100)\n",
        "mlm_loss": "import torch\n\ndef mlm_loss(logits, labels):\n    return torch.tensor(0.0)\n",
        "concepts": 'answer_q1 = answer_q2 = answer_q3 = answer_q4 = "e"\n',
    },
    "inputs returned as labels too": {
        "mask_tokens": "def mask_tokens(input_ids, special_tokens_mask, **kwargs):\n"
                       "    return input_ids.clone(), input_ids.clone()\n",
        "mlm_loss": "def mlm_loss(logits, labels):\n    return logits.sum()\n",
        "concepts": "",
    },
}


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_implementation_passes_every_check(name):
    assert_passes_every_check(CHECKS, CORRECT[name], name)


BUNDLES = bundle_misconceptions(CHECKS, WRONG, THRESHOLDS)


@pytest.mark.parametrize("bundle", BUNDLES, ids=bundle_ids(BUNDLES))
def test_misconception_fails_its_check(bundle):
    """Misconceptions that cannot move each other's checks, graded in one notebook (check_proofs.py)."""
    assert_bundle_caught(CHECKS, WRONG, THRESHOLDS, bundle)


def test_bundled_misconceptions_cannot_move_each_others_checks():
    assert_bundles_sound(CHECKS, WRONG, THRESHOLDS, BUNDLES)


def test_every_check_is_targeted_by_some_misconception_and_marked():
    assert_every_check_targeted(CHECKS, WRONG, {"mask_tokens_checks", "mlm_loss_checks", "concepts_checks"})


@pytest.mark.parametrize("stub", sorted(STUBS))
def test_stub_scores_zero(stub):
    assert_scores_zero(CHECKS, STUBS[stub], stub)


def test_release_scores_zero():
    assert_release_scores_zero("exercises/ex01-masking/masking.ipynb", "ex01-masking")




def message(source: str, check: str) -> str:
    return failure_message(CHECKS, source, check)


def test_why_reports_every_count_and_the_observed_cause():
    """The reason shown names what was observed, in full (no count cut off), and not a guess."""
    kept = message(WRONG["labels only where the input changed"][0], "test_kept_share")
    assert "0 their own id" in kept and "no position that shows its own id carries a label" in kept, kept
    full = message(WRONG["100% [MASK]"][0], "test_kept_share")
    assert all(word in full for word in ("selected", "[MASK]", "random id", "their own id")), full
    assert "..." not in full, full
    ignored = message(WRONG["mask_prob ignored (80% [MASK] always)"][0], "test_probabilities_are_arguments")
    assert "mask_prob" in ignored and "select_prob" not in ignored.split("follow")[1], ignored
    uniform = message(WRONG["random ids drawn from the batch's own tokens"][0], "test_random_replacements_are_uniform")
    assert "never come up" in uniform, uniform
    stub = message(STUBS["well-formed results that select nothing"], "test_input_tensors_not_modified")
    assert "no position was selected" in stub, stub


def test_visible_bounds_contain_the_hidden_range():
    """Visible and hidden checks agree: the visible rate bounds accept every rate the hidden checks accept
    at the visible batch's size, so a correct answer never fails a visible test (issue 15, section 5)."""
    from check_proofs import assert_contains_hidden_range, visible_bounds, visible_cell
    from check_proofs import common as shared

    common = shared()
    source = visible_cell("solutions/ex01-masking/masking.ipynb", "mask_tokens_checks")
    # the visible batch: 256 rows, [CLS] at 0, 29 tokens, [SEP] at 30, then padding
    assert "(256, 40)" in source and "ids[:, 30], ids[:, 31:] = CLS, SEP, PAD" in source, "update this test"
    eligible = 256 * 29
    assert_contains_hidden_range(visible_bounds(source, "rate"), eligible, 0.15)
    fewest_selected, _ = common.binomial_range(eligible, 0.15, common.TAIL)
    assert_contains_hidden_range(visible_bounds(source, "masked"), fewest_selected, 0.8)
    assert_contains_hidden_range(visible_bounds(source, "random"), fewest_selected, 0.1, slack=common.SLACK)

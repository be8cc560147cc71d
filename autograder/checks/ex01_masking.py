"""Hidden checks of ex01-masking: the student's `mask_tokens`, `mlm_loss` and four concept answers.

Every check is a property that holds for EVERY correct implementation, whatever the order of its random
draws (threshold on torch.rand, torch.bernoulli, exact counts with randperm, at-least-one-per-row...):
- exact properties (specials untouched, labels = original ids, no special random ids) on every position;
- rates tested against exact binomial acceptance ranges whose tails are < 1e-8 each (`_common`), so that
  a correct implementation fails with probability < 1e-6 over all checks together, with fixed seeds (the
  grading is deterministic). The batches are large enough that each targeted mistake lands far outside.
Each check is built so that other mistakes do not trip it (see autograder/README.md for the table of
stated properties and their checks), its message reports what was observed, and a side condition (types,
inputs untouched, seeds) is credited only for a function that masks at all.
"""

from __future__ import annotations

import pytest
import torch
from _common import (
    CLS,
    DEFAULTS,
    IGNORE,
    MASK,
    PAD,
    SEP,
    SMALL_VOCAB,
    UNK,
    VOCAB,
    assert_inputs_not_modified,
    assert_mask_and_special_ids_are_arguments,
    assert_masking,
    assert_no_special_replacements,
    assert_specials_untouched,
    assert_two_int64_tensors,
    assert_uniform_replacements,
    call_masking,
    call_with_own_defaults,
    concept_answer,
    kept_share_ok,
    kept_unlabelled,
    mask_share_ok,
    percent,
    random_share_ok,
    rate_ok,
    unpack,
)

from bertcourse.grading import NotData

# ----------------------------------------------------------------------------- helpers


def make_batch(rows: int, seed: int, vocab: int = VOCAB) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] w ... w [SEP] [PAD] ... rows of 100-128 tokens, and the special-tokens mask (bool). The text
    ids are drawn from range(MASK + 1, vocab): with SMALL_VOCAB only 16 ids, all of them allowed ones."""
    g = torch.Generator().manual_seed(seed)
    length = 128
    ids = torch.randint(MASK + 1, vocab, (rows, length), generator=g)
    ids[torch.rand(rows, length, generator=g) < 0.01] = UNK  # a few [UNK]s inside the text, marked special
    lengths = torch.randint(100, length + 1, (rows,), generator=g)
    ids[torch.arange(length) >= lengths[:, None]] = PAD
    ids[:, 0] = CLS
    ids[torch.arange(rows), lengths - 1] = SEP
    special = (ids == PAD) | (ids == CLS) | (ids == SEP) | (ids == UNK)
    return ids, special


def call_mask_tokens(student, ids, special, **options):
    """(inputs, labels) of the student's mask_tokens (options: seed, generator, vocab_size, probabilities)."""
    return call_masking(student, "mask_tokens", ids, special, **options)


def outcome(ids, special, inputs, labels) -> dict[str, int]:
    """Counts over the non-special positions: eligible, selected (labelled), [MASK], random, kept (labelled
    and unchanged), changed (shown otherwise than the original), and changed without a label."""
    eligible = ~special
    selected = eligible & (labels != IGNORE)
    changed = eligible & (inputs != ids)
    flags = dict(eligible=eligible, selected=selected, masked=selected & (inputs == MASK),
                 random=selected & changed & (inputs != MASK), kept=selected & ~changed, changed=changed,
                 unlabelled_changes=changed & ~selected)
    return {name: int(t.sum()) for name, t in flags.items()}


def shown(c: dict[str, int]) -> str:
    """Every count the share checks look at, in words."""
    return (f"{c['selected']} of {c['eligible']} non-special positions selected "
            f"({percent(c['selected'], c['eligible'])});"
            f" of those, {c['masked']} show [MASK] ({percent(c['masked'], c['selected'])}),"
            f" {c['random']} a random id ({percent(c['random'], c['selected'])}),"
            f" {c['kept']} their own id ({percent(c['kept'], c['selected'])})")


def selection_ok(c: dict[str, int], probs: dict[str, float]) -> bool:
    # selected = labelled or changed, so that labels missing at kept positions do not move it
    return rate_ok(c["selected"] + c["unlabelled_changes"], c["eligible"], probs["select_prob"])


# ----------------------------------------------------------------------------- mask_tokens


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="mask_tokens must return (inputs, labels): two int64 tensors shaped like input_ids")
def test_returns_two_integer_tensors(student):
    ids, special = make_batch(8, seed=1)
    result = call_with_own_defaults(student, "mask_tokens", ids, special, seed=1)
    assert_masking(ids, ~special, *unpack(result, "mask_tokens", ids.shape))
    assert_two_int64_tensors(result)


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="mask_tokens must not change the tensors it is given: the masked batch is a new tensor; "
                            "credited once it masks")
def test_input_tensors_not_modified(student):
    ids, special = make_batch(64, seed=2)
    assert_inputs_not_modified(student, "mask_tokens", ids, special, ~special, "special_tokens_mask")


@pytest.mark.check(cell="mask_tokens_checks", points=2.0,
                   feedback="[CLS], [SEP], [UNK] and padding (the special-tokens mask) must never be selected or "
                            "changed")
def test_special_positions_never_selected(student):
    ids, special = make_batch(256, seed=3)
    inputs, labels = call_mask_tokens(student, ids, special, seed=3)
    assert_specials_untouched(ids, special, inputs, labels, "special positions")


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="labels mark the selected positions: the original id at each one (whatever it shows), "
                            "-100 at every other position, and a position labelled -100 shows its original id")
def test_labels_hold_original_ids_at_selected_positions_only(student):
    ids, special = make_batch(256, seed=4)
    inputs, labels = call_mask_tokens(student, ids, special, seed=4)
    c = outcome(ids, special, inputs, labels)
    labelled = (labels != IGNORE) & ~special
    assert c["selected"] > 0, "no position was selected at all"
    wrong = int((labels[labelled] != ids[labelled]).sum())
    assert wrong == 0, f"{wrong} of {c['selected']} labels differ from the original id (e.g. hold what is shown)"
    assert c["unlabelled_changes"] == 0, f"{c['unlabelled_changes']} changed positions have label -100"
    # of the positions shown unchanged, only the ~10% 'kept' share of the selected ones may carry a label,
    # i.e. ~0.015 / 0.865 = 1.7%; labelling everything gives 100%
    unchanged = c["eligible"] - c["changed"]
    assert c["kept"] <= 0.05 * unchanged, (
        f"{c['kept']} of the {unchanged} unchanged non-special positions carry a label "
        f"({percent(c['kept'], unchanged)})")


@pytest.mark.check(cell="mask_tokens_checks", points=2.0,
                   feedback="about select_prob of the non-special positions should be selected for prediction")
def test_selection_rate(student):
    # every selected position shows [MASK]: the rate does not depend on how the 80/10/10 split is labelled
    probs = {**DEFAULTS, "mask_prob": 1.0, "random_prob": 0.0}
    ids, special = make_batch(512, seed=5)
    c = outcome(ids, special, *call_mask_tokens(student, ids, special, seed=5, **probs))
    selected = c["selected"] + c["unlabelled_changes"]
    assert selection_ok(c, probs), (
        f"{selected} of {c['eligible']} non-special positions were selected ({percent(selected, c['eligible'])}) "
        f"with select_prob={probs['select_prob']}")


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="about mask_prob (80%) of the selected positions should show [MASK], not all of them")
def test_mask_share(student):
    ids, special = make_batch(512, seed=6)
    c = outcome(ids, special, *call_mask_tokens(student, ids, special, seed=6))
    right = rate_ok(c["masked"], c["selected"], DEFAULTS["mask_prob"])
    if not right and kept_unlabelled(c, DEFAULTS):
        # no kept position: either they lost their labels (the kept-share check's failure) or there are
        # none; 80:10 and 90:10 are close, so confirm at probabilities where [MASK] : random is 5 : 3
        probs = {**DEFAULTS, "mask_prob": 0.5, "random_prob": 0.3}
        again = outcome(ids, special, *call_mask_tokens(student, ids, special, seed=16, **probs))
        right = kept_unlabelled(again, probs)
    assert right, shown(c)


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="about random_prob (10%) of ALL selected positions should get a random token; "
                            "mind the conditional probability once [MASK] is decided")
def test_random_share(student):
    ids, special = make_batch(512, seed=7)
    c = outcome(ids, special, *call_mask_tokens(student, ids, special, seed=7))
    assert random_share_ok(c, DEFAULTS), shown(c)


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="the rest of the selected positions (1 - mask_prob - random_prob, 10%) keep their "
                            "original id, and they still carry their label")
def test_kept_share(student):
    ids, special = make_batch(512, seed=8)
    c = outcome(ids, special, *call_mask_tokens(student, ids, special, seed=8))
    note = "; no position that shows its own id carries a label" if c["kept"] == 0 else ""
    assert kept_share_ok(c, DEFAULTS), shown(c) + note


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="random replacements (random_prob of the selected positions) must never be special "
                            "tokens (special_ids need not be contiguous ids)")
def test_random_replacements_are_never_special(student):
    # the default probabilities (so that a mistake with them does not matter) and a small vocabulary, so that
    # a draw over all ids (or over ids from len(special_ids) on) hits [PAD], [UNK], [CLS] or [SEP] often
    ids, special = make_batch(1024, seed=9, vocab=SMALL_VOCAB)
    inputs, _ = call_mask_tokens(student, ids, special, seed=9, vocab_size=SMALL_VOCAB)
    assert_no_special_replacements(ids, ~special, inputs)


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="random replacements must be drawn uniformly from every id in range(vocab_size) that "
                            "is not special, not from the tokens of the batch or a part of the id range")
def test_random_replacements_are_uniform(student):
    # SMALL_VOCAB: 115 allowed ids, while the text uses only 16 of them. Given that a position shows a random
    # id other than its original (an allowed id), that id is uniform over the 114 other allowed ids, for
    # every correct implementation: each id's count is Binomial(positions whose original differs, 1/114).
    ids, special = make_batch(256, seed=14, vocab=SMALL_VOCAB)
    inputs, _ = call_mask_tokens(student, ids, special, seed=14, vocab_size=SMALL_VOCAB,
                                 select_prob=0.5, mask_prob=0.0, random_prob=1.0)
    assert_uniform_replacements(ids, ~special, inputs, SMALL_VOCAB)


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="use the select_prob, mask_prob and random_prob arguments instead of fixed numbers")
def test_probabilities_are_arguments(student):
    # a rate right at the default probabilities must follow the arguments; a rate wrong already at the
    # defaults is the failure of its own check, not a sign of fixed numbers
    other = {"select_prob": 0.4, "mask_prob": 0.5, "random_prob": 0.3}
    ids, special = make_batch(512, seed=11)
    inputs, labels = call_mask_tokens(student, ids, special, seed=11)
    assert_masking(ids, ~special, inputs, labels)
    at_default = outcome(ids, special, inputs, labels)
    at_other = outcome(ids, special, *call_mask_tokens(student, ids, special, seed=12, **other))
    ignored = [name for name, ok in (("select_prob", selection_ok), ("mask_prob", mask_share_ok),
                                     ("random_prob", random_share_ok))
               if ok(at_default, DEFAULTS) and not ok(at_other, other)]
    assert not ignored, (
        f"with {', '.join(f'{k}={v}' for k, v in other.items())}, the shares do not follow "
        f"{' and '.join(ignored)}: {shown(at_other)}")


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="every call must draw a new mask from the generator it is given (dynamic masking); "
                            "credited once it masks")
def test_new_mask_on_each_call(student):
    ids, special = make_batch(64, seed=12)
    generator = student.generator(12)
    inputs, first = call_mask_tokens(student, ids, special, generator=generator)
    assert_masking(ids, ~special, inputs, first)
    _, second = call_mask_tokens(student, ids, special, generator=generator)
    assert not torch.equal(first != IGNORE, second != IGNORE), (
        "two calls with one generator selected the same positions")


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="take every random draw from the `generator` argument, so that a seed reproduces "
                            "the masking; credited once it masks")
def test_same_seed_same_mask(student):
    ids, special = make_batch(64, seed=13)
    first = call_mask_tokens(student, ids, special, seed=13)
    assert_masking(ids, ~special, *first)
    second = call_mask_tokens(student, ids, special, seed=13)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1]), (
        "two generators with the same seed gave different results")


# ----------------------------------------------------------------------------- mlm_loss


def loss_case(seed: int):
    """Logits that are confident and right at unselected positions and wrong at selected ones, with
    rows holding very different numbers of selected positions: every wrong averaging is far off."""
    g = torch.Generator().manual_seed(seed)
    rows, length, vocab = 6, 20, 50
    targets = torch.randint(0, vocab, (rows, length), generator=g)
    logits = torch.randn(rows, length, vocab, generator=g)
    logits.scatter_(2, targets.unsqueeze(2), 8.0)  # easy at every position
    labels = torch.full((rows, length), IGNORE)
    counts = [1, 2, 3, 6, 12, 0]
    for row, count in enumerate(counts):
        positions = torch.randperm(length, generator=g)[:count]
        wrong = (targets[row, positions] + 1 + torch.randint(0, vocab - 1, (count,), generator=g)) % vocab
        labels[row, positions] = wrong  # the logits favour another id: a high loss there
    log_probs = logits.log_softmax(-1)
    picked = labels != IGNORE
    expected = -log_probs[picked].gather(1, labels[picked].unsqueeze(1)).mean()
    return logits, labels, expected


def call_loss(student, logits, labels) -> float:
    """The loss as a number (a 0-dim tensor or a float are both read here; the type has its own check)."""
    value = student.call("mlm_loss", logits, labels)
    if isinstance(value, torch.Tensor):
        assert value.numel() == 1, f"mlm_loss returned a tensor of shape {tuple(value.shape)}, not a single number"
        value = float(value.reshape(()))
    assert isinstance(value, (int, float)), f"mlm_loss returned a {type(value).__name__}, not a number"
    return float(value)


@pytest.mark.check(cell="mlm_loss_checks", points=1.0,
                   feedback="the MLM loss is the mean cross-entropy over the selected positions only "
                            "(labels != -100), not over all positions")
def test_loss_is_mean_over_selected_positions(student):
    for seed in (21, 22):
        logits, labels, expected = loss_case(seed)
        value = call_loss(student, logits, labels)
        assert value == pytest.approx(float(expected), rel=1e-4), (
            f"the loss of a batch with {int((labels != IGNORE).sum())} selected of {labels.numel()} positions is "
            f"{value:.4f}, not the mean over the selected ones")


@pytest.mark.check(cell="mlm_loss_checks", points=1.0,
                   feedback="average over all selected positions of the batch together, not per sequence "
                            "first (and a sequence without selected positions adds nothing)")
def test_loss_weights_every_selected_position_equally(student):
    logits, labels, expected = loss_case(23)
    per_row = [labels[r] != IGNORE for r in range(labels.shape[0])]
    assert any(m.sum() == 0 for m in per_row)
    counts = [int(m.sum()) for m in per_row]
    assert call_loss(student, logits, labels) == pytest.approx(float(expected), rel=1e-4), (
        f"with {counts} selected positions per row, the loss is not the mean over all selected positions")
    # and only the selected positions' logits matter
    other = logits.clone()
    other[labels == IGNORE] = torch.randn_like(other[labels == IGNORE]) * 5
    assert call_loss(student, other, labels) == pytest.approx(float(expected), rel=1e-4), (
        "the loss changes when only the logits of unselected positions change")


@pytest.mark.check(cell="mlm_loss_checks", points=1.0,
                   feedback="mlm_loss must return a 0-dim float tensor that is still connected to the logits "
                            "(not a Python float, a 1-element tensor or a detached copy), so that training can "
                            "backpropagate through it; credited once it is a loss")
def test_loss_is_a_0dim_tensor(student):
    logits, labels, _ = loss_case(24)
    value = student.call("mlm_loss", logits, labels)
    # credited only for a cross-entropy at all, however averaged: it moves with the logits of the selected
    # positions, and it does not move when a constant is added to all the logits of a position
    harder = logits.clone()
    harder[labels != IGNORE] *= 2.0
    shifted = logits + torch.linspace(1.0, 4.0, logits.shape[1]).view(1, -1, 1)
    numbers = [call_loss(student, x, labels) for x in (logits, harder, shifted)]
    assert all(torch.isfinite(torch.tensor(numbers))) and numbers[0] != numbers[1], (
        f"not credited until mlm_loss computes a loss: it returned {numbers[0]:.4g} and {numbers[1]:.4g} for "
        "different logits at the selected positions")
    assert numbers[2] == pytest.approx(numbers[0], rel=1e-4, abs=1e-5), (
        "not credited until mlm_loss computes a cross-entropy: adding a constant to all the logits of a "
        f"position changed it from {numbers[0]:.4g} to {numbers[2]:.4g}")
    assert isinstance(value, torch.Tensor), f"mlm_loss returned a {type(value).__name__}"
    assert value.dim() == 0 and value.is_floating_point(), (
        f"mlm_loss returned a {value.dtype} tensor of shape {tuple(value.shape)}")
    try:
        grads = student.backward(student.ref("mlm_loss"), "__call__", logits, labels,
                                 grad_outputs=torch.tensor(1.0))["input_grads"]
    except NotData as exc:
        raise AssertionError(f"no gradient flows from the loss back to the logits: {exc}") from None
    gradient = grads[0]
    assert gradient is not None and bool(torch.isfinite(gradient).all()), (
        "backpropagating the loss gives the logits no finite gradient")
    assert bool((gradient[labels != IGNORE] != 0).any()), (
        "backpropagating the loss gives the logits of the selected positions no gradient")


# ----------------------------------------------------------------------------- concept questions



@pytest.mark.check(cell="concepts_checks", points=0.5,
                   feedback="Q1: ask which label value the cross-entropy leaves out, and what any other label asks "
                            "the model to predict")
def test_q1_labels_of_unselected_positions(student):
    assert concept_answer(student, "answer_q1") == "d"


@pytest.mark.check(cell="concepts_checks", points=0.5,
                   feedback="Q2: revisit what the random and unchanged 10% shares are for")
def test_q2_random_and_unchanged(student):
    assert concept_answer(student, "answer_q2") == "a"


@pytest.mark.check(cell="concepts_checks", points=0.5,
                   feedback="Q3: ask what a higher selection rate adds to a step, and what it takes away from the "
                            "context of each prediction")
def test_q3_a_higher_selection_rate(student):
    assert concept_answer(student, "answer_q3") == "c"


@pytest.mark.check(cell="concepts_checks", points=0.5,
                   feedback="Q4: count, over the passes, how often a token is a target and with which blanks "
                            "around it, under each scheme (lesson 1, section 5)")
def test_q4_dynamic_masking(student):
    assert concept_answer(student, "answer_q4") == "b"


@pytest.mark.check(cell="mask_tokens_checks", points=1.0,
                   feedback="use the mask_token_id and special_ids arguments, not bert-base-uncased's ids: another "
                            "tokenizer has another [MASK] and other specials; credited once it masks")
def test_mask_token_id_and_special_ids_are_arguments(student):
    ids, special = make_batch(256, seed=17, vocab=SMALL_VOCAB)
    assert_mask_and_special_ids_are_arguments(student, "mask_tokens", ids, special, ~special)

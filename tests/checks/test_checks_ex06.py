"""Proof of the hidden checks of ex06-pretraining-tasks: every classic mistake fails the checks aimed at it
(and, where listed, still passes the other checks of its part), three different correct implementations
(the solution; rejection sampling, vectorised coins, tensors, transformers-style segmentation and
Gumbel-max sampling; size-weighted documents, torch.bernoulli, sampling cut points with multinomial, a
runs-based corruption) pass every check whatever the order of their random draws, stubs and the release
score 0, and each cell's points are the sum of its checks'."""

from __future__ import annotations

import pytest
from check_proofs import (
    assert_bundle_caught,
    assert_bundles_sound,
    assert_contains_hidden_range,
    assert_every_check_targeted,
    assert_passes_every_check,
    assert_points_add_up,
    assert_release_scores_zero,
    assert_scores_zero,
    assert_solution_passes_every_check,
    bundle_ids,
    bundle_misconceptions,
    graded_cells,
    reference_source,
    stubbed,
    visible_bounds,
    visible_cell,
    wrong_entry,
)

pytestmark = pytest.mark.slow  # every proof grades a notebook with the real engine

CHECKS = "autograder/checks/ex06_pretraining_tasks.py"
NOTEBOOK = "solutions/ex06-pretraining-tasks/pretraining_tasks.ipynb"
RELEASE = "exercises/ex06-pretraining-tasks/pretraining_tasks.ipynb"

PRELUDE = """
import math

import torch
"""



def solution_source() -> str:
    """The solution notebook's own solution cells, after the imports of its set-up cell."""
    return reference_source(NOTEBOOK, PRELUDE)


# ----------------------------------------------------------------------------- other correct implementations

REJECTION = '''
def nsp_pairs(documents, generator, random_prob=0.5):
    # every coin first, pairs built from the last document backwards, the random sentence by rejection
    firsts = [(d, i) for d, doc in enumerate(documents) for i in range(len(doc) - 1)]
    coins = torch.bernoulli(torch.full((len(firsts),), float(random_prob)), generator=generator).bool().tolist()
    flat = [(d, s) for d, doc in enumerate(documents) for s in doc]
    pairs = []
    for (d, i), replace in zip(reversed(firsts), reversed(coins)):
        if replace:
            while True:
                e, s = flat[int(torch.randint(len(flat), (1,), generator=generator))]
                if e != d:
                    break
            pairs.append((documents[d][i], s, 1))
        else:
            pairs.append((documents[d][i], documents[d][i + 1], 0))
    return pairs


def sop_pairs(documents, generator, swap_prob=0.5):
    consecutive = [(a, b) for doc in documents for a, b in zip(doc, doc[1:])]
    swaps = (torch.rand(len(consecutive), generator=generator) < swap_prob).tolist()
    return [(b, a, 1) if swap else (a, b, 0) for (a, b), swap in zip(consecutive, swaps)]


def pair_inputs(ids_a, ids_b, *, cls_id, sep_id, max_len):
    la, lb = len(ids_a), len(ids_b)
    while la + lb > max_len - 3:  # a tie shortens the first segment
        if la >= lb:
            la -= 1
        else:
            lb -= 1
    ids = torch.tensor([cls_id, *ids_a[:la], sep_id, *ids_b[:lb], sep_id])
    return ids, torch.tensor([0] * (la + 2) + [1] * (lb + 1))


def random_spans_noise_mask(length, noise_density, mean_noise_span_length, generator):
    # transformers' run_t5_mlm_flax.py, in torch: shuffled segment starts, kept spans drawn first
    num_noise = min(max(int(math.floor(length * noise_density + 0.5)), 1), length - 1)
    num_spans = max(int(math.floor(num_noise / mean_noise_span_length + 0.5)), 1)

    def segment_lengths(items):
        starts = torch.zeros(items - 1, dtype=torch.long)
        starts[torch.randperm(items - 1, generator=generator)[: num_spans - 1]] = 1
        segment = torch.cat([torch.zeros(1, dtype=torch.long), starts]).cumsum(0)
        return torch.bincount(segment, minlength=num_spans)

    kept = segment_lengths(length - num_noise)
    noise = segment_lengths(num_noise)
    interleaved = torch.stack([kept, noise], dim=1).reshape(-1)
    return torch.repeat_interleave(torch.arange(2 * num_spans) % 2 == 1, interleaved)


def t5_span_corrupt(tokens, noise_mask, sentinel_ids):
    runs, start = [], None
    for i, noisy in enumerate(list(noise_mask) + [False]):
        if noisy and start is None:
            start = i
        elif not noisy and start is not None:
            runs.append((start, i))
            start = None
    inputs, targets, previous = [], [], 0
    for k, (begin, end) in enumerate(runs):
        inputs += list(tokens[previous:begin]) + [sentinel_ids[k]]
        targets += [sentinel_ids[k]] + list(tokens[begin:end])
        previous = end
    return inputs + list(tokens[previous:]), targets + [sentinel_ids[len(runs)]]


def electra_inputs(input_ids, attention_mask, masked, logits, generator):
    # Gumbel-max: argmax(logits + Gumbel noise) is a sample from softmax(logits)
    u = torch.rand(logits.shape, generator=generator).clamp_min(1e-12)
    sampled = (logits - torch.log(-torch.log(u))).argmax(dim=-1)
    corrupted = input_ids.masked_scatter(masked, sampled)
    labels = torch.where(corrupted == input_ids, 0, 1)
    return corrupted, torch.where(attention_mask.bool(), labels, torch.full_like(labels, -100))
'''

WEIGHTED = '''
def nsp_pairs(documents, generator, random_prob=0.5):
    # a candidate drawn for every pair (document by size, then a sentence), the coin afterwards
    sizes = torch.tensor([float(len(doc)) for doc in documents])
    pairs = []
    for d, doc in enumerate(documents):
        weights = sizes.clone()
        weights[d] = 0.0
        for i in range(len(doc) - 1):
            e = int(torch.multinomial(weights, 1, generator=generator))
            s = int(torch.randint(len(documents[e]), (1,), generator=generator))
            replace = bool(torch.bernoulli(torch.tensor(float(random_prob)), generator=generator))
            pairs.append((doc[i], documents[e][s], 1) if replace else (doc[i], doc[i + 1], 0))
    return pairs


def sop_pairs(documents, generator, swap_prob=0.5):
    pairs = []
    for doc in documents:
        for i in range(1, len(doc)):
            swap = torch.bernoulli(torch.tensor(float(swap_prob)), generator=generator).item() == 1.0
            pairs.append((doc[i], doc[i - 1], 1) if swap else (doc[i - 1], doc[i], 0))
    return pairs


def pair_inputs(ids_a, ids_b, *, cls_id, sep_id, max_len):
    a, b = list(ids_a), list(ids_b)
    while len(a) + len(b) + 3 > max_len:
        longer = b if len(b) >= len(a) else a
        del longer[-1]
    types = [0] * (1 + len(a) + 1) + [1] * (len(b) + 1)
    return [cls_id, *a, sep_id, *b, sep_id], types


def random_spans_noise_mask(length, noise_density, mean_noise_span_length, generator):
    num_noise = min(max(round(length * noise_density), 1), length - 1)
    num_spans = max(round(num_noise / mean_noise_span_length), 1)

    def split(items):  # cut points: a sample without replacement of the items - 1 gaps
        if num_spans == 1:
            return [items]
        cuts = sorted((torch.multinomial(torch.ones(items - 1), num_spans - 1, generator=generator) + 1).tolist())
        return [b - a for a, b in zip([0] + cuts, cuts + [items])]

    noise = split(num_noise)
    kept = split(length - num_noise)
    mask = torch.zeros(length, dtype=torch.bool)
    position = 0
    for k in range(num_spans):
        position += kept[k]
        mask[position : position + noise[k]] = True
        position += noise[k]
    return mask


def t5_span_corrupt(tokens, noise_mask, sentinel_ids):
    inputs, targets, k, previous = [], [], 0, False
    for token, noisy in zip(tokens, noise_mask):
        if noisy and not previous:
            inputs.append(sentinel_ids[k])
            targets.append(sentinel_ids[k])
            k += 1
        (targets if noisy else inputs).append(token)
        previous = noisy
    targets.append(sentinel_ids[k])
    return inputs, targets


def electra_inputs(input_ids, attention_mask, masked, logits, generator):
    corrupted = input_ids.clone()
    positions = masked.nonzero().tolist()
    probs = torch.softmax(logits.double(), dim=1)
    for row, (b, t) in enumerate(positions):
        corrupted[b, t] = int(torch.multinomial(probs[row], 1, generator=generator))
    labels = torch.full_like(input_ids, -100)
    real = attention_mask == 1
    labels[real] = (corrupted[real] != input_ids[real]).long()
    return corrupted, labels
'''

ANSWERS = 'answer_q1, answer_q2, answer_q3, answer_q4 = "A", " c", "(d)", "b"\n'

CORRECT = {
    "rejection, vectorised coins, tensors, Gumbel-max": lambda: PRELUDE + REJECTION + ANSWERS,
    "size-weighted documents, bernoulli, multinomial cuts, a loop per position": lambda: PRELUDE + WEIGHTED + ANSWERS,
}


@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_implementations_pass_every_check(name):
    assert_passes_every_check(CHECKS, CORRECT[name](), name)


def test_the_solution_notebook_passes_every_check():
    """The reference answer (the base every misconception edits), graded as the whole solution notebook."""
    assert_solution_passes_every_check(NOTEBOOK, "ex06-pretraining-tasks")


# ----------------------------------------------------------------------------- misconceptions


def mutate(*edits: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    """A misconception as edits (old, new) of the solution's source, applied by `apply`."""
    return edits


def apply(edits) -> str:
    base = solution_source()
    for old, new in edits:
        assert base.count(old) == 1, (old, base.count(old))
        base = base.replace(old, new)
    return base


NSP = {"test_nsp_one_pair_per_consecutive_pair", "test_nsp_true_next_sentence_labelled_0",
       "test_nsp_random_sentence_from_another_document", "test_nsp_random_sentence_drawn_uniformly",
       "test_nsp_balance_follows_random_prob", "test_nsp_draws_from_the_generator"}
SOP = {"test_sop_pairs_hold_consecutive_sentences", "test_sop_swapped_pairs_labelled_1",
       "test_sop_swap_share_follows_swap_prob"}
PAIR = {"test_pair_layout", "test_pair_segment_ids", "test_pair_truncation_longest_first",
        "test_pair_special_ids_are_arguments"}
MASK = {"test_noise_mask_exact_counts", "test_noise_mask_starts_kept_and_alternates",
        "test_noise_span_lengths_are_uniform_compositions", "test_noise_mask_draws_from_the_generator"}
CORRUPT = {"test_one_sentinel_per_span", "test_sentinels_numbered_in_order", "test_targets_end_with_the_final_sentinel",
           "test_targets_hold_each_span_after_its_sentinel",
           "test_sentinel_ids_are_an_argument"}
ELECTRA = {"test_electra_only_masked_positions_change", "test_electra_replacements_sampled_from_the_softmax",
           "test_electra_label_1_only_where_the_token_differs", "test_electra_padding_labelled_minus_100",
           "test_electra_draws_from_the_generator", "test_electra_inputs_not_modified"}


# Since the audit (issue 26) this check compares the whole corruption with other sentinel ids against the
# reference's, so any corruption mistake fails it too: not a check those mistakes "do not break".
ARGUMENT = "test_sentinel_ids_are_an_argument"


def others(*keep: str, within: set[str]) -> frozenset[str]:
    return frozenset(within - set(keep))


NSP_DRAW = "                j = torch.randint(len(others), (1,), generator=generator).item()\n"
NSP_COIN = "torch.rand(1, generator=generator).item() < random_prob"
CROSSING = '''
    flat = [(d, s) for d, doc in enumerate(documents) for s in doc]
    pairs = []
    for k in range(len(flat) - 1):  # the documents run together
        d, a = flat[k]
        if torch.rand(1, generator=generator).item() < random_prob:
            others = [s for e, s in flat if e != d]
            pairs.append((a, others[torch.randint(len(others), (1,), generator=generator).item()], 1))
        else:
            pairs.append((a, flat[k + 1][1], 0))
    return pairs
'''
NSP_BODY = solution_source().split("    ### BEGIN SOLUTION\n")[1].split("    ### END SOLUTION")[0]
SPLIT_CALL = "    noise, kept = split(num_noise), split(length - num_noise)\n"
EQUAL_SPANS = ("    noise = [num_noise // num_spans] * (num_spans - 1)\n"
               "    noise.append(num_noise - sum(noise))\n    kept = split(length - num_noise)\n")

WRONG = {
    # NSP
    "NSP pairs across document boundaries": (
        mutate((NSP_BODY, CROSSING)), {"test_nsp_one_pair_per_consecutive_pair"},
        frozenset({"test_nsp_random_sentence_from_another_document"})),
    "NSP labels inverted": (
        mutate(("pairs.append((doc[i], others[j], 1))", "pairs.append((doc[i], others[j], 0))"),
               ("pairs.append((doc[i], doc[i + 1], 0))", "pairs.append((doc[i], doc[i + 1], 1))")),
        {"test_nsp_true_next_sentence_labelled_0"}, others("test_nsp_true_next_sentence_labelled_0", within=NSP)),
    "NSP random sentence from any document (could be itself)": (
        mutate(("others = [sentence for e, sentence in located if e != d]",
                "others = [sentence for e, sentence in located]")),
        {"test_nsp_random_sentence_from_another_document"},
        frozenset({"test_nsp_one_pair_per_consecutive_pair", "test_nsp_draws_from_the_generator"})),
    "NSP random sentence from the same document": (
        mutate(("others = [sentence for e, sentence in located if e != d]", "others = list(doc)")),
        {"test_nsp_random_sentence_from_another_document"},
        frozenset({"test_nsp_one_pair_per_consecutive_pair", "test_nsp_draws_from_the_generator"})),
    "NSP always the first sentence of the next document": (
        mutate((NSP_DRAW, ""), ("pairs.append((doc[i], others[j], 1))",
                                "pairs.append((doc[i], documents[(d + 1) % len(documents)][0], 1))")),
        {"test_nsp_random_sentence_drawn_uniformly"},
        others("test_nsp_random_sentence_drawn_uniformly", "test_nsp_draws_from_the_generator", within=NSP)),
    "NSP random_prob ignored": (
        mutate((NSP_COIN, "torch.rand(1, generator=generator).item() < 0.5")),
        {"test_nsp_balance_follows_random_prob"}, others("test_nsp_balance_follows_random_prob", within=NSP)),
    "NSP from the global generator": (
        mutate((NSP_COIN, "torch.rand(1).item() < random_prob"),
               ("torch.randint(len(others), (1,), generator=generator)", "torch.randint(len(others), (1,))")),
        {"test_nsp_draws_from_the_generator"}, others("test_nsp_draws_from_the_generator", within=NSP)),
    # SOP
    "SOP negative from another document (NSP's)": (
        mutate(("pairs.append((b, a, 1))",
                "pairs.append((a, documents[(documents.index(doc) + 1) % len(documents)][0], 1))")),
        {"test_sop_pairs_hold_consecutive_sentences"}),
    "SOP labels inverted": (
        mutate(("pairs.append((b, a, 1))", "pairs.append((b, a, 0))"),
               ("pairs.append((a, b, 0))", "pairs.append((a, b, 1))")),
        {"test_sop_swapped_pairs_labelled_1"}, others("test_sop_swapped_pairs_labelled_1", within=SOP)),
    "SOP swap_prob ignored": (
        mutate(("< swap_prob:", "< 0.5:")),
        {"test_sop_swap_share_follows_swap_prob"}, others("test_sop_swap_share_follows_swap_prob", within=SOP)),
    "SOP pairs across document boundaries": (
        mutate(("    for doc in documents:\n        for a, b in zip(doc[:-1], doc[1:]):",
                "    for doc in [[s for d in documents for s in d]]:\n        for a, b in zip(doc[:-1], doc[1:]):")),
        {"test_sop_pairs_hold_consecutive_sentences"}, frozenset({"test_sop_swapped_pairs_labelled_1"})),
    # [CLS] A [SEP] B [SEP]
    "second [SEP] in segment 0": (
        mutate(("token_type_ids = [0] * (len(a) + 2) + [1] * (len(b) + 1)",
                "token_type_ids = [0] * (len(a) + 2) + [1] * len(b) + [0]")),
        {"test_pair_segment_ids"}, others("test_pair_segment_ids", within=PAIR)),
    "first [SEP] in segment 1": (
        mutate(("token_type_ids = [0] * (len(a) + 2) + [1] * (len(b) + 1)",
                "token_type_ids = [0] * (len(a) + 1) + [1] * (len(b) + 2)")),
        {"test_pair_segment_ids"}, others("test_pair_segment_ids", within=PAIR)),
    "only the second segment truncated": (
        mutate(("        if len(a) > len(b):\n            a.pop()\n        else:\n            b.pop()",
                "        if b:\n            b.pop()\n        else:\n            a.pop()")),
        {"test_pair_truncation_longest_first"}, others("test_pair_truncation_longest_first", within=PAIR)),
    "the joined sequence cut at max_len": (
        mutate(("    while len(a) + len(b) > max_len - 3:\n", "    while False:\n"),
               ("    return input_ids, token_type_ids", "    return input_ids[:max_len], token_type_ids[:max_len]")),
        {"test_pair_truncation_longest_first"}, others("test_pair_truncation_longest_first", within=PAIR)),
    "no [SEP] after B": (
        mutate(("input_ids = [cls_id] + a + [sep_id] + b + [sep_id]", "input_ids = [cls_id] + a + [sep_id] + b"),
               ("[1] * (len(b) + 1)", "[1] * len(b)")),
        {"test_pair_layout"}),
    "BERT's [CLS] and [SEP] ids written in": (
        mutate(("input_ids = [cls_id] + a + [sep_id] + b + [sep_id]", "input_ids = [101] + a + [102] + b + [102]")),
        {"test_pair_special_ids_are_arguments"}, others("test_pair_special_ids_are_arguments", within=PAIR)),
    # T5's noise mask
    "noise drawn token by token": (
        mutate(("    num_noise = min(", "    return torch.rand(length, generator=generator) < noise_density\n"
                                      "    num_noise = min(")),
        {"test_noise_mask_exact_counts"}),
    "the mask starts with noise": (
        mutate(("mask += [False] * kept[k] + [True] * noise[k]", "mask += [True] * noise[k] + [False] * kept[k]")),
        {"test_noise_mask_starts_kept_and_alternates"},
        others("test_noise_mask_starts_kept_and_alternates", within=MASK)),
    "noise spans of equal length": (
        mutate((SPLIT_CALL, EQUAL_SPANS)), {"test_noise_span_lengths_are_uniform_compositions"},
        others("test_noise_span_lengths_are_uniform_compositions", within=MASK)),
    "noise count rounded down": (
        mutate(("max(round(length * noise_density), 1)", "max(int(length * noise_density), 1)")),
        {"test_noise_mask_exact_counts"}, others("test_noise_mask_exact_counts", within=MASK)),
    "noise mask from the global generator": (
        mutate(("torch.randperm(items - 1, generator=generator)", "torch.randperm(items - 1)")),
        {"test_noise_mask_draws_from_the_generator"}, others("test_noise_mask_draws_from_the_generator", within=MASK)),
    # T5's sentinels
    "a sentinel per noise token": (
        mutate(("if i == 0 or not noise_mask[i - 1]:  # a new span starts", "if True:")),
        {"test_one_sentinel_per_span"}, others("test_one_sentinel_per_span", ARGUMENT, within=CORRUPT)),
    "sentinel numbering restarts at each span": (
        mutate(("                inputs.append(sentinel_ids[span])\n                targets.append(sentinel_ids[span])",
                "                inputs.append(sentinel_ids[0])\n                targets.append(sentinel_ids[0])")),
        {"test_sentinels_numbered_in_order"}, others("test_sentinels_numbered_in_order", ARGUMENT, within=CORRUPT)),
    "sentinels in reverse order": (
        mutate(("                inputs.append(sentinel_ids[span])\n                targets.append(sentinel_ids[span])",
                "                inputs.append(sentinel_ids[-1 - span])\n"
                "                targets.append(sentinel_ids[-1 - span])"),
               ("targets.append(sentinel_ids[span + 1])", "targets.append(sentinel_ids[-2 - span])")),
        {"test_sentinels_numbered_in_order"}, others("test_sentinels_numbered_in_order", ARGUMENT, within=CORRUPT)),
    "T5's sentinel ids written in": (
        mutate(("    inputs, targets, span = [], [], -1\n",
                "    sentinel_ids = list(range(32099, 31999, -1))\n    inputs, targets, span = [], [], -1\n")),
        {"test_sentinel_ids_are_an_argument"}, others("test_sentinel_ids_are_an_argument", within=CORRUPT)),
    "no final sentinel in the targets": (
        mutate(("    targets.append(sentinel_ids[span + 1])\n", "")),
        {"test_targets_end_with_the_final_sentinel"},
        others("test_targets_end_with_the_final_sentinel", ARGUMENT, within=CORRUPT)),
    "targets hold the kept tokens": (
        mutate(("            targets.append(token)\n        else:\n            inputs.append(token)\n",
                "        else:\n            inputs.append(token)\n            targets.append(token)\n")),
        {"test_targets_hold_each_span_after_its_sentinel"},
        others("test_targets_hold_each_span_after_its_sentinel", ARGUMENT, within=CORRUPT)),
    # ELECTRA
    "argmax instead of sampling": (
        mutate(("sampled = torch.multinomial(probs, 1, generator=generator).squeeze(1)",
                "sampled = probs.argmax(dim=-1)")),
        {"test_electra_replacements_sampled_from_the_softmax"},
        others("test_electra_replacements_sampled_from_the_softmax", "test_electra_draws_from_the_generator",
               within=ELECTRA)),
    "softmax over the wrong dimension": (
        mutate(("probs = torch.softmax(logits, dim=-1)", "probs = torch.softmax(logits, dim=0)")),
        {"test_electra_replacements_sampled_from_the_softmax"}),
    "every masked position labelled 1": (
        mutate(("labels = (corrupted != input_ids).long()", "labels = masked.long()")),
        {"test_electra_label_1_only_where_the_token_differs"},
        others("test_electra_label_1_only_where_the_token_differs", within=ELECTRA)),
    "RTD labels inverted": (
        mutate(("labels = (corrupted != input_ids).long()", "labels = (corrupted == input_ids).long()")),
        {"test_electra_label_1_only_where_the_token_differs"},
        others("test_electra_label_1_only_where_the_token_differs", within=ELECTRA)),
    "samples written to the first positions, not the masked ones": (
        mutate(("corrupted[masked] = sampled", "corrupted.view(-1)[: len(sampled)] = sampled")),
        {"test_electra_only_masked_positions_change"},
        frozenset({"test_electra_label_1_only_where_the_token_differs", "test_electra_padding_labelled_minus_100"})),
    "padding labelled 0": (
        mutate(("    labels[attention_mask == 0] = -100\n", "")),
        {"test_electra_padding_labelled_minus_100"}, others("test_electra_padding_labelled_minus_100", within=ELECTRA)),
    "input_ids corrupted in place": (
        mutate(("    corrupted = input_ids.clone()\n", "    original = input_ids.clone()\n    corrupted = input_ids\n"),
               ("labels = (corrupted != input_ids).long()", "labels = (corrupted != original).long()")),
        {"test_electra_inputs_not_modified"}, others("test_electra_inputs_not_modified", within=ELECTRA)),
    "ELECTRA samples from the global generator": (
        mutate(("torch.multinomial(probs, 1, generator=generator)", "torch.multinomial(probs, 1)")),
        {"test_electra_draws_from_the_generator"}, others("test_electra_draws_from_the_generator", within=ELECTRA)),
    # concepts
    "Q1: NSP made training unstable": (
        mutate(('    answer_q1 = "a"', '    answer_q1 = "b"')), {"test_q1_why_roberta_dropped_nsp"}),
    "Q2: the topic shortcut thought to survive same-document negatives": (
        mutate(('    answer_q2 = "c"', '    answer_q2 = "a"')), {"test_q2_negatives_from_the_same_document"}),
    "Q3: the unmasked positions thought to dilute the loss": (
        mutate(('    answer_q3 = "d"', '    answer_q3 = "a"')), {"test_q3_electra_with_a_loss_at_15_percent"}),
    "Q4: labels thought to follow the masked positions": (
        mutate(('    answer_q4 = "b"', '    answer_q4 = "c"')), {"test_q4_a_generator_that_often_samples_originals"}),
}


SOURCES = {name: (apply(wrong_entry(entry)[0]), *wrong_entry(entry)[1:]) for name, entry in WRONG.items()}
BUNDLES = bundle_misconceptions(CHECKS, SOURCES, solution_source())


@pytest.mark.parametrize("bundle", BUNDLES, ids=bundle_ids(BUNDLES))
def test_each_misconception_fails_its_checks_and_only_those_aimed_at_it(bundle):
    """Misconceptions of different parts (every part's functions and checks are independent of the others'),
    graded in one notebook: check_proofs.bundle_misconceptions makes the bundles and proves them sound."""
    assert_bundle_caught(CHECKS, SOURCES, solution_source(), bundle)


def test_bundled_misconceptions_cannot_move_each_others_checks():
    assert_bundles_sound(CHECKS, SOURCES, solution_source(), BUNDLES)


def test_every_check_is_the_target_of_a_misconception():
    cells = set(graded_cells(NOTEBOOK))
    assert_every_check_targeted(CHECKS, WRONG, cells)


def test_check_points_add_up_to_the_autograded_cells():
    assert_points_add_up(CHECKS, NOTEBOOK)


@pytest.mark.parametrize("grade_id, variable, trials, p", [
    ("nsp_checks", "half", 20 * 36, 0.5), ("nsp_checks", "fifth", 20 * 36, 0.2),
    ("sop_checks", "swapped", 20 * 36, 0.3), ("noise_mask_checks", "ones", 300, 4 / 14)])
def test_visible_bounds_contain_the_hidden_range(grade_id, variable, trials, p):
    """A correct function fails a visible rate check no more often than a hidden one (tail 1e-8): the
    visible bounds contain the exact binomial range at the visible number of trials."""
    assert_contains_hidden_range(visible_bounds(visible_cell(NOTEBOOK, grade_id), variable), trials, p)


# ----------------------------------------------------------------------------- stubs earn nothing

WELL_FORMED_NOTHING = '''
def nsp_pairs(documents, generator, random_prob=0.5):
    return [(doc[i], doc[i + 1], 0) for doc in documents for i in range(len(doc) - 1)]


def sop_pairs(documents, generator, swap_prob=0.5):
    return [(doc[i], doc[i + 1], 0) for doc in documents for i in range(len(doc) - 1)]


def random_spans_noise_mask(length, noise_density, mean_noise_span_length, generator):
    return torch.zeros(length, dtype=torch.bool)


def t5_span_corrupt(tokens, noise_mask, sentinel_ids):
    return list(tokens), []


def electra_inputs(input_ids, attention_mask, masked, logits, generator):
    return input_ids.clone(), torch.zeros_like(input_ids)
'''


@pytest.mark.parametrize("stub", ["return", "nothing"])  # the raise stub is the release (test below)
def test_a_stub_notebook_scores_zero(stub):
    if stub == "nothing":  # every function returns a well-formed result that does no work
        source = PRELUDE + WELL_FORMED_NOTHING
    else:
        source = stubbed(solution_source(), stub)
        assert "### BEGIN SOLUTION" not in source
    assert_scores_zero(CHECKS, source, f"a {stub} stub")


def test_the_release_scores_zero():
    assert_release_scores_zero(RELEASE, "ex06-pretraining-tasks")

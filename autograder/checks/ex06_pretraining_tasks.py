"""Hidden checks of ex06-pretraining-tasks: NSP and SOP pairs, `[CLS] A [SEP] B [SEP]` inputs, T5's noise
mask and sentinel span corruption, ELECTRA's replaced-token inputs and labels, four concept answers.

Every check is a property that holds for EVERY correct implementation, whatever the order of its random
draws: exact properties (where a random sentence comes from, which pairs carry which label, sentinels)
on every output, and rates or distributions against exact binomial acceptance ranges with tails < 1e-8
per side and cell (`_common.binomial_range`, a union bound over the cells of one check), at fixed seeds,
so a correct submission fails a check with a chance < 1e-6 and a result never changes between regrades.
The NSP distribution is tested on documents of equal length, where "uniform over the other documents'
sentences" and "a uniform other document, then a uniform sentence of it" coincide.

Each check aims at one property and is built so that other mistakes do not trip it: a "random" NSP pair
is recognised by its second sentence (not the true next one), never by its label, so inverted labels cost
only the label check; the sentinel checks compare sentinels by position, so a sentinel per token costs
only the one-per-span check and a numbering mistake only the numbering check; the ELECTRA label check
reads the student's own corrupted tokens, so a sampling mistake costs only the sampling check. A side
condition (the generator, padding labels) earns its point only together with a valid result, so a stub
scores 0 (tests/checks/test_checks_ex06.py proves all of this).
"""

from __future__ import annotations

import math

import pytest
import torch
from _common import IGNORE, binomial_range, concept_answer

from bertcourse.after_bert.sentence_pairs import truncate_longest_first
from bertcourse.after_bert.span_corruption import noise_counts, span_runs
from bertcourse.after_bert.span_corruption import t5_span_corrupt as reference_corrupt

TAIL = 1e-8


def documents(sizes: list[int]) -> list[list[str]]:
    """Documents of unique sentences; `locate` reads back where each came from."""
    return [[f"d{d} s{i} text" for i in range(n)] for d, n in enumerate(sizes)]


def locate(sentence) -> tuple[int, int]:
    assert isinstance(sentence, str), "each pair must hold two sentences (strings) and a label"
    parts = sentence.split()
    assert len(parts) == 3 and parts[0][0] == "d" and parts[1][0] == "s", (
        "a pair holds a string that is not one of the documents' sentences")
    return int(parts[0][1:]), int(parts[1][1:])


def pairs_of(value, docs: list[list[str]], what: str) -> list[tuple[tuple[int, int], tuple[int, int], int]]:
    """The student's pairs as ((doc, index) of first, (doc, index) of second, label)."""
    assert isinstance(value, (list, tuple)), f"{what} must return a list of (first, second, label) tuples"
    known = {s for doc in docs for s in doc}
    out = []
    for pair in value:
        assert isinstance(pair, (list, tuple)) and len(pair) == 3, (
            f"{what} must return a list of (first, second, label) tuples")
        first, second, label = pair
        if isinstance(label, torch.Tensor) and label.numel() == 1:
            label = label.item()
        assert isinstance(label, int) and not isinstance(label, bool) and label in (0, 1), (
            "each label must be the int 0 or 1")
        assert first in known and second in known, "a pair holds a string that is not one of the sentences"
        out.append((locate(first), locate(second), int(label)))
    return out


def is_true_next(first: tuple[int, int], second: tuple[int, int]) -> bool:
    return second == (first[0], first[1] + 1)


def consecutive_firsts(sizes: list[int]) -> list[tuple[int, int]]:
    return sorted((d, i) for d, n in enumerate(sizes) for i in range(n - 1))


def call_pairs(student, function: str, sizes: list[int], seed: int, **kwargs):
    docs = documents(sizes)
    return pairs_of(student.call(function, docs, student.generator(seed), **kwargs), docs, function)


# ----------------------------------------------------------------------------- part 1: NSP

NSP_SIZES = [5, 1, 7, 3, 4]  # a one-sentence document gives no pair (but may be drawn from)
NSP_SPREAD = [12, 12, 12, 12, 12]  # equal lengths: both ways of drawing uniformly agree


@pytest.mark.check(cell="nsp_checks", points=1.0,
                   feedback="one pair per consecutive sentence pair (a, b) INSIDE a document, a being the first "
                   "sentence of its pair: nothing across document boundaries, the last pair of each document "
                   "included")
def test_nsp_one_pair_per_consecutive_pair(student):
    for seed in range(3):
        pairs = call_pairs(student, "nsp_pairs", NSP_SIZES, seed)
        assert any(not is_true_next(a, b) for a, b, _ in pairs), "not credited until some second sentences are random"
        assert sorted(first for first, _, _ in pairs) == consecutive_firsts(NSP_SIZES), (
            "the first sentences of the pairs are not the first sentences of the documents' consecutive pairs")


@pytest.mark.check(cell="nsp_checks", points=1.0,
                   feedback="label 0 means 'b is the true next sentence' and 1 'b was replaced by a random "
                   "sentence' (transformers' next_sentence_label): the labels are inverted or mixed up")
def test_nsp_true_next_sentence_labelled_0(student):
    pairs = [p for seed in range(4) for p in call_pairs(student, "nsp_pairs", NSP_SIZES, seed)]
    true_next = [label for first, second, label in pairs if is_true_next(first, second)]
    random = [label for first, second, label in pairs if not is_true_next(first, second)]
    assert true_next, "no pair holds a true next sentence"
    assert random, "not credited until some second sentences are random"
    assert all(label == 0 for label in true_next), (
        f"{sum(true_next)} of {len(true_next)} pairs with the true next sentence are labelled 1")
    assert all(label == 1 for label in random), (
        f"{len(random) - sum(random)} of {len(random)} pairs with another sentence are labelled 0")


@pytest.mark.check(cell="nsp_checks", points=2.0,
                   feedback="the random second sentence must come from ANOTHER document: never the first "
                   "sentence itself, nor any sentence of its own document")
def test_nsp_random_sentence_from_another_document(student):
    sizes = [20, 20, 20]  # a draw that may stay in its document does so a third of the time
    pairs = [p for seed in range(4) for p in call_pairs(student, "nsp_pairs", sizes, 10 + seed)]
    random = [(first, second) for first, second, _ in pairs if not is_true_next(first, second)]
    assert random, "no pair has a random second sentence"
    itself = sum(first == second for first, second in random)
    same = sum(first[0] == second[0] for first, second in random)
    assert same == 0, (f"of {len(random)} random second sentences, {same} come from the first sentence's own "
                       f"document ({itself} are the first sentence itself)")


@pytest.mark.check(cell="nsp_checks", points=1.0,
                   feedback="the random sentence must be drawn uniformly from the other documents' sentences, "
                   "not always the same document, position or sentence")
def test_nsp_random_sentence_drawn_uniformly(student):
    n_docs, n = len(NSP_SPREAD), NSP_SPREAD[0]
    counts = torch.zeros(n_docs - 1, n, dtype=torch.long)  # (document offset - 1, position) of the draw
    for seed in range(50):  # ~1,400 random sentences, ~29 a cell
        for first, second, _ in call_pairs(student, "nsp_pairs", NSP_SPREAD, 100 + seed):
            if first[0] != second[0]:
                counts[(second[0] - first[0]) % n_docs - 1, second[1]] += 1
    trials = int(counts.sum())
    assert trials > 0, "no pair has a random second sentence from another document"
    lo, hi = binomial_range(trials, 1.0 / counts.numel(), TAIL / counts.numel())
    off = int(((counts < lo) | (counts > hi)).sum())
    assert off == 0, (f"of {trials} random sentences, {off} of the {counts.numel()} (other document, position) "
                      f"cells come up far too often or too rarely (from {int(counts.min())} to "
                      f"{int(counts.max())} draws; each holds 1/{counts.numel()} of them when uniform)")


def random_share(pairs) -> tuple[int, int]:
    return sum(not is_true_next(first, second) for first, second, _ in pairs), len(pairs)


@pytest.mark.check(cell="nsp_checks", points=1.0,
                   feedback="with probability random_prob (0.5 by default) the second sentence is replaced: "
                   "half the pairs random at the default, and random_prob is an argument")
def test_nsp_balance_follows_random_prob(student):
    sizes = [30] * 6
    for prob, kwargs in ((0.5, {}), (0.2, {"random_prob": 0.2}), (0.7, {"random_prob": 0.7})):
        pairs = [p for seed in range(5) for p in call_pairs(student, "nsp_pairs", sizes, 200 + seed, **kwargs)]
        random, total = random_share(pairs)
        lo, hi = binomial_range(total, prob, TAIL)
        assert lo <= random <= hi, (
            f"random_prob={prob}: {random} of {total} second sentences ({100 * random / max(total, 1):.1f}%) "
            "are random")


@pytest.mark.check(cell="nsp_checks", points=1.0,
                   feedback="draw every random number from `generator`: the same seed must give the same pairs, "
                   "another seed other pairs")
def test_nsp_draws_from_the_generator(student):
    first = call_pairs(student, "nsp_pairs", NSP_SPREAD, 7)
    assert sorted(p[0] for p in first) == consecutive_firsts(NSP_SPREAD), "not credited until the pairs are right"
    assert any(not is_true_next(a, b) for a, b, _ in first), "not credited until some second sentences are random"
    again = call_pairs(student, "nsp_pairs", NSP_SPREAD, 7)
    assert again == first, "the same seed gave other pairs"
    others = [call_pairs(student, "nsp_pairs", NSP_SPREAD, 8 + s) for s in range(3)]
    assert any(o != first for o in others), "every seed gave the same pairs"


# ----------------------------------------------------------------------------- part 2: SOP

SOP_SIZES = [6, 1, 9, 4]


def sop_orders(pairs) -> list[tuple[tuple[int, int], str, int]]:
    """(earlier sentence, 'kept' / 'swapped' / 'neither', label) of each pair."""
    out = []
    for first, second, label in pairs:
        if is_true_next(first, second):
            out.append((first, "kept", label))
        elif is_true_next(second, first):
            out.append((second, "swapped", label))
        else:
            out.append((min(first, second), "neither", label))
    return out


@pytest.mark.check(cell="sop_checks", points=1.0,
                   feedback="SOP's pairs hold the SAME two consecutive sentences of a document, one pair per "
                   "consecutive pair: no sentence from elsewhere (that is NSP) and nothing across documents")
def test_sop_pairs_hold_consecutive_sentences(student):
    for seed in range(3):
        orders = sop_orders(call_pairs(student, "sop_pairs", SOP_SIZES, seed))
        neither = sum(kind == "neither" for _, kind, _ in orders)
        assert any(kind != "kept" for _, kind, _ in orders), "not credited until some pairs are swapped"
        assert neither == 0, f"{neither} of {len(orders)} pairs are not two consecutive sentences of a document"
        assert sorted(earlier for earlier, _, _ in orders) == consecutive_firsts(SOP_SIZES), (
            "the pairs are not one per consecutive pair of each document")


@pytest.mark.check(cell="sop_checks", points=1.0,
                   feedback="label 0 means the original order (a, b) and 1 the swapped order (b, a) "
                   "(transformers' sentence_order_label): the labels are inverted or do not follow the order")
def test_sop_swapped_pairs_labelled_1(student):
    orders = [o for seed in range(4) for o in sop_orders(call_pairs(student, "sop_pairs", SOP_SIZES, 20 + seed))]
    kept = [label for _, kind, label in orders if kind == "kept"]
    swapped = [label for _, kind, label in orders if kind == "swapped"]
    assert kept and swapped, "not credited until both orders occur"
    assert all(label == 0 for label in kept), f"{sum(kept)} of {len(kept)} pairs in the original order are labelled 1"
    assert all(label == 1 for label in swapped), (
        f"{len(swapped) - sum(swapped)} of {len(swapped)} swapped pairs are labelled 0")


@pytest.mark.check(cell="sop_checks", points=1.0,
                   feedback="swap each pair with probability swap_prob (0.5 by default): half swapped at the "
                   "default, and swap_prob is an argument")
def test_sop_swap_share_follows_swap_prob(student):
    sizes = [30] * 6
    for prob, kwargs in ((0.5, {}), (0.3, {"swap_prob": 0.3})):
        orders = [o for seed in range(5) for o in sop_orders(call_pairs(student, "sop_pairs", sizes, 40 + seed,
                                                                        **kwargs))]
        recognised = [kind for _, kind, _ in orders if kind != "neither"]
        swapped = sum(kind == "swapped" for kind in recognised)
        lo, hi = binomial_range(len(recognised), prob, TAIL)
        assert recognised and lo <= swapped <= hi, (
            f"swap_prob={prob}: {swapped} of {len(recognised)} pairs are swapped")


# ----------------------------------------------------------------------------- part 3: pair inputs

CLS_ID, SEP_ID = 101, 102


def ints(value, what: str) -> list[int]:
    if isinstance(value, torch.Tensor):
        assert value.dim() == 1, f"{what} must be a list of ints (or a 1-D tensor)"
        value = value.tolist()
    assert isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value), (
        f"{what} must be a list of ints (or a 1-D tensor)")
    return list(value)


def call_pair_inputs(student, a: list[int], b: list[int], max_len: int) -> tuple[list[int], list[int]]:
    result = student.call("pair_inputs", a, b, cls_id=CLS_ID, sep_id=SEP_ID, max_len=max_len)
    assert isinstance(result, (list, tuple)) and len(result) == 2, "pair_inputs must return (input_ids, token_type_ids)"
    ids, types = ints(result[0], "input_ids"), ints(result[1], "token_type_ids")
    assert len(ids) == len(types), "input_ids and token_type_ids differ in length"
    return ids, types


def segments(seed: int, count: int) -> list[tuple[list[int], list[int]]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        la, lb = (int(x) for x in torch.randint(1, 12, (2,), generator=g))
        out.append((torch.randint(1000, 2000, (la,), generator=g).tolist(),
                    torch.randint(2000, 3000, (lb,), generator=g).tolist()))
    return out


@pytest.mark.check(cell="pair_inputs_checks", points=1.0,
                   feedback="the layout is [CLS] A [SEP] B [SEP]: one [CLS] first, a [SEP] after EACH segment")
def test_pair_layout(student):
    for a, b in segments(0, 8):
        ids, _ = call_pair_inputs(student, a, b, max_len=64)
        assert ids == [CLS_ID, *a, SEP_ID, *b, SEP_ID], "input_ids are not [CLS] A [SEP] B [SEP]"


@pytest.mark.check(cell="pair_inputs_checks", points=1.0,
                   feedback="token_type_ids are 0 for [CLS], A and the FIRST [SEP], and 1 for B and the LAST [SEP]")
def test_pair_segment_ids(student):
    for a, b in segments(1, 8):
        _, types = call_pair_inputs(student, a, b, max_len=64)
        assert types == [0] * (len(a) + 2) + [1] * (len(b) + 1), (
            "the segment ids are wrong at [CLS], A, a [SEP] or B")


@pytest.mark.check(cell="pair_inputs_checks", points=1.0,
                   feedback="use the cls_id and sep_id arguments, not BERT's 101 and 102: another tokenizer has "
                            "other ids; credited once the layout is right")
def test_pair_special_ids_are_arguments(student):
    a, b = segments(4, 1)[0]
    assert call_pair_inputs(student, a, b, max_len=64)[0] == [CLS_ID, *a, SEP_ID, *b, SEP_ID], (
        "not credited until the layout is right")
    result = student.call("pair_inputs", a, b, cls_id=0, sep_id=2, max_len=64)  # RoBERTa's <s> and </s>
    assert isinstance(result, (list, tuple)) and len(result) == 2, "pair_inputs must return (input_ids, token_type_ids)"
    assert ints(result[0], "input_ids") == [0, *a, 2, *b, 2], "with cls_id=0 and sep_id=2 the layout is not theirs"


def longest_first_lengths(la: int, lb: int, budget: int) -> set[tuple[int, int]]:
    """The kept lengths of longest-first truncation, either way of breaking a tie."""
    out = {tuple(map(len, truncate_longest_first(list(range(la)), list(range(lb)), budget)))}
    a, b = la, lb  # ties broken towards the first segment
    while a + b > budget:
        if a >= b:
            a -= 1
        else:
            b -= 1
    return out | {(a, b)}


@pytest.mark.check(cell="pair_inputs_checks", points=1.0,
                   feedback="truncate longest-first: drop tokens from the END of the longer segment, one at a "
                   "time, until [CLS] A [SEP] B [SEP] fits max_len (both [SEP]s kept)")
def test_pair_truncation_longest_first(student):
    cases = [(20, 3, 12), (3, 20, 12), (15, 15, 14), (9, 8, 11), (2, 30, 9), (25, 24, 20)]
    g = torch.Generator().manual_seed(2)
    for la, lb, max_len in cases:
        a = torch.randint(1000, 2000, (la,), generator=g).tolist()
        b = torch.randint(2000, 3000, (lb,), generator=g).tolist()
        ids, _ = call_pair_inputs(student, a, b, max_len=max_len)
        assert len(ids) == max_len, f"{la} + {lb} tokens and max_len {max_len}: got {len(ids)} ids"
        assert ids[0] == CLS_ID and ids[-1] == SEP_ID and ids.count(SEP_ID) == 2, (
            "after truncation the layout is no longer [CLS] A [SEP] B [SEP]")
        cut = ids.index(SEP_ID)
        kept_a, kept_b = ids[1:cut], ids[cut + 1 : -1]
        assert kept_a == a[: len(kept_a)] and kept_b == b[: len(kept_b)], "tokens were not dropped from the end"
        assert (len(kept_a), len(kept_b)) in longest_first_lengths(la, lb, max_len - 3), (
            f"{la} + {lb} tokens into {max_len}: kept {len(kept_a)} + {len(kept_b)}, not longest-first")


# ----------------------------------------------------------------------------- part 4: T5

def noise_mask(student, length: int, density: float, mean: float, seed: int) -> list[bool]:
    value = student.call("random_spans_noise_mask", length, density, mean, student.generator(seed))
    if isinstance(value, torch.Tensor):
        assert value.dim() == 1, "random_spans_noise_mask must return a 1-D bool tensor"
        value = value.tolist()
    assert isinstance(value, (list, tuple)) and len(value) == length, (
        "random_spans_noise_mask must return a bool tensor of shape [length]")
    assert all(v in (0, 1) for v in value), "the mask must hold True/False"
    return [bool(v) for v in value]


def run_lengths(mask: list[bool], value: bool) -> list[int]:
    return [end - start for start, end in span_runs([m == value for m in mask])]


# (length, density, mean): no rounding tie anywhere (x.5 is rounded either way by correct code); the last
# two need the "at least 1" rules.
MASK_CASES = [(100, 0.15, 3.0), (64, 0.15, 3.0), (40, 0.3, 2.0), (128, 0.2, 5.0), (10, 0.22, 3.0), (8, 0.04, 3.0),
              (20, 0.12, 3.0)]


def _no_ties() -> None:
    for length, density, mean in MASK_CASES:
        noise = length * density
        assert abs(noise % 1 - 0.5) > 0.01 and abs(round(noise) / mean % 1 - 0.5) > 0.01, (length, density, mean)


_no_ties()


@pytest.mark.check(cell="noise_mask_checks", points=1.0,
                   feedback="the counts are fixed, not random: length times noise_density noise tokens, rounded (at "
                   "least 1, at most length - 1), in the noise tokens divided by mean_noise_span_length spans, "
                   "rounded (at least 1)")
def test_noise_mask_exact_counts(student):
    for case_index, (length, density, mean) in enumerate(MASK_CASES):
        noise, spans = noise_counts(length, density, mean)
        for seed in range(3):
            mask = noise_mask(student, length, density, mean, 10 * case_index + seed)
            assert sum(mask) == noise, f"length {length}, density {density}: {sum(mask)} noise tokens"
            got = len(run_lengths(mask, True))
            assert got == spans, f"length {length}, {noise} noise tokens, mean span {mean}: {got} noise spans"


@pytest.mark.check(cell="noise_mask_checks", points=1.0,
                   feedback="the spans alternate starting with a NON-noise span: non-noise, noise, ..., noise "
                   "(as many of each), so the first token is kept and the last one is noise")
def test_noise_mask_starts_kept_and_alternates(student):
    for seed in range(30):
        length, density, mean = MASK_CASES[seed % 4]
        mask = noise_mask(student, length, density, mean, 300 + seed)
        assert any(mask), "not credited until the mask holds noise"
        assert not mask[0], "a mask starts with a noise token"
        assert len(run_lengths(mask, False)) == len(run_lengths(mask, True)), (
            "a mask does not hold as many non-noise spans as noise spans")


def composition_marginal(items: int, parts: int, length: int) -> float:
    """P(a given part = length) in a uniformly random composition of `items` into `parts` positive parts."""
    if parts == 1:
        return float(length == items)
    return math.comb(items - length - 1, parts - 2) / math.comb(items - 1, parts - 1)


@pytest.mark.check(cell="noise_mask_checks", points=1.0,
                   feedback="the span lengths must be a uniformly random split (every split of the noise tokens "
                   "into the spans, and of the kept tokens, equally likely), not equal or fixed lengths")
def test_noise_span_lengths_are_uniform_compositions(student):
    trials, length, density, mean = 600, 100, 0.15, 3.0  # 15 noise tokens in 5 spans, 85 kept in 5
    noise, spans = noise_counts(length, density, mean)
    seen = {True: torch.zeros(length + 1, dtype=torch.long), False: torch.zeros(length + 1, dtype=torch.long)}
    for m in range(trials):
        mask = noise_mask(student, length, density, mean, 1000 + m)
        for kind in (True, False):
            runs = run_lengths(mask, kind)
            assert len(runs) == spans, "not credited until the mask has the right number of spans"
            seen[kind][runs[m % spans]] += 1  # span m mod 5 of mask m: independent draws, binomial counts
    for kind, items, name in ((True, noise, "noise"), (False, length - noise, "kept")):
        lengths = range(1, items - spans + 2)
        for span_length in lengths:
            lo, hi = binomial_range(trials, composition_marginal(items, spans, span_length), TAIL / len(lengths))
            count = int(seen[kind][span_length])
            assert lo <= count <= hi, (
                f"{name} spans of length {span_length}: {count} of {trials}, not a uniform split of {items} "
                f"tokens into {spans} spans")


@pytest.mark.check(cell="noise_mask_checks", points=1.0,
                   feedback="draw every random number from `generator`: the same seed must give the same mask, "
                   "another seed another mask")
def test_noise_mask_draws_from_the_generator(student):
    noise, spans = noise_counts(100, 0.15, 3.0)
    first = noise_mask(student, 100, 0.15, 3.0, 5)
    assert sum(first) == noise and len(run_lengths(first, True)) == spans, "not credited until the counts are right"
    assert noise_mask(student, 100, 0.15, 3.0, 5) == first, "the same seed gave another mask"
    assert any(noise_mask(student, 100, 0.15, 3.0, 6 + s) != first for s in range(3)), "every seed gave the same mask"


SENTINELS = list(range(32099, 31999, -1))  # T5's <extra_id_0> = 32099, <extra_id_1> = 32098, ...


def corrupt_cases() -> list[tuple[list[int], list[bool]]]:
    g = torch.Generator().manual_seed(3)
    cases = []
    for length, noise_at in [(12, [0, 1, 5, 11]), (9, [8]), (10, [0]), (15, [2, 3, 4, 7, 9, 10, 13]),
                             (6, [1, 2, 3, 4, 5]), (7, [3])]:
        tokens = torch.randint(5, 1000, (length,), generator=g).tolist()
        cases.append((tokens, [i in noise_at for i in range(length)]))
    for _ in range(6):  # random masks, spans of every length
        length = int(torch.randint(5, 40, (1,), generator=g))
        tokens = torch.randint(5, 1000, (length,), generator=g).tolist()
        cases.append((tokens, (torch.rand(length, generator=g) < 0.35).tolist()))
    return cases


def call_corrupt(student, tokens: list[int], mask: list[bool]) -> tuple[list[int], list[int]]:
    result = student.call("t5_span_corrupt", tokens, mask, SENTINELS)
    assert isinstance(result, (list, tuple)) and len(result) == 2, "t5_span_corrupt must return (inputs, targets)"
    return ints(result[0], "inputs"), ints(result[1], "targets")


def sentinel_positions(sequence: list[int]) -> list[int]:
    return [i for i, token in enumerate(sequence) if token in SENTINELS]


@pytest.mark.check(cell="span_corrupt_checks", points=1.0,
                   feedback="each maximal run of noise tokens becomes ONE sentinel in the inputs (a sentinel per "
                   "span, not per token); the kept tokens stay, in order")
def test_one_sentinel_per_span(student):
    for tokens, mask in corrupt_cases():
        inputs, _ = call_corrupt(student, tokens, mask)
        expected, _ = reference_corrupt(tokens, mask, SENTINELS)
        shape = ["<s>" if t in SENTINELS else t for t in inputs]
        assert shape == ["<s>" if t in SENTINELS else t for t in expected], (
            "the inputs are not the kept tokens with one sentinel in place of each noise span")


@pytest.mark.check(cell="span_corrupt_checks", points=1.0,
                   feedback="sentinels are numbered in order: the k-th span gets sentinel_ids[k] (k = 0, 1, ...), "
                   "in the inputs and in the targets; no restart, no reversed order")
def test_sentinels_numbered_in_order(student):
    for tokens, mask in corrupt_cases():
        inputs, targets = call_corrupt(student, tokens, mask)
        used_in = [inputs[i] for i in sentinel_positions(inputs)]
        used_out = [targets[i] for i in sentinel_positions(targets)]
        assert used_in, "not credited until the inputs hold sentinels"
        assert used_in == SENTINELS[: len(used_in)], "the inputs' sentinels are not sentinel_ids[0], [1], ... in order"
        assert used_out == SENTINELS[: len(used_out)], (
            "the targets' sentinels are not sentinel_ids[0], [1], ... in order")


@pytest.mark.check(cell="span_corrupt_checks", points=1.0,
                   feedback="the targets end with one more sentinel, sentinel_ids[number of spans], after the last "
                   "span (T5's '<X> for inviting <Y> last <Z>'), also when nothing is noise")
def test_targets_end_with_the_final_sentinel(student):
    for tokens, mask in corrupt_cases() + [([7, 8, 9], [False, False, False])]:
        inputs, targets = call_corrupt(student, tokens, mask)
        assert targets and targets[-1] in SENTINELS, (
            f"the targets end with {targets[-1]}, an id that is no sentinel" if targets else
            "the targets are empty: even the closing sentinel is missing")
        assert len(sentinel_positions(targets)) == len(sentinel_positions(inputs)) + 1, (
            "the targets do not hold one sentinel more than the inputs")


@pytest.mark.check(cell="span_corrupt_checks", points=1.0,
                   feedback="use the sentinel_ids you are given, in their order: not T5's ids counted down from "
                   "32099; credited once the sentinels are numbered in order")
def test_sentinel_ids_are_an_argument(student):
    tokens, mask = corrupt_cases()[0]
    inputs, _ = call_corrupt(student, tokens, mask)
    used = [t for t in inputs if t in SENTINELS]
    assert used and used == SENTINELS[:len(used)], "not credited until the sentinels are in order"
    others = list(range(5000, 5100))  # counting up, far from T5's
    result = student.call("t5_span_corrupt", tokens, mask, others)
    assert isinstance(result, (list, tuple)) and len(result) == 2, "t5_span_corrupt must return (inputs, targets)"
    inputs, targets = ints(result[0], "inputs"), ints(result[1], "targets")
    assert [inputs, targets] == [list(part) for part in reference_corrupt(tokens, mask, others)], (
        "with sentinel_ids 5000, 5001, ... the inputs or targets do not use them in order")


def reconstruct(inputs: list[int], targets: list[int]) -> list[int]:
    """The k-th sentinel of the inputs replaced by what follows the k-th sentinel of the targets (by position,
    so that a numbering mistake is not mistaken for a lost span)."""
    marks = sentinel_positions(targets) + [len(targets)]
    spans = [targets[start + 1 : end] for start, end in zip(marks[:-1], marks[1:])]
    out, k = [], 0
    for token in inputs:
        if token in SENTINELS:
            out += spans[k] if k < len(spans) else []
            k += 1
        else:
            out.append(token)
    return out


@pytest.mark.check(cell="span_corrupt_checks", points=1.0,
                   feedback="the targets hold each span's noise tokens right after its sentinel, so that inputs "
                   "and targets together give back the original sequence")
def test_targets_hold_each_span_after_its_sentinel(student):
    for tokens, mask in corrupt_cases():
        inputs, targets = call_corrupt(student, tokens, mask)
        assert sentinel_positions(inputs), "not credited until the inputs hold sentinels"
        assert reconstruct(inputs, targets) == tokens, (
            "filling each sentinel of the inputs with the tokens after it in the targets does not give back the "
            "original sequence")


# ----------------------------------------------------------------------------- part 5: ELECTRA

VOCAB = 8
PATTERNS = torch.tensor([[2.0, 1.0, 0.0, -1.0, 0.5, 0.5, -2.0, 1.5],
                         [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                         [3.0, -1.0, 1.0, 0.0, 0.0, -3.0, 2.5, 0.0],
                         [-1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0]])


def electra_batch(seed: int, rows: int = 16, seq: int = 24, favour_original: bool = False):
    """input_ids with padding at the end of each row, masked = about half the real tokens, logits [n, V] from
    PATTERNS in row-major order of the masked positions (or, with favour_original, the original id 40
    logits above the rest at every other masked position: it comes back with chance 1 - 7e^-40)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (rows, seq), generator=g)
    lengths = torch.randint(seq // 2, seq + 1, (rows,), generator=g)
    attention = (torch.arange(seq) < lengths[:, None]).long()
    ids[attention == 0] = 0
    masked = (torch.rand(rows, seq, generator=g) < 0.5) & attention.bool()
    which = torch.arange(int(masked.sum())) % len(PATTERNS)
    logits = PATTERNS[which].clone()
    if favour_original:
        originals = ids[masked]
        rows_favoured = torch.arange(len(originals)) % 2 == 0
        logits[rows_favoured, originals[rows_favoured]] += 40.0
    return ids, attention, masked, logits, which


def call_electra(student, ids, attention, masked, logits, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    result = student.call("electra_inputs", ids, attention, masked, logits, student.generator(seed))
    assert isinstance(result, (list, tuple)) and len(result) == 2, "electra_inputs must return (corrupted, labels)"
    corrupted, labels = result
    assert isinstance(corrupted, torch.Tensor) and isinstance(labels, torch.Tensor), (
        "electra_inputs must return two tensors")
    assert corrupted.shape == ids.shape and labels.shape == ids.shape, (
        "electra_inputs must return tensors shaped like input_ids")
    assert not corrupted.is_floating_point() and not labels.is_floating_point(), "the tensors must hold integers"
    return corrupted.long(), labels.long()


@pytest.mark.check(cell="electra_checks", points=1.0,
                   feedback="only the masked positions get a sampled token; every other position keeps its id")
def test_electra_only_masked_positions_change(student):
    for seed in range(3):
        ids, attention, masked, logits, _ = electra_batch(seed)
        corrupted, _ = call_electra(student, ids, attention, masked, logits, seed)
        assert bool((corrupted[masked] != ids[masked]).any()), "not credited until some masked token is replaced"
        changed = int((corrupted[~masked] != ids[~masked]).sum())
        assert changed == 0, f"{changed} positions that were not masked changed"


@pytest.mark.check(cell="electra_checks", points=1.0,
                   feedback="each masked position takes a token SAMPLED from softmax of its row of logits (rows in "
                   "the order of the masked positions, row by row): not the argmax, not uniform")
def test_electra_replacements_sampled_from_the_softmax(student):
    counts = torch.zeros(len(PATTERNS), VOCAB, dtype=torch.long)
    for seed in range(6):
        ids, attention, masked, logits, which = electra_batch(40 + seed)
        corrupted, _ = call_electra(student, ids, attention, masked, logits, 40 + seed)
        drawn = corrupted[masked]
        assert bool(((drawn >= 0) & (drawn < VOCAB)).all()), "a sampled token lies outside the vocabulary"
        counts.index_put_((which, drawn), torch.ones_like(drawn), accumulate=True)
    probs = torch.softmax(PATTERNS, dim=-1)
    off = []
    for pattern in range(len(PATTERNS)):
        trials = int(counts[pattern].sum())
        for token in range(VOCAB):
            lo, hi = binomial_range(trials, float(probs[pattern, token]), TAIL / counts.numel())
            if not lo <= int(counts[pattern, token]) <= hi:
                off.append((pattern, token))
    assert not off, (f"{len(off)} of the {counts.numel()} (row of logits, token) pairs are drawn far too often or "
                     f"too rarely for samples from the softmax")


@pytest.mark.check(cell="electra_checks", points=1.0,
                   feedback="label 1 only where the corrupted token DIFFERS from the original; a masked position "
                   "whose sampled token equals the original is labelled 0, like every unmasked position")
def test_electra_label_1_only_where_the_token_differs(student):
    for seed in range(3):
        ids, attention, masked, logits, _ = electra_batch(60 + seed, favour_original=True)
        corrupted, labels = call_electra(student, ids, attention, masked, logits, 60 + seed)
        real = attention.bool()
        assert bool((corrupted[real] != ids[real]).any()), "not credited until some token is replaced"
        expected = (corrupted != ids).long()
        wrong = int((labels[real] != expected[real]).sum())
        back = int(((corrupted == ids) & masked).sum())
        assert wrong == 0, (f"{wrong} of {int(real.sum())} real positions have the wrong label ({back} masked "
                            "positions got their original token back)")


@pytest.mark.check(cell="electra_checks", points=1.0,
                   feedback="padding positions (attention_mask 0) get the label -100, so the loss leaves them out")
def test_electra_padding_labelled_minus_100(student):
    ids, attention, masked, logits, _ = electra_batch(80)
    corrupted, labels = call_electra(student, ids, attention, masked, logits, 80)
    real = attention.bool()
    assert bool((labels[real] == 1).any()) and bool((labels[real] == 0).any()), (
        "not credited until the real positions are labelled 0 and 1")
    assert bool(((labels[real] == 0) | (labels[real] == 1)).all()), "not credited until real positions hold 0 or 1"
    wrong = int((labels[~real] != IGNORE).sum())
    assert wrong == 0, f"{wrong} of {int((~real).sum())} padding positions are not labelled -100"


@pytest.mark.check(cell="electra_checks", points=0.5,
                   feedback="`corrupted` is a new tensor: input_ids (and the other inputs) are left as they were, so "
                   "that the discriminator can still be told which tokens are original; credited once the masked "
                   "positions alone are replaced")
def test_electra_inputs_not_modified(student):
    ids, attention, masked, logits, _ = electra_batch(91)
    placed = [student.put(value.clone()) for value in (ids, attention, masked, logits)]
    result = student.call("electra_inputs", *placed, student.generator(5))
    assert isinstance(result, (list, tuple)) and len(result) == 2, "electra_inputs must return (corrupted, labels)"
    corrupted = result[0]
    assert isinstance(corrupted, torch.Tensor) and corrupted.shape == ids.shape, (
        "electra_inputs must return tensors shaped like input_ids")
    assert torch.equal(corrupted[~masked], ids[~masked]) and bool((corrupted[masked] != ids[masked]).any()), (
        "not credited until the masked positions alone are replaced")
    changed = [name for name, handle, value in zip(("input_ids", "attention_mask", "masked", "logits"), placed,
                                                   (ids, attention, masked, logits))
               if not torch.equal(student.get(handle), value)]
    assert not changed, f"electra_inputs changed its input {', '.join(changed)}"


@pytest.mark.check(cell="electra_checks", points=0.5,
                   feedback="draw every random number from `generator`: the same seed must give the same tokens, "
                   "another seed other tokens")
def test_electra_draws_from_the_generator(student):
    ids, attention, masked, logits, _ = electra_batch(90)
    first, _ = call_electra(student, ids, attention, masked, logits, 3)
    assert torch.equal(first[~masked], ids[~masked]) and bool((first[masked] != ids[masked]).any()), (
        "not credited until the masked positions alone are replaced")
    again, _ = call_electra(student, ids, attention, masked, logits, 3)
    assert torch.equal(again, first), "the same seed gave other tokens"
    other, _ = call_electra(student, ids, attention, masked, logits, 4)
    assert not torch.equal(other, first), "another seed gave the same tokens"


# ----------------------------------------------------------------------------- part 6: concepts


@pytest.mark.check(cell="concepts_checks", points=0.5,
                   feedback="Q1: ask what RoBERTa put in each input when it dropped the NSP loss, and what it "
                   "compared that with")
def test_q1_why_roberta_dropped_nsp(student):
    assert concept_answer(student, "answer_q1") == "a"


@pytest.mark.check(cell="concepts_checks", points=0.5,
                   feedback="Q2: ask what a sentence from elsewhere in the same document shares with the first one, "
                            "and what is then left to tell a negative apart")
def test_q2_negatives_from_the_same_document(student):
    assert concept_answer(student, "answer_q2") == "c"


@pytest.mark.check(cell="concepts_checks", points=0.5,
                   feedback="Q3: count the positions that enter each loss, and ask where ELECTRA's gain over BERT "
                            "comes from")
def test_q3_electra_with_a_loss_at_15_percent(student):
    assert concept_answer(student, "answer_q3") == "d"


@pytest.mark.check(cell="concepts_checks", points=0.5,
                   feedback="Q4: ask how many positions still differ from the original, and how easy those are to "
                            "spot")
def test_q4_a_generator_that_often_samples_originals(student):
    assert concept_answer(student, "answer_q4") == "b"

"""Proof of the hidden checks of ex09-tagging-and-qa: each misconception fails the checks aimed at it (and not
those it does not break), three correct implementations (the solution's, Python loops, numpy) pass every check,
a function that calls the course's own answer earns nothing, stubs and the release score 0, and the points add
up to course.yml's.

The three parts (labels, entities, spans) are separate functions, so one graded notebook carries several
misconceptions at once (`BUNDLES`, made and proven sound by check_proofs.bundle_misconceptions): a third of
the gradings, each misconception still proven on its own checks."""

from __future__ import annotations

import re

import pytest
from check_proofs import (
    assert_bundle_caught,
    assert_bundles_sound,
    assert_every_check_targeted,
    assert_hints_name,
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
)

CHECKS = "autograder/checks/ex09_tagging_and_qa.py"
NOTEBOOK = "solutions/ex09-tagging-and-qa/tagging_and_qa.ipynb"
RELEASE = "exercises/ex09-tagging-and-qa/tagging_and_qa.ipynb"
PRELUDE = "import math\n\nimport torch\n"


def solution() -> str:
    return reference_source(NOTEBOOK, PRELUDE)


def body(function: str) -> str:
    """The solution region of `function` in the solution (from its `### BEGIN SOLUTION` to its end marker)."""
    found = re.search(rf"def {function}\(.*?(    ### BEGIN SOLUTION\n.*?    ### END SOLUTION\n)", solution(), re.DOTALL)
    assert found, function
    return found.group(1)


def rewrite(function: str, code: str) -> tuple[str, str]:
    """A replacement pair: `function`'s solution region becomes `code` (indented as a body)."""
    return body(function), "".join(f"    {line}\n" if line else "\n" for line in code.strip("\n").splitlines())


def mutate(*pairs: tuple[str, str]) -> str:
    source = solution()
    for old, new in pairs:
        assert source.count(old) == 1, (old, source.count(old))
        source = source.replace(old, new)
    return source


LOOPS = PRELUDE + '''
def align_labels(word_ids, word_tags, label_ids, *, all_pieces=False):
    out = []
    for i, w in enumerate(word_ids):
        if w is None:
            out.append(-100)
            continue
        tag = word_tags[w]
        if i == 0 or word_ids[i - 1] != w:
            out.append(label_ids[tag])
        elif not all_pieces:
            out.append(-100)
        else:
            out.append(label_ids[tag.replace("B-", "I-", 1)])
    return out


def entity_spans(tags):
    spans, current = [], None  # current: [type, first, last]
    for i, tag in enumerate(tags):
        if tag == "O":
            if current:
                spans.append(list(current))
            current = None
            continue
        prefix, kind = tag.split("-", 1)
        if prefix == "I" and current and current[0] == kind:
            current[2] = i
        else:
            if current:
                spans.append(list(current))
            current = [kind, i, i]
    if current:
        spans.append(list(current))
    return spans  # lists, not tuples


def entity_scores(true_tags, pred_tags, *, zero_division=0.0):
    truth = {(s, *span) for s, tags in enumerate(true_tags) for span in entity_spans(tags)}
    guess = {(s, *span) for s, tags in enumerate(pred_tags) for span in entity_spans(tags)}
    right = len(truth & guess)
    precision = right / len(guess) if guess else zero_division
    recall = right / len(truth) if truth else zero_division
    f1 = 2 * right / (len(truth) + len(guess)) if truth or guess else zero_division
    return precision, recall, f1


def best_span(start_logits, end_logits, sequence_ids, max_answer_tokens=30):
    start, end = start_logits.tolist(), end_logits.tolist()
    best = None
    for i, si in enumerate(sequence_ids):
        if si != 1:
            continue
        for j in range(i, min(i + max_answer_tokens, len(sequence_ids))):
            if sequence_ids[j] != 1:
                break
            if best is None or start[i] + end[j] > best[0]:
                best = (start[i] + end[j], i, j)
    return best[1], best[2]


def span_to_chars(offsets, start, end):
    first_char, _ = offsets[start]
    _, end_char = offsets[end]
    return int(first_char), int(end_char)


def answer_in_windows(windows, max_answer_tokens=30):
    scored = []
    for k, w in enumerate(windows):
        s, e = best_span(w["start_logits"], w["end_logits"], w["sequence_ids"], max_answer_tokens)
        scored.append((w["start_logits"][s].item() + w["end_logits"][e].item(), k, s, e))
    _, k, s, e = max(scored)
    return span_to_chars(windows[k]["offsets"], s, e)
'''

NUMPY = PRELUDE + '''
import numpy as np


def align_labels(word_ids, word_tags, label_ids, *, all_pieces=False):
    inside = {t: "I-" + t[2:] if t.startswith("B-") else t for t in word_tags}
    previous = [None] + list(word_ids[:-1])
    return torch.tensor([-100 if w is None else label_ids[word_tags[w]] if w != p
                         else label_ids[inside[word_tags[w]]] if all_pieces else -100
                         for w, p in zip(word_ids, previous)])


def entity_spans(tags):
    spans = []
    for i, tag in enumerate(tags):
        kind = tag[2:]
        if tag.startswith("B-") or (tag.startswith("I-") and (i == 0 or tags[i - 1][2:] != kind)):
            j = i
            while j + 1 < len(tags) and tags[j + 1] == "I-" + kind:
                j += 1
            spans.append((kind, i, j))
    return spans


def entity_scores(true_tags, pred_tags, *, zero_division=0.0):
    counts = np.zeros(3)
    for truth, guess in zip(true_tags, pred_tags):
        t, g = set(entity_spans(truth)), set(entity_spans(guess))
        counts += (len(t & g), len(t), len(g))
    right, n_true, n_pred = counts
    precision = right / n_pred if n_pred else float(zero_division)
    recall = right / n_true if n_true else float(zero_division)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return np.float64(precision), np.float64(recall), float(f1)


def best_span(start_logits, end_logits, sequence_ids, max_answer_tokens=30):
    start, end = np.asarray(start_logits, dtype=np.float64), np.asarray(end_logits, dtype=np.float64)
    inside = np.array([s == 1 for s in sequence_ids])
    n = len(inside)
    legal = np.triu(np.ones((n, n), dtype=bool)) & ~np.triu(np.ones((n, n), dtype=bool), k=max_answer_tokens)
    legal &= inside[:, None] & inside[None, :]
    scores = np.where(legal, start[:, None] + end[None, :], -np.inf)
    i, j = np.unravel_index(np.argmax(scores), scores.shape)
    return torch.tensor(i), torch.tensor(j)


def span_to_chars(offsets, start, end):
    o = np.asarray(offsets)
    return int(o[int(start), 0]), int(o[int(end), 1])


def answer_in_windows(windows, max_answer_tokens=30):
    spans = [best_span(w["start_logits"], w["end_logits"], w["sequence_ids"], max_answer_tokens) for w in windows]
    scores = [float(w["start_logits"][int(s)] + w["end_logits"][int(e)]) for w, (s, e) in zip(windows, spans)]
    k = int(np.argmax(scores))
    return span_to_chars(windows[k]["offsets"], int(spans[k][0]), int(spans[k][1]))
'''

SPANS_DOCSTRING = (
    '    """The entities (type, first word, last word) of one sentence\'s BIO tags, read as conlleval reads them."""',
    '    """The entities of one sentence\'s BIO tags, as bertcourse.metrics.entity_spans reads them (conlleval)."""\n'
    '    # written here, not imported from bertcourse.metrics')


def with_docstring() -> str:
    """The solution, its entity_spans' docstring (and a comment) naming the course's module: no use of it."""
    return mutate(SPANS_DOCSTRING)


CORRECT = {"python loops": lambda: LOOPS, "numpy": lambda: NUMPY,
           "a docstring that names bertcourse.metrics": with_docstring}

FIRST, SPECIAL, FIRST_MODE, ALL_MODE, B_TO_I = (
    "test_first_piece_gets_the_word_label", "test_special_tokens_get_minus_100",
    "test_first_piece_mode_ignores_the_other_pieces", "test_all_pieces_mode_labels_every_piece",
    "test_all_pieces_b_continues_as_i")
RUNS, I_RULE, END = ("test_spans_of_b_and_i_runs", "test_i_after_o_or_another_type_begins_an_entity",
                     "test_entity_at_the_end_is_kept")
SCORES, PARTIAL, MICRO, ZERO = ("test_entity_scores_on_tagged_sentences", "test_no_credit_for_part_of_an_entity",
                                "test_micro_average_within_sentences", "test_zero_division")
BEST, INSIDE, ORDER, LIMIT = ("test_best_legal_span", "test_span_inside_the_context", "test_end_not_before_start",
                              "test_length_limit")
CHARS, W_BEST, W_OFFSETS, W_LEGAL = ("test_tokens_back_to_characters", "test_best_window_by_span_score",
                                     "test_offsets_of_the_winning_window", "test_window_scores_are_legal_spans")
ALIGN = {FIRST, SPECIAL, FIRST_MODE, ALL_MODE, B_TO_I}
ENTITIES = {RUNS, I_RULE, END, SCORES, PARTIAL, MICRO, ZERO}
SPANS = {BEST, INSIDE, ORDER, LIMIT}

SPECIAL_LINE = "        if word is None:\n            labels.append(-100)"
CONTINUE_B = '            labels.append(label_ids["I-" + tag[2:] if tag.startswith("B-") else tag])'
BEGINS = '        if prefix == "B-" or (prefix == "I-" and start is None):'
ENDS = "        if start is not None and (prefix != \"I-\" or label != kind):"
LEGAL = "    legal = context[:, None] & context[None, :] & (last >= first) & (last - first < max_answer_tokens)"
CONTEXT = "    context = torch.tensor([s == 1 for s in sequence_ids])"
WINDOW_SCORE = '        score = float(window["start_logits"][start] + window["end_logits"][end])'

# name -> (replacement pairs on the solution, checks it must fail, checks it must still pass)
WRONG_ALIGN = {
    "every piece of a B- word labelled B-": (((CONTINUE_B, "            labels.append(label_ids[tag])"),), {B_TO_I}),
    "aligned by position, not by word_ids": ((rewrite("align_labels", """
labels = [-100] * len(word_ids)
for i, tag in enumerate(word_tags):  # word i at token i + 1, after [CLS]
    if i + 1 < len(word_ids) and word_ids[i + 1] is not None:
        labels[i + 1] = label_ids[tag]
return labels
"""),), ALIGN),
    "special tokens labelled O": (((SPECIAL_LINE, SPECIAL_LINE.replace("-100", 'label_ids["O"]')),), {SPECIAL}),
    "other pieces always -100 (all_pieces ignored)": ((("        elif all_pieces:", "        elif False:"),),
        {ALL_MODE, B_TO_I}),
    "every piece labelled (first-piece mode ignored)": ((("        elif all_pieces:", "        elif True:"),),
        {FIRST_MODE}),
    "B- turned into I- on first pieces too": (((
        "        elif word != previous:\n            labels.append(label_ids[word_tags[word]])",
        "        elif word != previous:\n            tag = word_tags[word]\n"
        '            labels.append(label_ids["I-" + tag[2:] if all_pieces and tag.startswith("B-") else tag])'),),
        {B_TO_I}),
    "the course's own align_word_labels": ((rewrite("align_labels", """
from bertcourse.heads import align_word_labels, bio_continuation
names = sorted(label_ids, key=label_ids.get)
return align_word_labels(word_ids, [label_ids[t] for t in word_tags], all_pieces, bio_continuation(names))
"""),), ALIGN),
}
MUST_PASS_ALIGN = {name: ALIGN - targeted for name, (_, targeted) in WRONG_ALIGN.items()}  # parts are independent

WRONG_ENTITIES = {
    "I- after O dropped": (((BEGINS, '        if prefix == "B-":'),), {I_RULE, SCORES, ZERO},
                           {RUNS, END, PARTIAL, MICRO}),
    "I- of another type glued to the entity before": (((ENDS, ENDS.replace(' or label != kind', '')),),
        {I_RULE, SCORES, ZERO}, {RUNS, END, PARTIAL, MICRO}),
    "the entity open at the end lost": ((('enumerate(list(tags) + ["O"])', "enumerate(list(tags))"),), {END},
        {RUNS, I_RULE}),
    "B-PER B-PER read as one entity": (((ENDS, ENDS.replace('prefix != "I-"', 'prefix == "O"')),
                                       (BEGINS, '        if prefix in ("B-", "I-") and start is None:')),
        {RUNS, I_RULE, END, SCORES, ZERO}, {PARTIAL, MICRO}),
    "tags counted, not entities": ((rewrite("entity_scores", """
pairs = [(t, g) for truth, guess in zip(true_tags, pred_tags) for t, g in zip(truth, guess)]
right = sum(t == g != "O" for t, g in pairs)
n_true, n_pred = sum(t != "O" for t, _ in pairs), sum(g != "O" for _, g in pairs)
precision = right / n_pred if n_pred else zero_division
recall = right / n_true if n_true else zero_division
return precision, recall, 2 * precision * recall / (precision + recall) if precision + recall else 0.0
"""),), {SCORES, PARTIAL}, {RUNS, I_RULE, END}),
    "credit for an overlapping entity of the same type": ((rewrite("entity_scores", """
right = n_true = n_pred = 0
for truth, guess in zip(true_tags, pred_tags):
    true_spans, pred_spans = entity_spans(truth), entity_spans(guess)
    right += sum(any(k == q and a <= d and c <= b for q, c, d in true_spans) for k, a, b in pred_spans)
    n_true, n_pred = n_true + len(true_spans), n_pred + len(pred_spans)
precision = right / n_pred if n_pred else zero_division
recall = right / n_true if n_true else zero_division
return precision, recall, 2 * precision * recall / (precision + recall) if precision + recall else 0.0
"""),), {SCORES, PARTIAL}, {RUNS, I_RULE, END, MICRO}),
    "the type ignored in the match": ((("set(entity_spans(truth)), set(entity_spans(guess))",
                                       "{s[1:] for s in entity_spans(truth)}, {s[1:] for s in entity_spans(guess)}"),),
        {SCORES, PARTIAL}, {RUNS, I_RULE, END}),
    "entities matched across sentences": ((rewrite("entity_scores", """
true_set = {span for truth in true_tags for span in entity_spans(truth)}
pred_set = {span for guess in pred_tags for span in entity_spans(guess)}
right, n_true, n_pred = len(true_set & pred_set), len(true_set), len(pred_set)
precision = right / n_pred if n_pred else zero_division
recall = right / n_true if n_true else zero_division
return precision, recall, 2 * precision * recall / (precision + recall) if precision + recall else 0.0
"""),), {MICRO}, {RUNS, I_RULE, END, PARTIAL}),
    "a mean of per-sentence scores": ((rewrite("entity_scores", """
rows = []
for truth, guess in zip(true_tags, pred_tags):
    t, g = set(entity_spans(truth)), set(entity_spans(guess))
    p = len(t & g) / len(g) if g else zero_division
    r = len(t & g) / len(t) if t else zero_division
    rows.append((p, r, 2 * p * r / (p + r) if p + r else 0.0))
return tuple(sum(column) / len(rows) for column in zip(*rows))
"""),), {MICRO}, {RUNS, I_RULE, END, PARTIAL}),
    "zero_division ignored": ((("right / n_pred if n_pred else zero_division", "right / n_pred if n_pred else 0.0"),
                              ("right / n_true if n_true else zero_division", "right / n_true if n_true else 0.0")),
        {ZERO}, ENTITIES - {ZERO}),
    "F1 = zero_division when P + R = 0": (((
        "    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0",
        "    f1 = 2 * precision * recall / (precision + recall) if precision + recall else zero_division"),),
        {ZERO}, ENTITIES - {ZERO}),
    "the course's entity_spans imported by name": ((
        (body("entity_spans"), "    import importlib\n\n"
                               "    return importlib.import_module(\"bertcourse.metrics\").entity_spans(tags)\n"),),
        ENTITIES, set()),
    "F1 as the mean of precision and recall": (((
        "    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0",
        "    f1 = (precision + recall) / 2"),), {SCORES, MICRO}, {RUNS, I_RULE, END, PARTIAL}),
    "the course's own entity_spans": ((
        (body("entity_spans"), "    pass\n"), ("def entity_scores(", "from bertcourse.metrics import entity_spans\n\n\n"
                                                                     "def entity_scores(")), ENTITIES, set()),
}

WRONG_SPANS = {
    "spans in the question": (((CONTEXT, CONTEXT.replace("s == 1", "s is not None")),), {INSIDE}, {CHARS}),
    "spans on special tokens": (((CONTEXT, CONTEXT.replace("s == 1", "s != 0")),), {INSIDE}, {CHARS}),
    "end before start": (((LEGAL, LEGAL.replace(" & (last >= first)", "")),), {ORDER}, {CHARS}),
    "the length limit ignored": (((LEGAL, LEGAL.replace(" & (last - first < max_answer_tokens)", "")),),
        {BEST, LIMIT}, {INSIDE, ORDER, CHARS}),
    "the length limit off by one": (((LEGAL, LEGAL.replace("last - first < max", "last - first <= max")),), {LIMIT},
        {INSIDE, ORDER, CHARS}),
    "a greedy span (the best start, then the best end after it)": ((rewrite("best_span", """
context = [s == 1 for s in sequence_ids]
starts = [i for i, inside in enumerate(context) if inside]
first = max(starts, key=lambda i: float(start_logits[i]))
ends = [j for j in range(first, min(first + max_answer_tokens, len(context))) if context[j]]
return first, max(ends, key=lambda j: float(end_logits[j]))
"""),), {BEST, INSIDE, LIMIT}, {ORDER, CHARS}),
    "the best start and the best end apart": ((rewrite("best_span", """
context = torch.tensor([s == 1 for s in sequence_ids])
start = start_logits.masked_fill(~context, -math.inf).argmax()
return int(start), int(end_logits.masked_fill(~context, -math.inf).argmax())
"""),), {BEST, ORDER}, {CHARS}),
    "the last token's first character": ((("return offsets[start][0], offsets[end][1]",
                                          "return offsets[start][0], offsets[end][0]"),), {CHARS}, SPANS),
    "offsets of the first window": ((('span_to_chars(window["offsets"], start, end)',
                                     'span_to_chars(windows[0]["offsets"], start, end)'),), {W_OFFSETS},
        SPANS | {CHARS}),
    "the best window by its start logit": (((WINDOW_SCORE, '        score = float(window["start_logits"][start])'),),
        {W_BEST}, SPANS | {CHARS, W_OFFSETS}),
    "windows compared after a softmax within each window": (((WINDOW_SCORE, WINDOW_SCORE.replace(
        'float(window["start_logits"][start] + window["end_logits"][end])',
        'float(torch.softmax(window["start_logits"], 0)[start] * torch.softmax(window["end_logits"], 0)[end])')),),
        {W_BEST}, SPANS | {CHARS, W_OFFSETS, W_LEGAL}),
    "windows compared by start x end": (((WINDOW_SCORE, WINDOW_SCORE.replace(
        'window["start_logits"][start] + window["end_logits"][end]',
        'window["start_logits"][start] * window["end_logits"][end]')),),
        {W_BEST}, SPANS | {CHARS, W_OFFSETS, W_LEGAL}),
    "windows compared by their largest logits": (((WINDOW_SCORE, WINDOW_SCORE.replace(
        'window["start_logits"][start] + window["end_logits"][end]',
        'window["start_logits"].max() + window["end_logits"].max()')),), {W_LEGAL},
        SPANS | {CHARS, W_OFFSETS, W_BEST}),
    "the course's own best_span": ((("import torch\n", "import torch\n\nimport bertcourse.heads\n"),
                                    (body("best_span"), '''    allowed = torch.tensor([s == 1 for s in sequence_ids])
    start, end, _ = bertcourse.heads.best_span(start_logits, end_logits, allowed, max_answer_tokens)
    return int(start), int(end)
'''),), SPANS | {W_BEST, W_OFFSETS, W_LEGAL}, {CHARS}),
}


def entry(table: dict, name: str, must_pass: dict | None = None) -> tuple[tuple, set[str], set[str]]:
    pairs, targeted, *rest = table[name]
    return pairs, set(targeted), set(rest[0] if rest else (must_pass or {}).get(name, set()))


WRONG = {name: entry(WRONG_ALIGN, name, MUST_PASS_ALIGN) for name in WRONG_ALIGN}
WRONG |= {name: entry(WRONG_ENTITIES, name) for name in WRONG_ENTITIES}
WRONG |= {name: entry(WRONG_SPANS, name) for name in WRONG_SPANS}
SOURCES = {name: (mutate(*pairs), targeted, must_pass) for name, (pairs, targeted, must_pass) in WRONG.items()}
BUNDLES = bundle_misconceptions(CHECKS, SOURCES, solution())


WELL_FORMED_NOTHING = PRELUDE + '''
def align_labels(word_ids, word_tags, label_ids, *, all_pieces=False):
    return [-100] * len(word_ids)

def entity_spans(tags):
    return []

def entity_scores(true_tags, pred_tags, *, zero_division=0.0):
    return 0.0, 0.0, 0.0

def best_span(start_logits, end_logits, sequence_ids, max_answer_tokens=30):
    first = list(sequence_ids).index(1)
    return first, first

def span_to_chars(offsets, start, end):
    return 0, 0

def answer_in_windows(windows, max_answer_tokens=30):
    return 0, 0
'''

STUBS = {"return the first argument": lambda: stubbed(solution(), "return"),
         "well-formed nothing": lambda: WELL_FORMED_NOTHING}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_implementation_passes_every_check(name):
    assert_passes_every_check(CHECKS, CORRECT[name](), name)


@pytest.mark.slow
def test_the_solution_notebook_passes_every_check():
    """The reference answer (the base every misconception edits), graded as the whole solution notebook."""
    assert_solution_passes_every_check(NOTEBOOK, "ex09-tagging-and-qa")


@pytest.mark.slow
@pytest.mark.parametrize("bundle", BUNDLES, ids=bundle_ids(BUNDLES))
def test_misconceptions_fail_their_checks(bundle):
    """One notebook with misconceptions that cannot move each other's checks (mostly one of each part: the
    parts are separate functions): each fails its own checks and passes those it does not break."""
    assert_bundle_caught(CHECKS, SOURCES, solution(), bundle)


def test_bundled_misconceptions_cannot_move_each_others_checks():
    assert_bundles_sound(CHECKS, SOURCES, solution(), BUNDLES)


def test_every_check_is_targeted_by_some_misconception_and_marked():
    assert_every_check_targeted(CHECKS, {name: (None, targeted, must_pass)
                                         for name, (_, targeted, must_pass) in WRONG.items()},
                                set(graded_cells(NOTEBOOK)))


def test_check_points_add_up_to_the_cells_and_to_course_yml():
    assert_points_add_up(CHECKS, NOTEBOOK, "ex09-tagging-and-qa")


@pytest.mark.slow
@pytest.mark.parametrize("stub", list(STUBS))
def test_stub_scores_zero(stub):
    source = STUBS[stub]()
    assert "### BEGIN SOLUTION" not in source
    assert_scores_zero(CHECKS, source, stub)


@pytest.mark.slow
def test_release_scores_zero():
    assert_release_scores_zero(RELEASE, "ex09-tagging-and-qa")


# Issue 36: the hint a planted mistake gets names that mistake, and no other: legality before optimality in
# best_span (a greedy span, always legal, is told about optimality), F1's edge rule, the scale of the windows.
SAYS = {"a greedy span (the best start, then the best end after it)": "another legal span scores higher",
        "spans in the question": "CONTEXT (sequence id 1)",
        "the length limit off by one": "at most max_answer_tokens",
        "end before start": "end >= start",
        "F1 = zero_division when P + R = 0": "whatever zero_division is",
        "windows compared after a softmax within each window": "softmax within each window",
        "windows compared by start x end": "not by a product"}
HINTS = {"a greedy span (the best start, then the best end after it)": (SPANS, {BEST, INSIDE, LIMIT}),
         "spans in the question": (SPANS, {BEST, INSIDE, ORDER}),
         "the length limit off by one": (SPANS, {LIMIT}),
         "end before start": (SPANS, {BEST, INSIDE, ORDER, LIMIT}),
         "F1 = zero_division when P + R = 0": (ENTITIES, {ZERO}),
         "windows compared after a softmax within each window": ({W_BEST, W_OFFSETS, W_LEGAL}, {W_BEST}),
         "windows compared by start x end": ({W_BEST, W_OFFSETS, W_LEGAL}, {W_BEST})}
OTHERS = {"greedy": "another legal span scores higher", "inside": "CONTEXT (sequence id 1)",
          "limit": "at most max_answer_tokens", "order": "end >= start"}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(HINTS))
def test_the_hint_names_the_mistake_made(name):
    among, failing = HINTS[name]
    expected = dict.fromkeys(failing, SAYS[name])  # a span checked for legality first, then for being the best
    assert_hints_name(CHECKS, SOURCES[name][0], set(among), expected,
                      tuple(words for words in OTHERS.values() if words != SAYS[name]))


@pytest.mark.slow
def test_windows_compared_right_on_a_wrong_best_span_are_sent_to_part_4():
    """A greedy best_span inside a right answer_in_windows: the window checks say the spans are part 4's mistake,
    not that the windows were compared wrong."""
    windows = {W_BEST, W_OFFSETS, W_LEGAL}
    assert_hints_name(CHECKS, SOURCES["a greedy span (the best start, then the best end after it)"][0], windows,
                      dict.fromkeys(windows, "fix part 4 first"), ("not by the start logit alone",
                                                                  "offsets of the window", "largest logits"))

"""Hidden checks of ex09-tagging-and-qa: word labels aligned to pieces, entity-level P/R/F1 from BIO tags, and
the answer span of extractive QA, in one window and across the windows of a long context.

Every input is what a fast tokenizer gives: the judge trains a tiny WordPiece tokenizer on a few sentences
with the course's own helper (`bertcourse.tokenizer.train_tokenizer`, offline, deterministic; most words come
out in several pieces) and passes its `word_ids()`, `sequence_ids()` and offsets of stride windows as plain
lists, next to hand-planted rows. References:

- labels: `bertcourse.heads.align_word_labels` with `bio_continuation` (proven in tests/test_heads.py);
- entities: `bertcourse.metrics.entity_spans` / `entity_scores` (conlleval's reading of I- after O or after
  another type; proven against seqeval's rule in tests/test_metrics.py) at the default zero_division, and
  planted cases for zero_division=1;
- spans: a brute force over every (start, end) pair in float64 here; the planted logits keep the best span
  at least 1e-3 ahead of the next, so a float32 implementation finds the same one.

The course package holds its own versions of these functions (lesson 4 uses them): a function that reaches
`bertcourse.heads` or `bertcourse.metrics` (imported, or called by a notebook function it calls) earns nothing
(`borrowed_answer`). tests/checks/test_checks_ex09.py proves each check against its misconception, three
correct implementations and the stubs.
"""

from __future__ import annotations

import functools
import math
import weakref

import pytest
import torch

from bertcourse.grading import Diagnosis, Remote, StudentError
from bertcourse.heads import align_word_labels, bio_continuation
from bertcourse.metrics import entity_scores as reference_scores
from bertcourse.metrics import entity_spans as reference_spans

IGNORE = -100
TOL = 1e-9

# ----------------------------------------------------------------------------- the course's answers are not yours

ANSWERS = ("bertcourse.heads", "bertcourse.metrics")
# Names through which a string becomes an import or code: only a function that uses one of them has its string
# constants read (so a docstring or any other string that merely mentions a course module is free).
IMPORTS_BY_NAME = frozenset({"__import__", "import_module", "exec", "eval", "compile", "modules", "find_spec",
                             "spec_from_file_location", "run_module", "run_path", "load_module", "getattr"})
_cleared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # student -> names already found their own


def _origin(student, remote: Remote) -> str:
    """The module an object of the notebook comes from ('' when it does not say)."""
    try:
        value = student.getattr(remote, "__name__" if remote.type_name == "module" else "__module__")
    except StudentError:
        return ""
    return value if isinstance(value, str) else ""


def _is_answer(origin: str) -> bool:
    return any(origin == m or origin.startswith(m + ".") for m in ANSWERS)


def borrowed_answer(student, name: str) -> str:
    """The course module that the notebook's `name` takes its answer from, '' when none: `name` imported from
    it, or a global that `name` (its nested functions and comprehensions included) or a notebook function it
    calls refers to, or the module's name written out in a function that imports or runs code by name
    (`importlib.import_module("bertcourse.metrics")`, `exec`, `sys.modules[...]`). Only code that imports or
    calls counts: a docstring, a comment or any other string that mentions a course module is no use of it."""
    seen: set[str] = set()
    names, codes = [name], []
    while names or codes:
        if codes:
            code = codes.pop()
            code_names = student.getattr(code, "co_names")  # globals, attributes, and modules imported here
            borrowed = [n for n in code_names if _is_answer(n)]
            if "bertcourse" in code_names:  # `bertcourse.heads.best_span(...)` through the package itself
                borrowed += [f"bertcourse.{n}" for n in code_names if _is_answer(f"bertcourse.{n}")]
            if borrowed:
                return borrowed[0]
            names += [n for n in code_names if n not in seen]
            consts = student.getattr(code, "co_consts")
            by_name = bool(IMPORTS_BY_NAME & set(code_names))
            if isinstance(consts, Remote):  # it holds code objects: nested functions, lambdas, comprehensions
                consts = [student.call_method(consts, "__getitem__", i)
                          for i in range(student.call_method(consts, "__len__"))]
            for const in consts:
                if isinstance(const, Remote) and const.type_name == "code":
                    codes.append(const)
                elif by_name and isinstance(const, str) and any(m in const for m in ANSWERS):
                    return const
            continue
        current = names.pop()
        if current in seen:
            continue
        seen.add(current)
        if not student.has(current):  # an attribute's name or a builtin: not a global of the notebook
            continue
        remote = student.ref(current)
        origin = _origin(student, remote)
        if _is_answer(origin):
            return origin
        if remote.type_name == "function" and origin == "__main__":
            codes.append(student.getattr(remote, "__code__", as_remote=True))
    return ""


def own(student, name: str) -> None:
    """Fails unless the notebook's `name` is its own work (once per check)."""
    cleared = _cleared.setdefault(student, set())
    if name not in cleared:
        origin = borrowed_answer(student, name)
        assert not origin, (f"`{name}` uses the course's own answer ({origin}): the exercise is to write it "
                            "yourself, so it earns nothing")
        cleared.add(name)


def call(student, name: str, *args, **kwargs):
    own(student, name)
    return student.call(name, *args, **kwargs)


def integer(value, what: str) -> int:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    assert isinstance(value, int) and not isinstance(value, bool), f"{what} must be an integer"
    return value


def integers(value, count: int | None, what: str) -> list[int]:
    if isinstance(value, torch.Tensor):
        assert value.dim() == 1, f"{what} must be one value per token (a list or a 1-D tensor)"
        value = value.tolist()
    assert isinstance(value, (list, tuple)), f"{what} must return a list"
    if count is not None:
        assert len(value) == count, f"{what} must return {count} values here, one per token; got {len(value)}"
    return [integer(v, f"each value {what} returns") for v in value]


def number(value, what: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{what} must be a number"
    return float(value)


# ----------------------------------------------------------------------------- a tokenizer built here

SENTENCES = [
    "Marie Curie moved to Paris in November 1891 .",
    "The Nobel Prize in Physics went to Pierre Curie and Henri Becquerel in 1903 .",
    "Warsaw was her home until she left for France .",
    "Radioactivity was measured with an electrometer built by Pierre .",
]
TAGS = [
    "B-PER I-PER O O B-LOC O B-DATE I-DATE O",
    "O B-MISC I-MISC I-MISC I-MISC O O B-PER I-PER O B-PER I-PER O B-DATE O",
    "B-LOC O O O O O O O B-LOC O",
    "O O O O O O O O B-PER O",
]
# Label ids in no particular order: the ids are those of `label_ids`, not of a list the checks keep.
LABEL_IDS = {"I-LOC": 0, "B-DATE": 1, "O": 2, "I-PER": 3, "B-MISC": 4, "B-PER": 5, "I-MISC": 6, "I-DATE": 7,
             "B-LOC": 8}
QUESTION = "Who shared the prize with the Curies ?"


@functools.cache
def tokenizer():
    from bertcourse.tokenizer import train_tokenizer

    return train_tokenizer(SENTENCES + [QUESTION], vocab_size=100, progress=False)


@functools.cache
def tagged_rows() -> tuple[tuple[list, list[str]], ...]:
    """(word_ids, word tags) of the four sentences, as one padded batch gives them."""
    words = [s.split() for s in SENTENCES]
    encoding = tokenizer()(words, is_split_into_words=True, padding=True)
    return tuple((encoding.word_ids(row), tags.split()) for row, tags in enumerate(TAGS))


# Hand-planted rows: a one-piece word after a many-piece one, a word of one piece at the end, padding.
PLANTED = [
    ([None, 0, 0, 0, 1, 2, 2, 3, None, None], "B-PER I-PER O B-LOC"),
    ([None, 0, 1, 1, 2, 2, 2, 2, 3, 4, 4, None], "O B-DATE I-DATE I-DATE O"),
    ([None, 0, 0, 1, 1, 2, None], "B-MISC B-MISC I-MISC"),
]


def label_rows() -> list[tuple[list, list[str]]]:
    return list(tagged_rows()) + [(ids, tags.split()) for ids, tags in PLANTED]


# ----------------------------------------------------------------------------- part 1: align_labels


def reference_align(word_ids: list, tags: list[str], all_pieces: bool) -> list[int]:
    names = sorted(LABEL_IDS, key=LABEL_IDS.get)
    return align_word_labels(word_ids, [LABEL_IDS[t] for t in tags], all_pieces, bio_continuation(names))


def student_align(student, word_ids, tags, all_pieces: bool) -> list[int]:
    value = call(student, "align_labels", list(word_ids), list(tags), dict(LABEL_IDS), all_pieces=all_pieces)
    return integers(value, len(word_ids), "align_labels")


def pieces(word_ids: list) -> tuple[list[int], list[int]]:
    """Positions of the first pieces and of the other pieces of words."""
    first, other = [], []
    for i, word in enumerate(word_ids):
        if word is not None:
            (other if i > 0 and word_ids[i - 1] == word else first).append(i)
    return first, other


def assert_first_pieces(student, all_pieces: bool = False) -> None:
    for word_ids, tags in label_rows():
        got, expected = student_align(student, word_ids, tags, all_pieces), reference_align(word_ids, tags, all_pieces)
        first, _ = pieces(word_ids)
        assert [got[i] for i in first] == [expected[i] for i in first], (
            "the first piece of some word does not carry its word's label id")


def assert_aligns_first_pieces(student) -> None:
    try:
        assert_first_pieces(student)
    except AssertionError:
        raise AssertionError("not credited until the first piece of every word gets its word's label") from None


@pytest.mark.check(cell="align_labels_checks", points=2.0,
                   feedback="a word's label goes on its FIRST piece, the first token of that word in word_ids(); "
                            "tokens are matched to words through word_ids(), not by position (a word of three "
                            "pieces moves every later word three tokens on)")
def test_first_piece_gets_the_word_label(student):
    assert_first_pieces(student)


@pytest.mark.check(cell="align_labels_checks", points=1.0,
                   feedback="special tokens and padding (word id None) get -100 in both modes: they are no word, "
                            "and -100 is what the loss skips; credited once first pieces are right")
def test_special_tokens_get_minus_100(student):
    assert_aligns_first_pieces(student)
    for all_pieces in (False, True):
        for word_ids, tags in label_rows():
            got = student_align(student, word_ids, tags, all_pieces)
            assert all(got[i] == IGNORE for i, w in enumerate(word_ids) if w is None), (
                f"a special token or padding did not get -100 (all_pieces={all_pieces})")


@pytest.mark.check(cell="align_labels_checks", points=1.0,
                   feedback="in first-piece mode every other piece of a word gets -100, so each word counts once "
                            "in the loss; credited once first pieces are right")
def test_first_piece_mode_ignores_the_other_pieces(student):
    assert_aligns_first_pieces(student)
    for word_ids, tags in label_rows():
        got = student_align(student, word_ids, tags, False)
        _, other = pieces(word_ids)
        assert all(got[i] == IGNORE for i in other), "in first-piece mode a later piece of a word got a label"


@pytest.mark.check(cell="align_labels_checks", points=1.0,
                   feedback="with all_pieces=True every piece is labelled: a later piece of an O or I- word "
                            "carries its word's own label; credited once first pieces are right")
def test_all_pieces_mode_labels_every_piece(student):
    assert_aligns_first_pieces(student)
    for word_ids, tags in label_rows():
        got = student_align(student, word_ids, tags, True)
        _, other = pieces(word_ids)
        plain = [i for i in other if not tags[word_ids[i]].startswith("B-")]
        assert all(got[i] == LABEL_IDS[tags[word_ids[i]]] for i in plain), (
            "with all_pieces=True a later piece of an O or I- word did not carry its word's label")


@pytest.mark.check(cell="align_labels_checks", points=2.0,
                   feedback="with all_pieces=True a B-X word keeps B-X on its first piece only: its later pieces "
                            "continue the entity, so they take I-X (a B- on every piece would start a new entity "
                            "at each piece); credited once first pieces are right")
def test_all_pieces_b_continues_as_i(student):
    assert_aligns_first_pieces(student)
    for word_ids, tags in label_rows():
        got, expected = student_align(student, word_ids, tags, True), reference_align(word_ids, tags, True)
        first, other = pieces(word_ids)
        began = [i for i in first + other if tags[word_ids[i]].startswith("B-")]
        assert [got[i] for i in began] == [expected[i] for i in began], (
            "with all_pieces=True the pieces of a B- word are not B- on the first and I- on the others")


# ----------------------------------------------------------------------------- part 2: entity_spans, entity_scores


def student_spans(student, tags: list[str]) -> list[tuple[str, int, int]]:
    value = call(student, "entity_spans", list(tags))
    assert isinstance(value, (list, tuple)), "entity_spans must return a list of (type, first, last)"
    spans = []
    for span in value:
        assert isinstance(span, (list, tuple)) and len(span) == 3 and isinstance(span[0], str), (
            "each entity must be (type, first word, last word), the type a string such as \"PER\"")
        spans.append((span[0], integer(span[1], "an entity's first word"), integer(span[2], "an entity's last word")))
    return sorted(spans, key=lambda s: (s[1], s[2], s[0]))


def assert_spans(student, cases: list[str], message: str) -> None:
    for case in cases:
        tags = case.split()
        assert student_spans(student, tags) == sorted(reference_spans(tags), key=lambda s: (s[1], s[2], s[0])), (
            message)


RUNS = ["B-PER I-PER O B-LOC O", "O B-DATE I-DATE I-DATE O O B-NUM O", "B-PER B-PER O", "O O O",
        "B-LOC O B-LOC I-LOC O"]


def assert_reads_runs(student) -> None:
    try:
        assert_spans(student, RUNS, "")
    except AssertionError:
        raise AssertionError("not credited until plain B-/I- runs are read as entities") from None


@pytest.mark.check(cell="entity_spans_checks", points=1.0,
                   feedback="an entity is a B-X followed by the I-X words after it; B- always begins a new entity "
                            "(B-PER B-PER is two), and O ends one")
def test_spans_of_b_and_i_runs(student):
    assert_spans(student, RUNS, "some B-/I- runs did not come out as entities (type, first word, last word)")


@pytest.mark.check(cell="entity_spans_checks", points=1.0,
                   feedback="state and apply conlleval's rule: an I-X after O, at the start, or after another type "
                            "begins a new entity of type X (it is neither dropped nor glued to the entity before); "
                            "credited once plain runs are read")
def test_i_after_o_or_another_type_begins_an_entity(student):
    assert_reads_runs(student)
    assert_spans(student, ["O I-PER I-PER O", "I-ORG O", "B-PER I-LOC I-LOC O", "B-PER I-PER I-LOC O",
                           "B-DATE I-NUM O B-NUM O"],
                 "an I- after O, at the start or after another type was not read as the start of an entity")


@pytest.mark.check(cell="entity_spans_checks", points=1.0,
                   feedback="an entity still open at the last word ends there: it is an entity too; credited once "
                            "plain runs are read")
def test_entity_at_the_end_is_kept(student):
    assert_reads_runs(student)
    assert_spans(student, ["O B-PER I-PER", "B-LOC", "O O B-DATE I-DATE"],
                 "an entity that ends at the last word was lost")


def student_scores(student, truth, guess, **kwargs) -> list[float]:
    value = call(student, "entity_scores", [list(t) for t in truth], [list(g) for g in guess], **kwargs)
    assert isinstance(value, (list, tuple)) and len(value) == 3, "entity_scores must return (precision, recall, f1)"
    return [number(v, "each score") for v in value]


def close(got: list[float], expected) -> bool:
    return all(math.isclose(a, float(b), abs_tol=1e-9) for a, b in zip(got, expected, strict=True))


TYPES = ("PER", "LOC", "DATE")


def random_sentence(g: torch.Generator, n: int) -> list[str]:
    tags, i = ["O"] * n, 0
    while i < n:
        if float(torch.rand(1, generator=g)) < 0.35:
            kind, length = TYPES[int(torch.randint(3, (1,), generator=g))], int(torch.randint(1, 4, (1,), generator=g))
            for k in range(i, min(n, i + length)):
                tags[k] = ("B-" if k == i else "I-") + kind
            i += length + 1
        else:
            i += 1
    return tags


def perturbed(g: torch.Generator, tags: list[str]) -> list[str]:
    """A tagger's guess: most words kept, some changed to O, another type, a B- or I- of any type."""
    out = list(tags)
    for i in range(len(out)):
        u = float(torch.rand(1, generator=g))
        if u < 0.08:
            out[i] = "O"
        elif u < 0.16:
            out[i] = ("B-" if float(torch.rand(1, generator=g)) < 0.5 else "I-") + TYPES[
                int(torch.randint(3, (1,), generator=g))]
        elif u < 0.22 and out[i] != "O":
            out[i] = out[i][:2] + TYPES[(TYPES.index(out[i][2:]) + 1) % 3]
    return out


def random_corpus(seed: int, sentences: int = 40) -> tuple[list[list[str]], list[list[str]]]:
    g = torch.Generator().manual_seed(seed)
    truth = [random_sentence(g, int(torch.randint(3, 15, (1,), generator=g))) for _ in range(sentences)]
    return truth, [perturbed(g, t) for t in truth]


def assert_scores_entities(student) -> None:
    for seed in (1, 2, 3):
        truth, guess = random_corpus(seed)
        assert close(student_scores(student, truth, guess), reference_scores(truth, guess)), (
            "precision, recall and F1 are not those of whole entities matched on type, first and last word")


@pytest.mark.check(cell="entity_scores_checks", points=2.0,
                   feedback="a predicted entity is right only when one true entity of the same sentence has its "
                            "type AND its exact first and last word; precision = right / predicted entities, "
                            "recall = right / true entities, F1 their harmonic mean")
def test_entity_scores_on_tagged_sentences(student):
    assert_scores_entities(student)


@pytest.mark.check(cell="entity_scores_checks", points=1.0,
                   feedback="count entities, not tags: a DATE of three words predicted over two of them is one "
                            "wrong entity (no partial credit for overlap), and a PER predicted as LOC is wrong")
def test_no_credit_for_part_of_an_entity(student):
    truth = ["B-DATE I-DATE I-DATE O B-PER O".split(), "B-PER I-PER O B-LOC".split()]
    guess = ["B-DATE I-DATE O O B-PER O".split(), "B-LOC I-LOC O B-LOC".split()]
    assert close(student_scores(student, truth, guess), (0.5, 0.5, 0.5)), (
        "an entity predicted over part of its words, or with the wrong type, earned credit")


@pytest.mark.check(cell="entity_scores_checks", points=1.0,
                   feedback="pool the counts over all sentences first (micro), and match an entity only within its "
                            "own sentence: not a mean of per-sentence scores")
def test_micro_average_within_sentences(student):
    truth = ["B-PER O".split(), "B-LOC I-LOC O B-PER O B-DATE".split(), "O O O".split(), "B-PER O O".split()]
    guess = ["B-PER O".split(), "O O O O O B-LOC".split(), "B-PER O O".split(), "O O O".split()]
    assert close(student_scores(student, truth, guess), reference_scores(truth, guess)), (
        "the scores are not the counts pooled over sentences, each entity matched within its own sentence")


@pytest.mark.check(cell="entity_scores_checks", points=1.0,
                   feedback="with no predicted entity precision is zero_division, with no true entity recall is "
                            "zero_division (the argument, 0 by default); F1 is 0 when precision + recall is 0; "
                            "credited once the scores of tagged sentences are right")
def test_zero_division(student):
    assert_scores_entities(student)
    none, some = [["O", "O"], ["O"]], [["B-PER", "O"], ["O"]]
    one = {"zero_division": 1.0}
    cases = [((none, some, {}), (0.0, 0.0, 0.0)), ((some, none, {}), (0.0, 0.0, 0.0)),
             ((none, none, {}), (0.0, 0.0, 0.0)), ((some, none, one), (1.0, 0.0, 0.0)),
             ((none, some, one), (0.0, 1.0, 0.0)), ((none, none, one), (1.0, 1.0, 1.0))]
    wrong = [["B-LOC", "O"], ["O"]]  # one true and one predicted entity, and no match: P = R = 0
    for kwargs in ({}, one, {"zero_division": 0.5}):
        got = student_scores(student, some, wrong, **kwargs)
        if close(got[:2], (0.0, 0.0)) and not close(got[2:], (0.0,)):
            raise Diagnosis("F1 is 0 when precision + recall is 0, whatever zero_division is: zero_division stands "
                            "in for a ratio with nothing to count (no predicted or no true entity), and here "
                            "both exist", f"with P = R = 0 and zero_division={kwargs.get('zero_division', 0.0)}, "
                                      f"F1 was {got[2]:g}")
        assert close(got, (0.0, 0.0, 0.0)), (
            "with a predicted entity that matches no true one, the scores are not 0 "
            f"(zero_division={kwargs.get('zero_division', 0.0)})")
    for (truth, guess, kwargs), expected in cases:
        missing = " and no ".join(side for side, tags in (("true", truth), ("predicted", guess)) if tags is none)
        assert close(student_scores(student, truth, guess, **kwargs), expected), (
            f"with no {missing} entities (zero_division={kwargs.get('zero_division', 0.0)}) the scores are not "
            "as stated")


# ----------------------------------------------------------------------------- part 3: answer spans


@functools.cache
def windows_of(max_length: int, stride: int) -> tuple[tuple[list, list], ...]:
    """(sequence_ids, offsets) of the stride windows of QUESTION over all of SENTENCES as one context."""
    encoding = tokenizer()(QUESTION, " ".join(SENTENCES), truncation="only_second", max_length=max_length,
                           stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True, padding=True)
    return tuple((encoding.sequence_ids(row), [tuple(o) for o in encoding["offset_mapping"][row]])
                 for row in range(len(encoding["input_ids"])))


def reference_span(start: list[float], end: list[float], sequence_ids: list, max_tokens: int) -> tuple[int, int, float]:
    """Brute force: the best (start, end, score) over every legal pair; the runner-up at least 1e-3 behind."""
    scores = sorted(((start[i] + end[j], i, j) for i, si in enumerate(sequence_ids) if si == 1
                     for j in range(i, min(len(end), i + max_tokens)) if sequence_ids[j] == 1), reverse=True)
    assert len(scores) < 2 or scores[0][0] - scores[1][0] > 1e-3, "planted logits too close to call"
    return scores[0][1], scores[0][2], scores[0][0]


def random_logits(seed: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g) * 3, torch.randn(n, generator=g) * 3


def student_span(student, start, end, sequence_ids, max_tokens) -> tuple[int, int]:
    value = call(student, "best_span", start, end, list(sequence_ids), max_answer_tokens=max_tokens)
    assert isinstance(value, (list, tuple)) and len(value) == 2, "best_span must return (start, end)"
    return integer(value[0], "the start"), integer(value[1], "the end")


OPTIMALITY = ("the span returned is legal, but another legal span scores higher: score EVERY legal (start, end) "
              "pair by start_logits[start] + end_logits[end] and take the best; choosing the start first and then "
              "an end for it can miss the best pair")


LEGAL_HINTS = {
    "outside the row": "start and end are token positions of this row: 0 to len(sequence_ids) - 1",
    "outside the context": "both ends must lie in the CONTEXT (sequence id 1): never in the question (0), never on "
                           "[CLS], [SEP] or padding (None)",
    "backwards": "a span ends at or after its start (end >= start): the best start and the best end chosen apart "
                 "may come in the wrong order",
    "too long": "a span holds at most max_answer_tokens tokens, both ends counted (end - start + 1)",
}

def legality(span: tuple[int, int], sequence_ids: list, max_tokens: int) -> str:
    """What makes a span illegal ('' when it is legal)."""
    first, last = span
    if not (0 <= first < len(sequence_ids) and 0 <= last < len(sequence_ids)):
        return "outside the row"
    if sequence_ids[first] != 1 or sequence_ids[last] != 1:
        return "outside the context"
    if last < first:
        return "backwards"
    return "too long" if last - first + 1 > max_tokens else ""


def assert_span_case(student, start, end, sequence_ids, max_tokens, message: str, about: tuple[str, ...] = ()) -> None:
    """The span is the best legal one. Legality first: a span broken in a way that `about` names fails with
    `message` (the check's own mistake); a legal span that is not the best is told about optimality."""
    expected = reference_span(start.tolist(), end.tolist(), sequence_ids, max_tokens)[:2]
    got = student_span(student, start, end, sequence_ids, max_tokens)
    if got == expected:
        return
    broken = legality(got, sequence_ids, max_tokens)
    if not broken:
        raise Diagnosis(OPTIMALITY, f"the span returned, {got}, is legal but not the best legal one "
                                    f"(max_answer_tokens={max_tokens})")
    if broken in about:
        raise AssertionError(message)
    raise Diagnosis(LEGAL_HINTS[broken], f"the span returned, {got}, is {broken}")


def assert_best_span_works(student) -> None:
    sequence_ids, _ = windows_of(40, 10)[1]
    start, end = random_logits(5, len(sequence_ids))
    try:
        assert_span_case(student, start, end, sequence_ids, 30, "")
    except Diagnosis:
        raise
    except AssertionError:
        raise AssertionError("not credited until the best span of random logits is found") from None


@pytest.mark.check(cell="best_span_checks", points=2.0,
                   feedback="the answer is the legal (start, end) with the highest start_logits[start] + "
                            "end_logits[end]: score every legal pair, not the best start and the best end apart")
def test_best_legal_span(student):
    for seed, (max_length, stride, row), max_tokens in ((1, (40, 10, 0), 30), (2, (40, 10, 2), 5),
                                                        (3, (64, 16, 1), 8), (4, (32, 8, 3), 3)):
        sequence_ids, _ = windows_of(max_length, stride)[row]
        start, end = random_logits(seed, len(sequence_ids))
        assert_span_case(student, start, end, sequence_ids, max_tokens,
                         f"the span returned is not the best legal one (max_answer_tokens={max_tokens})")


def planted(sequence_ids: list, seed: int, plants: dict[str, dict[int, float]]) -> tuple[torch.Tensor, torch.Tensor]:
    start, end = random_logits(seed, len(sequence_ids))
    for position, value in plants.get("start", {}).items():
        start[position] = value
    for position, value in plants.get("end", {}).items():
        end[position] = value
    return start, end


@pytest.mark.check(cell="best_span_checks", points=1.0,
                   feedback="both ends must lie in the CONTEXT (sequence id 1): never in the question (0), never "
                            "on [CLS], [SEP] or padding (None); credited once random logits give the best span")
def test_span_inside_the_context(student):
    assert_best_span_works(student)
    sequence_ids, _ = windows_of(40, 10)[0]
    question = [i for i, s in enumerate(sequence_ids) if s == 0]
    special = [i for i, s in enumerate(sequence_ids) if s is None]
    for seed, plants in ((11, {"start": {question[1]: 40.0}, "end": {question[2]: 40.0}}),
                         (12, {"start": {0: 40.0}, "end": {0: 40.0}}),
                         (13, {"start": {special[1]: 40.0}, "end": {special[-1]: 40.0}}),
                         (14, {"start": {question[-1]: 40.0}, "end": {special[1]: 40.0}})):
        start, end = planted(sequence_ids, seed, plants)
        assert_span_case(student, start, end, sequence_ids, 30,
                         "the highest scores sat in the question or on special tokens, and the span went there",
                         ("outside the context", "outside the row"))


@pytest.mark.check(cell="best_span_checks", points=1.0,
                   feedback="a span ends at or after its start (end >= start): the best start and the best end "
                            "apart may come in the wrong order; credited once random logits give the best span")
def test_end_not_before_start(student):
    assert_best_span_works(student)
    sequence_ids, _ = windows_of(40, 10)[1]
    context = [i for i, s in enumerate(sequence_ids) if s == 1]
    for seed, (s, e) in ((21, (context[6], context[2])), (22, (context[-1], context[0]))):
        start, end = planted(sequence_ids, seed, {"start": {s: 20.0}, "end": {e: 20.0}})
        assert_span_case(student, start, end, sequence_ids, 30,
                         "the best start came after the best end, and the span returned ends before it starts",
                         ("backwards",))


@pytest.mark.check(cell="best_span_checks", points=1.0,
                   feedback="a span holds at most max_answer_tokens tokens, both ends counted (end - start + 1); "
                            "credited once random logits give the best span")
def test_length_limit(student):
    assert_best_span_works(student)
    sequence_ids, _ = windows_of(40, 10)[1]
    first = next(i for i, s in enumerate(sequence_ids) if s == 1)
    for seed, length, limit in ((31, 6, 5), (32, 5, 5), (33, 12, 4), (34, 2, 1), (35, 1, 1)):
        start, end = planted(sequence_ids, seed, {"start": {first + 2: 20.0}, "end": {first + 1 + length: 20.0}})
        assert_span_case(student, start, end, sequence_ids, limit,
                         f"a span longer than max_answer_tokens={limit} was returned", ("too long",))


def student_chars(student, offsets, start, end) -> tuple[int, int]:
    value = call(student, "span_to_chars", list(offsets), start, end)
    assert isinstance(value, (list, tuple)) and len(value) == 2, "span_to_chars must return (first, end) characters"
    return integer(value[0], "the first character"), integer(value[1], "the end character")


@pytest.mark.check(cell="span_to_chars_checks", points=2.0,
                   feedback="the offsets give each token's characters [first, end) in the context: the answer "
                            "runs from its first token's first character to its LAST token's end, in the window "
                            "the tokens came from")
def test_tokens_back_to_characters(student):
    for max_length, stride, row in ((40, 10, 0), (40, 10, 3), (32, 8, 5)):
        sequence_ids, offsets = windows_of(max_length, stride)[row]
        context = [i for i, s in enumerate(sequence_ids) if s == 1]
        for a, b in ((context[0], context[0]), (context[1], context[4]), (context[3], context[-1]),
                     (context[-2], context[-1])):
            assert student_chars(student, offsets, a, b) == (offsets[a][0], offsets[b][1]), (
                "tokens start..end were not mapped to the characters of the context they came from")


def window_dicts(max_length: int, stride: int, seed: int) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for sequence_ids, offsets in windows_of(max_length, stride):
        out.append({"start_logits": torch.randn(len(sequence_ids), generator=g) * 3,
                    "end_logits": torch.randn(len(sequence_ids), generator=g) * 3,
                    "sequence_ids": list(sequence_ids), "offsets": list(offsets)})
    return out


def reference_windows(windows: list[dict], max_tokens: int) -> tuple[int, int]:
    best = [(reference_span(w["start_logits"].tolist(), w["end_logits"].tolist(), w["sequence_ids"], max_tokens), w)
            for w in windows]
    scores = sorted((b[0][2] for b in best), reverse=True)
    assert len(scores) < 2 or scores[0] - scores[1] > 1e-3, "planted windows too close to call"
    (start, end, _), window = max(best, key=lambda b: b[0][2])
    return window["offsets"][start][0], window["offsets"][end][1]


def student_windows(student, windows: list[dict], max_tokens: int) -> tuple[int, int]:
    value = call(student, "answer_in_windows", windows, max_answer_tokens=max_tokens)
    assert isinstance(value, (list, tuple)) and len(value) == 2, (
        "answer_in_windows must return (first, end) characters of the context")
    return integer(value[0], "the first character"), integer(value[1], "the end character")


PART4_FIRST = ("each window's candidate is its best legal span, which your best_span does not find yet here: the "
               "windows were compared right, on the spans best_span gave; fix part 4 first")


def assert_window_answer(student, windows: list[dict], max_tokens: int, message: str) -> None:
    """The answer is the reference's; when it is not but it is what the student's own best_span leads to (each
    window's span from it, compared by start + end), the mistake is part 4's, and the hint says so."""
    got = student_windows(student, windows, max_tokens)
    if got == reference_windows(windows, max_tokens):
        return
    spans = [student_span(student, w["start_logits"], w["end_logits"], w["sequence_ids"], max_tokens) for w in windows]
    best = [reference_span(w["start_logits"].tolist(), w["end_logits"].tolist(), w["sequence_ids"], max_tokens)[:2]
            for w in windows]
    if spans != best:
        scores = [float(w["start_logits"][a] + w["end_logits"][b]) for w, (a, b) in zip(windows, spans)]
        k = max(range(len(windows)), key=scores.__getitem__)
        offsets = windows[k]["offsets"]
        if 0 <= spans[k][0] < len(offsets) and 0 <= spans[k][1] < len(offsets) and got == (
                offsets[spans[k][0]][0], offsets[spans[k][1]][1]):
            raise Diagnosis(PART4_FIRST, "the answer is the best of the spans your best_span gave, one window's "
                                         "span not its best legal one")
    raise AssertionError(message)


def assert_one_window_works(student) -> None:
    windows = window_dicts(40, 10, 41)[2:3]
    assert_window_answer(student, windows, 30,
                         "not credited until one window's answer is its best legal span, in characters")


def plant(window: dict, where: str, position: int, value: float) -> None:
    window[where] = window[where].clone()
    window[where][position] = value


def context_positions(window: dict) -> list[int]:
    return [i for i, s in enumerate(window["sequence_ids"]) if s == 1]


def modest_windows(seed: int) -> list[dict]:
    windows = window_dicts(40, 10, seed)
    for w in windows:  # every window a modest best span
        w["start_logits"], w["end_logits"] = w["start_logits"] / 3, w["end_logits"] / 3
    return windows


@pytest.mark.check(cell="answer_in_windows_checks", points=1.0,
                   feedback="windows are compared by the score of their best LEGAL span, start logit + end logit, "
                            "the logits themselves: not by the start logit alone, not by probabilities from a softmax "
                            "within each window (each window's are relative to that window only), not by a product; "
                            "credited once one window's answer is right")
def test_best_window_by_span_score(student):
    assert_one_window_works(student)
    for seed, (strong_start, best) in ((42, (1, 4)), (43, (5, 2))):
        windows = modest_windows(seed)
        a, b = context_positions(windows[strong_start]), context_positions(windows[best])
        plant(windows[strong_start], "start_logits", a[3], 14.0)  # the highest start of all, its ends weak
        plant(windows[best], "start_logits", b[2], 11.0)
        plant(windows[best], "end_logits", b[4], 11.0)
        assert_window_answer(student, windows, 30,
                             "the answer did not come from the window whose best legal span scores highest")
    # On the stated scale window `best` wins (22 against 20); after a softmax within each window `crowded` wins
    # (its best span near probability 1, while `best` shares its mass with four other strong starts and ends).
    for seed, (crowded, best) in ((49, (2, 5)), (50, (6, 1))):
        windows = modest_windows(seed)
        c, b = context_positions(windows[crowded]), context_positions(windows[best])
        plant(windows[crowded], "start_logits", c[2], 10.0)
        plant(windows[crowded], "end_logits", c[4], 10.0)
        plant(windows[best], "start_logits", b[5], 11.0)
        plant(windows[best], "end_logits", b[7], 11.0)
        for k in (0, 1, 9, 10):
            plant(windows[best], "start_logits", b[k], 10.3)
            plant(windows[best], "end_logits", b[k], 10.3)
        assert_window_answer(student, windows, 30,
                             "the window whose best span had the highest start + end logits lost to one whose span "
                             "is likelier within its own window")
    # On the stated scale window `best` wins (16 against 15); by start x end `even` wins (56.25 against 28).
    for seed, (even, best) in ((51, (3, 0)), (52, (1, 6))):
        windows = modest_windows(seed)
        e, b = context_positions(windows[even]), context_positions(windows[best])
        plant(windows[even], "start_logits", e[1], 7.5)
        plant(windows[even], "end_logits", e[3], 7.5)
        plant(windows[best], "start_logits", b[2], 14.0)
        plant(windows[best], "end_logits", b[3], 2.0)
        assert_window_answer(student, windows, 30,
                             "the window whose best span had the highest start + end logits lost to one with a larger "
                             "start x end")


@pytest.mark.check(cell="answer_in_windows_checks", points=1.0,
                   feedback="each window has its own offsets: the answer's characters come from the offsets of "
                            "the window that holds the best span; credited once one window's answer is right")
def test_offsets_of_the_winning_window(student):
    assert_one_window_works(student)
    for seed, best in ((44, 3), (45, 6), (46, 1)):
        windows = window_dicts(40, 10, seed)
        b = context_positions(windows[best])
        plant(windows[best], "start_logits", b[5], 15.0)
        plant(windows[best], "end_logits", b[7], 15.0)
        assert_window_answer(student, windows, 30, "the answer's characters are not those of the best span's own "
                                                    "window")


@pytest.mark.check(cell="answer_in_windows_checks", points=1.0,
                   feedback="a window's score is its best LEGAL span's (inside the context, end >= start, within the "
                            "length limit), not its largest logits wherever they are; credited once one window's "
                            "answer is right")
def test_window_scores_are_legal_spans(student):
    assert_one_window_works(student)
    for seed, (loud, best), long in ((47, (2, 5), False), (48, (4, 1), True)):
        windows = window_dicts(40, 10, seed)
        w, b = windows[loud], context_positions(windows[best])
        plant(windows[best], "start_logits", b[2], 20.0)  # the best legal span of all: 40
        plant(windows[best], "end_logits", b[3], 20.0)
        question, context = [i for i, s in enumerate(w["sequence_ids"]) if s == 0], context_positions(w)
        plant(w, "start_logits", question[1], 30.0)  # loud logits where no answer may be: 60
        plant(w, "end_logits", 0, 30.0)
        # and in the context a pair that is too long (with max_answer_tokens 6) or backwards: 50
        first, last = (context[2], context[10]) if long else (context[-1], context[0])
        plant(w, "start_logits", first, 25.0)
        plant(w, "end_logits", last, 25.0)
        max_tokens = 6 if long else 30
        assert_window_answer(student, windows, max_tokens,
                             "a window won with logits in the question, on a special token, or on an illegal pair")

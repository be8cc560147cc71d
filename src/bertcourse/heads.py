"""Heads for the other fine-tuning tasks (lesson 4, section 6): sentence pairs, token labels, answer spans.

A pretrained encoder gives one vector per token. What changes from task to task is only which vectors a
head reads and what it predicts from them:

- **sentence pairs** (NLI, paraphrase): the pair is ONE input `[CLS] A [SEP] B [SEP]`, segment id 0 on
  `[CLS] A [SEP]` and 1 on `B [SEP]`, so that attention compares the two sentences in every layer; the
  head is the sentence classifier of `bertcourse.classifier` reading `[CLS]` (`encode_pairs` builds the
  input with the course tokenizer's own pair template);
- **token classification** (NER, POS tags): a linear layer on every token. Labels belong to words but
  the model sees pieces, so a word's label goes on its FIRST piece and the other pieces get -100, the
  label cross-entropy ignores (`align_word_labels`): each word then counts once in the loss and in the
  scores, however many pieces the tokenizer cut it into;
- **extractive QA** (SQuAD): `[CLS] question [SEP] context [SEP]`, and a linear layer giving every token
  a start and an end score. The answer is the span (start <= end, at most `max_answer_tokens` tokens,
  both ends inside the context) with the highest start + end score (`best_span`), turned back into the
  context's characters with the tokenizer's offsets (`span_to_chars`): the answer is a piece of the
  original text, not of the lower-cased, split pieces.

Shapes: B batch, S sequence, D d_model, L labels.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bertcourse.masking import IGNORE_INDEX
from bertcourse.model import init_linear_

# ----------------------------------------------------------------------------- sentence pairs


def encode_pairs(tokenizer: Any, first: Sequence[str], second: Sequence[str], max_length: int) -> Any:
    """`[CLS] A [SEP] B [SEP]` rows with segment ids 0/1, padded, as tensors (a `BatchEncoding`).

    Over-long pairs are cut from the longer sentence first (`truncation=True`, i.e. longest_first), so
    neither sentence disappears entirely. Feed `input_ids`, `attention_mask` and `token_type_ids` to a
    `bertcourse.classifier.SequenceClassifier` on a BERT. Segment ids are asked for explicitly: a
    tokenizer rebuilt from a checkpoint's JSON (`tokenizer_from_json`) does not return them by default.
    """
    if len(first) != len(second):
        raise ValueError(f"{len(first)} first sentences but {len(second)} second sentences")
    return tokenizer(list(first), list(second), truncation=True, max_length=max_length, padding=True,
                     return_token_type_ids=True, return_tensors="pt")


# ----------------------------------------------------------------------------- token classification


def align_word_labels(word_ids: Sequence[int | None], word_labels: Sequence[int], all_pieces: bool = False,
                      continuation: Sequence[int] | None = None) -> list[int]:
    """One label per token: word w's label on its first piece, -100 on its other pieces and on special tokens.

    `word_ids` is a tokenizer's `word_ids(row)` (None for `[CLS]`, `[SEP]`, padding). With `all_pieces`
    every piece is labelled (transformers' `label_all_tokens`): a continuation piece gets
    `continuation[label]` (see `bio_continuation`: B-X becomes I-X, since the piece continues the entity
    its word began), or the word's own label when `continuation` is None.
    """
    labels, previous = [], None
    for word in word_ids:
        if word is not None and not 0 <= word < len(word_labels):
            raise ValueError(f"word id {word} but only {len(word_labels)} word labels")
        if word is None or (word == previous and not all_pieces):
            labels.append(IGNORE_INDEX)
        elif word == previous:
            label = int(word_labels[word])
            labels.append(label if continuation is None else int(continuation[label]))
        else:
            labels.append(int(word_labels[word]))
        previous = word
    return labels


def bio_continuation(label_names: Sequence[str]) -> list[int]:
    """For each label id, the id a continuation piece takes: B-X -> I-X (which must exist), any other itself."""
    index = {name: i for i, name in enumerate(label_names)}
    out = []
    for i, name in enumerate(label_names):
        if name.startswith("B-"):
            inside = "I-" + name[2:]
            if inside not in index:
                raise ValueError(f"label {name!r} has no {inside!r} for its continuation pieces")
            out.append(index[inside])
        else:
            out.append(i)
    return out


def encode_tagged_words(tokenizer: Any, words: Sequence[Sequence[str]], tags: Sequence[Sequence[int]] | None = None,
                        max_length: int = 128, all_pieces: bool = False,
                        continuation: Sequence[int] | None = None) -> Any:
    """Pre-split sentences (a list of words each) as padded tensors; with `tags` (one per word), `labels` too.

    Words cut off by `max_length` lose their labels with their pieces; every kept word keeps its own.
    `all_pieces` and `continuation` choose how the other pieces of a word are labelled (`align_word_labels`).
    """
    encoding = tokenizer([list(w) for w in words], is_split_into_words=True, truncation=True,
                         max_length=max_length, padding=True, return_tensors="pt")
    if tags is not None:
        if len(tags) != len(words):
            raise ValueError(f"{len(words)} sentences but {len(tags)} tag lists")
        for row, (sentence, row_tags) in enumerate(zip(words, tags)):
            if len(sentence) != len(row_tags):
                raise ValueError(f"sentence {row}: {len(sentence)} words but {len(row_tags)} tags")
        encoding["labels"] = torch.tensor([align_word_labels(encoding.word_ids(row), tags[row], all_pieces,
                                                             continuation) for row in range(len(words))])
    return encoding


class TokenClassifierOutput(NamedTuple):
    """`loss` (mean cross-entropy over the labelled tokens, None without labels), `logits` [B, S, L]."""

    loss: torch.Tensor | None
    logits: torch.Tensor


class TokenClassifier(nn.Module):
    """encoder -> dropout -> linear at every position; the loss skips tokens labelled -100."""

    def __init__(self, encoder: nn.Module, n_labels: int, dropout: float = 0.1):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.d_model, n_labels)
        init_linear_(self.classifier)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> TokenClassifierOutput:
        """Token ids and mask [B, S] -> logits [B, S, L]; labels [B, S] (-100: not scored) give the loss."""
        hidden = self.encoder.encode(input_ids, attention_mask, token_type_ids)  # [B, S, D]
        logits = self.classifier(self.dropout(hidden)).float()  # [B, S, L]
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
        return TokenClassifierOutput(loss, logits)


def word_predictions(logits: torch.Tensor, word_ids: Sequence[int | None]) -> list[int]:
    """One predicted label per word of one row (logits [S, L]): the prediction at the word's first piece."""
    predicted = logits.argmax(-1).tolist()
    out: dict[int, int] = {}
    for position, word in enumerate(word_ids):
        if word is not None and word not in out:
            out[word] = predicted[position]
    return [out[w] for w in sorted(out)]


# The course's own tagging set: no NER corpus is reachable offline, so entities are derived by a fixed rule
# from real sentences (WikiText's). The rule reads only what a lower-casing tokenizer keeps (words and
# digits), so a model can learn it; its entities span one to three words and their words are often
# several pieces ("500,000" is three), which is what the B-/I- bookkeeping is about.
TAG_NAMES = ("O", "B-DATE", "I-DATE", "B-NUM", "I-NUM")
MONTHS = frozenset("January February March April May June July August September October November December".split())
_NUMBER = re.compile(r"^\d[\d,.]*$")


def number_date_tags(words: Sequence[str]) -> list[str]:
    """BIO tags of one sentence: DATE is a month name next to a number ("11 March 1942", "March 1942",
    "11 March"; a month alone is O, so the modal "May" never is one); NUM is a run of other numbers."""
    tags = ["O"] * len(words)
    is_number = [bool(_NUMBER.match(w)) for w in words]
    for i, word in enumerate(words):
        if word not in MONTHS:
            continue
        day = i > 0 and is_number[i - 1] and len(words[i - 1]) <= 2 and tags[i - 1] == "O"
        year = i + 1 < len(words) and is_number[i + 1]
        if day or year:
            first, last = i - day, i + year
            tags[first:last + 1] = ["B-DATE"] + ["I-DATE"] * (last - first)
    for i in range(len(words)):
        if is_number[i] and tags[i] == "O":
            tags[i] = "I-NUM" if i > 0 and tags[i - 1] in ("B-NUM", "I-NUM") else "B-NUM"
    return tags


# ----------------------------------------------------------------------------- extractive QA


def encode_question_context(tokenizer: Any, questions: Sequence[str], contexts: Sequence[str],
                            max_length: int) -> Any:
    """`[CLS] question [SEP] context [SEP]` rows, padded, with character offsets (`offset_mapping`).

    Only the context is cut when a row is too long (`only_second`): a question cut short would be a
    different question. `sequence_ids(row)` tells question (0), context (1) and special tokens (None).
    """
    if len(questions) != len(contexts):
        raise ValueError(f"{len(questions)} questions but {len(contexts)} contexts")
    return tokenizer(list(questions), list(contexts), truncation="only_second", max_length=max_length,
                     padding=True, return_offsets_mapping=True, return_token_type_ids=True, return_tensors="pt")


def context_mask(encoding: Any) -> torch.Tensor:
    """[B, S] bool: True at the context's tokens (where an answer may start and end), False elsewhere."""
    rows = encoding["input_ids"].shape[0]
    return torch.tensor([[s == 1 for s in encoding.sequence_ids(row)] for row in range(rows)])


def answer_token_span(offsets: Sequence[Sequence[int]], in_context: Sequence[bool], char_start: int,
                      char_end: int) -> tuple[int, int] | None:
    """The tokens (start, end), both included, that cover context characters [char_start, char_end).

    The training targets of a QA head. None when the answer is not wholly inside the context tokens kept
    (cut off by `max_length`); such a row is usually dropped or pointed at `[CLS]`.
    """
    if not 0 <= char_start < char_end:
        raise ValueError(f"an answer needs 0 <= char_start < char_end, got {char_start}, {char_end}")
    kept = [t for t, inside in enumerate(in_context) if inside]
    if not kept or char_start < offsets[kept[0]][0] or char_end > offsets[kept[-1]][1]:
        return None
    start = next(t for t in kept if offsets[t][1] > char_start)  # the token holding the first character
    end = next(t for t in reversed(kept) if offsets[t][0] < char_end)  # the token holding the last one
    return (start, end) if start <= end else None


class SpanOutput(NamedTuple):
    """`loss` (mean of the start and end cross-entropies, None without targets); logits [B, S] each."""

    loss: torch.Tensor | None
    start_logits: torch.Tensor
    end_logits: torch.Tensor


class QuestionAnswering(nn.Module):
    """encoder -> linear D -> 2 at every position: a start score and an end score per token."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.qa_outputs = nn.Linear(encoder.config.d_model, 2)
        init_linear_(self.qa_outputs)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None, start_positions: torch.Tensor | None = None,
                end_positions: torch.Tensor | None = None) -> SpanOutput:
        """Logits [B, S] for start and end (padding gets the lowest score); targets [B] give the loss."""
        hidden = self.encoder.encode(input_ids, attention_mask, token_type_ids)  # [B, S, D]
        logits = self.qa_outputs(hidden).float()  # [B, S, 2]
        logits = logits.masked_fill((attention_mask == 0)[..., None], torch.finfo(logits.dtype).min)
        start_logits, end_logits = logits.unbind(-1)  # [B, S] each
        loss = None
        if (start_positions is None) != (end_positions is None):
            raise ValueError("give both start_positions and end_positions, or neither")
        if start_positions is not None:
            loss = (F.cross_entropy(start_logits, start_positions) + F.cross_entropy(end_logits, end_positions)) / 2
        return SpanOutput(loss, start_logits, end_logits)


def best_span(start_logits: torch.Tensor, end_logits: torch.Tensor, allowed: torch.Tensor,
              max_answer_tokens: int = 30) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The highest-scoring span per row: (start [B], end [B], start + end score [B]).

    Candidates are all (i, j) with i <= j < i + max_answer_tokens (at most that many tokens, the rule of
    transformers' SQuAD scripts) and both ends where `allowed` [B, S] is True (the context: never the
    question or a special token). Scoring every pair at once is S^2 numbers a row: trivial at S <= 512.
    Rows of a single sequence [S] are accepted too.
    """
    if max_answer_tokens < 1:
        raise ValueError(f"max_answer_tokens must be at least 1, got {max_answer_tokens}")
    single = start_logits.dim() == 1
    if single:
        start_logits, end_logits, allowed = start_logits[None], end_logits[None], allowed[None]
    allowed = allowed.to(start_logits.device).bool()  # context_mask builds it on the CPU
    positions = torch.arange(start_logits.shape[1], device=start_logits.device)
    length = positions[None, :] - positions[:, None]  # [S, S]: end - start
    valid = (length >= 0) & (length < max_answer_tokens) & allowed[:, :, None] & allowed[:, None, :]  # [B, S, S]
    empty = ~valid.flatten(1).any(1)
    if empty.any():
        raise ValueError(f"rows {empty.nonzero().flatten().tolist()} have no allowed position for an answer")
    scores = (start_logits.float()[:, :, None] + end_logits.float()[:, None, :]).masked_fill(~valid, -torch.inf)
    best = scores.flatten(1).argmax(1)
    seq_len = start_logits.shape[1]
    start, end, score = best // seq_len, best % seq_len, scores.flatten(1).max(1).values
    return (start[0], end[0], score[0]) if single else (start, end, score)


def span_to_chars(offsets: Sequence[Sequence[int]] | torch.Tensor, start: int, end: int) -> tuple[int, int]:
    """Characters [first, last) of the context that tokens start..end (included) came from."""
    offsets = offsets.tolist() if isinstance(offsets, torch.Tensor) else offsets
    return int(offsets[int(start)][0]), int(offsets[int(end)][1])


def extract_answers(output: SpanOutput, encoding: Any, contexts: Sequence[str],
                    max_answer_tokens: int = 30) -> list[str]:
    """The answer text of every context: the best legal span mapped back to its characters.

    When the encoding holds several windows per context (`encode_question_windows`), the answer is the
    best span of ANY window, windows compared by their start + end score (transformers' SQuAD rule).
    """
    starts, ends, scores = best_span(output.start_logits, output.end_logits, context_mask(encoding),
                                     max_answer_tokens)
    rows = len(starts)
    owner = (encoding["overflow_to_sample_mapping"].tolist() if "overflow_to_sample_mapping" in encoding
             else list(range(rows)))
    best: dict[int, int] = {}
    for row in range(rows):
        if owner[row] not in best or scores[row] > scores[best[owner[row]]]:
            best[owner[row]] = row
    if sorted(best) != list(range(len(contexts))):
        raise ValueError(f"{len(contexts)} contexts but windows of {len(best)}")
    answers = []
    for example in range(len(contexts)):
        row = best[example]
        first, last = span_to_chars(encoding["offset_mapping"][row], int(starts[row]), int(ends[row]))
        answers.append(contexts[example][first:last])
    return answers


# ----------------------------------------------------------------------------- long contexts: windows


def encode_question_windows(tokenizer: Any, questions: Sequence[str], contexts: Sequence[str], max_length: int,
                            overlap: int) -> Any:
    """`encode_question_context`, but a context too long for one row is split into windows of `max_length`
    tokens, consecutive windows sharing `overlap` context tokens, each with the whole question.

    Row r belongs to example `overflow_to_sample_mapping[r]`. `overlap` is what transformers calls
    `stride` (its SQuAD script passes `doc_stride=128` there); Google's BERT used "doc_stride" for the step
    between window starts instead. The overlap lets an answer cut by one window's edge lie whole in the next.
    """
    if len(questions) != len(contexts):
        raise ValueError(f"{len(questions)} questions but {len(contexts)} contexts")
    if overlap < 0:
        raise ValueError(f"overlap must be >= 0, got {overlap}")
    return tokenizer(list(questions), list(contexts), truncation="only_second", max_length=max_length,
                     stride=overlap, return_overflowing_tokens=True, padding=True, return_offsets_mapping=True,
                     return_token_type_ids=True, return_tensors="pt")


def window_targets(encoding: Any, answer_chars: Sequence[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Start and end targets [rows] of every window: the answer's tokens where the window holds all of it,
    else position 0 (`[CLS]`), as BERT's SQuAD code and transformers' do. `answer_chars` per example."""
    starts, ends = [], []
    in_context = context_mask(encoding)
    for row, example in enumerate(encoding["overflow_to_sample_mapping"].tolist()):
        span = answer_token_span(encoding["offset_mapping"][row].tolist(), in_context[row].tolist(),
                                 *answer_chars[example])
        start, end = span or (0, 0)
        starts.append(start)
        ends.append(end)
    return torch.tensor(starts), torch.tensor(ends)


# ----------------------------------------------------------------------------- a QA set the course builds


class SpanQuestion(NamedTuple):
    """A question, its context, and the answer as the context's characters [start, start + len(answer))."""

    question: str
    context: str
    start: int
    answer: str


_YEAR = re.compile(r"^(1[5-9]\d\d|20[0-2]\d)$")


def year_number_questions(sentences: Sequence[str], sentences_per_context: int = 3) -> list[SpanQuestion]:
    """A small extractive QA set from real text: consecutive groups of sentences are contexts, and the
    answer is a word of them. "which year ?" is asked where the context holds exactly one year (1500-2029),
    "which number ?" where it holds exactly one other number; a context holding both asks both, so the
    model must read the question. Numbers are written as `number_date_tags` finds them."""
    out = []
    for first in range(0, len(sentences) - sentences_per_context + 1, sentences_per_context):
        words = " ".join(sentences[first:first + sentences_per_context]).split()
        context = " ".join(words)
        starts = [0]
        for word in words[:-1]:
            starts.append(starts[-1] + len(word) + 1)
        years = [i for i, w in enumerate(words) if _YEAR.match(w)]
        numbers = [i for i, w in enumerate(words) if _NUMBER.match(w) and not _YEAR.match(w)]
        for question, found in (("which year ?", years), ("which number ?", numbers)):
            if len(found) == 1:
                out.append(SpanQuestion(question, context, starts[found[0]], words[found[0]]))
    return out


# ----------------------------------------------------------------------------- a short training loop


def batched(rows: Iterable[Any], size: int) -> list[list[Any]]:
    """Consecutive lists of `size` items (the last may be shorter)."""
    rows = list(rows)
    return [rows[i:i + size] for i in range(0, len(rows), size)]


__all__ = [
    "IGNORE_INDEX", "MONTHS", "QuestionAnswering", "SpanOutput", "SpanQuestion", "TAG_NAMES", "TokenClassifier",
    "TokenClassifierOutput", "align_word_labels", "answer_token_span", "batched", "best_span", "bio_continuation",
    "context_mask", "encode_pairs", "encode_question_context", "encode_question_windows", "encode_tagged_words",
    "extract_answers", "number_date_tags", "span_to_chars", "window_targets", "word_predictions",
    "year_number_questions",
]

"""Sentence-pair pretraining tasks: BERT's next-sentence prediction (NSP) and ALBERT's sentence-order
prediction (SOP), built from documents of consecutive sentences.

Labels follow transformers (`BertForPreTraining`'s `next_sentence_label`, `AlbertForPreTraining`'s
`sentence_order_label`): 0 = the original (the true next sentence, the original order), 1 = corrupted.

Why both: NSP's negative is a sentence from *another document*, so it usually differs in topic and a
model can answer from the words alone, without reading order or coherence (RoBERTa found NSP could be
dropped). SOP's negative is the same two sentences swapped: same words, same topic, only the order
tells, so a bag of words cannot solve it (ALBERT).

Every random number comes from the `torch.Generator` passed in; inputs are never modified.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import torch

from bertcourse import data

Pair = tuple[str, str, int]
IS_NEXT, NOT_NEXT = 0, 1  # NSP labels (transformers' next_sentence_label)
IN_ORDER, SWAPPED = 0, 1  # SOP labels (transformers' sentence_order_label)


def _check_probability(value: float, name: str) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {value}")


def _check_documents(documents: Sequence[Sequence[str]]) -> None:
    if isinstance(documents, str) or any(isinstance(doc, str) for doc in documents):
        raise ValueError("documents must be a list of documents, each a list of sentences (got a plain string)")


def nsp_pairs(documents: Sequence[Sequence[str]], generator: torch.Generator, *,
              random_prob: float = 0.5) -> list[Pair]:
    """(first, second, label) for every consecutive sentence pair (a, b) inside a document: with probability
    `random_prob` the second sentence is replaced by one drawn uniformly from the sentences of the *other*
    documents (label 1), else it stays b (label 0). A sentence is never paired with itself, since the
    random one always comes from another document."""
    _check_documents(documents)
    _check_probability(random_prob, "random_prob")
    sizes = [len(doc) for doc in documents]
    if sum(1 for n in sizes if n > 0) < 2 and any(n >= 2 for n in sizes) and random_prob > 0:
        raise ValueError("nsp_pairs needs at least two documents with sentences: the random sentence comes "
                         "from another document")
    starts = [0]
    for n in sizes:
        starts.append(starts[-1] + n)
    total = starts[-1]
    pairs: list[Pair] = []
    for d, doc in enumerate(documents):
        for i in range(len(doc) - 1):
            if float(torch.rand((), generator=generator)) < random_prob:
                # uniform over the total - len(doc) sentences outside document d: draw an index among them
                # and skip over d's own block
                j = int(torch.randint(total - len(doc), (), generator=generator))
                j += len(doc) if j >= starts[d] else 0
                other = bisect.bisect_right(starts, j) - 1  # empty documents share a start: the last is j's
                pairs.append((doc[i], documents[other][j - starts[other]], NOT_NEXT))
            else:
                pairs.append((doc[i], doc[i + 1], IS_NEXT))
    return pairs


def sop_pairs(documents: Sequence[Sequence[str]], generator: torch.Generator, *,
              swap_prob: float = 0.5) -> list[Pair]:
    """(a, b, 0) or, with probability `swap_prob`, (b, a, 1) for every consecutive pair (a, b) inside a
    document: both classes hold the same two sentences, so only their order tells them apart."""
    _check_documents(documents)
    _check_probability(swap_prob, "swap_prob")
    pairs: list[Pair] = []
    for doc in documents:
        for a, b in zip(doc[:-1], doc[1:]):
            swap = float(torch.rand((), generator=generator)) < swap_prob
            pairs.append((b, a, SWAPPED) if swap else (a, b, IN_ORDER))
    return pairs


def truncate_longest_first(first: list[int], second: list[int], budget: int) -> tuple[list[int], list[int]]:
    """Drop tokens from the end of the longer of the two (the second on a tie) until both fit in `budget`
    together: transformers' `truncation="longest_first"`."""
    first, second = list(first), list(second)
    while len(first) + len(second) > budget:
        if len(first) > len(second):
            first.pop()
        else:
            second.pop()
    return first, second


def encode_pair(tokenizer: Any, first: str, second: str, max_seq_len: int) -> dict[str, list[int]]:
    """`[CLS] A [SEP] B [SEP]` with `input_ids`, `token_type_ids` (0 up to and including the first [SEP],
    1 for B and the last [SEP]) and `attention_mask`, longest-first truncated to `max_seq_len` tokens.
    `tokenizer`: a transformers tokenizer with [CLS] and [SEP] (the course's WordPiece)."""
    return pair_from_ids(tokenizer.encode(first, add_special_tokens=False),
                         tokenizer.encode(second, add_special_tokens=False),
                         tokenizer.cls_token_id, tokenizer.sep_token_id, max_seq_len)


def pair_from_ids(first: list[int], second: list[int], cls: int, sep: int, max_seq_len: int) -> dict[str, list[int]]:
    """`encode_pair` of two sentences already tokenized (ids without specials): many pairs share a sentence,
    which is then tokenized once, all sentences in one batch."""
    if max_seq_len < 5:
        raise ValueError(f"max_seq_len must leave room for [CLS], [SEP], [SEP] and a token of each sentence, "
                         f"got {max_seq_len}")
    a, b = truncate_longest_first(first, second, max_seq_len - 3)
    input_ids = [cls, *a, sep, *b, sep]
    token_type_ids = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": [1] * len(input_ids)}


def _article_starts(line: str) -> bool:
    """Whether a WikiText line opens an article: among the headings glued to its start ("= = History = = "),
    one of level 1 ("= Title = "), which only an article's title has."""
    while (heading := data._HEADING.match(line)) is not None:
        if heading.group(1) == "=":
            return True
        line = line[heading.end():]
    return False


def documents_from_lines(lines: Sequence[str], min_words: int = 1) -> list[list[str]]:
    """WikiText lines (the local copy's, or `data.hub_rows_as_lines` of the hub's rows: one sentence a line,
    headings glued to the next sentence) -> one list of sentences per article, an article starting at a
    line whose headings include a title ("= Title ="). Sentences are cleaned as the corpus cleans them
    (`data.load_corpus`: headings dropped, "@-@" undone, <unk> as [UNK]); those with fewer than
    `min_words` words are left out. A title the local copy glued to the END of a line (after an article
    that ends without a full stop: 16 of the 105 titles of its test and validation files) is not seen, so
    that article joins the one before (103 articles, ~17,000 sentences at min_words=4)."""
    documents: list[list[str]] = []
    for line in lines:
        if _article_starts(line) or not documents:
            documents.append([])
        sentence = data._clean_wikitext_line(line)
        if sentence and data._enough_words(sentence, min_words):
            documents[-1].append(sentence)
    return [doc for doc in documents if doc]

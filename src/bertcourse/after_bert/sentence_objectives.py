"""BERT's and ALBERT's auxiliary sentence objectives next to masked LM: MLM + NSP and MLM + SOP.

A row is `[CLS] A [SEP] B [SEP]`, A and B two *spans* of consecutive sentences of one document, each
up to half the row (BERT's "sentences" were spans of text too, filled to the sequence length), so a
row holds as many tokens as the course's packed blocks. The pairs come from the reference builders
(`bertcourse.after_bert.sentence_pairs`: NSP's B is a span of another document half the time, SOP's pair is
swapped half the time); the masks are drawn afresh per batch as for MLM alone. A 2-way head on [CLS]
(BERT's pooler: dense + tanh, then a linear layer) predicts the pair label, and the loss is the sum
MLM + pair cross-entropy, as in `BertForPreTraining`. Rows without a pair label (-100: text that has no
documents, such as SST-2's phrases) train the MLM only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from bertcourse.after_bert.sentence_pairs import nsp_pairs, pair_from_ids, sop_pairs
from bertcourse.config import ModelConfig
from bertcourse.masking import IGNORE_INDEX, collate_for_mlm, pad_batch
from bertcourse.model import BertForMLM, LMOutput, init_linear_
from bertcourse.training.objectives import Batch, MaskedLM
from bertcourse.training.packing import PackedData, tokenize_sentences

PAIR_TASKS = ("nsp", "sop")


@dataclass
class PairData(PackedData):
    """Rows (`blocks`, `segments`) with one pair label per row: 0 original, 1 corrupted, -100 none."""

    pair_labels: list[int] = field(default_factory=list)


def span_documents(documents: Sequence[Sequence[str]], tokenizer: Any, max_tokens: int) -> list[list[str]]:
    """Each document's sentences joined into consecutive spans of at most `max_tokens` tokens (a longer
    sentence is a span of its own, cut later by `pair_from_ids`)."""
    counts = iter(len(ids) for ids in tokenize_sentences(tokenizer, [s for doc in documents for s in doc]))
    spans_by_document = []
    for doc in documents:
        spans: list[str] = []
        current: list[str] = []
        size = 0
        for sentence in doc:
            n = next(counts)
            if current and size + n > max_tokens:
                spans.append(" ".join(current))
                current, size = [], 0
            current.append(sentence)
            size += n
        if current:
            spans.append(" ".join(current))
        spans_by_document.append(spans)
    return spans_by_document


def pair_rows(documents: Sequence[Sequence[str]], tokenizer: Any, max_seq_len: int, task: str,
              generator: torch.Generator) -> PairData:
    """NSP or SOP rows from `documents` (lists of sentences): spans of up to half a row, paired by the
    reference builders, encoded `[CLS] A [SEP] B [SEP]` with segment ids 0 / 1."""
    if task not in PAIR_TASKS:
        raise ValueError(f"task must be one of {', '.join(PAIR_TASKS)}, got {task!r}")
    spans = span_documents(documents, tokenizer, (max_seq_len - 3) // 2)
    pairs = (nsp_pairs if task == "nsp" else sop_pairs)(spans, generator)
    texts = list(dict.fromkeys(text for a, b, _ in pairs for text in (a, b)))
    ids = dict(zip(texts, tokenize_sentences(tokenizer, texts), strict=True))  # each span once, in one batch
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    rows = [pair_from_ids(ids[a], ids[b], cls, sep, max_seq_len) for a, b, _ in pairs]
    return PairData([r["input_ids"] for r in rows], [r["token_type_ids"] for r in rows],
                    pair_labels=[label for _, _, label in pairs])


def with_unlabelled(pairs: PairData, packed: PackedData) -> PairData:
    """`pairs` followed by `packed`'s blocks, which carry no pair label (-100): they train the MLM only."""
    return PairData([*pairs.blocks, *packed.blocks], [*pairs.segments, *packed.segments],
                    pair_labels=pairs.pair_labels + [IGNORE_INDEX] * len(packed))


class PairMLM(MaskedLM):
    """Masked LM on pair rows, each batch carrying its rows' `pair_labels` (needs `PairData`).

    Pair rows differ in length, so batches are padded to a multiple of `PAD_MULTIPLE`: a handful of
    shapes instead of one per batch (the CPU's bf16 kernels are prepared once per shape, and a new
    shape every step made a step several times slower).
    """

    PAD_MULTIPLE: ClassVar[int] = 64

    def batch(self, data: PackedData, indices: Sequence[int], generator: torch.Generator) -> Batch:
        """Masked rows with segment ids and `pair_labels` [B]; `labels` as MaskedLM's."""
        if not isinstance(data, PairData):
            raise TypeError("PairMLM needs PairData rows (sentence_objectives.pair_rows)")
        batch = collate_for_mlm([data.blocks[i] for i in indices], self.tokenizer, generator=generator,
                                pad_to_multiple_of=self.PAD_MULTIPLE, **asdict(self.masking))
        batch["token_type_ids"] = pad_batch([data.segments[i] for i in indices], 0, self.PAD_MULTIPLE)[0]
        batch["pair_labels"] = torch.tensor([data.pair_labels[i] for i in indices])
        return batch


class PairHead(nn.Module):
    """BERT's pooler (dense + tanh on the [CLS] state) and a linear layer to the two pair classes."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.pooler = nn.Linear(config.d_model, config.d_model)
        self.classifier = nn.Linear(config.d_model, 2)
        init_linear_(self.pooler, self.classifier, std=config.init_std)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[B, S, D] -> [B, 2] logits from position 0."""
        return self.classifier(torch.tanh(self.pooler(hidden[:, 0])))


@dataclass
class PairOutput:
    """The summed loss, its parts (`mlm`, and `nsp` or `sop`), the MLM output and the pair logits [B, 2]."""

    loss: torch.Tensor | None
    parts: dict[str, torch.Tensor]
    mlm: LMOutput
    pair_logits: torch.Tensor


class BertWithPairHead(nn.Module):
    """A course BERT (`bert`, any `BertForMLM`) with a pair head on [CLS]; loss = MLM + pair loss."""

    def __init__(self, bert: BertForMLM, task: str):
        super().__init__()
        if task not in PAIR_TASKS:
            raise ValueError(f"task must be one of {', '.join(PAIR_TASKS)}, got {task!r}")
        self.bert, self.task = bert, task
        self.config = bert.config
        self.pair_head = PairHead(bert.config)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The BERT's hidden states [B, S, D] (what a probe reads)."""
        return self.bert.encode(input_ids, attention_mask, token_type_ids)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                pair_labels: torch.Tensor | None = None) -> PairOutput:
        """MLM as the BERT computes it, plus the pair cross-entropy over the rows whose label is not -100."""
        hidden = self.encode(input_ids, attention_mask, token_type_ids)
        mlm = self.bert.predict(hidden, labels)
        pair_logits = self.pair_head(hidden).float()
        parts = {}
        if mlm.loss is not None:
            parts["mlm"] = mlm.loss
        if pair_labels is not None:
            labelled = pair_labels != IGNORE_INDEX
            parts[self.task] = (F.cross_entropy(pair_logits[labelled], pair_labels[labelled]) if labelled.any()
                                else pair_logits.sum() * 0.0)
        loss = sum(parts.values()) if parts else None
        return PairOutput(loss, parts, mlm, pair_logits)


@torch.no_grad()
def pair_predictions(model: BertWithPairHead, rows: PairData, device: torch.device | str = "cpu",
                     batch_size: int = 128) -> list[int]:
    """The pair head's predicted label of every row, on the unmasked rows, in eval mode."""
    was_training = model.training
    model.eval()
    predicted: list[int] = []
    try:
        for start in range(0, len(rows), batch_size):
            ids, attention = pad_batch(rows.blocks[start : start + batch_size], 0)
            segments = pad_batch(rows.segments[start : start + batch_size], 0)[0]
            logits = model(ids.to(device), attention.to(device), segments.to(device)).pair_logits
            predicted.extend(logits.argmax(-1).tolist())
    finally:
        model.train(was_training)
    return predicted


__all__ = [
    "PAIR_TASKS", "PairData", "span_documents", "pair_rows", "with_unlabelled", "PairMLM", "PairHead",
    "PairOutput", "BertWithPairHead", "pair_predictions",
]

"""Proof of the hidden checks of ex03-tiny-bert: each misconception fails its check, and several
different correct implementations (fused or separate kernels, manual or torch attention, a decoder
Linear or the embedding used directly) pass every check.

Each source is graded by the real engine (worker, sandbox, judge) through `bertcourse.grading.testing`,
so a proof here is a proof of what a student's notebook would get.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertcourse.grading.testing import run_check_module

pytestmark = pytest.mark.slow  # every proof grades a notebook with the real engine

ROOT = Path(__file__).resolve().parents[1]
CHECKS = ROOT / "autograder/checks/ex03_tiny_bert.py"
NOTEBOOK = ROOT / "solutions/ex03-tiny-bert/tiny_bert.ipynb"

PRELUDE = """
import math
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn import Embedding
"""

# ----------------------------------------------------------------------------- correct implementations

EMBEDDINGS_INDEXED = """
class Embeddings(nn.Module):
    def __init__(self, vocab_size, d_model, max_seq_len, type_vocab_size=2, dropout=0.1, layer_norm_eps=1e-12):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_seq_len, d_model)
        self.segment_embedding = nn.Embedding(type_vocab_size, d_model)
        self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids, token_type_ids=None):
        seq = input_ids.shape[1]
        x = self.token_embedding.weight[input_ids] + self.position_embedding.weight[:seq][None]
        if token_type_ids is not None:
            x = x + self.segment_embedding.weight[token_type_ids]
        else:
            x = x + self.segment_embedding.weight[0]
        return self.dropout(self.norm(x))
"""

ATTENTION_SDPA = """
def extended_attention_mask(attention_mask):
    return (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min


class SelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.h, self.p = n_heads, dropout
        self.query, self.key, self.value = (nn.Linear(d_model, d_model) for _ in range(3))
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, attention_mask=None):
        b, s, d = x.shape
        q, k, v = (f(x).reshape(b, s, self.h, d // self.h).permute(0, 2, 1, 3)
                   for f in (self.query, self.key, self.value))
        mask = None if attention_mask is None else extended_attention_mask(attention_mask)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.p if self.training else 0.0)
        return self.out(y.permute(0, 2, 1, 3).reshape(b, s, d))
"""

ATTENTION_PER_HEAD_LOOP = """
def extended_attention_mask(attention_mask):
    mask = torch.where(attention_mask.bool(), 0.0, -1e9)
    return mask.unsqueeze(1).unsqueeze(2)


class SelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.n_heads = n_heads
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, attention_mask=None):
        d_head = x.shape[-1] // self.n_heads
        q, k, v = self.query(x), self.key(x), self.value(x)
        outputs = []
        for h in range(self.n_heads):
            part = slice(h * d_head, (h + 1) * d_head)
            scores = torch.einsum("bqd,bkd->bqk", q[..., part], k[..., part]) / d_head ** 0.5
            if attention_mask is not None:
                scores = scores + extended_attention_mask(attention_mask)[:, 0]
            outputs.append(self.drop(torch.softmax(scores, -1)) @ v[..., part])
        return self.out(torch.cat(outputs, dim=-1))
"""

HEAD_EMBEDDING_DIRECT = """
class MLMHead(nn.Module):
    def __init__(self, token_embedding, layer_norm_eps=1e-12):
        super().__init__()
        vocab_size, d_model = token_embedding.weight.shape
        self.dense = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.decoder = nn.Linear(d_model, vocab_size, bias=False)
        self.decoder.weight = token_embedding.weight
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def transform(self, h):
        return self.norm(F.gelu(self.dense(h)))

    def forward(self, hidden, labels=None):
        if labels is None:
            return self.transform(hidden) @ self.decoder.weight.t() + self.bias
        rows = (labels != -100).nonzero(as_tuple=True)
        logits = F.linear(self.transform(hidden[rows]), self.decoder.weight, self.bias)
        targets = labels[rows]
        loss = -torch.log_softmax(logits, -1).gather(1, targets[:, None]).mean()
        return loss, logits
"""

HEAD_KEEPS_EMBEDDING_MODULE = """
class MLMHead(nn.Module):
    def __init__(self, token_embedding, layer_norm_eps=1e-12):
        super().__init__()
        vocab_size, d_model = token_embedding.weight.shape
        self.dense = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.embedding = token_embedding  # the decoder weight is read from the embedding at every call
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden, labels=None):
        selected = None if labels is None else labels.ne(-100)
        h = hidden if selected is None else hidden[selected]
        logits = self.norm(F.gelu(self.dense(h))) @ self.embedding.weight.T + self.bias
        if labels is None:
            return logits
        return F.cross_entropy(logits, labels[selected], reduction="sum") / selected.sum(), logits
"""

ANSWERS = 'answer_q1, answer_q2, answer_q3, answer_q4 = "b", " C", "a", "d"\n'


def solution_source() -> str:
    """The solution notebook's own solution cells (the reference answer of the exercise)."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    return PRELUDE + "\n".join("".join(c["source"]) for c in cells if c["metadata"].get("nbgrader", {}).get("solution"))


CORRECT = {
    "solution": solution_source,
    "indexed+sdpa+direct": lambda: PRELUDE + EMBEDDINGS_INDEXED + ATTENTION_SDPA + HEAD_EMBEDDING_DIRECT + ANSWERS,
    "indexed+loop+module": lambda: (
        PRELUDE + EMBEDDINGS_INDEXED + ATTENTION_PER_HEAD_LOOP + HEAD_KEEPS_EMBEDDING_MODULE + ANSWERS
    ),
}


@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_implementations_pass_every_check(name):
    results = run_check_module(CHECKS, CORRECT[name]())
    assert results and all(results.values()), {k: v for k, v in results.items() if not v}


# ----------------------------------------------------------------------------- misconceptions

BASE = PRELUDE + EMBEDDINGS_INDEXED + ATTENTION_SDPA + HEAD_EMBEDDING_DIRECT + ANSWERS
LOOP = PRELUDE + EMBEDDINGS_INDEXED + ATTENTION_PER_HEAD_LOOP + HEAD_EMBEDDING_DIRECT + ANSWERS


def mutate(old: str, new: str, base: str = BASE) -> str:
    assert old in base, old
    return base.replace(old, new)


WRONG = {
    # Embeddings
    "segment embedding forgotten": (
        mutate("            x = x + self.segment_embedding.weight[token_type_ids]\n", "            pass\n"),
        {"test_embeddings_match_reference_on_a_padded_batch", "test_embeddings_use_the_segment_embedding"},
    ),
    "no LayerNorm after the sum": (
        mutate("return self.dropout(self.norm(x))", "return self.dropout(x)"),
        {"test_embeddings_match_reference_on_a_padded_batch"},
    ),
    "positions start at 1": (
        mutate("self.position_embedding.weight[:seq][None]", "self.position_embedding.weight[1:seq + 1][None]"),
        {"test_embeddings_match_reference_on_a_padded_batch"},
    ),
    "dropout before the LayerNorm": (
        mutate("return self.dropout(self.norm(x))", "return self.norm(self.dropout(x))"),
        {"test_embeddings_dropout_after_layernorm"},
    ),
    # attention mask
    "mask multiplied instead of added": (
        mutate(
            "scores = scores + extended_attention_mask(attention_mask)[:, 0]",
            "scores = scores * attention_mask[:, None, :]",
            LOOP,
        ),
        {"test_attention_on_a_padded_batch_matches_reference", "test_attention_ignores_what_padding_holds"},
    ),
    "0/1 mask returned and added": (
        mutate(
            "return (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min",
            "return attention_mask[:, None, None, :].float()",
        ),
        {
            "test_extended_attention_mask_shape_and_values",
            "test_attention_on_a_padded_batch_matches_reference",
            "test_attention_ignores_what_padding_holds",
        },
    ),
    "mask broadcast over queries instead of keys": (
        mutate("attention_mask[:, None, None, :].float()", "attention_mask[:, None, :, None].float()"),
        {
            "test_extended_attention_mask_shape_and_values",
            "test_attention_on_a_padded_batch_matches_reference",
            "test_attention_ignores_what_padding_holds",
        },
    ),
    "mask without the head axis [batch, 1, seq]": (
        mutate("attention_mask[:, None, None, :].float()", "attention_mask[:, None, :].float()"),
        {"test_extended_attention_mask_shape_and_values", "test_attention_on_a_padded_batch_matches_reference"},
    ),
    "padding attended to (mask ignored)": (
        mutate("mask = None if attention_mask is None else extended_attention_mask(attention_mask)", "mask = None"),
        {"test_attention_on_a_padded_batch_matches_reference", "test_attention_ignores_what_padding_holds"},
    ),
    "-inf mask gives NaN on an all-padding row": (
        mutate(
            "mask = torch.where(attention_mask.bool(), 0.0, -1e9)",
            "mask = torch.where(attention_mask.bool(), 0.0, float('-inf'))",
            LOOP,
        ),
        {"test_extended_attention_mask_shape_and_values", "test_attention_all_padding_row_is_finite"},
    ),
    "no 1/sqrt(d_head) scaling": (
        mutate(
            '            scores = torch.einsum("bqd,bkd->bqk", q[..., part], k[..., part]) / d_head ** 0.5\n',
            '            scores = torch.einsum("bqd,bkd->bqk", q[..., part], k[..., part])\n',
            LOOP,
        ),
        {"test_attention_without_padding_matches_reference", "test_attention_on_a_padded_batch_matches_reference"},
    ),
    # MLM head
    "untied copy of the embedding": (
        mutate(
            "self.decoder.weight = token_embedding.weight",
            "self.decoder.weight = nn.Parameter(token_embedding.weight.detach().clone())",
        ),
        {"test_head_decoder_is_tied_to_the_embedding"},
    ),
    "no output bias": (
        mutate(
            "self.transform(hidden) @ self.decoder.weight.t() + self.bias",
            "self.transform(hidden) @ self.decoder.weight.t()",
        ),
        {"test_head_full_logits_match_reference"},
    ),
    "logits at every position even with labels": (
        mutate(
            "        rows = (labels != -100).nonzero(as_tuple=True)\n",
            "        logits = self.transform(hidden) @ self.decoder.weight.t() + self.bias\n"
            "        return F.cross_entropy(logits.flatten(0, 1), labels.flatten()), logits\n",
        ),
        {"test_head_logits_only_at_selected_positions"},
    ),
    "loss averaged over every position": (
        mutate(
            "loss = -torch.log_softmax(logits, -1).gather(1, targets[:, None]).mean()",
            "loss = -torch.log_softmax(logits, -1).gather(1, targets[:, None]).sum() / labels.numel()",
        ),
        {"test_head_logits_only_at_selected_positions"},
    ),
    # concepts
    "pooler mistaken for a trained sentence vector": (
        mutate('"b", " C", "a", "d"', '"a", " C", "a", "d"'),
        {"test_q1_cls_vector_not_untrained_pooler"},
    ),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_each_misconception_fails_its_check(name):
    source, expected_failures = WRONG[name]
    results = run_check_module(CHECKS, source)
    failed = {check for check, passed in results.items() if not passed}
    assert expected_failures <= failed, f"{name}: expected {expected_failures} to fail, failed: {failed}"
    # a mistake in one part must not cost points in another part
    parts = {part_of(check) for check in failed}
    assert len(parts) == 1, f"{name}: failures spread over parts {parts}: {failed}"


def part_of(check: str) -> str:
    for prefix, part in (
        ("test_embeddings", "embeddings"),
        ("test_extended", "attention"),
        ("test_attention", "attention"),
        ("test_head", "head"),
        ("test_q", "concepts"),
    ):
        if check.startswith(prefix):
            return part
    raise AssertionError(f"check {check} belongs to no part")


def test_check_points_add_up_to_the_autograded_cells():
    from masking_checks_support import checks_of

    checks = checks_of("autograder/checks/ex03_tiny_bert.py")
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    points = {
        c["metadata"]["nbgrader"]["grade_id"]: c["metadata"]["nbgrader"]["points"]
        for c in cells
        if c["metadata"].get("nbgrader", {}).get("grade")
    }
    per_cell: dict[str, float] = {}
    for mark in checks.values():
        per_cell[mark["cell"]] = per_cell.get(mark["cell"], 0.0) + mark["points"]
    assert per_cell == points

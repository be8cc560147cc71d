"""Proof of the hidden checks of ex03-tiny-bert: each misconception fails its check, and several
different correct implementations (fused or separate kernels, manual or torch attention, a decoder
Linear or the embedding used directly) pass every check.

Each source is graded by the real engine (worker, sandbox, judge) through `bertcourse.authoring.proofs`,
so a proof here is a proof of what a student's notebook would get. Stub notebooks (solution regions that
return their input or raise NotImplementedError) and the release score 0, and the visible test cell and
the hidden check give the same verdict on every padding value.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from unittest import mock

import pytest
from check_proofs import (
    assert_bundle_caught,
    assert_bundles_sound,
    bundle_ids,
    bundle_misconceptions,
    stubbed,
)

from bertcourse.authoring.proofs import run_check_module

pytestmark = pytest.mark.slow  # every proof grades a notebook with the real engine

ROOT = Path(__file__).resolve().parents[2]
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
        self.decoder = nn.Linear(d_model, vocab_size, bias=False)
        self.decoder.weight = token_embedding.weight
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden, labels=None):
        selected = None if labels is None else labels.ne(-100)
        h = hidden if selected is None else hidden[selected]
        logits = self.norm(F.gelu(self.dense(h))) @ self.embedding.weight.T + self.bias
        if labels is None:
            return logits
        return F.cross_entropy(logits, labels[selected], reduction="sum") / selected.sum(), logits
"""

EMBEDDINGS_FUNCTIONAL = """
class Embeddings(nn.Module):
    def __init__(self, vocab_size, d_model, max_seq_len, type_vocab_size=2, dropout=0.1, layer_norm_eps=1e-12):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_seq_len, d_model)
        self.segment_embedding = nn.Embedding(type_vocab_size, d_model)
        self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids, token_type_ids=None):
        types = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
        positions = torch.arange(input_ids.size(1)).expand_as(input_ids)
        x = sum(table(i) for table, i in ((self.token_embedding, input_ids), (self.position_embedding, positions),
                                          (self.segment_embedding, types)))
        return F.dropout(self.norm(x), self.dropout.p, training=self.training)
"""

ATTENTION_CLASSIC_BERT = """
def extended_attention_mask(attention_mask):
    return (1.0 - attention_mask[:, None, None, :].float()) * -10000.0


class SelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.query, self.key, self.value, self.out = (nn.Linear(d_model, d_model) for _ in range(4))
        self.attention_dropout = nn.Dropout(dropout)

    def forward(self, x, attention_mask=None):
        def split(t):
            return t.unflatten(-1, (self.n_heads, self.d_head))  # [batch, seq, heads, d_head]
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * self.d_head ** -0.5
        if attention_mask is not None:
            scores = scores + extended_attention_mask(attention_mask)
        weights = self.attention_dropout(F.softmax(scores, dim=-1))
        return self.out(torch.einsum("bhqk,bkhd->bqhd", weights, v).flatten(2))
"""

HEAD_FUNCTIONAL = """
class MLMHead(nn.Module):
    def __init__(self, token_embedding, layer_norm_eps=1e-12):
        super().__init__()
        vocab_size, d_model = token_embedding.weight.shape
        self.dense = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.decoder = nn.Linear(d_model, vocab_size, bias=False)
        self.decoder.weight = token_embedding.weight
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden, labels=None):
        if labels is not None:
            keep = labels.view(-1) != -100
            hidden, targets = hidden.reshape(-1, hidden.shape[-1])[keep], labels.view(-1)[keep]
        logits = F.linear(self.norm(F.gelu(self.dense(hidden))), self.decoder.weight, self.bias)
        return logits if labels is None else (F.nll_loss(F.log_softmax(logits, -1), targets), logits)
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
    "functional+classic-bert+functional": lambda: (
        PRELUDE + EMBEDDINGS_FUNCTIONAL + ATTENTION_CLASSIC_BERT + HEAD_FUNCTIONAL + ANSWERS
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
    assert base.count(old) == 1, old
    return base.replace(old, new)


def mutate_all(base: str, *replacements: tuple[str, str]) -> str:
    for old, new in replacements:
        base = mutate(old, new, base)
    return base



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
        {"test_embeddings_dropout_only_in_training"},
    ),
    "embedding dropout rate 1 - p": (
        mutate("self.dropout = nn.Dropout(dropout)", "self.dropout = nn.Dropout(1 - dropout)"),
        {"test_embeddings_dropout_only_in_training"},
    ),
    "embedding dropout also in eval mode": (
        mutate("return self.dropout(self.norm(x))", "return F.dropout(self.norm(x), self.dropout.p)"),
        {"test_embeddings_dropout_only_in_training"},
    ),
    "embedding layer_norm_eps ignored": (
        mutate("self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps)\n        self.dropout",
               "self.norm = nn.LayerNorm(d_model)\n        self.dropout"),
        {"test_embeddings_use_their_constructor_arguments"},
    ),
    "type_vocab_size ignored": (
        mutate("nn.Embedding(type_vocab_size, d_model)", "nn.Embedding(2, d_model)"),
        {"test_embeddings_use_their_constructor_arguments"},
    ),
    "Embeddings.forward returns its input": (
        mutate("        seq = input_ids.shape[1]\n", "        return input_ids\n"),
        {
            "test_embeddings_match_reference_on_a_padded_batch",
            "test_embeddings_use_the_segment_embedding",
            "test_embeddings_dropout_only_in_training",
            "test_embeddings_use_their_constructor_arguments",
        },
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
    "padding gets -9999, above the contract's -10000": (
        mutate("* torch.finfo(torch.float32).min", "* 9999.0 * -1"),
        {"test_extended_attention_mask_shape_and_values"},
    ),
    "heads interleaved instead of contiguous features": (
        mutate("f(x).reshape(b, s, self.h, d // self.h).permute(0, 2, 1, 3)",
               "f(x).reshape(b, s, d // self.h, self.h).permute(0, 3, 1, 2)"),
        {"test_attention_without_padding_matches_reference", "test_attention_on_a_padded_batch_matches_reference"},
    ),
    "SelfAttention.forward returns its input": (
        mutate("        b, s, d = x.shape\n", "        return x\n"),
        {
            "test_attention_without_padding_matches_reference",
            "test_attention_on_a_padded_batch_matches_reference",
            "test_attention_ignores_what_padding_holds",
            "test_attention_all_padding_row_is_finite",
            "test_attention_all_padding_row_has_finite_gradients",
            "test_attention_dropout_only_in_training",
        },
    ),
    "-inf added inside attention, weights repaired with nan_to_num": (
        mutate_all(
            LOOP,
            ("scores = scores + extended_attention_mask(attention_mask)[:, 0]",
             "scores = scores + torch.where(attention_mask[:, None, :] == 1, 0.0, float('-inf'))"),
            ("self.drop(torch.softmax(scores, -1))", "self.drop(torch.softmax(scores, -1).nan_to_num(0.0))"),
        ),
        {"test_attention_all_padding_row_has_finite_gradients"},
    ),
    "-inf added inside attention, output repaired with nan_to_num": (
        mutate_all(
            LOOP,
            ("scores = scores + extended_attention_mask(attention_mask)[:, 0]",
             "scores = scores + torch.where(attention_mask[:, None, :] == 1, 0.0, float('-inf'))"),
            ("return self.out(torch.cat(outputs, dim=-1))", "return self.out(torch.cat(outputs, dim=-1)).nan_to_num()"),
        ),
        {"test_attention_all_padding_row_has_finite_gradients"},
    ),
    "attention dropout also in eval mode": (
        mutate("self.drop(torch.softmax(scores, -1))", "F.dropout(torch.softmax(scores, -1), self.drop.p)", LOOP),
        {"test_attention_dropout_only_in_training"},
    ),
    "attention dropout forgotten": (
        mutate("self.drop(torch.softmax(scores, -1))", "torch.softmax(scores, -1)", LOOP),
        {"test_attention_dropout_only_in_training"},
    ),
    "attention dropout rate 1 - p": (
        mutate("self.drop = nn.Dropout(dropout)", "self.drop = nn.Dropout(1 - dropout)", LOOP),
        {"test_attention_dropout_only_in_training"},
    ),
    "attention dropout on the output instead of the weights": (
        mutate_all(
            LOOP,
            ("self.drop(torch.softmax(scores, -1))", "torch.softmax(scores, -1)"),
            ("return self.out(torch.cat(outputs, dim=-1))", "return self.drop(self.out(torch.cat(outputs, dim=-1)))"),
        ),
        {"test_attention_dropout_only_in_training"},
    ),
    "attention dropout without the 1 / (1 - p) scale": (
        mutate("self.drop(torch.softmax(scores, -1))",
               "torch.softmax(scores, -1) * (torch.rand(scores.shape) >= self.drop.p) if self.training "
               "else torch.softmax(scores, -1)", LOOP),
        {"test_attention_dropout_only_in_training"},
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
        {"test_head_decoder_is_the_embedding_parameter", "test_head_training_updates_the_embedding"},
    ),
    "tie through .data (a second Parameter on the same storage)": (
        mutate("self.decoder.weight = token_embedding.weight",
               "self.decoder.weight = nn.Parameter(token_embedding.weight.data)"),
        {"test_head_decoder_is_the_embedding_parameter", "test_head_training_updates_the_embedding"},
    ),
    "tie that blocks the gradient (.detach())": (
        mutate("F.linear(self.transform(hidden[rows]), self.decoder.weight, self.bias)",
               "F.linear(self.transform(hidden[rows]), self.decoder.weight.detach(), self.bias)"),
        {"test_head_training_updates_the_embedding"},
    ),
    "head layer_norm_eps ignored": (
        mutate("self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps)\n        self.decoder",
               "self.norm = nn.LayerNorm(d_model)\n        self.decoder"),
        {"test_head_uses_layer_norm_eps"},
    ),
    "output bias a buffer, not a Parameter": (
        mutate("self.bias = nn.Parameter(torch.zeros(vocab_size))",
               'self.register_buffer("bias", torch.zeros(vocab_size))'),
        {"test_head_training_updates_the_embedding"},
    ),
    "output bias starts random": (
        mutate("self.bias = nn.Parameter(torch.zeros(vocab_size))",
               "self.bias = nn.Parameter(torch.randn(vocab_size))"),
        {"test_head_full_logits_match_reference"},
    ),
    "tanh-approximated GELU": (
        mutate("return self.norm(F.gelu(self.dense(h)))",
               'return self.norm(F.gelu(self.dense(h), approximate="tanh"))'),
        {"test_head_full_logits_match_reference"},
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
        mutate('"b", " C", "a", "d"', '"c", " C", "a", "d"'),
        {"test_q1_the_pooler_of_an_mlm_only_bert"},
    ),
    "summing embeddings thought to lose the positions": (
        mutate('"b", " C", "a", "d"', '"b", "d", "a", "d"'),
        {"test_q2_why_summing_embeddings_works"},
    ),
    "a multiplied mask thought to remove the padded key": (
        mutate('"b", " C", "a", "d"', '"b", " C", "b", "d"'),
        {"test_q3_why_add_the_mask"},
    ),
    "a tied decoder thought to train only the labels' rows": (
        mutate('"b", " C", "a", "d"', '"b", " C", "a", "b"'),
        {"test_q4_which_rows_of_a_tied_table_train"},
    ),
}


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


def other_parts(expected: set[str]) -> frozenset[str]:
    """The checks of the parts other than that of `expected` (a mistake in one part must not cost points in
    another), which a misconception must pass."""
    from check_proofs import checks_of

    (part,) = {part_of(check) for check in expected}
    return frozenset(check for check in checks_of(str(CHECKS.relative_to(ROOT))) if part_of(check) != part)


SOURCES = {name: (source, set(expected), other_parts(expected)) for name, (source, expected) in WRONG.items()}
BUNDLES = bundle_misconceptions(str(CHECKS.relative_to(ROOT)), SOURCES, BASE)


@pytest.mark.parametrize("bundle", BUNDLES, ids=bundle_ids(BUNDLES))
def test_each_misconception_fails_its_check(bundle):
    """Each fails its checks, and no check of another part; misconceptions that cannot move each other's
    checks share a grading (check_proofs.bundle_misconceptions)."""
    assert_bundle_caught(str(CHECKS.relative_to(ROOT)), SOURCES, BASE, bundle)


def test_bundled_misconceptions_cannot_move_each_others_checks():
    assert_bundles_sound(str(CHECKS.relative_to(ROOT)), SOURCES, BASE, BUNDLES)


def test_check_points_add_up_to_the_autograded_cells():
    from check_proofs import assert_points_add_up

    assert_points_add_up("autograder/checks/ex03_tiny_bert.py", str(NOTEBOOK.relative_to(ROOT)))


def test_every_check_is_the_target_of_a_misconception():
    from check_proofs import checks_of

    targeted = set().union(*(expected for _, expected in WRONG.values()))
    assert set(checks_of("autograder/checks/ex03_tiny_bert.py")) == targeted


# ----------------------------------------------------------------------------- stubs earn nothing

def grade_variant(tmp_path: Path, stub: str, keep_init: bool = False):
    from bertcourse.authoring.proofs import shared_grader

    nb = json.loads(NOTEBOOK.read_text())
    for cell in nb["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("solution"):
            source = "".join(cell["source"])
            cell["source"] = stubbed(source, stub, keep_init)
            assert cell["source"] != source, cell["metadata"]["nbgrader"]["grade_id"]
    path = tmp_path / "tiny_bert.ipynb"
    path.write_text(json.dumps(nb))
    return shared_grader().grade(path, "ex03-tiny-bert")


@pytest.mark.parametrize("stub", ["return"])  # the raise stub is the release, graded below
def test_a_stub_notebook_scores_zero(tmp_path, stub):
    result = grade_variant(tmp_path, stub)
    assert result.ok and result.max_score == 19.0, result.error
    assert result.score == 0.0, [c.name for c in result.checks if c.passed]


def test_stubbed_functions_behind_real_constructors_earn_only_the_tie(tmp_path):
    """The modules' attributes exist (the solution's __init__), every function returns its input: only
    the structural tie is real work; every side condition (padding ignored, finite gradients, dropout
    off in eval) needs the valid result too."""
    result = grade_variant(tmp_path, "return", keep_init=True)
    assert result.ok, result.error
    assert [c.name for c in result.checks if c.passed] == ["test_head_decoder_is_the_embedding_parameter"]


def test_the_release_scores_zero():
    """The release, nbgrader's raise stub of the solution, scores 0 (so the raise stub does)."""
    from check_proofs import assert_release_scores_zero
    from notebook_gradings import graded_notebook

    assert_release_scores_zero("exercises/ex03-tiny-bert/tiny_bert.ipynb", "ex03-tiny-bert")
    result = graded_notebook("exercises/ex03-tiny-bert/tiny_bert.ipynb", "ex03-tiny-bert")
    assert result.ok and result.max_score == 19.0, result.error


# ----------------------------------------------------------------------------- visible and hidden agree


def cell_source(grade_id: str) -> str:
    """The source of the solution notebook's cell `grade_id`."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    return next("".join(c["source"]) for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)


def visible_cell_passes(solution_source: str, grade_id: str) -> bool:
    """Run the notebook's visible test cell `grade_id` in this process against `solution_source`."""
    import bertcourse.selfcheck

    namespace = {name: getattr(bertcourse.selfcheck, name) for name in dir(bertcourse.selfcheck)
                 if not name.startswith("_")}
    exec(PRELUDE + solution_source, namespace)  # noqa: S102 - the course's own test sources
    try:  # as nbgrader runs it: a failing visible cell raises (for a student it reports and Run All goes on)
        with mock.patch.dict(os.environ, {bertcourse.selfcheck.GRADING_VARIABLE: "validate"}):
            exec(cell_source(grade_id), namespace)  # noqa: S102
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize("padding", ["-10000.0", "-1e4", "torch.finfo(torch.float32).min", "-1e9",
                                     "-9999.0", "-1e3", "float('-inf')"])
def test_visible_and_hidden_mask_rules_agree(padding):
    """The padding value rule (PADDING_MASK_MAX, defined once) gives the same verdict in both places."""
    from bertcourse.contract import PADDING_MASK_MAX

    solution = mutate("torch.finfo(torch.float32).min)", f"{padding})", cell_source("attention"))
    mask_check = "test_extended_attention_mask_shape_and_values"
    hidden = run_check_module(CHECKS, PRELUDE + solution + ANSWERS, only={mask_check})[mask_check]
    visible = visible_cell_passes(solution, "attention_checks")
    assert visible == hidden, f"padding {padding}: visible test {visible}, hidden check {hidden}"
    value = float(eval(padding, {"torch": __import__("torch")}))  # noqa: S307
    assert hidden == (value <= PADDING_MASK_MAX and value > float("-inf")), padding

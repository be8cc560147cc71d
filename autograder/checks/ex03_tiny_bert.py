"""Hidden checks of ex03-tiny-bert: the student's `Embeddings`, `extended_attention_mask`,
`SelfAttention`, `MLMHead` and four concept answers.

Each module is compared with the course's reference (`bertcourse.model`) after copying the
reference's weights into it. The weights are random EVERYWHERE (biases, LayerNorm gains and shifts,
segment and position tables, std 0.2) and the batches are padded to different lengths with segment B
present, so each targeted mistake (mask multiplied instead of added, mask broadcast over the wrong
axis, padding attended to, segment embedding forgotten, LayerNorm or bias missing, no 1/sqrt(d_head))
moves outputs by far more than the tolerance, while float32 summation order moves them by ~1e-6.
Dropout is off (eval()) in every comparison except the one that checks dropout itself. Some mistakes
change no output (an untied copy of the embedding): those are checked directly, by changing the
embedding in the student's worker and watching the head's logits follow.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertcourse.model import Embeddings, ModelConfig, PredictionHead, SelfAttention, additive_padding_mask

VOCAB, D_MODEL, N_HEADS, MAX_LEN, SEQ = 50, 24, 3, 16, 12
BATCH = 5  # differs from N_HEADS and SEQ, so a mask broadcast over the wrong axis cannot line up by luck
TOL = dict(atol=1e-4, rtol=1e-4)
IGNORE = -100

CONFIG = ModelConfig(
    vocab_size=VOCAB,
    d_model=D_MODEL,
    n_heads=N_HEADS,
    d_ff=4 * D_MODEL,
    max_seq_len=MAX_LEN,
    dropout=0.0,
    layer_norm_eps=1e-12,
)


def randomize(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Every parameter random: LayerNorm gains around 1, everything else around 0, std 0.2."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=generator) * 0.2
            p.copy_(1.0 + noise if name.endswith("norm.weight") else noise)
    return module.eval()


def padded_batch(seed: int, all_padding_row: bool = False):
    """ids [BATCH, SEQ] right-padded to lengths 12, 9, 5, 7, 2 (or 0), segment B in the second half."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (BATCH, SEQ), generator=g)
    lengths = torch.tensor([SEQ, 9, 5, 7, 0 if all_padding_row else 2])
    attention_mask = (torch.arange(SEQ) < lengths[:, None]).long()
    ids[attention_mask == 0] = 0
    token_type_ids = ((torch.arange(SEQ) >= lengths[:, None] // 2) & (attention_mask == 1)).long()
    return ids, attention_mask, token_type_ids


def tensor(value, what: str) -> torch.Tensor:
    assert isinstance(value, torch.Tensor), f"{what} must return a tensor, got {type(value).__name__}"
    return value.detach().float()


# ----------------------------------------------------------------------------- part 1: embeddings


def reference_embeddings(seed: int = 1) -> Embeddings:
    return randomize(Embeddings(CONFIG), seed)


def student_embeddings(student, reference: Embeddings, dropout: float = 0.0):
    module = student.call(
        "Embeddings", VOCAB, D_MODEL, MAX_LEN, type_vocab_size=2, dropout=dropout, layer_norm_eps=1e-12
    )
    student.call_method(module, "load_state_dict", reference.state_dict())
    student.call_method(module, "eval")
    return module


@pytest.mark.check(
    cell="embeddings_checks",
    points=2.0,
    feedback="Embeddings must sum the token, position and segment embeddings, then apply LayerNorm",
)
def test_embeddings_match_reference_on_a_padded_batch(student):
    reference = reference_embeddings()
    module = student_embeddings(student, reference)
    ids, _, token_type_ids = padded_batch(seed=11)
    got = tensor(student.call_method(module, "forward", ids, token_type_ids), "Embeddings.forward")
    with torch.no_grad():
        expected = reference(ids, token_type_ids)
    assert got.shape == expected.shape, f"shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    torch.testing.assert_close(got, expected, **TOL)


@pytest.mark.check(
    cell="embeddings_checks",
    points=1.0,
    feedback="the segment (token type) embedding must be part of the sum; "
    "token_type_ids=None means segment 0 everywhere",
)
def test_embeddings_use_the_segment_embedding(student):
    reference = reference_embeddings(seed=2)
    module = student_embeddings(student, reference)
    ids, _, token_type_ids = padded_batch(seed=12)
    with_b = tensor(student.call_method(module, "forward", ids, token_type_ids), "Embeddings.forward")
    default = tensor(student.call_method(module, "forward", ids), "Embeddings.forward")
    zeros = tensor(student.call_method(module, "forward", ids, torch.zeros_like(ids)), "Embeddings.forward")
    torch.testing.assert_close(default, zeros, **TOL)
    with torch.no_grad():
        torch.testing.assert_close(with_b, reference(ids, token_type_ids), **TOL)
        torch.testing.assert_close(default, reference(ids), **TOL)


@pytest.mark.check(
    cell="embeddings_checks",
    points=1.0,
    feedback="dropout belongs after the LayerNorm of the summed embeddings, and only in training mode",
)
def test_embeddings_dropout_after_layernorm(student):
    reference = reference_embeddings(seed=3)
    module = student_embeddings(student, reference, dropout=0.5)
    ids, _, token_type_ids = padded_batch(seed=13)
    evaluated = tensor(student.call_method(module, "forward", ids, token_type_ids), "Embeddings.forward")
    student.call_method(module, "train")
    trained = tensor(student.call_method(module, "forward", ids, token_type_ids), "Embeddings.forward")
    dropped = trained == 0
    # 1440 values, p = 0.5: outside [0.3, 0.7] has probability < 1e-50 for a correct implementation
    assert 0.3 < dropped.float().mean() < 0.7
    torch.testing.assert_close(trained[~dropped], 2.0 * evaluated[~dropped], **TOL)


# ----------------------------------------------------------------------------- part 2: attention


@pytest.mark.check(
    cell="attention_checks",
    points=2.0,
    feedback="the mask is ADDED to the scores: shape [batch, 1, 1, seq], 0 for tokens and a "
    "large negative finite number for padding",
)
def test_extended_attention_mask_shape_and_values(student):
    _, attention_mask, _ = padded_batch(seed=21, all_padding_row=True)
    got = student.call("extended_attention_mask", attention_mask)
    got = tensor(got, "extended_attention_mask")
    assert got.shape == (BATCH, 1, 1, SEQ), f"shape {tuple(got.shape)}, expected {(BATCH, 1, 1, SEQ)}"
    assert bool(torch.isfinite(got).all()), "use a large negative finite number, not -inf"
    keep = attention_mask[:, None, None, :].expand_as(got) == 1
    assert bool((got[keep] == 0).all()), "tokens must get 0"
    assert bool((got[~keep] <= -1e4).all()), "padding must get a large negative number"


def reference_attention(seed: int) -> SelfAttention:
    return randomize(SelfAttention(CONFIG), seed)


def split_qkv(reference: SelfAttention) -> dict[str, torch.Tensor]:
    """The reference's fused projection as the student's query/key/value/out layers."""
    state = reference.state_dict()
    q_w, k_w, v_w = state["qkv.weight"].chunk(3, dim=0)
    q_b, k_b, v_b = state["qkv.bias"].chunk(3, dim=0)
    return {
        "query.weight": q_w,
        "query.bias": q_b,
        "key.weight": k_w,
        "key.bias": k_b,
        "value.weight": v_w,
        "value.bias": v_b,
        "out.weight": state["out.weight"],
        "out.bias": state["out.bias"],
    }


def student_attention(student, reference: SelfAttention):
    module = student.call("SelfAttention", D_MODEL, N_HEADS, dropout=0.0)
    student.call_method(module, "load_state_dict", split_qkv(reference))
    student.call_method(module, "eval")
    return module


def hidden_states(seed: int) -> torch.Tensor:
    return torch.randn(BATCH, SEQ, D_MODEL, generator=torch.Generator().manual_seed(seed))


@pytest.mark.check(
    cell="attention_checks",
    points=1.0,
    feedback="multi-head attention: softmax(q k^T / sqrt(d_head)) v per head, heads concatenated, "
    "then the output projection",
)
def test_attention_without_padding_matches_reference(student):
    reference = reference_attention(seed=4)
    module = student_attention(student, reference)
    x = hidden_states(seed=22)
    got = tensor(student.call_method(module, "forward", x), "SelfAttention.forward")
    got_ones = tensor(
        student.call_method(module, "forward", x, torch.ones(BATCH, SEQ, dtype=torch.long)), "SelfAttention.forward"
    )
    with torch.no_grad():
        expected = reference(x)
    assert got.shape == expected.shape, f"shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    torch.testing.assert_close(got, expected, **TOL)
    torch.testing.assert_close(got_ones, expected, **TOL)


@pytest.mark.check(
    cell="attention_checks",
    points=2.0,
    feedback="padding must get (almost) zero attention weight: add the extended mask to the scores "
    "before the softmax, broadcast over heads and queries",
)
def test_attention_on_a_padded_batch_matches_reference(student):
    reference = reference_attention(seed=5)
    module = student_attention(student, reference)
    x = hidden_states(seed=23)
    _, attention_mask, _ = padded_batch(seed=23)
    got = tensor(student.call_method(module, "forward", x, attention_mask), "SelfAttention.forward")
    with torch.no_grad():
        expected = reference(x, additive_padding_mask(attention_mask, torch.float32))
    real = attention_mask == 1
    torch.testing.assert_close(got[real], expected[real], **TOL)


@pytest.mark.check(
    cell="attention_checks",
    points=1.0,
    feedback="what sits at a padded position must not change the outputs at real positions",
)
def test_attention_ignores_what_padding_holds(student):
    reference = reference_attention(seed=6)
    module = student_attention(student, reference)
    x = hidden_states(seed=24)
    _, attention_mask, _ = padded_batch(seed=24)
    other = x.clone()
    other[attention_mask == 0] = 5.0 * torch.randn(
        int((attention_mask == 0).sum()), D_MODEL, generator=torch.Generator().manual_seed(25)
    )
    a = tensor(student.call_method(module, "forward", x, attention_mask), "SelfAttention.forward")
    b = tensor(student.call_method(module, "forward", other, attention_mask), "SelfAttention.forward")
    real = attention_mask == 1
    torch.testing.assert_close(a[real], b[real], **TOL)


@pytest.mark.check(
    cell="attention_checks",
    points=1.0,
    feedback="a row that is all padding must give finite outputs, not NaN (no -inf in the mask)",
)
def test_attention_all_padding_row_is_finite(student):
    reference = reference_attention(seed=7)
    module = student_attention(student, reference)
    x = hidden_states(seed=26)
    _, attention_mask, _ = padded_batch(seed=26, all_padding_row=True)
    got = tensor(student.call_method(module, "forward", x, attention_mask), "SelfAttention.forward")
    assert bool(torch.isfinite(got).all())
    with torch.no_grad():
        expected = reference(x, additive_padding_mask(attention_mask, torch.float32))
    real = attention_mask == 1
    torch.testing.assert_close(got[real], expected[real], **TOL)


# ----------------------------------------------------------------------------- part 3: MLM head


def head_setup(student, seed: int):
    """A reference head and the student's, built on an nn.Embedding living in the student's worker."""
    embedding = torch.nn.Embedding(VOCAB, D_MODEL)
    reference = randomize(PredictionHead(CONFIG, embedding), seed)
    student_embedding = student.call("Embedding", VOCAB, D_MODEL)
    student.call_method(student_embedding, "load_state_dict", {"weight": embedding.weight.detach().clone()})
    head = student.call("MLMHead", student_embedding, layer_norm_eps=1e-12)
    state = {k: v for k, v in reference.state_dict().items()}
    student.call_method(head, "load_state_dict", state, strict=False)
    student.call_method(head, "eval")
    hidden = 2.0 * torch.randn(BATCH, SEQ, D_MODEL, generator=torch.Generator().manual_seed(seed))
    return reference, embedding, head, student_embedding, hidden


def selected_labels(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids, attention_mask, _ = padded_batch(seed)
    chosen = (torch.rand(BATCH, SEQ, generator=g) < 0.3) & (attention_mask == 1)
    chosen[0, 3] = chosen[2, 1] = True
    return torch.where(chosen, ids, torch.full_like(ids, IGNORE))


@pytest.mark.check(
    cell="mlm_head_checks",
    points=2.0,
    feedback="MLM head: dense -> GELU -> LayerNorm, then the decoder (the token embedding matrix) "
    "plus a bias, at every position when labels is None",
)
def test_head_full_logits_match_reference(student):
    reference, _, head, _, hidden = head_setup(student, seed=31)
    got = tensor(student.call_method(head, "forward", hidden), "MLMHead.forward")
    with torch.no_grad():
        expected = reference(hidden)
    assert got.shape == expected.shape, f"shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    torch.testing.assert_close(got, expected, **TOL)


@pytest.mark.check(
    cell="mlm_head_checks",
    points=2.0,
    feedback="with labels, return (loss, logits) with logits only at the selected positions "
    "(labels != -100) and the loss averaged over those positions",
)
def test_head_logits_only_at_selected_positions(student):
    reference, _, head, _, hidden = head_setup(student, seed=32)
    labels = selected_labels(seed=32)
    result = student.call_method(head, "forward", hidden, labels)
    assert isinstance(result, (tuple, list)) and len(result) == 2, "with labels, forward returns (loss, logits)"
    loss, logits = tensor(result[0], "MLMHead.forward"), tensor(result[1], "MLMHead.forward")
    chosen = labels != IGNORE
    with torch.no_grad():
        full = reference(hidden)
    assert logits.shape == (int(chosen.sum()), VOCAB), (
        f"logits shape {tuple(logits.shape)}: expected one row per selected position {(int(chosen.sum()), VOCAB)}"
    )
    torch.testing.assert_close(logits, full[chosen], **TOL)
    torch.testing.assert_close(loss, F.cross_entropy(full[chosen], labels[chosen]), **TOL)


@pytest.mark.check(
    cell="mlm_head_checks",
    points=2.0,
    feedback="the decoder must share the token embedding's weight (the same Parameter), not a copy",
)
def test_head_decoder_is_tied_to_the_embedding(student):
    reference, embedding, head, student_embedding, hidden = head_setup(student, seed=33)
    changed = embedding.weight.detach().clone()
    changed[7] += 1.0
    changed[11:20] *= -1.0
    student.call_method(student_embedding, "load_state_dict", {"weight": changed})  # in place, in the worker
    got = tensor(student.call_method(head, "forward", hidden), "MLMHead.forward")
    with torch.no_grad():
        embedding.weight.copy_(changed)  # the reference is tied: its logits follow
        expected = reference(hidden)
    torch.testing.assert_close(got, expected, **TOL)


# ----------------------------------------------------------------------------- part 4: concepts


def answer(student, name: str) -> str:
    value = student.value(name)
    assert isinstance(value, str), f'`{name}` must be a string such as "a"'
    return value.strip().lower()


@pytest.mark.check(
    cell="concepts_checks",
    points=1.0,
    feedback="Q1: without next-sentence prediction the pooler is never trained; fine-tune from "
    "the last layer's [CLS] vector",
)
def test_q1_cls_vector_not_untrained_pooler(student):
    assert answer(student, "answer_q1") == "b"


@pytest.mark.check(
    cell="concepts_checks",
    points=1.0,
    feedback="Q2: think about what adding learned vectors does compared with concatenating them",
)
def test_q2_why_summing_embeddings_works(student):
    assert answer(student, "answer_q2") == "c"


@pytest.mark.check(
    cell="concepts_checks", points=1.0, feedback="Q3: think about what happens to a score of 0 after the softmax"
)
def test_q3_why_add_the_mask(student):
    assert answer(student, "answer_q3") == "a"


@pytest.mark.check(
    cell="concepts_checks",
    points=1.0,
    feedback="Q4: compare the cost of the vocabulary projection with the rest of a tiny model",
)
def test_q4_why_logits_only_at_selected_positions(student):
    assert answer(student, "answer_q4") == "d"

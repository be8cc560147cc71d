"""Hidden checks of ex03-tiny-bert: the student's `Embeddings`, `extended_attention_mask`,
`SelfAttention`, `MLMHead` and four concept answers.

Each module is compared with the course's reference (`bertcourse.model`) after copying the
reference's weights into it. The weights are random EVERYWHERE (biases, LayerNorm gains and shifts,
segment and position tables, std 0.2) and the batches are padded to different lengths with segment B
present, so each targeted mistake (mask multiplied instead of added, mask broadcast over the wrong
axis, padding attended to, segment embedding forgotten, LayerNorm or bias missing, no 1/sqrt(d_head))
moves outputs by far more than the tolerance, while float32 summation order moves them by ~1e-6.
No default hides a mistake: dropout is checked at p = 0.25 (not the default 0.1, not 0.5 = 1 - 0.5) in
both modes, the LayerNorm eps at a value where it changes the output, and the tie of the decoder by
identity and by the gradient that training sends to the embedding (a backward pass in the worker,
`student.backward`). A check of a side condition (padding ignored, finite gradients) first demands the
valid result, so a stub that returns its input earns nothing.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from _common import concept_answer, shaped, tensor

from bertcourse.contract import PADDING_MASK_MAX
from bertcourse.grading import StudentError
from bertcourse.model import Embeddings, MLMHead, ModelConfig, SelfAttention, extended_attention_mask
from bertcourse.model_support import randomize_

VOCAB, D_MODEL, N_HEADS, MAX_LEN, SEQ = 50, 24, 3, 16, 12
D_HEAD = D_MODEL // N_HEADS
BATCH = 5  # differs from N_HEADS and SEQ, so a mask broadcast over the wrong axis cannot line up by luck
TOL = dict(atol=1e-4, rtol=1e-4)
IGNORE = -100
P_DROP = 0.25  # neither a default (0.1, 0.0) nor its own complement: nn.Dropout(1 - p) is caught too
BIG_EPS = 0.05  # the embeddings' sum has variance ~0.04: this eps changes the LayerNorm's output by ~10%

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
    """Every parameter random (the package's `randomize_`: LayerNorm gains around 1, everything else around
    0, std 0.2), seeded with `seed`, in eval mode."""
    return randomize_(module, torch.Generator().manual_seed(seed)).eval()


def padded_batch(seed: int, all_padding_row: bool = False):
    """ids [BATCH, SEQ] right-padded to lengths 12, 9, 5, 7, 2 (or 0), segment B in the second half."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (BATCH, SEQ), generator=g)
    lengths = torch.tensor([SEQ, 9, 5, 7, 0 if all_padding_row else 2])
    attention_mask = (torch.arange(SEQ) < lengths[:, None]).long()
    ids[attention_mask == 0] = 0
    token_type_ids = ((torch.arange(SEQ) >= lengths[:, None] // 2) & (attention_mask == 1)).long()
    return ids, attention_mask, token_type_ids


def share(flags: torch.Tensor) -> float:
    return float(flags.float().mean())


# ----------------------------------------------------------------------------- part 1: embeddings


def reference_embeddings(seed: int = 1, config: ModelConfig = CONFIG) -> Embeddings:
    return randomize(Embeddings(config), seed)


def student_embeddings(student, reference: Embeddings, dropout: float = 0.0, config: ModelConfig = CONFIG):
    module = student.call(
        "Embeddings", VOCAB, D_MODEL, config.max_seq_len, type_vocab_size=config.type_vocab_size,
        dropout=dropout, layer_norm_eps=config.layer_norm_eps,
    )
    student.call_method(module, "load_state_dict", reference.state_dict())
    student.call_method(module, "eval")
    return module


@pytest.mark.check(
    cell="embeddings_checks",
    points=1.0,
    feedback="Embeddings must sum the token, position (0, 1, ..., seq - 1) and segment embeddings, then apply "
    "LayerNorm",
)
def test_embeddings_match_reference_on_a_padded_batch(student):
    reference = reference_embeddings()
    module = student_embeddings(student, reference)
    ids, _, token_type_ids = padded_batch(seed=11)
    got = shaped(student.call_method(module, "forward", ids, token_type_ids), (BATCH, SEQ, D_MODEL),
                 "Embeddings.forward")
    with torch.no_grad():
        expected = reference(ids, token_type_ids)
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
    feedback="dropout(p=dropout) belongs after the LayerNorm of the summed embeddings, active after .train() "
    "and off after .eval()",
)
def test_embeddings_dropout_only_in_training(student):
    reference = reference_embeddings(seed=3)
    module = student_embeddings(student, reference, dropout=P_DROP)
    ids, _, token_type_ids = padded_batch(seed=13)
    shape = (BATCH, SEQ, D_MODEL)
    evaluated = shaped(student.call_method(module, "forward", ids, token_type_ids), shape, "Embeddings.forward")
    again = shaped(student.call_method(module, "forward", ids, token_type_ids), shape, "Embeddings.forward")
    assert torch.equal(evaluated, again) and not bool((evaluated == 0).any()), (
        "after .eval() the output has zeros or changes from call to call: dropout must be off in eval mode"
    )
    student.call_method(module, "train")
    trained = shaped(student.call_method(module, "forward", ids, token_type_ids), shape, "Embeddings.forward")
    dropped = trained == 0
    # 1440 values, p = 0.25: outside [0.15, 0.35] has probability < 1e-17 for a correct implementation
    assert 0.15 < share(dropped) < 0.35, (
        f"after .train() {share(dropped):.0%} of the values are zeroed, expected about {P_DROP:.0%} "
        f"(dropout={P_DROP})"
    )
    assert torch.allclose(trained[~dropped], evaluated[~dropped] / (1 - P_DROP), **TOL), (
        "the values dropout keeps are not the eval output scaled by 1 / (1 - p): dropout goes last, after the "
        "LayerNorm"
    )


@pytest.mark.check(
    cell="embeddings_checks",
    points=1.0,
    feedback="every size and constant comes from the constructor's arguments: the position table has max_seq_len "
    "rows, the segment table type_vocab_size rows, the LayerNorm uses layer_norm_eps; a fixed value is right only "
    "for the defaults",
)
def test_embeddings_use_their_constructor_arguments(student):
    config = dataclasses.replace(CONFIG, max_seq_len=MAX_LEN - 3, type_vocab_size=3, layer_norm_eps=BIG_EPS)
    reference = reference_embeddings(seed=4, config=config)
    with torch.no_grad():  # only the token table and the LayerNorm matter here: positions and segments are 0
        reference.position_embedding.weight.zero_()
        reference.segment_embedding.weight.zero_()
    module = student_embeddings(student, reference, config=config)  # a size mismatch names the table
    ids, _, token_type_ids = padded_batch(seed=14)
    got = shaped(student.call_method(module, "forward", ids, 2 * token_type_ids), (BATCH, SEQ, D_MODEL),
                 "Embeddings.forward")
    with torch.no_grad():
        expected = reference(ids, 2 * token_type_ids)
    if not torch.allclose(got, expected, **TOL):
        try:
            eps = student.getattr(module, "norm.eps")
        except StudentError:
            eps = None
        assert eps is None or eps == BIG_EPS, f"with layer_norm_eps={BIG_EPS} the LayerNorm's eps is {eps}"
        raise AssertionError(f"with layer_norm_eps={BIG_EPS} the output is not LayerNorm(eps=layer_norm_eps) "
                             "of the summed embeddings")


# ----------------------------------------------------------------------------- part 2: attention


@pytest.mark.check(
    cell="attention_checks",
    points=1.0,
    feedback=f"the mask is ADDED to the scores: shape [batch, 1, 1, seq], 0 for tokens and a "
    f"large negative finite number (at most {PADDING_MASK_MAX:g}) for padding",
)
def test_extended_attention_mask_shape_and_values(student):
    _, attention_mask, _ = padded_batch(seed=21, all_padding_row=True)
    got = shaped(student.call("extended_attention_mask", attention_mask), (BATCH, 1, 1, SEQ),
                 "extended_attention_mask")
    assert bool(torch.isfinite(got).all()), "use a large negative finite number, not -inf"
    keep = attention_mask[:, None, None, :].expand_as(got) == 1
    assert bool((got[keep] == 0).all()), "tokens must get 0"
    largest = float(got[~keep].max())
    assert largest <= PADDING_MASK_MAX, f"padding got {largest:g}, which is not at most {PADDING_MASK_MAX:g}"


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


def student_attention(student, state: dict[str, torch.Tensor], dropout: float = 0.0):
    module = student.call("SelfAttention", D_MODEL, N_HEADS, dropout=dropout)
    student.call_method(module, "load_state_dict", state)
    student.call_method(module, "eval")
    return module


def hidden_states(seed: int) -> torch.Tensor:
    return torch.randn(BATCH, SEQ, D_MODEL, generator=torch.Generator().manual_seed(seed))


def expected_attention(reference: SelfAttention, x: torch.Tensor, attention_mask: torch.Tensor | None):
    with torch.no_grad():
        mask = None if attention_mask is None else extended_attention_mask(attention_mask, torch.float32)
        return reference(x, mask)


@pytest.mark.check(
    cell="attention_checks",
    points=1.0,
    feedback="multi-head attention: softmax(q k^T / sqrt(d_head)) v per head (head h on features "
    "h*d_head to (h+1)*d_head - 1), heads concatenated, then the output projection",
)
def test_attention_without_padding_matches_reference(student):
    reference = reference_attention(seed=4)
    module = student_attention(student, split_qkv(reference))
    x = hidden_states(seed=22)
    shape = (BATCH, SEQ, D_MODEL)
    got = shaped(student.call_method(module, "forward", x), shape, "SelfAttention.forward")
    got_ones = shaped(student.call_method(module, "forward", x, torch.ones(BATCH, SEQ, dtype=torch.long)), shape,
                      "SelfAttention.forward")
    expected = expected_attention(reference, x, None)
    torch.testing.assert_close(got, expected, **TOL)
    assert torch.allclose(got_ones, expected, **TOL), "a mask of all ones must give the same output as no mask"


@pytest.mark.check(
    cell="attention_checks",
    points=1.0,
    feedback="padding must get (almost) zero attention weight: add the extended mask to the scores "
    "before the softmax, broadcast over heads and queries",
)
def test_attention_on_a_padded_batch_matches_reference(student):
    reference = reference_attention(seed=5)
    module = student_attention(student, split_qkv(reference))
    x = hidden_states(seed=23)
    _, attention_mask, _ = padded_batch(seed=23)
    got = shaped(student.call_method(module, "forward", x, attention_mask), (BATCH, SEQ, D_MODEL),
                 "SelfAttention.forward")
    expected = expected_attention(reference, x, attention_mask)
    real = attention_mask == 1
    torch.testing.assert_close(got[real], expected[real], **TOL)


@pytest.mark.check(
    cell="attention_checks",
    points=1.0,
    feedback="what sits at a padded position must not change the outputs at real positions",
)
def test_attention_ignores_what_padding_holds(student):
    reference = reference_attention(seed=6)
    module = student_attention(student, split_qkv(reference))
    x = hidden_states(seed=24)
    _, attention_mask, _ = padded_batch(seed=24)
    other = x.clone()
    other[attention_mask == 0] = 5.0 * torch.randn(
        int((attention_mask == 0).sum()), D_MODEL, generator=torch.Generator().manual_seed(25)
    )
    shape = (BATCH, SEQ, D_MODEL)
    a = shaped(student.call_method(module, "forward", x, attention_mask), shape, "SelfAttention.forward")
    b = shaped(student.call_method(module, "forward", other, attention_mask), shape, "SelfAttention.forward")
    real = attention_mask == 1
    assert torch.allclose(a[real], expected_attention(reference, x, attention_mask)[real], **TOL), (
        "the outputs at real positions are not the attention outputs to begin with"
    )
    assert torch.allclose(a[real], b[real], **TOL), "changing what padded positions hold changed real outputs"


@pytest.mark.check(
    cell="attention_checks",
    points=1.0,
    feedback="a row that is all padding must give finite outputs, not NaN (no -inf in the mask)",
)
def test_attention_all_padding_row_is_finite(student):
    reference = reference_attention(seed=7)
    module = student_attention(student, split_qkv(reference))
    x = hidden_states(seed=26)
    _, attention_mask, _ = padded_batch(seed=26, all_padding_row=True)
    got = shaped(student.call_method(module, "forward", x, attention_mask), (BATCH, SEQ, D_MODEL),
                 "SelfAttention.forward")
    assert bool(torch.isfinite(got).all()), "a row that is all padding gives NaN or inf outputs"
    real = attention_mask == 1
    torch.testing.assert_close(got[real], expected_attention(reference, x, attention_mask)[real], **TOL)


@pytest.mark.check(
    cell="attention_checks",
    points=1.0,
    feedback="a row that is all padding must give finite gradients too: mask with a finite number, not -inf "
    "repaired afterwards (nan_to_num, where): a softmax over -inf scores has NaN gradients",
)
def test_attention_all_padding_row_has_finite_gradients(student):
    reference = reference_attention(seed=8)
    module = student_attention(student, split_qkv(reference))
    x = hidden_states(seed=27)
    _, attention_mask, _ = padded_batch(seed=27, all_padding_row=True)
    upstream = torch.randn(BATCH, SEQ, D_MODEL, generator=torch.Generator().manual_seed(28))
    result = student.backward(module, "forward", x, attention_mask, grad_outputs=upstream)
    got = shaped(result["output"], (BATCH, SEQ, D_MODEL), "SelfAttention.forward")
    real = attention_mask == 1
    assert torch.allclose(got[real], expected_attention(reference, x, attention_mask)[real], **TOL), (
        "the outputs at real positions are not the attention outputs to begin with"
    )
    grad_x = result["input_grads"][0]
    assert isinstance(grad_x, torch.Tensor), "the output does not depend on the input x through autograd"
    assert bool(torch.isfinite(grad_x).all()), "the gradient with respect to the input has NaN or inf"
    for name in ("query", "key", "value", "out"):
        grad = student.getattr(module, f"{name}.weight.grad")
        assert isinstance(grad, torch.Tensor), f"{name}.weight got no gradient"
        assert bool(torch.isfinite(grad).all()), f"the gradient of {name}.weight has NaN or inf"


def dropout_probe_state() -> dict[str, torch.Tensor]:
    """query = key = 0 (all scores 0, so every weight is 1/SEQ), value = out = identity."""
    zero, eye, none = torch.zeros(D_MODEL, D_MODEL), torch.eye(D_MODEL), torch.zeros(D_MODEL)
    return {"query.weight": zero, "query.bias": none, "key.weight": zero, "key.bias": none,
            "value.weight": eye, "value.bias": none, "out.weight": eye, "out.bias": none}


@pytest.mark.check(
    cell="attention_checks",
    points=1.0,
    feedback="dropout(p=dropout) acts on the attention weights (after the softmax), each query-key weight of "
    "each head dropped on its own, only after .train(): off after .eval()",
)
def test_attention_dropout_only_in_training(student):
    # Every weight is 1/SEQ and key k carries the value 2^k in every feature, so an output value times
    # SEQ * (1 - p) is the integer whose bits are the keys that dropout kept for that query and head.
    module = student_attention(student, dropout_probe_state(), dropout=P_DROP)
    codes = 2.0 ** torch.arange(SEQ)
    x = codes[None, :, None].expand(BATCH, SEQ, D_MODEL).contiguous()
    shape = (BATCH, SEQ, D_MODEL)
    evaluated = shaped(student.call_method(module, "forward", x), shape, "SelfAttention.forward")
    again = shaped(student.call_method(module, "forward", x), shape, "SelfAttention.forward")
    assert torch.equal(evaluated, again), "after .eval() the output changes from call to call: dropout must be off"
    assert torch.allclose(evaluated, torch.full(shape, float(codes.mean())), **TOL), (
        "after .eval(), with all scores equal, the output is not the mean of the values"
    )
    student.call_method(module, "train")
    trained = shaped(student.call_method(module, "forward", x), shape, "SelfAttention.forward")
    assert not torch.equal(trained, evaluated), "after .train() nothing was dropped: apply dropout to the weights"
    record = trained * SEQ * (1 - P_DROP)
    kept = record.round()
    assert float((record - kept).abs().max()) < 0.05 and bool((kept >= 0).all() and (kept < 2**SEQ).all()), (
        "after .train() the kept attention weights are not scaled by 1 / (1 - p) (as nn.Dropout does)"
    )
    per_head = kept.view(BATCH, SEQ, N_HEADS, D_HEAD)
    assert bool((per_head == per_head[..., :1]).all()), (
        "the features of one head were dropped separately: drop attention weights, not outputs or values"
    )
    bits = (per_head[..., 0].long()[..., None] >> torch.arange(SEQ)) & 1  # [batch, query, head, key]
    # 2160 decisions, keep 0.75: outside [0.65, 0.85] has probability < 1e-20 for a correct implementation
    assert 0.65 < share(bits == 1) < 0.85, (
        f"after .train() dropout kept {share(bits == 1):.0%} of the attention weights, expected about "
        f"{1 - P_DROP:.0%} (dropout={P_DROP})"
    )


# ----------------------------------------------------------------------------- part 3: MLM head


def head_setup(student, seed: int, layer_norm_eps: float = 1e-12):
    """A reference head and the student's, built on an nn.Embedding living in the student's worker."""
    config = dataclasses.replace(CONFIG, layer_norm_eps=layer_norm_eps)
    embedding = torch.nn.Embedding(VOCAB, D_MODEL)
    reference = randomize(MLMHead(config, embedding), seed)
    student_embedding = student.call("Embedding", VOCAB, D_MODEL)
    student.call_method(student_embedding, "load_state_dict", {"weight": embedding.weight.detach().clone()})
    head = student.call("MLMHead", student_embedding, layer_norm_eps=layer_norm_eps)
    fresh_bias = student.getattr(head, "bias")
    student.call_method(head, "load_state_dict", dict(reference.state_dict()), strict=False)
    student.call_method(head, "eval")
    hidden = 2.0 * torch.randn(BATCH, SEQ, D_MODEL, generator=torch.Generator().manual_seed(seed))
    return reference, embedding, head, student_embedding, hidden, fresh_bias


def selected_labels(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids, attention_mask, _ = padded_batch(seed)
    chosen = (torch.rand(BATCH, SEQ, generator=g) < 0.3) & (attention_mask == 1)
    chosen[0, 3] = chosen[2, 1] = True
    return torch.where(chosen, ids, torch.full_like(ids, IGNORE))


@pytest.mark.check(
    cell="mlm_head_checks",
    points=1.0,
    feedback="MLM head: dense -> GELU (exact) -> LayerNorm, then the decoder (the token embedding matrix) "
    "plus a bias that starts at zeros, at every position when labels is None",
)
def test_head_full_logits_match_reference(student):
    reference, _, head, _, hidden, fresh_bias = head_setup(student, seed=31)
    assert isinstance(fresh_bias, torch.Tensor) and torch.equal(fresh_bias, torch.zeros(VOCAB)), (
        "a new head's bias is not a vector of vocab_size zeros"
    )
    got = shaped(student.call_method(head, "forward", hidden), (BATCH, SEQ, VOCAB), "MLMHead.forward")
    with torch.no_grad():
        expected = reference(hidden)
    torch.testing.assert_close(got, expected, **TOL)


@pytest.mark.check(
    cell="mlm_head_checks",
    points=2.0,
    feedback="with labels, return (loss, logits) with logits only at the selected positions "
    "(labels != -100) and the loss averaged over those positions",
)
def test_head_logits_only_at_selected_positions(student):
    reference, _, head, _, hidden, _ = head_setup(student, seed=32)
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
    points=1.0,
    feedback="the head's LayerNorm must use the layer_norm_eps it is given, not LayerNorm's own default "
    "epsilon",
)
def test_head_uses_layer_norm_eps(student):
    eps = 1.0  # GELU(dense(h)) has a variance of ~1 here: this eps changes the logits by far more than TOL
    reference, _, head, _, hidden, _ = head_setup(student, seed=34, layer_norm_eps=eps)
    got = shaped(student.call_method(head, "forward", hidden), (BATCH, SEQ, VOCAB), "MLMHead.forward")
    with torch.no_grad():
        expected = reference(hidden)
    torch.testing.assert_close(got, expected, **TOL)


@pytest.mark.check(
    cell="mlm_head_checks",
    points=1.0,
    feedback="the decoder's weight must BE the token embedding's Parameter, the same object: not a copy and not "
    "another tensor sharing its storage (lesson 3, section 3)",
)
def test_head_decoder_is_the_embedding_parameter(student):
    embedding = student.call("Embedding", VOCAB, D_MODEL)
    head = student.call("MLMHead", embedding, layer_norm_eps=1e-12)
    decoder_weight = student.getattr(head, "decoder.weight", as_remote=True)
    assert student.same(decoder_weight, student.getattr(embedding, "weight", as_remote=True)), (
        "head.decoder.weight is not token_embedding.weight"
    )


@pytest.mark.check(
    cell="mlm_head_checks",
    points=1.0,
    feedback="training through the head must update the token embedding (the tie must carry the decoder's "
    "gradient: no copy, no .detach(), no .data) and the output bias, which must be a learnable parameter of the "
    "head, not a plain tensor",
)
def test_head_training_updates_the_embedding(student):
    reference, embedding, head, student_embedding, hidden, _ = head_setup(student, seed=33)
    student.call_method(head, "train")
    labels = selected_labels(seed=33)
    result = student.backward(head, "forward", hidden, labels, grad_outputs=(torch.tensor(1.0), None))
    chosen = labels != IGNORE
    loss = F.cross_entropy(reference(hidden)[chosen], labels[chosen])
    loss.backward()
    assert torch.allclose(tensor(result["output"][0], "MLMHead.forward"), loss.detach(), **TOL), (
        "the loss is not the mean cross-entropy over the selected positions to begin with"
    )
    grad = student.getattr(student_embedding, "weight.grad")
    assert isinstance(grad, torch.Tensor), "the token embedding got no gradient from the head's loss"
    assert torch.allclose(grad, embedding.weight.grad, **TOL), (
        "the token embedding's gradient is not the gradient of the loss through the decoder"
    )
    bias_grad = student.getattr(head, "bias.grad")
    assert isinstance(bias_grad, torch.Tensor), "the output bias got no gradient: make it an nn.Parameter"
    assert torch.allclose(bias_grad, reference.bias.grad, **TOL), "the output bias's gradient is not the expected one"


# ----------------------------------------------------------------------------- part 4: concepts



@pytest.mark.check(
    cell="concepts_checks",
    points=0.5,
    feedback="Q1: ask which loss of an MLM-only pretraining ever reached the pooler's weights",
)
def test_q1_the_pooler_of_an_mlm_only_bert(student):
    assert concept_answer(student, "answer_q1") == "b"


@pytest.mark.check(
    cell="concepts_checks",
    points=0.5,
    feedback="Q2: think about what adding learned vectors does compared with concatenating them",
)
def test_q2_why_summing_embeddings_works(student):
    assert concept_answer(student, "answer_q2") == "c"


@pytest.mark.check(
    cell="concepts_checks", points=0.5, feedback="Q3: think about what happens to a score of 0 after the softmax"
)
def test_q3_why_add_the_mask(student):
    assert concept_answer(student, "answer_q3") == "a"


@pytest.mark.check(
    cell="concepts_checks",
    points=0.5,
    feedback="Q4: follow the gradient of one selected position's softmax back into the decoder's weight",
)
def test_q4_which_rows_of_a_tied_table_train(student):
    assert concept_answer(student, "answer_q4") == "d"

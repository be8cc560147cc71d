"""ALBERT's and RoPE's changes to the course BERT (bertcourse.after_bert.variants): shared layers share, counts are
exact (against transformers' ALBERT too), RoPE's scores depend on offsets only."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from bertcourse.config import ModelConfig
from bertcourse.model import build_model, count_parameters
from bertcourse.after_bert.variants import (
    VariantSpec,
    apply_rotary,
    build_variant,
    embedding_parameters,
    parameter_counts,
    rotary_tables,
)

CONFIG = ModelConfig(vocab_size=120, n_layers=3, d_model=32, n_heads=2, d_ff=64, max_seq_len=24, dropout=0.0)


def batch(seed: int = 0, length: int = 12) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, CONFIG.vocab_size, (2, length), generator=generator)
    labels = torch.full_like(ids, -100)
    labels[:, 1::3] = ids[:, 1::3]
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def test_plain_spec_is_the_course_bert():
    torch.manual_seed(0)
    plain = build_variant(CONFIG, VariantSpec())
    assert count_parameters(plain) == count_parameters(build_model(CONFIG))
    assert plain.head.decoder.weight is plain.embeddings.token_embedding.weight


def test_shared_layers_are_one_module_and_one_set_of_parameters():
    model = build_variant(CONFIG, VariantSpec(share_layers=True))
    assert all(block is model.blocks[0] for block in model.blocks)
    assert model.blocks[1].attention.qkv.weight is model.blocks[0].attention.qkv.weight
    block = sum(p.numel() for p in model.blocks[0].parameters())
    assert count_parameters(build_model(CONFIG)) - count_parameters(model) == (CONFIG.n_layers - 1) * block
    # one update moves "every layer": they stay identical after a step
    model(**batch()).loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    state = model.state_dict()
    assert torch.equal(state["blocks.0.ffn.fc_in.weight"], state["blocks.2.ffn.fc_in.weight"])


def test_sharing_keeps_the_compute_every_layer_still_runs():
    model = build_variant(CONFIG, VariantSpec(share_layers=True)).eval()
    calls = []
    model.blocks[0].register_forward_hook(lambda *args: calls.append(1))
    model(**batch())
    assert len(calls) == CONFIG.n_layers


def test_factorised_embedding_counts_v_times_e_plus_e_times_h():
    E, V, H, P = 8, CONFIG.vocab_size, CONFIG.d_model, CONFIG.max_seq_len
    model = build_variant(CONFIG, VariantSpec(embedding_size=E))
    embeddings = model.embeddings
    assert embeddings.token_embedding.weight.shape == (V, E)
    assert embeddings.token_embedding.weight.numel() + embeddings.project.weight.numel() == V * E + E * H
    assert embedding_parameters(V, H, E) == V * E + E * H and embedding_parameters(V, H) == V * H
    assert model.head.decoder.weight is embeddings.token_embedding.weight  # still tied, now V x E
    # the whole difference, by hand: tables (token, position, 2 segments) and the embedding LayerNorm at E
    # instead of H, the projection E -> H with its bias, the head's dense H -> E and LayerNorm at E
    expected = (V + P + 2 + 2) * (H - E) - (E * H + H) + (H * H + H) - (H * E + E) + 2 * H - 2 * E
    assert count_parameters(build_model(CONFIG)) - count_parameters(model) == expected
    out = model(**batch())
    assert out.loss.item() > 0 and out.hidden_states.shape == (2, 12, H)


def test_albert_counts_match_transformers_albert():
    from transformers import AlbertConfig, AlbertForMaskedLM

    E = 8
    ours = build_variant(CONFIG, VariantSpec(embedding_size=E, share_layers=True))
    theirs = AlbertForMaskedLM(AlbertConfig(
        vocab_size=CONFIG.vocab_size, embedding_size=E, hidden_size=CONFIG.d_model, num_hidden_layers=CONFIG.n_layers,
        num_attention_heads=CONFIG.n_heads, intermediate_size=CONFIG.d_ff, max_position_embeddings=CONFIG.max_seq_len,
        type_vocab_size=2, hidden_act="gelu"))
    assert count_parameters(ours) == sum(p.numel() for p in theirs.parameters())


def test_parameter_counts_of_bert_base_shape():
    base = ModelConfig(vocab_size=30522, n_layers=12, d_model=768, n_heads=12, d_ff=3072, max_seq_len=512)
    counts = parameter_counts(base, 128)
    with torch.device("meta"):
        assert counts["bert"] == count_parameters(build_model(base))
    assert counts["albert"] < counts["shared"] < counts["bert"] and counts["factorised"] < counts["bert"]
    assert counts["bert"] - counts["rope"] == 512 * 768  # the learned position table, and nothing else


def test_rotary_scores_depend_only_on_the_offset():
    generator = torch.Generator().manual_seed(0)
    seq_len, dim = 16, 8
    query = torch.randn(dim, generator=generator).expand(seq_len, dim)  # the same vector at every position
    key = torch.randn(dim, generator=generator).expand(seq_len, dim)
    cos, sin = rotary_tables(seq_len, dim)
    scores = apply_rotary(query, cos, sin) @ apply_rotary(key, cos, sin).T  # [S, S]: score of (m, n)
    for offset in range(-seq_len + 1, seq_len):
        diagonal = torch.diagonal(scores, offset)
        assert torch.allclose(diagonal, diagonal[0].expand_as(diagonal), atol=1e-5), offset
    assert abs(float(scores[0, 1]) - float(scores[0, 5])) > 1e-3  # different offsets, different scores
    assert torch.allclose(apply_rotary(query, cos, sin).norm(dim=-1), query.norm(dim=-1))  # a rotation


def test_rope_model_has_no_position_table_but_knows_order():
    torch.manual_seed(0)
    # larger weights than BERT's 0.02: at that scale attention starts almost uniform, blind to order
    model = build_variant(dataclasses.replace(CONFIG, init_std=0.3), VariantSpec(positions="rope")).eval()
    assert not hasattr(model.embeddings, "position_embedding")
    ids = batch()["input_ids"][:1]
    swapped = ids.clone()
    swapped[0, [2, 7]] = ids[0, [7, 2]]
    with torch.no_grad():
        a, b = model.encode(ids), model.encode(swapped)
    assert not torch.allclose(a[0, 0], b[0, 0], atol=1e-3)  # [CLS]'s view changes with the order
    assert model(**batch()).loss.item() > 0


def test_bad_specs_are_refused():
    with pytest.raises(ValueError, match="positions"):
        VariantSpec(positions="sinusoidal")
    with pytest.raises(ValueError, match="head_dim"):
        rotary_tables(4, 7)
    with pytest.raises(ValueError, match="arch"):
        build_variant(CONFIG.for_arch("gpt"), VariantSpec())

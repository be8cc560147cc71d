"""The course's BERT and GPT compute what transformers' reference implementations compute.

Weights are random everywhere (biases and LayerNorm gains included, std 0.2) and batches are padded
with segment B present, so a wrong mask, a missing bias or a swapped norm shows up far above 1e-5.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bertcourse.course import load_course
from bertcourse.model import (
    GPT,
    IGNORE_INDEX,
    BertForMLM,
    ModelConfig,
    build_model,
    count_parameters,
    describe,
    extended_attention_mask,
)
from bertcourse.model_support import (
    bert_state_dict_to_hf,
    gpt_state_dict_to_hf,
    hf_bert_config,
    hf_gpt2_config,
    randomize_,
)

TINY = dict(vocab_size=300, n_layers=2, d_model=32, n_heads=4, d_ff=64, max_seq_len=16)


def padded_batch(vocab_size: int = 300, seq_len: int = 16):
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, vocab_size, (4, seq_len), generator=generator)
    attention_mask = torch.ones(4, seq_len, dtype=torch.long)
    attention_mask[1, 10:] = 0
    attention_mask[2, 3:] = 0
    attention_mask[3, 7:] = 0
    input_ids[attention_mask == 0] = 0
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, 5:] = 1
    token_type_ids[attention_mask == 0] = 0
    return input_ids, attention_mask, token_type_ids


def random_bert(**overrides) -> BertForMLM:
    model = BertForMLM(ModelConfig(**{**TINY, **overrides}))
    return randomize_(model, torch.Generator().manual_seed(1)).eval()


def random_gpt(**overrides) -> GPT:
    model = GPT(ModelConfig(**TINY).for_arch("gpt", **overrides))
    return randomize_(model, torch.Generator().manual_seed(2)).eval()


def test_bert_matches_transformers_bert_model_on_a_padded_batch():
    from transformers import BertForMaskedLM

    model = random_bert()
    reference = BertForMaskedLM(hf_bert_config(model.config)).eval()
    result = reference.load_state_dict(bert_state_dict_to_hf(model.state_dict(), model.config), strict=False)
    assert result.unexpected_keys == []
    assert set(result.missing_keys) <= {"cls.predictions.decoder.bias"}  # tied to cls.predictions.bias
    input_ids, attention_mask, token_type_ids = padded_batch()
    with torch.no_grad():
        ours = model.encode(input_ids, attention_mask, token_type_ids)
        theirs = reference.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        assert ours.abs().max() > 0.5  # a real signal, not a degenerate all-zero output
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
        ours_logits = model(input_ids, attention_mask, token_type_ids).logits
        theirs_logits = reference(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).logits
        torch.testing.assert_close(ours_logits, theirs_logits, atol=1e-5, rtol=1e-5)


def test_gpt_matches_transformers_gpt2_model_with_and_without_padding():
    from transformers import GPT2Model

    model = random_gpt()
    reference = GPT2Model(hf_gpt2_config(model.config)).eval()
    result = reference.load_state_dict(gpt_state_dict_to_hf(model.state_dict(), model.config))
    assert not result.missing_keys and not result.unexpected_keys
    input_ids, attention_mask, _ = padded_batch()
    with torch.no_grad():
        ours = model.encode(input_ids, attention_mask)
        theirs = reference(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        real = attention_mask.bool()
        assert ours.abs().max() > 0.5
        torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(
            model.encode(input_ids), reference(input_ids=input_ids).last_hidden_state, atol=1e-5, rtol=1e-5
        )


def test_padding_tokens_do_not_change_the_real_positions_and_an_all_padding_row_is_finite():
    for model in (random_bert(), random_gpt()):
        input_ids, attention_mask, token_type_ids = padded_batch()
        attention_mask[0] = 0  # a row that is all padding
        other_ids = input_ids.clone()
        other_ids[attention_mask == 0] = torch.randint(5, 300, (int((attention_mask == 0).sum()),))
        with torch.no_grad():
            kwargs = {} if isinstance(model, GPT) else {"token_type_ids": token_type_ids}
            a = model.encode(input_ids, attention_mask, **kwargs)
            b = model.encode(other_ids, attention_mask, **kwargs)
        assert torch.isfinite(a).all() and torch.isfinite(b).all()
        real = attention_mask.bool()
        torch.testing.assert_close(a[real], b[real], atol=1e-5, rtol=1e-5)
        assert (a[~real] - b[~real]).abs().max() > 1e-2  # the padded positions themselves did change


def test_additive_mask_shape_and_values():
    mask = extended_attention_mask(torch.tensor([[1, 1, 0], [1, 0, 0]]), torch.float32)
    assert mask.shape == (2, 1, 1, 3)
    assert mask[0, 0, 0, :2].eq(0).all() and mask[1, 0, 0, 1:].eq(torch.finfo(torch.float32).min).all()
    causal = extended_attention_mask(torch.tensor([[1, 1, 0]]), torch.float32, causal=True)
    blocked = causal[0, 0] != 0  # [query, key]: later keys and padding
    assert causal.shape == (1, 1, 3, 3)
    assert blocked.tolist() == [[False, True, True], [False, False, True], [False, False, True]]


def test_gpt_is_causal_and_bert_is_not():
    input_ids, _, _ = padded_batch()
    changed = input_ids.clone()
    changed[:, -1] = (changed[:, -1] + 7) % 300
    gpt, bert = random_gpt(), random_bert()
    with torch.no_grad():
        assert torch.equal(gpt.encode(input_ids)[:, :-1], gpt.encode(changed)[:, :-1])
        assert (bert.encode(input_ids)[:, 0] - bert.encode(changed)[:, 0]).abs().max() > 1e-3


def test_the_segment_embedding_is_used():
    model = random_bert()
    input_ids, attention_mask, token_type_ids = padded_batch()
    with torch.no_grad():
        a = model.encode(input_ids, attention_mask, token_type_ids)
        b = model.encode(input_ids, attention_mask, torch.zeros_like(token_type_ids))
    assert (a - b).abs().max() > 1e-2


def test_mlm_head_is_tied_to_the_token_embedding():
    model = random_bert()
    assert model.head.decoder.weight is model.embeddings.token_embedding.weight
    input_ids, attention_mask, token_type_ids = padded_batch()
    with torch.no_grad():
        before = model(input_ids, attention_mask, token_type_ids).logits
        model.embeddings.token_embedding.weight[7].add_(1.0)  # token 7 never occurs in the input
        after = model(input_ids, attention_mask, token_type_ids).logits
    assert (after[..., 7] - before[..., 7]).abs().min() > 1e-3  # the output score of token 7 moved
    torch.testing.assert_close(after[..., 8:], before[..., 8:])
    state = model.state_dict()
    assert state["head.decoder.weight"].data_ptr() == state["embeddings.token_embedding.weight"].data_ptr()


@pytest.mark.parametrize("rows_per_chunk", [None, 1, 2, 5])  # None: the default (one chunk at this size)
def test_logits_only_at_selected_positions_equal_the_full_computation(rows_per_chunk, monkeypatch):
    import bertcourse.model

    if rows_per_chunk is not None:  # the head then runs on chunks of this many rows
        monkeypatch.setattr(bertcourse.model, "LOGITS_CHUNK_BYTES", rows_per_chunk * 4 * TINY["vocab_size"])
    for model in (random_bert(), random_gpt()):
        input_ids, attention_mask, token_type_ids = padded_batch()
        labels = torch.full_like(input_ids, IGNORE_INDEX)
        selected = torch.zeros_like(input_ids, dtype=torch.bool)
        selected[0, [1, 4, 9]] = True
        selected[1, [0, 2]] = True
        selected[3, 6] = True
        labels[selected] = input_ids[selected]
        kwargs = {} if isinstance(model, GPT) else {"token_type_ids": token_type_ids}
        model.zero_grad()
        out = model(input_ids, attention_mask, labels=labels, **kwargs)
        out.loss.backward()
        chunked_grads = {name: p.grad.clone() for name, p in model.named_parameters()}
        model.zero_grad()
        full = model(input_ids, attention_mask, **kwargs).logits
        targets = labels  # both models: position t predicts labels[t] (the GPT's shift is the objective's)
        chosen = targets != IGNORE_INDEX
        assert out.logits.shape == (int(chosen.sum()), model.config.vocab_size)
        torch.testing.assert_close(out.logits.detach(), full[chosen].detach(), atol=1e-5, rtol=1e-5)
        expected = F.cross_entropy(
            full.reshape(-1, full.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX
        )
        torch.testing.assert_close(out.loss.detach(), expected.detach(), atol=1e-5, rtol=1e-5)
        expected.backward()  # and the same gradients as the loss over the full logits
        for name, p in model.named_parameters():
            torch.testing.assert_close(chunked_grads[name], p.grad, atol=1e-6, rtol=1e-5, msg=name)


def test_a_batch_without_targets_gives_a_zero_loss_that_backpropagates():
    model = random_bert().train()
    input_ids, attention_mask, _ = padded_batch()
    out = model(input_ids, attention_mask, labels=torch.full_like(input_ids, IGNORE_INDEX))
    assert out.loss.item() == 0.0
    out.loss.backward()


@pytest.mark.parametrize("profile", ["cpu-quick", "cpu", "gpu"])
def test_bert_and_gpt_of_each_profile_have_parameter_counts_within_two_percent(profile):
    spec = load_course(check_files=False).profile(profile)
    bert = build_model(spec.model)
    gpt = build_model(spec.model.for_arch("gpt"))
    assert isinstance(bert, BertForMLM) and isinstance(gpt, GPT)
    assert bert.config.d_model == gpt.config.d_model == spec.model.d_model
    assert bert.config.n_layers == gpt.config.n_layers == spec.model.n_layers
    assert bert.config.vocab_size == gpt.config.vocab_size == spec.vocab_size
    n_bert, n_gpt = count_parameters(bert), count_parameters(gpt)
    assert abs(n_bert - n_gpt) / n_bert < 0.02, (n_bert, n_gpt)
    assert f"{n_bert:,} parameters" in describe(bert)


def test_config_rejects_bad_shapes_and_unknown_architecture():
    with pytest.raises(ValueError, match="divisible"):
        ModelConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="unknown architecture"):
        ModelConfig(**TINY).for_arch("lstm")
    with pytest.raises(ValueError, match="unknown architecture"):
        ModelConfig(arch="lstm")
    config = ModelConfig(**TINY).for_arch("bert", dropout=0.0)
    assert config.dropout == 0.0 and not config.causal and config.arch == "bert"
    gpt = ModelConfig(**TINY).for_arch("gpt", dropout=0.2)
    assert gpt.causal and gpt.pre_ln and gpt.type_vocab_size == 0 and gpt.dropout == 0.2
    with pytest.raises(ValueError, match="GPT needs arch='gpt'"):
        GPT(ModelConfig(**TINY))
    with pytest.raises(ValueError, match="BertForMLM needs arch='bert'"):
        BertForMLM(gpt)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mask_under_autocast_stays_finite_on_an_all_padding_row(dtype):
    """Under autocast the mask is built in the autocast type: float32's minimum would be -inf in fp16."""
    for model in (random_bert(), random_gpt()):
        input_ids, attention_mask, _ = padded_batch()
        attention_mask[0] = 0
        seen: list[torch.Tensor] = []
        model.blocks[0].attention.register_forward_pre_hook(lambda module, args, seen=seen: seen.append(args[1]))
        with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
            hidden = model.encode(input_ids, attention_mask)
        assert torch.isfinite(hidden).all()
        assert seen[0].dtype == dtype and torch.isfinite(seen[0]).all()
        assert (seen[0] == torch.finfo(dtype).min).any()


LEGACY = Path(__file__).resolve().parent / "fixtures" / "legacy"


@pytest.mark.parametrize("arch", ["bert", "gpt"])
def test_a_checkpoint_saved_before_arch_loads_computes_as_it_did_and_resumes(arch):
    """Written by the code before `ModelConfig.arch` (its config says `causal`); see fixtures/legacy."""
    from bertcourse.training.checkpoint import CheckpointError, check_compatible, load_checkpoint, load_pretrained

    path = LEGACY / f"pretrain-{arch}-checkpoint.pt"
    saved = load_checkpoint(path)
    assert "arch" not in saved["settings"]["model_config"] and "causal" in saved["settings"]["model_config"]
    model, tokenizer = load_pretrained(path)
    assert type(model) is {"bert": BertForMLM, "gpt": GPT}[arch] and model.config.arch == arch
    assert len(tokenizer) == model.config.vocab_size
    expected = saved["expected"]
    with torch.no_grad():
        hidden = model.encode(expected["input_ids"], expected["attention_mask"])
    assert expected["hidden"].abs().max() > 0.5
    torch.testing.assert_close(hidden, expected["hidden"], atol=1e-6, rtol=1e-6)
    today = dict(saved["settings"], model_config=model.config.to_dict())
    check_compatible(path, saved["settings"], today)  # --resume accepts it: the same settings
    other = dict(today, model_config=dict(today["model_config"], d_model=16, n_heads=2))
    with pytest.raises(CheckpointError, match="model d_model: checkpoint 8, this run 16"):
        check_compatible(path, saved["settings"], other)

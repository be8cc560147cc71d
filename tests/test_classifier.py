"""bertcourse.classifier: pooling (against transformers' own rule), the head and loss, probe and LoRA."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2ForSequenceClassification

from bertcourse.classifier import (
    SequenceClassifier,
    add_lora,
    build_classifier,
    cls_pool,
    freeze_encoder,
    last_token_pool,
    mean_pool,
    trainable_parameters,
)
from bertcourse.config import ModelConfig
from bertcourse.model import build_model

PAD = 0


def tiny_encoder(arch: str = "bert", dropout: float = 0.0):
    torch.manual_seed(0)
    return build_model(ModelConfig(arch=arch, vocab_size=50, n_layers=1, d_model=16, n_heads=2, d_ff=32,
                                   max_seq_len=16, dropout=dropout))


def padded(lengths: list[int], width: int, side: str) -> torch.Tensor:
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        if side == "right":
            mask[row, :n] = 1
        else:
            mask[row, width - n :] = 1
    return mask


@pytest.mark.parametrize("side", ["right", "left"])
def test_last_token_pool_matches_transformers_gpt2_rule(side):
    """GPT2ForSequenceClassification scores the last non-pad token; so must we, for either padding side."""
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=30, n_positions=12, n_embd=8, n_layer=1, n_head=2, pad_token_id=PAD, num_labels=3)
    model = GPT2ForSequenceClassification(config).eval()
    mask = padded([7, 10, 3], 10, side)
    ids = torch.randint(1, 30, mask.shape).masked_fill(mask == 0, PAD)
    with torch.no_grad():
        theirs = model(input_ids=ids, attention_mask=mask).logits
        hidden = model.transformer(input_ids=ids, attention_mask=mask).last_hidden_state
        ours = model.score(last_token_pool(hidden, mask))
    torch.testing.assert_close(ours, theirs)


def test_pad_equal_to_eos_is_where_transformers_and_the_mask_disagree():
    """With pad = eos, transformers reads a real trailing eos as padding and pools the token before it;
    the attention mask knows better (the documented difference)."""
    hidden = torch.arange(2 * 5, dtype=torch.float32).view(2, 5, 1)
    eos = 9
    ids = torch.tensor([[5, 6, eos, eos, eos], [5, 6, 7, eos, eos]])  # row 0: one real eos, then padding
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]])
    non_pad = (ids != eos).int()
    transformers_index = (torch.arange(5) * non_pad).argmax(-1)
    assert transformers_index.tolist() == [1, 2]
    assert last_token_pool(hidden, mask).squeeze(1).tolist() == [2.0, 8.0]  # positions 2 and 3


def test_pooling_rules_on_a_handmade_batch():
    hidden = torch.arange(2 * 4 * 2, dtype=torch.float32).view(2, 4, 2)
    right = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert torch.equal(cls_pool(hidden, right), hidden[:, 0])
    assert torch.equal(last_token_pool(hidden, right), torch.stack([hidden[0, 1], hidden[1, 3]]))
    assert torch.equal(last_token_pool(hidden, left), torch.stack([hidden[0, 3], hidden[1, 3]]))
    assert torch.equal(mean_pool(hidden, right), torch.stack([hidden[0, :2].mean(0), hidden[1].mean(0)]))
    changed = hidden.clone()
    changed[0, 2:] = 1e6  # padding positions: no effect on any pooling of row 0
    for pool in (cls_pool, last_token_pool, mean_pool):
        torch.testing.assert_close(pool(changed, right)[0], pool(hidden, right)[0])


def test_classifier_loss_is_cross_entropy_averaged_over_the_batch():
    model = SequenceClassifier(tiny_encoder(), n_labels=3, dropout=0.0).eval()
    ids, mask = torch.randint(5, 50, (4, 6)), torch.ones(4, 6, dtype=torch.long)
    labels = torch.tensor([0, 2, 1, 2])
    out = model(ids, mask, labels=labels)
    assert out.logits.shape == (4, 3)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, labels))
    assert model(ids, mask).loss is None


def test_bert_and_gpt_default_to_cls_and_last_token_pooling():
    assert build_classifier(tiny_encoder("bert"), "full").pooling == "cls"
    assert build_classifier(tiny_encoder("gpt"), "full").pooling == "last"
    with pytest.raises(ValueError, match="pooling must be one of"):
        SequenceClassifier(tiny_encoder(), pooling="max")
    with pytest.raises(ValueError, match="regime must be"):
        build_classifier(tiny_encoder(), "adapter")


def test_probe_freezes_exactly_the_encoder_and_trains_the_head():
    model = SequenceClassifier(tiny_encoder())
    freeze_encoder(model)
    names = {name for name, _ in trainable_parameters(model)}
    assert names == {"classifier.weight", "classifier.bias"}
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.SGD([p for _, p in trainable_parameters(model)], lr=0.5)
    ids, mask = torch.randint(5, 50, (3, 5)), torch.ones(3, 5, dtype=torch.long)
    model(ids, mask, labels=torch.tensor([0, 1, 1])).loss.backward()
    optimizer.step()
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed == {"classifier.weight", "classifier.bias"}


@pytest.mark.parametrize("arch", ["bert", "gpt"])
def test_lora_trains_only_adapters_and_head_and_starts_from_the_pretrained_function(arch):
    encoder = tiny_encoder(arch)
    plain = SequenceClassifier(encoder, dropout=0.0).eval()
    ids, mask = torch.randint(5, 50, (3, 6)), torch.ones(3, 6, dtype=torch.long)
    with torch.no_grad():
        expected = plain(ids, mask).logits
    add_lora(plain, rank=4, alpha=8)
    with torch.no_grad():
        torch.testing.assert_close(plain(ids, mask).logits, expected)  # B = 0: the same function at first
    names = [name for name, _ in trainable_parameters(plain)]
    assert {"classifier.weight", "classifier.bias"} <= set(names)
    adapters = [n for n in names if n.startswith("encoder.")]
    assert adapters and all(".lora_A." in n or ".lora_B." in n for n in adapters)
    assert {n.split(".lora_")[0].rsplit(".", 1)[1] for n in adapters} == {"qkv", "out"}
    frozen = {k: v.clone() for k, v in plain.state_dict().items() if "lora_" not in k and "classifier" not in k}
    optimizer = torch.optim.SGD([p for _, p in trainable_parameters(plain)], lr=0.5)
    plain.train()
    plain(ids, mask, labels=torch.tensor([0, 1, 1])).loss.backward()
    optimizer.step()
    state = plain.state_dict()
    assert all(torch.equal(state[k], v) for k, v in frozen.items()), "a frozen base weight moved"

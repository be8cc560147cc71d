"""The optimizer every loop shares (`bertcourse.training.optim.adamw`) and layer-wise learning-rate decay."""

from __future__ import annotations

import pytest
import torch

from bertcourse.classifier import build_classifier
from bertcourse.config import ModelConfig
from bertcourse.model import build_model
from bertcourse.training.optim import adamw, layerwise_lr_scale


def _classifier(n_layers: int = 3):
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=40, n_layers=n_layers, d_model=16, n_heads=2, d_ff=32, max_seq_len=16)
    return build_classifier(build_model(config), "full", dropout=0.0)


def _first_step_sizes(model, lr_scale) -> dict[str, float]:
    """The largest change of each parameter in AdamW's first step. Adam's first update is lr * g / (|g| + eps),
    +-lr wherever the gradient is not tiny, so the largest change of a parameter is its learning rate."""
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = adamw(model, 1e-2, 0.0, lr_scale=lr_scale)
    ids = torch.randint(4, 40, (8, 10), generator=torch.Generator().manual_seed(0))
    model(ids, torch.ones_like(ids), labels=torch.tensor([0, 1] * 4)).loss.backward()
    optimizer.step()
    return {name: float((p.detach() - before[name]).abs().max()) for name, p in model.named_parameters()
            if p.grad is not None}


def test_without_a_scale_every_parameter_learns_at_the_rate_and_only_matrices_decay():
    model = _classifier()
    groups = adamw(model, 1e-3, 0.01).param_groups
    assert [(g["lr"], g["weight_decay"]) for g in groups] == [(1e-3, 0.01), (1e-3, 0.0)]
    assert all(p.dim() >= 2 for p in groups[0]["params"]) and all(p.dim() < 2 for p in groups[1]["params"])
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
    sizes = list(_first_step_sizes(model, None).values())
    assert sizes == pytest.approx([1e-2] * len(sizes), rel=1e-3)


def test_layer_wise_decay_slows_each_block_by_the_factor_below_the_one_above():
    """Three blocks at decay 0.5: the head at the full rate, blocks 2 / 1 / 0 at 1/2, 1/4, 1/8 of it, the
    embeddings at 1/16, measured as each parameter's first step (not read back from the optimizer's groups)."""
    model = _classifier(3)
    sizes = _first_step_sizes(model, layerwise_lr_scale(model, 0.5))
    expected = {"classifier.": 1e-2, "encoder.blocks.2.": 5e-3, "encoder.blocks.1.": 2.5e-3,
                "encoder.blocks.0.": 1.25e-3, "encoder.embeddings.": 6.25e-4}
    for name, size in sizes.items():
        prefix = next(p for p in expected if name.startswith(p))
        assert size == pytest.approx(expected[prefix], rel=1e-3), name
    assert {next(p for p in expected if n.startswith(p)) for n in sizes} == set(expected)  # every family trained
    scale = layerwise_lr_scale(model, 1.0)
    assert {scale(name) for name, _ in model.named_parameters()} == {1.0}


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_layer_wise_decay_reads_the_blocks_of_transformers_models_too(family):
    """A checkpoint loaded with transformers' classes names its blocks `layer.i` / `h.i` and its embeddings
    `word_embeddings` / `wte`: below the first block is the embeddings, above the last the head."""
    import transformers

    if family == "bert":
        model = transformers.BertForSequenceClassification(transformers.BertConfig(
            vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32))
        bottom, top = "bert.embeddings.word_embeddings.weight", "classifier.weight"
        blocks = ("bert.encoder.layer.0.output.dense.weight", "bert.encoder.layer.1.output.dense.weight")
    else:
        model = transformers.GPT2ForSequenceClassification(transformers.GPT2Config(
            vocab_size=50, n_embd=16, n_layer=2, n_head=2, pad_token_id=0))
        bottom, top = "transformer.wte.weight", "score.weight"
        blocks = ("transformer.h.0.mlp.c_fc.weight", "transformer.h.1.mlp.c_fc.weight")
    scale = layerwise_lr_scale(model, 0.8)
    assert [scale(bottom), scale(blocks[0]), scale(blocks[1]), scale(top)] == pytest.approx([0.8**3, 0.8**2, 0.8, 1])


def test_layer_wise_decay_refuses_a_factor_outside_the_range_and_a_model_without_blocks():
    for decay in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="above 0 and at most 1"):
            layerwise_lr_scale(_classifier(), decay)
    with pytest.raises(ValueError, match="no numbered blocks among Linear"):
        layerwise_lr_scale(torch.nn.Linear(3, 2), 0.9)

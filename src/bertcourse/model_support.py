"""Support code for tests, benchmarks and hidden checks of `bertcourse.model`; not part of the lesson.

- `randomize_`: every parameter random, so that a comparison of two implementations cannot pass by the
  luck of default initialisation (the ex03 hidden checks and tests/test_model.py use it);
- `hf_bert_config` / `hf_gpt2_config` and `*_state_dict_to_hf`: the same model in `transformers`, with
  our weights under its names, to prove that ours computes what the reference implementations compute.
"""

from __future__ import annotations

import torch
from torch import nn

from bertcourse.config import ModelConfig


def randomize_(model: nn.Module, generator: torch.Generator | None = None, std: float = 0.2) -> nn.Module:
    """Fill EVERY parameter (biases and LayerNorm too) with random values, in place.

    Default initialisation (zero biases, unit LayerNorm gains) hides mistakes such as a missing bias
    or a swapped LayerNorm; comparisons of two implementations use this instead. LayerNorm gains are
    drawn around 1, everything else around 0.
    """
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator) * std
            if name.endswith("norm.weight"):
                p.copy_(1.0 + noise)
            else:
                p.copy_(noise)
    return model


# ----------------------------------------------------------------------------- transformers' twins
# transformers is imported inside these functions: it takes seconds to import, and the hidden checks that
# import this module for `randomize_` never need it.


def hf_bert_config(config: ModelConfig):
    """A `transformers.BertConfig` of the same shape (built locally, nothing is downloaded)."""
    from transformers import BertConfig

    return BertConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.d_model,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        intermediate_size=config.d_ff,
        hidden_act="gelu",
        hidden_dropout_prob=config.dropout,
        attention_probs_dropout_prob=config.dropout,
        max_position_embeddings=config.max_seq_len,
        type_vocab_size=config.type_vocab_size,
        layer_norm_eps=config.layer_norm_eps,
        pad_token_id=config.pad_token_id,
        initializer_range=config.init_std,
    )


def bert_state_dict_to_hf(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Our BertForMLM (post-LN) weights renamed to `transformers.BertForMaskedLM` names."""
    hf = {
        "bert.embeddings.word_embeddings.weight": state["embeddings.token_embedding.weight"],
        "bert.embeddings.position_embeddings.weight": state["embeddings.position_embedding.weight"],
        "bert.embeddings.token_type_embeddings.weight": state["embeddings.segment_embedding.weight"],
        "bert.embeddings.LayerNorm.weight": state["embeddings.norm.weight"],
        "bert.embeddings.LayerNorm.bias": state["embeddings.norm.bias"],
        "cls.predictions.transform.dense.weight": state["head.dense.weight"],
        "cls.predictions.transform.dense.bias": state["head.dense.bias"],
        "cls.predictions.transform.LayerNorm.weight": state["head.norm.weight"],
        "cls.predictions.transform.LayerNorm.bias": state["head.norm.bias"],
        "cls.predictions.decoder.weight": state["head.decoder.weight"],
        "cls.predictions.bias": state["head.bias"],
    }
    for i in range(config.n_layers):
        ours, theirs = f"blocks.{i}.", f"bert.encoder.layer.{i}."
        for kind in ("weight", "bias"):
            q, k, v = state[ours + f"attention.qkv.{kind}"].chunk(3, dim=0)
            hf[theirs + f"attention.self.query.{kind}"] = q
            hf[theirs + f"attention.self.key.{kind}"] = k
            hf[theirs + f"attention.self.value.{kind}"] = v
            hf[theirs + f"attention.output.dense.{kind}"] = state[ours + f"attention.out.{kind}"]
            hf[theirs + f"attention.output.LayerNorm.{kind}"] = state[ours + f"attention_norm.{kind}"]
            hf[theirs + f"intermediate.dense.{kind}"] = state[ours + f"ffn.fc_in.{kind}"]
            hf[theirs + f"output.dense.{kind}"] = state[ours + f"ffn.fc_out.{kind}"]
            hf[theirs + f"output.LayerNorm.{kind}"] = state[ours + f"ffn_norm.{kind}"]
    return hf


def gpt_state_dict_to_hf(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Our GPT backbone weights renamed to `transformers.GPT2Model` names (Conv1D stores W transposed)."""
    hf = {
        "wte.weight": state["embeddings.token_embedding.weight"],
        "wpe.weight": state["embeddings.position_embedding.weight"],
        "ln_f.weight": state["final_norm.weight"],
        "ln_f.bias": state["final_norm.bias"],
    }
    for i in range(config.n_layers):
        ours, theirs = f"blocks.{i}.", f"h.{i}."
        hf[theirs + "ln_1.weight"] = state[ours + "attention_norm.weight"]
        hf[theirs + "ln_1.bias"] = state[ours + "attention_norm.bias"]
        hf[theirs + "ln_2.weight"] = state[ours + "ffn_norm.weight"]
        hf[theirs + "ln_2.bias"] = state[ours + "ffn_norm.bias"]
        hf[theirs + "attn.c_attn.weight"] = state[ours + "attention.qkv.weight"].t()
        hf[theirs + "attn.c_attn.bias"] = state[ours + "attention.qkv.bias"]
        hf[theirs + "attn.c_proj.weight"] = state[ours + "attention.out.weight"].t()
        hf[theirs + "attn.c_proj.bias"] = state[ours + "attention.out.bias"]
        hf[theirs + "mlp.c_fc.weight"] = state[ours + "ffn.fc_in.weight"].t()
        hf[theirs + "mlp.c_fc.bias"] = state[ours + "ffn.fc_in.bias"]
        hf[theirs + "mlp.c_proj.weight"] = state[ours + "ffn.fc_out.weight"].t()
        hf[theirs + "mlp.c_proj.bias"] = state[ours + "ffn.fc_out.bias"]
    return hf


def hf_gpt2_config(config: ModelConfig):
    """A `transformers.GPT2Config` of the same shape (built locally, nothing is downloaded)."""
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=config.vocab_size,
        n_positions=config.max_seq_len,
        n_embd=config.d_model,
        n_layer=config.n_layers,
        n_head=config.n_heads,
        n_inner=config.d_ff,
        activation_function="gelu",
        resid_pdrop=config.dropout,
        embd_pdrop=config.dropout,
        attn_pdrop=config.dropout,
        layer_norm_epsilon=config.layer_norm_eps,
        initializer_range=config.init_std,
    )

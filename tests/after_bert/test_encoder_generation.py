"""Generation with an encoder: the three attention masks do what UniLM's do to the course model, cloze
returns real candidates, and mask-predict follows its schedule (Ghazvininejad et al. 2019)."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib
import pytest
import torch

from bertcourse.after_bert.encoder_generation import (
    GenerationError,
    additive_attention_mask,
    bidirectional_mask,
    causal_mask,
    cloze,
    draw_attention_mask,
    encode_with_mask,
    mask_predict,
    masked_token_hits,
    prefix_mask,
)
from bertcourse.model import ModelConfig, build_model
from bertcourse.model_support import randomize_
from bertcourse.tokenizer import train_tokenizer

TINY = ModelConfig(vocab_size=60, n_layers=2, d_model=16, n_heads=2, d_ff=32, max_seq_len=12, dropout=0.0)


def random_model(arch: str = "bert"):
    torch.manual_seed(0)
    model = build_model(TINY.for_arch(arch))
    randomize_(model)
    return model.eval()


def test_the_three_masks_have_the_shapes_and_patterns_of_unilm():
    s, p = 7, 3
    assert bidirectional_mask(s).shape == causal_mask(s).shape == prefix_mask(s, p).shape == (s, s)
    assert bidirectional_mask(s).all()
    assert torch.equal(causal_mask(s), torch.ones(s, s, dtype=torch.bool).tril())
    mask = prefix_mask(s, p)
    for q in range(s):
        for k in range(s):
            expected = k < p or (q >= p and k <= q)  # the prefix both ways; the rest left to right
            assert mask[q, k] == expected, (q, k)
    assert torch.equal(prefix_mask(s, s), bidirectional_mask(s))
    assert torch.equal(prefix_mask(s, 0), causal_mask(s)) and torch.equal(prefix_mask(s, 1), causal_mask(s))


@pytest.mark.parametrize("bad", [lambda: prefix_mask(5, 6), lambda: prefix_mask(5, -1), lambda: causal_mask(0),
                                 lambda: additive_attention_mask(torch.ones(3, 4, dtype=torch.bool)),
                                 lambda: additive_attention_mask(torch.ones(3, 3))])
def test_impossible_masks_are_refused_with_a_reason(bad):
    with pytest.raises(GenerationError, match="must|square"):
        bad()


def test_the_bidirectional_mask_gives_the_models_own_encoding_and_blocks_padding():
    model = random_model()
    ids = torch.randint(5, 60, (2, 10), generator=torch.Generator().manual_seed(1))
    padding = torch.tensor([[1] * 10, [1] * 6 + [0] * 4])
    with torch.no_grad():
        assert torch.allclose(encode_with_mask(model, ids, bidirectional_mask(10), padding),
                              model.encode(ids, padding), atol=1e-6)
    additive = additive_attention_mask(bidirectional_mask(10), padding)
    assert additive.shape == (2, 1, 10, 10)
    assert (additive[1, 0, :, 6:] < -1e30).all() and (additive[1, 0, :, :6] == 0).all()


def test_the_causal_mask_makes_the_encoder_the_gpt_it_would_be():
    gpt = random_model("gpt")
    ids = torch.randint(5, 60, (2, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.allclose(encode_with_mask(gpt, ids, causal_mask(10)), gpt.encode(ids), atol=1e-6)


def changed_positions(model, allowed, ids, position):
    other = ids.clone()
    other[0, position] = (ids[0, position] + 7 - 5) % 55 + 5  # another regular token
    with torch.no_grad():
        a, b = encode_with_mask(model, ids, allowed), encode_with_mask(model, other, allowed)
    return ((a - b).abs().amax(-1)[0] > 1e-6).nonzero().flatten().tolist()


def test_what_each_mask_lets_a_change_reach():
    model, s, p = random_model(), 10, 4
    ids = torch.randint(5, 60, (1, s), generator=torch.Generator().manual_seed(3))
    assert changed_positions(model, bidirectional_mask(s), ids, 6) == list(range(s))
    assert changed_positions(model, causal_mask(s), ids, 6) == [6, 7, 8, 9]  # never the past
    # prefix LM: a generated token never reaches the prefix; a prefix token reaches everything
    assert changed_positions(model, prefix_mask(s, p), ids, 6) == [6, 7, 8, 9]
    assert changed_positions(model, prefix_mask(s, p), ids, p - 1) == list(range(s))


def test_draw_attention_mask_draws_on_the_axes_it_is_given():
    from matplotlib.figure import Figure

    backend = matplotlib.get_backend()
    fig = Figure()
    ax = fig.subplots()
    image = draw_attention_mask(ax, prefix_mask(5, 2), "prefix", labels=list("abcde"))
    assert image.get_array().shape == (5, 5) and ax.get_title() == "prefix"
    assert [t.get_text() for t in ax.get_xticklabels()] == list("abcde")
    assert matplotlib.get_backend() == backend


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(["the cat sat on the mat", "a dog sat on a log", "the dog ate the cat"] * 5, 60,
                           progress=False)


def test_cloze_returns_the_top_k_regular_tokens_of_every_mask(tokenizer):
    model = build_model(TINY.for_arch("bert", vocab_size=len(tokenizer))).eval()
    guesses = cloze(model, tokenizer, "the [MASK] sat on the [MASK]", k=4)
    assert len(guesses) == 2
    for guess in guesses:
        assert len(guess.tokens) == 4 and guess.probabilities == sorted(guess.probabilities, reverse=True)
        assert not set(guess.tokens) & set(tokenizer.all_special_tokens)
        assert 0 < sum(guess.probabilities) <= 1 + 1e-6
    with pytest.raises(GenerationError, match="no \\[MASK\\]"):
        cloze(model, tokenizer, "the cat sat")


class FixedLogits(torch.nn.Module):
    """A stand-in model: the same logits at every call, position i preferring token 10 + i with a
    confidence that is set per position, so the test knows which guesses are least sure."""

    def __init__(self, peaks: list[float], vocab: int = 30):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        table = torch.zeros(len(peaks), vocab)
        for i, peak in enumerate(peaks):
            table[i, 10 + i] = peak
        self.table = table
        self.calls: list[torch.Tensor] = []

    def forward(self, input_ids, attention_mask=None):
        self.calls.append(input_ids[0].clone())
        return SimpleNamespace(logits=self.table[None].expand(len(input_ids), -1, -1))


def test_mask_predict_remasks_the_least_confident_on_schedule():
    peaks = [0.0, 5.0, 1.0, 4.0, 2.0, 3.0, 0.5, 6.0]  # position 0 is the prompt, never filled
    model = FixedLogits(peaks)
    ids = torch.full((8,), 3)
    fill = torch.tensor([False] + [True] * 7)
    result = mask_predict(model, ids, fill, mask_token_id=4, rounds=3, forbidden=[0, 1, 2, 3, 4])
    assert result.ids[0] == 3 and torch.equal(result.ids[1:], torch.arange(11, 18))
    assert [int(m.sum()) for m in result.masked] == [7, 7 * 2 // 3, 7 * 1 // 3]  # N (T - t + 1) / T
    confidence_order = sorted(range(1, 8), key=lambda i: peaks[i])
    assert result.masked[1].nonzero().flatten().tolist() == sorted(confidence_order[:4])
    assert result.masked[2].nonzero().flatten().tolist() == sorted(confidence_order[:2])
    assert (model.calls[1] == 4).sum() == 4 and model.calls[1][0] == 3  # the re-masked went in as [MASK]


def test_mask_predict_never_picks_a_forbidden_token_and_refuses_nonsense():
    model = FixedLogits([9.0, 9.0, 9.0])
    model.table[:, 1] = 100.0  # a special token the model loves
    result = mask_predict(model, torch.zeros(3, dtype=torch.long), torch.ones(3, dtype=torch.bool), 4, 2,
                          forbidden=[1])
    assert 1 not in result.ids.tolist()
    with pytest.raises(GenerationError, match="no position"):
        mask_predict(model, torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.bool), 4, 2)
    with pytest.raises(GenerationError, match="rounds"):
        mask_predict(model, torch.zeros(3, dtype=torch.long), torch.ones(3, dtype=torch.bool), 4, 0)


def test_masked_token_hits_under_the_bidirectional_mask_are_the_models_own():
    from bertcourse.masking import mask_tokens
    from bertcourse.training.heldout import target_hits

    model = random_model()
    generator = torch.Generator().manual_seed(4)
    ids = torch.randint(5, 60, (3, 12), generator=generator)
    inputs, labels = mask_tokens(ids, mask_token_id=4, vocab_size=60, special_ids=[0, 1, 2, 3, 4],
                                 select_prob=0.5, generator=generator)
    batches = [{"input_ids": inputs, "attention_mask": torch.ones_like(ids), "labels": labels}]
    ours = masked_token_hits(model, batches, bidirectional_mask)
    assert len(ours) == int((labels != -100).sum()) > 0
    assert torch.equal(ours, target_hits(model, batches))
    assert len(masked_token_hits(model, batches, causal_mask)) == len(ours)

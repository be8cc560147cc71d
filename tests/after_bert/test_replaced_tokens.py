"""ELECTRA's replaced-token detection (bertcourse.after_bert.replaced_tokens): labels 1 only where the sampled token
differs from the original, -100 at padding; replacements sampled from softmax(logits / T), not argmax."""

from __future__ import annotations

import pytest
import torch
from stats_support import plausible

from bertcourse.after_bert.replaced_tokens import replaced_token_labels, sample_replacements


def test_labels_mark_only_tokens_that_differ_and_ignore_padding():
    original = torch.tensor([[2, 10, 11, 12, 3, 0], [2, 20, 21, 3, 0, 0]])
    corrupted = torch.tensor([[2, 10, 99, 12, 3, 0], [2, 20, 21, 3, 0, 0]])
    attention = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]])
    # position (0, 1) and (1, 2) were masked and the generator sampled the original back: label 0
    labels = replaced_token_labels(original, corrupted, attention)
    assert labels.dtype == torch.long
    assert labels.tolist() == [[0, 0, 1, 0, 0, -100], [0, 0, 0, 0, -100, -100]]
    assert torch.equal(original, torch.tensor([[2, 10, 11, 12, 3, 0], [2, 20, 21, 3, 0, 0]]))  # untouched


def test_labels_refuse_mismatched_shapes():
    with pytest.raises(ValueError, match="same shape"):
        replaced_token_labels(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long),
                              torch.ones(2, 3))


def test_replacements_follow_the_softmax_at_each_temperature():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 0.0, 3.0, 0.0]])
    draws = 4000
    for temperature in (1.0, 2.0, 0.5):
        g = torch.Generator().manual_seed(int(temperature * 10))
        samples = sample_replacements(logits.repeat(draws, 1), g, temperature).reshape(draws, 2)  # rows independent
        assert samples.shape == (draws, 2) and samples.dtype == torch.long
        probs = torch.softmax(logits / temperature, dim=-1)
        for row in range(2):
            for token in range(4):
                count = int((samples[:, row] == token).sum())
                assert plausible(count, draws, float(probs[row, token]), tail=1e-10), (temperature, row, token)


def test_replacements_are_not_the_argmax_and_carry_no_gradient():
    logits = torch.tensor([[1.0, 0.9, 0.8]] * 300, requires_grad=True)
    samples = sample_replacements(logits, torch.Generator().manual_seed(0))
    assert not samples.requires_grad
    assert set(samples.tolist()) == {0, 1, 2}  # argmax would give 0 every time
    assert sample_replacements(torch.zeros(0, 5), torch.Generator()).shape == (0,)
    with pytest.raises(ValueError, match="temperature"):
        sample_replacements(logits, torch.Generator(), temperature=0.0)
    with pytest.raises(ValueError, match=r"\[n, vocab\]"):
        sample_replacements(torch.zeros(5), torch.Generator())


def test_same_seed_same_replacements():
    logits = torch.randn(50, 30, generator=torch.Generator().manual_seed(1))
    first = sample_replacements(logits, torch.Generator().manual_seed(7))
    assert torch.equal(first, sample_replacements(logits, torch.Generator().manual_seed(7)))
    assert not torch.equal(first, sample_replacements(logits, torch.Generator().manual_seed(8)))

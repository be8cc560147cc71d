"""Span corruption: masking contiguous spans instead of single tokens.

- `random_spans_noise_mask`: T5's noise mask (Raffel et al. 2020, `random_spans_noise_mask` in
  t5/data/preprocessors.py and transformers' examples/flax/language-modeling/run_t5_mlm_flax.py): an
  exact number of noise tokens in an exact number of spans, every such mask equally likely.
- `t5_span_corrupt`: T5's inputs and decoder targets, one sentinel per span ("Thank you <X> me to your
  party <Y> week" -> "<X> for inviting <Y> last <Z>").
- `geometric_span_mask`: SpanBERT's masking (Joshi et al. 2020): whole-word spans whose lengths follow a
  geometric distribution clipped at `max_span`, until 15% of the tokens are covered.

Why spans: predicting a span from its two ends is harder than a single token whose neighbours give it
away (a word's other pieces, say), and T5's target is much shorter than the input (one sentinel per span,
not per token), which makes the encoder-decoder cheaper to train.

Every random number comes from the `torch.Generator` passed in.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def random_segmentation(num_items: int, num_segments: int, generator: torch.Generator) -> torch.Tensor:
    """`num_segments` positive lengths adding up to `num_items`, every such composition equally likely: the
    segments start after `num_segments - 1` cut points drawn without replacement from the `num_items - 1`
    gaps between items."""
    if not 1 <= num_segments <= num_items:
        raise ValueError(f"cannot cut {num_items} items into {num_segments} non-empty segments")
    gaps = torch.randperm(num_items - 1, generator=generator)[: num_segments - 1] + 1
    edges = torch.cat([torch.tensor([0]), gaps.sort().values, torch.tensor([num_items])])
    return edges.diff()


def noise_counts(length: int, noise_density: float, mean_noise_span_length: float) -> tuple[int, int]:
    """(noise tokens, noise spans) of T5's mask: round(length * density) tokens, kept in [1, length - 1],
    in round(tokens / mean span length) spans, at least 1 (and never more spans than either kind of token
    can fill)."""
    if length < 2:
        raise ValueError(f"a noise mask needs at least 2 tokens (one noise, one not), got length {length}")
    if not 0.0 < noise_density < 1.0 or mean_noise_span_length <= 0:
        raise ValueError(f"noise_density must lie in (0, 1) and mean_noise_span_length be > 0, got "
                         f"{noise_density} and {mean_noise_span_length}")
    num_noise = min(max(round(length * noise_density), 1), length - 1)
    num_spans = max(round(num_noise / mean_noise_span_length), 1)
    return num_noise, min(num_spans, num_noise, length - num_noise)


def random_spans_noise_mask(length: int, noise_density: float, mean_noise_span_length: float,
                            generator: torch.Generator) -> torch.Tensor:
    """T5's noise mask: a bool tensor `[length]`, True = noise. Exactly `noise_counts(...)` noise tokens in
    that many spans; non-noise and noise spans alternate, starting with non-noise (so the last span is
    noise); the lengths of both kinds of span are uniformly random compositions (`random_segmentation`)."""
    num_noise, num_spans = noise_counts(length, noise_density, mean_noise_span_length)
    noise = random_segmentation(num_noise, num_spans, generator)
    nonnoise = random_segmentation(length - num_noise, num_spans, generator)
    interleaved = torch.stack([nonnoise, noise], dim=1).reshape(-1)  # nonnoise_0, noise_0, nonnoise_1, ...
    span_starts = torch.zeros(length, dtype=torch.long)
    span_starts[interleaved.cumsum(0)[:-1]] = 1
    return span_starts.cumsum(0) % 2 == 1  # span number of each position: odd = a noise span


def span_runs(noise_mask: Sequence[bool]) -> list[tuple[int, int]]:
    """[(start, end)] of the maximal runs of True in `noise_mask`, end exclusive, in order."""
    flags = noise_mask.tolist() if isinstance(noise_mask, torch.Tensor) else noise_mask
    runs: list[tuple[int, int]] = []
    start = None
    for i, noisy in enumerate([bool(x) for x in flags] + [False]):
        if noisy and start is None:
            start = i
        elif not noisy and start is not None:
            runs.append((start, i))
            start = None
    return runs


def t5_span_corrupt(tokens: Sequence[int], noise_mask: Sequence[bool],
                    sentinel_ids: Sequence[int]) -> tuple[list[int], list[int]]:
    """(inputs, targets) of T5's span corruption. inputs: `tokens` with each maximal run of noise replaced
    by ONE sentinel, `sentinel_ids[0]`, `[1]`, ... in order; targets: `sentinel_ids[k]` followed by span k's
    tokens, for every span k, then a final `sentinel_ids[n_spans]` that closes the last span. No EOS (the
    caller appends one)."""
    tokens = [int(t) for t in tokens]
    if len(noise_mask) != len(tokens):
        raise ValueError(f"noise_mask has {len(noise_mask)} entries for {len(tokens)} tokens")
    runs = span_runs(noise_mask)
    if len(sentinel_ids) < len(runs) + 1:
        raise ValueError(f"{len(runs)} noise spans need {len(runs) + 1} sentinel ids (one per span and a final "
                         f"one), got {len(sentinel_ids)}")
    inputs: list[int] = []
    targets: list[int] = []
    previous_end = 0
    for k, (start, end) in enumerate(runs):
        inputs += tokens[previous_end:start] + [int(sentinel_ids[k])]
        targets += [int(sentinel_ids[k])] + tokens[start:end]
        previous_end = end
    inputs += tokens[previous_end:]
    targets.append(int(sentinel_ids[len(runs)]))
    return inputs, targets


def clipped_geometric_probs(p: float, max_span: int) -> torch.Tensor:
    """P(length = 1..max_span) of SpanBERT's span lengths: Geometric(p) restricted to 1..max_span and
    renormalised (SpanBERT's code; mean 3.8 words at p = 0.2, max_span = 10, the paper's figure)."""
    if not 0.0 < p <= 1.0 or max_span < 1:
        raise ValueError(f"p must lie in (0, 1] and max_span be >= 1, got p={p}, max_span={max_span}")
    lengths = torch.arange(1, max_span + 1, dtype=torch.float64)
    probs = p * (1 - p) ** (lengths - 1)
    return probs / probs.sum()


def geometric_span_mask(word_ids: Sequence[int | None] | torch.Tensor, budget_fraction: float = 0.15,
                        p: float = 0.2, max_span: int = 10, *, generator: torch.Generator) -> torch.Tensor:
    """SpanBERT's span selection over one sequence: a bool tensor `[len(word_ids)]`, True = selected.

    `word_ids`: the fast tokenizer's `word_ids()` (None or -1 for [CLS], [SEP], padding: never selected).
    The budget is `max(1, round(budget_fraction * n))` of the n word pieces. Repeatedly: draw a span length
    in words from `clipped_geometric_probs(p, max_span)`, a start word uniformly among the words not yet
    selected, and select that many consecutive unselected words from it (fewer at the end of the sequence
    or at a selected word), whole words only; a word that would overflow the budget ends the selection.
    """
    ids = [-1 if w is None else int(w) for w in (word_ids.tolist() if isinstance(word_ids, torch.Tensor)
                                                  else word_ids)]
    pieces: dict[int, list[int]] = {}  # word -> its positions, words in order of first appearance
    for i, w in enumerate(ids):
        if w >= 0:
            pieces.setdefault(w, []).append(i)
    words = list(pieces)
    budget = max(1, round(budget_fraction * sum(len(v) for v in pieces.values())))
    probs = clipped_geometric_probs(p, max_span)
    selected = torch.zeros(len(ids), dtype=torch.bool)
    taken: set[int] = set()
    used = 0
    while len(taken) < len(words):
        length = int(torch.multinomial(probs, 1, generator=generator)) + 1
        free = [i for i, w in enumerate(words) if w not in taken]  # a start among the unselected words
        start = free[int(torch.randint(len(free), (), generator=generator))]
        for w in words[start:start + length]:
            if w in taken:
                break
            if used + len(pieces[w]) > budget:
                return selected
            taken.add(w)
            used += len(pieces[w])
            selected[pieces[w]] = True
        if used >= budget:
            break
    return selected

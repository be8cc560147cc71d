"""ELECTRA's replaced-token detection (Clark et al. 2020): a small generator fills the masked positions
with *sampled* tokens and the discriminator labels every position original (0) or replaced (1).

Two details are easy to get wrong:
- a position is "replaced" only if the sampled token differs from the original: when the generator
  samples the right token, the input is the original text there, and ELECTRA labels it 0;
- the generator's tokens are sampled from its softmax, not its argmax: a well-trained generator's argmax
  is often right (nothing replaced) and its mistakes are few and predictable; samples give the
  discriminator plausible, varied replacements. No gradient flows through the sampling (the generator is
  trained by its own MLM loss).

Every random number comes from the `torch.Generator` passed in.
"""

from __future__ import annotations

import torch

ORIGINAL, REPLACED = 0, 1
IGNORE_INDEX = -100  # padding: left out of the discriminator's loss, as in the MLM loss


def replaced_token_labels(original: torch.Tensor, corrupted: torch.Tensor,
                          attention_mask: torch.Tensor) -> torch.Tensor:
    """Labels `[B, S]` (int64): 1 where `corrupted != original`, 0 where they are equal (a masked position
    whose sampled token is the original included), -100 where `attention_mask == 0`."""
    if original.shape != corrupted.shape or original.shape != attention_mask.shape:
        raise ValueError(f"original {tuple(original.shape)}, corrupted {tuple(corrupted.shape)} and "
                         f"attention_mask {tuple(attention_mask.shape)} must have the same shape")
    labels = (corrupted != original).long()
    return labels.masked_fill(attention_mask == 0, IGNORE_INDEX)


@torch.no_grad()
def sample_replacements(logits: torch.Tensor, generator: torch.Generator, temperature: float = 1.0) -> torch.Tensor:
    """One token per row of `logits` `[n, V]`, drawn from softmax(logits / temperature) (a LongTensor `[n]`);
    no gradient flows back.

    Drawn by inverse CDF, n uniforms against the cumulative probabilities: `torch.multinomial` gives the
    same distribution but draws n x V exponentials on the CPU (~450 ms of a ~900 ms ELECTRA step at the
    cpu profile; this takes ~10 ms).
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be [n, vocab], got shape {tuple(logits.shape)}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (argmax is not ELECTRA's generator), got {temperature}")
    if logits.shape[0] == 0:
        return torch.zeros(0, dtype=torch.long, device=logits.device)
    cumulative = torch.softmax(logits.detach().float() / temperature, dim=-1).cumsum(-1)  # [n, V]
    uniform = torch.rand(logits.shape[0], 1, generator=generator, device=logits.device) * cumulative[:, -1:]
    return torch.searchsorted(cumulative, uniform, right=True).squeeze(1).clamp_(max=logits.shape[1] - 1)

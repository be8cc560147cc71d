"""Where a training step of the parameter-matched GPT goes on the CPU (the `cpu` profile's size).

The GPT predicts the next token at EVERY position: as one tensor its logits would be 4096 x 8000
(131 MB in fp32) per batch, plus their log-softmax and gradients. Allocations that large are served
by glibc with fresh pages from the kernel each time (mmap), zero-filled on first touch, which is why
`bertcourse.model` runs the head on chunks of at most ~16 MB of logits. This script reports the step
time with the process's system (kernel) CPU time per step beside it; to see the effect of the
allocator alone, compare with `MALLOC_MMAP_THRESHOLD_=4294967296` in the environment, or set
`bertcourse.model.LOGITS_CHUNK_BYTES` very large (`--one-chunk`) to undo the chunking.

    .venv/bin/python benchmarks/gpt_step.py
    .venv/bin/python benchmarks/gpt_step.py --one-chunk
    MALLOC_MMAP_THRESHOLD_=4294967296 .venv/bin/python benchmarks/gpt_step.py --one-chunk
"""

from __future__ import annotations

import os
import sys

import torch
from pretraining import Runner  # the same training step (fused AdamW) as the BERT benchmark

import bertcourse.model
from bertcourse.course import load_course
from bertcourse.model import GPT
from bertcourse.training.objectives import next_token_labels


def main(steps: int = 15) -> None:
    one_chunk = "--one-chunk" in sys.argv[1:]
    if one_chunk:
        bertcourse.model.LOGITS_CHUNK_BYTES = 2**40
    torch.manual_seed(0)
    runner = Runner("GPT", GPT(load_course().profile("cpu").model.for_arch("gpt")))
    config = runner.model.config
    ids = torch.randint(5, config.vocab_size, (32, config.max_seq_len))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
             "labels": next_token_labels(ids, torch.ones_like(ids))}

    runner.step(batch)  # warm-up
    before = os.times()
    seconds = runner.timed([batch] * steps)
    after = os.times()
    print(
        f"GPT, cpu profile, batch 32 x {config.max_seq_len}, {torch.get_num_threads()} threads, "
        f"{'logits in one chunk' if one_chunk else 'logits in chunks'}, "
        f"MALLOC_MMAP_THRESHOLD_={os.environ.get('MALLOC_MMAP_THRESHOLD_', 'unset')}: "
        f"{seconds * 1000:.0f} ms per step, of which the kernel's CPU time "
        f"{(after.system - before.system) / steps * 1000:.0f} ms (summed over threads)"
    )


if __name__ == "__main__":
    main()

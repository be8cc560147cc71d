"""Pretraining's resident memory stays flat after warm-up (issue 13).

Before the fix a GPT run of the cpu profile grew without bound (>12 GB by step 3,000): the number of
targets changes every batch, and the CPU kernels kept memory for every shape of the head's last chunk
they met. The test runs a few hundred steps of the cpu-quick GPT (the objective with the most
distinct target counts) and compares the resident memory over the run's second half, where a flat
run only wobbles: medians, not single samples, and a bound several times the wobble.
Verified to fail without the fix: with `bertcourse.model.ROWS_MULTIPLE = 1` (no padding) the second
half grew by ~250 MB in bf16 and ~140 MB in fp32 (benchmarks/README.md, "Memory").
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

import bertcourse.training.pretrain
from bertcourse.training.pretrain import PretrainOptions, pretrain

STEPS = 300
GROWTH_BOUND_MB = 64  # a flat run's second-half medians differ by < 20 MB; the unfixed run grew 140-250 MB


def resident_mb() -> float:
    """This process's resident set size (VmRSS) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS line in /proc/self/status")


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status (Linux only)")
def test_pretraining_memory_stops_growing_after_warm_up(tmp_path, corpus, quick_tokenizer, monkeypatch):
    samples: dict[int, float] = {}
    draw = bertcourse.training.pretrain.batch_indices

    def sampled(step: int, *args, **kwargs):  # called once per step, before the step's batch is built
        samples[step] = resident_mb()
        return draw(step, *args, **kwargs)

    monkeypatch.setattr(bertcourse.training.pretrain, "batch_indices", sampled)
    pretrain(PretrainOptions(arch="gpt", profile="cpu-quick", out_dir=tmp_path, max_steps=STEPS, progress=False,
                             eval_every=STEPS, checkpoint_every=STEPS), corpus=corpus, tokenizer=quick_tokenizer)

    def median_over(first: float, last: float) -> float:
        return statistics.median(mb for step, mb in samples.items() if first * STEPS < step <= last * STEPS)

    middle, end = median_over(0.4, 0.5), median_over(0.9, 1.0)
    assert end - middle < GROWTH_BOUND_MB, (
        f"resident memory grew by {end - middle:.0f} MB between steps {STEPS // 2} and {STEPS} "
        f"({middle:.0f} -> {end:.0f} MB; allowed {GROWTH_BOUND_MB}): something keeps memory per step"
    )

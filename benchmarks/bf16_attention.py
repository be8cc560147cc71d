"""Where a bf16 training step of the course BERT spends its time on the CPU, and one lever tried.

    .venv/bin/python benchmarks/bf16_attention.py --threads 1

1. `torch.profiler` over 4 steps of the `cpu` profile's BERT in fp32 and under bf16 autocast: the ops
   with the most self CPU time (the CPU flash-attention backward is the one that grows in bf16).
2. The step timed in fp32, in bf16, and in bf16 with only the attention kernel run in fp32 (its inputs
   cast up, autocast off around it, the output cast back): copies of one initialisation on the same
   batches, the order rotating from round to round; speed-ups are medians of per-round ratios.

The fp32 attention is an experiment done here by swapping `F.scaled_dot_product_attention` inside
`bertcourse.model` for the duration of a step; the package does not do it (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pretraining import Runner, make_batches  # noqa: E402

import bertcourse.model as course_model  # noqa: E402
from bertcourse.course import load_course  # noqa: E402

SDPA = F.scaled_dot_product_attention


def fp32_attention(query, key, value, *args, **kwargs):
    """scaled_dot_product_attention computed in fp32 when handed bf16 CPU tensors."""
    if query.device.type != "cpu" or query.dtype != torch.bfloat16:
        return SDPA(query, key, value, *args, **kwargs)
    mask = kwargs.get("attn_mask")
    if mask is not None and mask.is_floating_point():
        kwargs["attn_mask"] = mask.float()
    with torch.autocast("cpu", enabled=False):
        return SDPA(query.float(), key.float(), value.float(), *args, **kwargs).to(query.dtype)


class Fp32AttentionRunner(Runner):
    """A Runner whose model computes attention in fp32 during its steps."""

    def step(self, batch: dict[str, torch.Tensor]) -> None:
        course_model.F.scaled_dot_product_attention = fp32_attention
        try:
            super().step(batch)
        finally:
            course_model.F.scaled_dot_product_attention = SDPA


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    profile_spec = load_course().profile("cpu")
    config = profile_spec.model.for_arch("bert")
    torch.manual_seed(0)
    model = course_model.build_model(config)
    clip = profile_spec.pretrain.grad_clip
    runners = [Runner("fp32", model, None, clip), Runner("bf16", copy.deepcopy(model), torch.bfloat16, clip),
               Fp32AttentionRunner("bf16, attention in fp32", copy.deepcopy(model), torch.bfloat16, clip)]
    batches = make_batches(config, 32, max(args.steps, 6))
    for runner in runners[:2]:
        for batch in batches[:2]:
            runner.step(batch)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for batch in batches[2:6]:
                runner.step(batch)
        print(f"== {runner.name}: self CPU time of 4 steps, top ops")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))
    for runner in runners:
        runner.step(batches[0])
    times: dict[str, list[float]] = {r.name: [] for r in runners}
    for round_ in range(args.rounds):
        shift = round_ % len(runners)
        for runner in runners[shift:] + runners[:shift]:
            times[runner.name].append(runner.timed(batches[: args.steps]))
    for name, values in times.items():
        ratios = [f / t for f, t in zip(times["fp32"], values)]
        print(f"{name:26s} ms/step median {1000 * statistics.median(values):6.0f}; speed-up over fp32 "
              f"{statistics.median(ratios):.2f}x (rounds {min(ratios):.2f}-{max(ratios):.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

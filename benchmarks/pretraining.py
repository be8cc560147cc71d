"""Training speed of the course BERT against transformers' BertForMaskedLM, in one run.

Both models get the same configuration (a course.yml profile), the same masked batches (the course
masking, 15% selected) and the same optimizer (fused AdamW, as `bertcourse pretrain` uses); a training
step is forward + backward + update.
Each round measures this machine's matmul rate and then both models back to back, so that a change in
load or clock speed hits all three alike. The speed-up is the median of the per-round ratios. The
fraction of the matmul rate is given best against best (the fastest round of the model against the
fastest matmul measurement: the undisturbed machine, as `timeit` advises for noisy machines) and as the
median and range of the per-round ratios.

Achieved FLOP/s: the floating-point operations of one training step are counted by
`torch.utils.flop_counter.FlopCounterMode` (matrix products and attention, forward and backward) and
divided by the measured step time, then compared with this machine's fp32 matrix-multiply rate
(measured in the same round with a large square `torch.mm`). Note the course BERT does fewer FLOPs per token than
BertForMaskedLM because it runs the vocabulary projection only at the selected positions; the
fraction of the matmul rate says how well the FLOPs it does run use the hardware.

    .venv/bin/python benchmarks/pretraining.py                  # cpu profile as in course.yml, batch 32 x 128
    .venv/bin/python benchmarks/pretraining.py --threads 1
    .venv/bin/python benchmarks/pretraining.py --dropout 0.1    # with BERT's original dropout
    .venv/bin/python benchmarks/pretraining.py --profile cpu-quick --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from bertcourse.course import load_course
from bertcourse.masking import mask_tokens
from bertcourse.model import BertForMLM, ModelConfig
from bertcourse.model_support import hf_bert_config

SPECIAL_IDS = [0, 1, 2, 3, 4]  # [PAD] [UNK] [CLS] [SEP] [MASK]


def _cpu_attention_flops(query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query, key, value)


def _cpu_attention_backward_flops(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out, query, key, value)


# FlopCounterMode knows the CUDA attention kernels but not the CPU flash kernel that
# scaled_dot_product_attention runs when dropout is off; without these its FLOPs would go uncounted.
CPU_ATTENTION_FLOPS = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward_flops,
}


def matmul_rate(size: int = 2048, repeats: int = 10) -> float:
    """The best fp32 FLOP/s of a large square matrix product on this machine."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def make_batches(config: ModelConfig, batch_size: int, n: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n):
        ids = torch.randint(5, config.vocab_size, (batch_size, config.max_seq_len), generator=generator)
        ids[:, 0], ids[:, -1] = 2, 3
        inputs, labels = mask_tokens(
            ids,
            mask_token_id=4,
            vocab_size=config.vocab_size,
            special_ids=SPECIAL_IDS,
            generator=generator,
            select_prob=0.15,
            mask_prob=0.8,
            random_prob=0.1,
        )
        batches.append({"input_ids": inputs, "attention_mask": torch.ones_like(ids), "labels": labels})
    return batches


class Runner:
    """One model + AdamW; `step(batch)` is one full training step."""

    def __init__(self, name: str, model: torch.nn.Module):
        self.name, self.model = name, model.train()
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # as bertcourse.train

    def step(self, batch: dict[str, torch.Tensor]) -> None:
        loss = self.model(**batch).loss
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def flops_per_step(self, batch: dict[str, torch.Tensor]) -> int:
        with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION_FLOPS) as counter:
            self.step(batch)
        return counter.get_total_flops()

    def timed(self, batches: list[dict[str, torch.Tensor]]) -> float:
        """Seconds per step over `batches`."""
        start = time.perf_counter()
        for batch in batches:
            self.step(batch)
        return (time.perf_counter() - start) / len(batches)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu", help="course.yml profile whose model size is used")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed run")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of matmul rate + both models")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--dropout", type=float, default=None, help="override the profile's dropout (both models)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    from transformers import BertForMaskedLM

    overrides = {} if args.dropout is None else {"dropout": args.dropout}
    config = load_course().profile(args.profile).model.for_arch("bert", **overrides)
    ours = Runner("bertcourse BertForMLM", BertForMLM(config))
    reference = Runner("transformers BertForMaskedLM", BertForMaskedLM(hf_bert_config(config)))
    batches = make_batches(config, args.batch_size, args.steps)
    print(
        f"profile {args.profile}: {config.n_layers} layers x {config.d_model}, vocab {config.vocab_size}, "
        f"batch {args.batch_size} x {config.max_seq_len}, dropout {config.dropout}, fp32, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}"
    )

    flops = {r.name: r.flops_per_step(batches[0]) for r in (ours, reference)}
    for runner in (ours, reference):  # warm-up
        runner.step(batches[0])
    # Each round measures the matmul rate and both models back to back, so a change in machine load
    # or clock speed hits all three alike; fractions and speed-ups are per-round ratios, medians shown.
    step_time: dict[str, list[float]] = {ours.name: [], reference.name: []}
    peaks: list[float] = []
    for _ in range(args.rounds):
        peaks.append(matmul_rate(repeats=5))
        for runner in (ours, reference):
            step_time[runner.name].append(runner.timed(batches))

    tokens_per_step = args.batch_size * config.max_seq_len
    peak = max(peaks)
    print(f"fp32 matmul rate (2048^3 torch.mm), per round: {', '.join(f'{p / 1e9:.0f}' for p in peaks)} GFLOP/s")
    print(f"{'model':32s} {'tokens/s':>10s} {'GFLOP/step':>11s} {'GFLOP/s':>9s} {'of matmul':>10s}   per round")
    for runner in (ours, reference):
        times = step_time[runner.name]
        fractions = sorted(flops[runner.name] / t / p for t, p in zip(times, peaks))
        best = min(times)
        print(
            f"{runner.name:32s} {tokens_per_step / best:10,.0f} {flops[runner.name] / 1e9:11.2f} "
            f"{flops[runner.name] / best / 1e9:9.1f} {flops[runner.name] / best / peak:10.1%}   "
            f"median {statistics.median(fractions):.1%} ({fractions[0]:.1%}-{fractions[-1]:.1%})"
        )
    speedups = [r / o for o, r in zip(step_time[ours.name], step_time[reference.name])]
    print(f"speed-up (tokens/s, ours / transformers): {statistics.median(speedups):.2f}x "
          f"(rounds {min(speedups):.2f}-{max(speedups):.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

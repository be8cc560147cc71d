"""Training speed of the course BERT against transformers' BertForMaskedLM, in one run.

Both models get the same configuration (a course.yml profile), the same masked batches (the course
masking, 15% selected) and the same optimizer (AdamW); a training step is forward + backward + update.
Runs of the two alternate (ABAB...) so that a change in machine load hits both alike; the median
tokens/s of each is reported, with their ratio.

Achieved FLOP/s: the floating-point operations of one training step are counted by
`torch.utils.flop_counter.FlopCounterMode` (matrix products and attention, forward and backward) and
divided by the measured step time, then compared with this machine's fp32 matrix-multiply rate
(measured here with large square `torch.mm`). Note the course BERT does fewer FLOPs per token than
BertForMaskedLM because it runs the vocabulary projection only at the selected positions; the
fraction of the matmul rate says how well the FLOPs it does run use the hardware.

    .venv/bin/python benchmarks/pretraining.py                     # cpu profile size, batch 32 x 128
    .venv/bin/python benchmarks/pretraining.py --profile cpu-quick --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from bertcourse.masking import mask_tokens
from bertcourse.model import BertForMLM, ModelConfig, hf_bert_config

SPECIAL_IDS = [0, 1, 2, 3, 4]  # [PAD] [UNK] [CLS] [SEP] [MASK]


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
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        self.rates: list[float] = []

    def step(self, batch: dict[str, torch.Tensor]) -> None:
        loss = self.model(**batch).loss
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def flops_per_step(self, batch: dict[str, torch.Tensor]) -> int:
        with FlopCounterMode(display=False) as counter:
            self.step(batch)
        return counter.get_total_flops()

    def timed(self, batches: list[dict[str, torch.Tensor]]) -> float:
        start = time.perf_counter()
        for batch in batches:
            self.step(batch)
        seconds = time.perf_counter() - start
        tokens = sum(int(b["attention_mask"].sum()) for b in batches)
        self.rates.append(tokens / seconds)
        return seconds / len(batches)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu", help="course.yml profile whose model size is used")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed run")
    parser.add_argument("--rounds", type=int, default=5, help="alternating timed runs per model")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    from transformers import BertForMaskedLM

    config = ModelConfig.from_profile(args.profile)
    ours = Runner("bertcourse BertForMLM", BertForMLM(config))
    reference = Runner("transformers BertForMaskedLM", BertForMaskedLM(hf_bert_config(config)))
    batches = make_batches(config, args.batch_size, args.steps)
    print(
        f"profile {args.profile}: {config.n_layers} layers x {config.d_model}, vocab {config.vocab_size}, "
        f"batch {args.batch_size} x {config.max_seq_len}, dropout {config.dropout}, fp32, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}"
    )

    peak = matmul_rate()
    flops = {r.name: r.flops_per_step(batches[0]) for r in (ours, reference)}
    for runner in (ours, reference):  # warm-up
        runner.step(batches[0])
    step_time: dict[str, list[float]] = {ours.name: [], reference.name: []}
    for _ in range(args.rounds):
        for runner in (ours, reference):
            step_time[runner.name].append(runner.timed(batches))
    peak = max(peak, matmul_rate())  # measured before and after: the better of the two

    tokens_per_step = args.batch_size * config.max_seq_len
    print(f"fp32 matmul rate (2048^3 torch.mm): {peak / 1e9:.1f} GFLOP/s")
    print(f"{'model':32s} {'tokens/s':>10s} {'GFLOP/step':>11s} {'GFLOP/s':>9s} {'of matmul':>10s}")
    for runner in (ours, reference):
        seconds = statistics.median(step_time[runner.name])
        achieved = flops[runner.name] / seconds
        print(
            f"{runner.name:32s} {tokens_per_step / seconds:10,.0f} {flops[runner.name] / 1e9:11.2f} "
            f"{achieved / 1e9:9.1f} {achieved / peak:10.1%}"
        )
    speedup = statistics.median(step_time[reference.name]) / statistics.median(step_time[ours.name])
    print(f"speed-up (tokens/s, ours / transformers): {speedup:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Training speed of the course BERT against transformers' BertForMaskedLM, in one run.

Both models get the same configuration (a course.yml profile), the same masked batches (the course
masking, 15% selected) and the same optimizer (fused AdamW, as `bertcourse pretrain` uses); a training
step is forward + backward + gradient clipping (the profile's grad_clip, since 2026-12-02) + update.
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

`--precision bf16` adds a bf16 twin of each model: the course BERT and BertForMaskedLM each in fp32 and
under bf16 autocast, as `bertcourse pretrain --precision bf16` runs it (forward and loss under autocast,
master weights and fused AdamW in fp32), the twins starting from the same weights. Every round then
measures the matmul rate in both dtypes (2048^3 `torch.mm` of fp32 and of bf16 matrices) and times the
four models, in an order that rotates from round to round, so that load shifts hit all alike; each model's
fraction is against the matmul rate of the dtype it computes in. The speed-ups (course bf16 over course
fp32; course over BertForMaskedLM at the same precision) are medians of the per-round ratios, the numbers
to quote on a shared machine. `--arch gpt` times the course GPT in fp32 and bf16 (transformers has no
counterpart built from this config).

    .venv/bin/python benchmarks/pretraining.py --precision bf16 --threads 1              # the cpu profile's BERT
    .venv/bin/python benchmarks/pretraining.py --precision bf16 --threads 1 --arch gpt

Every mode ends with the process's resident memory (Linux): its peak and its size at the end. `--memory`
measures that per model instead, in the real loop: `bertcourse.training.pretrain.pretrain` for `--memory-steps` steps
of the profile, BERT and GPT each in a fresh process, the resident memory sampled before every step. It
prints the peak, the end and the growth over the run's second half (median of the last tenth of the
steps minus the median at 40-50%): after warm-up a run's memory should stay flat (issue 13).

    nice -n 19 .venv/bin/python benchmarks/pretraining.py --memory --threads 1                # cpu profile
    nice -n 19 .venv/bin/python benchmarks/pretraining.py --memory --threads 1 --profile cpu-quick
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from bertcourse.course import load_course
from bertcourse.masking import mask_tokens
from bertcourse.model import ModelConfig, build_model
from bertcourse.model_support import hf_bert_config
from bertcourse.training.devices import autocast_dtype, cpu_has_native_bf16
from bertcourse.training.flops import CPU_ATTENTION_FLOPS  # FlopCounterMode taught the CPU flash-attention kernel
from bertcourse.training.objectives import next_token_labels

SPECIAL_IDS = [0, 1, 2, 3, 4]  # [PAD] [UNK] [CLS] [SEP] [MASK]


def resident_mb() -> float:
    """This process's resident memory now (VmRSS, Linux), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def memory_line() -> str:
    """The process's peak resident memory (ru_maxrss: kB on Linux) and its resident memory now."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return f"resident memory of this process (all models timed): peak {peak:,.0f} MB, end {resident_mb():,.0f} MB"


def memory_of_one_run(args: argparse.Namespace) -> int:
    """One pretraining run of `args.memory_of`, its resident memory sampled before every step."""
    import bertcourse.training.pretrain

    samples: dict[int, float] = {}
    draw = bertcourse.training.pretrain.batch_indices

    def sampled(step: int, *rest, **kwargs):  # the loop calls it once per step, before building the batch
        samples[step] = resident_mb()
        return draw(step, *rest, **kwargs)

    bertcourse.training.pretrain.batch_indices = sampled  # this process exists only for this run
    steps = args.memory_steps
    with tempfile.TemporaryDirectory() as out:
        options = bertcourse.training.pretrain.PretrainOptions(arch=args.memory_of, profile=args.profile, out_dir=out,
                                                   max_steps=steps, progress=False, eval_every=steps,
                                                   checkpoint_every=steps)
        start = time.perf_counter()
        result = bertcourse.training.pretrain.pretrain(options)
        seconds = time.perf_counter() - start

    def median_over(first: float, last: float) -> float:
        return statistics.median(mb for step, mb in samples.items() if first * steps < step <= last * steps)

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    growth = median_over(0.9, 1.0) - median_over(0.4, 0.5)
    precision = "bf16" if autocast_dtype("cpu", "auto") == torch.bfloat16 else "fp32"
    print(f"MEMORY {args.memory_of} ({args.profile}, {precision}, {steps} steps in {seconds:.0f} s, "
          f"{result.train_data.n_tokens:,} tokens packed): "
          f"step 1 {samples[1]:,.0f} MB, step {steps // 2} {samples[steps // 2]:,.0f} MB, peak {peak:,.0f} MB, "
          f"end {resident_mb():,.0f} MB; growth over the second half {growth:+,.0f} MB", flush=True)
    return 0


def compare_memory(args: argparse.Namespace) -> int:
    """Peak and end resident memory of a short real pretraining run of each model, each in its own process."""
    print(f"profile {args.profile}: bertcourse.training.pretrain.pretrain, {args.memory_steps} steps, precision auto, "
          f"{args.threads or 'default'} threads; resident memory sampled before every step")
    for arch in ("bert", "gpt"):
        threads = ["--threads", str(args.threads)] if args.threads else []
        command = [sys.executable, __file__, "--memory-of", arch, "--profile", args.profile,
                   "--memory-steps", str(args.memory_steps), *threads]
        lines = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout.splitlines()
        print(next(line for line in lines if line.startswith("MEMORY ")).removeprefix("MEMORY "))
    return 0


def matmul_rate(size: int = 2048, repeats: int = 10, dtype: torch.dtype = torch.float32) -> float:
    """The best FLOP/s of a large square matrix product of `dtype` matrices on this machine."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
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
    """One model + AdamW; `step(batch)` is one full training step (autocast to `dtype` if given, and
    gradient clipping to `grad_clip` if given, as `bertcourse pretrain` does)."""

    def __init__(self, name: str, model: torch.nn.Module, dtype: torch.dtype | None = None,
                 grad_clip: float | None = None):
        self.name, self.model, self.dtype, self.grad_clip = name, model.train(), dtype, grad_clip
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # as bertcourse.training.pretrain

    def step(self, batch: dict[str, torch.Tensor]) -> None:
        with torch.autocast("cpu", dtype=self.dtype) if self.dtype else contextlib.nullcontext():
            loss = self.model(**batch).loss
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
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
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                        help="bf16: every model also under bf16 autocast, side by side with fp32")
    parser.add_argument("--arch", choices=["bert", "gpt"], default="bert",
                        help="the course model (gpt: no transformers counterpart is timed)")
    parser.add_argument("--memory", action="store_true",
                        help="resident memory of a short real pretraining run of each model instead")
    parser.add_argument("--memory-steps", type=int, default=300, help="with --memory: steps per run")
    parser.add_argument("--memory-of", choices=["bert", "gpt"], help=argparse.SUPPRESS)  # one run (a child)
    args = parser.parse_args(argv)
    if args.memory_steps < 20:  # the growth compares medians over tenths of the run
        parser.error(f"--memory-steps must be at least 20, got {args.memory_steps}")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_of:
        return memory_of_one_run(args)
    if args.memory:
        return compare_memory(args)
    return compare_speed(args)


def gpt_batches(batches: list[dict[str, torch.Tensor]]) -> None:
    """Next-token targets at every real position, as bertcourse.training.objectives.NextToken (in place)."""
    for batch in batches:
        batch["input_ids"] = batch["input_ids"].where(batch["labels"] == -100, batch["labels"])
        batch["labels"] = next_token_labels(batch["input_ids"], batch["attention_mask"])


def compare_speed(args: argparse.Namespace) -> int:
    """Tokens/s, FLOP rate and speed-ups of the course model against BertForMaskedLM (and bf16 twins)."""
    torch.manual_seed(0)
    profile_spec = load_course().profile(args.profile)
    overrides = {} if args.dropout is None else {"dropout": args.dropout}
    config = profile_spec.model.for_arch(args.arch, **overrides)
    dtypes = {"fp32": None} if args.precision == "fp32" else {"fp32": None, "bf16": torch.bfloat16}
    clip = profile_spec.pretrain.grad_clip  # as bertcourse pretrain does, for every model alike
    ours_name = "bertcourse " + ("BertForMLM" if args.arch == "bert" else "GPT")
    models = {ours_name: build_model(config)}
    if args.arch == "bert":
        from transformers import BertForMaskedLM

        models["transformers BertForMaskedLM"] = BertForMaskedLM(hf_bert_config(config))
    runners = []
    for name, model in models.items():
        for precision, dtype in dtypes.items():
            twin = model
            if dtype is not None:  # the same initial weights as the fp32 copy
                twin = copy.deepcopy(model)
            runners.append(Runner(f"{name}, {precision}", twin, dtype, clip))
    batches = make_batches(config, args.batch_size, args.steps)
    if args.arch == "gpt":
        gpt_batches(batches)
    auto = "bf16" if autocast_dtype("cpu", "auto") == torch.bfloat16 else "fp32"
    print(
        f"profile {args.profile}: {args.arch}, {config.n_layers} layers x {config.d_model}, "
        f"vocab {config.vocab_size}, batch {args.batch_size} x {config.max_seq_len}, dropout {config.dropout}, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}; "
        f"native bf16 on this CPU: {cpu_has_native_bf16()} (--precision auto: {auto})"
    )

    flops = {r.name: r.flops_per_step(batches[0]) for r in runners}
    for runner in runners:  # warm-up: first-call allocations and kernel choices
        runner.step(batches[0])
    # Each round measures the matmul rate(s) and every model back to back, so a change in machine load
    # or clock speed hits all alike; fractions and speed-ups are per-round ratios, medians shown.
    step_time: dict[str, list[float]] = {r.name: [] for r in runners}
    peaks: dict[str, list[float]] = {precision: [] for precision in dtypes}
    for round_ in range(args.rounds):
        for precision in dtypes:
            peaks[precision].append(matmul_rate(repeats=5, dtype=dtypes[precision] or torch.float32))
        shift = round_ % len(runners)
        for runner in runners[shift:] + runners[:shift]:
            step_time[runner.name].append(runner.timed(batches))

    tokens_per_step = args.batch_size * config.max_seq_len
    for precision, rates in peaks.items():
        print(f"{precision} matmul rate (2048^3 torch.mm), per round: "
              f"{', '.join(f'{p / 1e9:.0f}' for p in rates)} GFLOP/s")
    print(f"{'model':40s} {'tokens/s':>10s} {'GFLOP/step':>11s} {'GFLOP/s':>9s} {'of matmul':>10s}   per round")
    for runner in runners:
        times, rates = step_time[runner.name], peaks[runner.name.rsplit(", ", 1)[1]]
        fractions = sorted(flops[runner.name] / t / p for t, p in zip(times, rates))
        best = min(times)
        print(
            f"{runner.name:40s} {tokens_per_step / best:10,.0f} {flops[runner.name] / 1e9:11.2f} "
            f"{flops[runner.name] / best / 1e9:9.1f} {flops[runner.name] / best / max(rates):10.1%}   "
            f"median {statistics.median(fractions):.1%} ({fractions[0]:.1%}-{fractions[-1]:.1%}), "
            f"ms/step median {1000 * statistics.median(times):.0f}"
        )

    def speedup(label: str, fast: str, slow: str) -> None:
        ratios = [s / f for f, s in zip(step_time[fast], step_time[slow])]
        print(f"speed-up, {label}: {statistics.median(ratios):.2f}x "
              f"(rounds {min(ratios):.2f}-{max(ratios):.2f}x, {args.rounds} rounds of {args.steps} steps)")

    if "bf16" in dtypes:
        speedup(f"{ours_name} bf16 over its fp32 (tokens/s)", f"{ours_name}, bf16", f"{ours_name}, fp32")
    if args.arch == "bert":
        for precision in dtypes:
            speedup(f"{precision}, ours over transformers (tokens/s)", f"{ours_name}, {precision}",
                    f"transformers BertForMaskedLM, {precision}")
        if "bf16" in dtypes:
            speedup("transformers bf16 over its fp32", "transformers BertForMaskedLM, bf16",
                    "transformers BertForMaskedLM, fp32")
    print(memory_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The `gpu` profile on a real GPU, in one command: the figures the README's GPU table needs.

A maintainer with a CUDA GPU (a Colab T4, say) runs

    BERTCOURSE_DATA=... python benchmarks/gpu_smoke.py                 # 300 steps of the gpu profile
    python benchmarks/gpu_smoke.py --steps 1000 --precision fp16

and pastes the markdown table it prints into README.md ("Pretraining on a GPU"). It runs the package's
own loop (`bertcourse.training.pretrain.pretrain`, the profile's model, batch, schedule and precision: `auto` is
bf16 where the GPU has it, fp16 with loss scaling on a T4) for `--steps` steps and reports:

- steps/s and tokens/s of the steady state (the steps after the first tenth, timed between the starts of
  consecutive steps: the loop reads every step's loss, which waits for the GPU);
- FLOPs per step, counted by `torch.utils.flop_counter.FlopCounterMode` on one training step of the
  profile's model (matmuls and attention, forward and backward, as benchmarks/pretraining.py counts
  them), and the achieved TFLOP/s they give at the measured step rate;
- peak GPU memory (`torch.cuda.max_memory_allocated`: tensors only, not the allocator's reserve);
- the held-out MLM loss and accuracy after the `--steps` steps (the learning-rate schedule is the
  profile's, compressed to `--steps`: a smoke test that the run learns, not the full profile's result);
- the estimated time of the full profile (its `max_steps` at the measured step rate; evaluation,
  checkpoints, tokenizer and packing not included);
- the corpus it trained on (the profile's: WikiText-103 + WikiText-2 + SST-2 for gpu, or the smaller course
  corpus when WikiText-103 was not found, which it says) and the passes its steps make over the blocks
  packed for them (the first sentences holding steps x batch x 128 tokens, as `bertcourse pretrain` packs),
  and the passes of the full profile over the whole corpus, ESTIMATED from the blocks per character of the
  part packed (exact when the steps packed all of it).

Without a GPU it refuses (exit status 2) unless `--allow-cpu` is given: a dry run of a few steps on the
CPU, which proves the script end to end (tests/test_gpu_smoke.py) and prints the gpu profile's FLOP count,
but whose figures say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pretraining import CPU_ATTENTION_FLOPS, make_batches  # noqa: E402  (the benchmarks folder is no package)

from bertcourse.course import load_course  # noqa: E402
from bertcourse.data import load_corpus  # noqa: E402
from bertcourse.training.devices import autocast_dtype, precision_name  # noqa: E402
from bertcourse.model import ModelConfig, build_model  # noqa: E402

NO_GPU = 2  # exit status without a GPU (and without --allow-cpu)


def flops_per_step(config: ModelConfig, batch_size: int, device: torch.device) -> int:
    """FLOPs of one training step (forward, loss, backward) of a fresh model of `config` on one batch.

    Counted in fp32: a count of operations, the same under autocast; the optimizer's elementwise update is
    not counted (as in benchmarks/pretraining.py).
    """
    model = build_model(config).to(device).train()
    batch = {k: v.to(device) for k, v in make_batches(config, batch_size, 1)[0].items()}
    with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION_FLOPS) as counter:
        model(**batch).loss.backward()
    return counter.get_total_flops()


def timed_pretraining(args: argparse.Namespace, device: torch.device, out_dir: str,
                      corpus: object) -> tuple[object, list[float]]:
    """`bertcourse.training.pretrain.pretrain` for `args.steps` steps on `corpus`; the wall-clock time at the start of
    every step."""
    import bertcourse.training.pretrain

    starts: list[float] = []
    draw = bertcourse.training.pretrain.batch_indices

    def timed(step: int, *rest, **kwargs):  # the loop calls it once per step, first thing
        starts.append(time.perf_counter())
        return draw(step, *rest, **kwargs)

    bertcourse.training.pretrain.batch_indices = timed  # this process runs only this one pretraining
    try:
        options = bertcourse.training.pretrain.PretrainOptions(
            arch="bert", profile=args.profile, out_dir=out_dir, data_dir=args.data_dir, source=args.source,
            max_steps=args.steps, eval_every=args.steps, checkpoint_every=args.steps, progress=False,
            device=device.type, precision=args.precision)
        result = bertcourse.training.pretrain.pretrain(options, corpus=corpus)
    finally:
        bertcourse.training.pretrain.batch_indices = draw
    return result, starts


def markdown(rows: list[tuple[str, str]]) -> str:
    """A two-column markdown table: what was measured, its value."""
    return "\n".join(["| figure | value |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="gpu", help="course.yml profile (default gpu)")
    parser.add_argument("--steps", type=int, default=300, help="training steps to run and time (default 300)")
    parser.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp16", "fp32"],
                        help="as `bertcourse pretrain --precision` (auto: bf16 where the GPU has it, else fp16)")
    parser.add_argument("--data-dir", default=None, help="as `bertcourse pretrain --data-dir`")
    parser.add_argument("--source", default="auto", help="as `bertcourse pretrain --source`")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="without a GPU, run a dry run on the CPU instead of refusing (its figures are no GPU's)")
    args = parser.parse_args(argv)
    if args.steps < 10:
        parser.error(f"--steps must be at least 10 (the first tenth is warm-up), got {args.steps}")
    if torch.cuda.is_available():
        device = torch.device("cuda")
        name = torch.cuda.get_device_name(device)
    elif args.allow_cpu:
        device, name = torch.device("cpu"), "CPU (dry run with --allow-cpu: not a GPU figure)"
    else:
        print("gpu_smoke.py measures the gpu profile on a CUDA GPU, and torch sees none here "
              f"(torch {torch.__version__}, torch.cuda.is_available() is False). Run it on a machine with "
              "a GPU (Colab: Runtime > Change runtime type > T4 GPU), or pass --allow-cpu for a dry run "
              "of the script on the CPU.", file=sys.stderr)
        return NO_GPU

    course = load_course()
    profile = course.profile(args.profile)
    spec = profile.pretrain
    corpus = load_corpus(course, data_dir=args.data_dir, source=args.source, profile=args.profile)
    precision = precision_name(autocast_dtype(device, args.precision))
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    with tempfile.TemporaryDirectory() as out_dir:
        result, starts = timed_pretraining(args, device, out_dir, corpus)
    if device.type == "cuda":
        peak = f"{torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB"
    else:
        peak = f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB resident (CPU: no GPU memory)"
    config = result.model.config  # the profile's model with the tokenizer's real vocabulary size
    flops = flops_per_step(config, spec.batch_size, device)
    warm = max(1, len(starts) // 10)  # the steps before it are warm-up: allocations, kernel choices
    seconds_per_step = (starts[-1] - starts[warm]) / (len(starts) - 1 - warm)
    tokens_per_step = spec.batch_size * config.max_seq_len
    final = result.final_eval
    full = spec.max_steps * seconds_per_step
    blocks, packed = len(result.train_data), result.packed_sentences
    # the whole corpus in blocks, ESTIMATED from the blocks per character of the part packed (characters track
    # tokens across WikiText's sentences and SST-2's short phrases far better than sentence counts)
    all_blocks = blocks * sum(map(len, corpus.train)) / sum(map(len, corpus.train[:packed]))
    sources = [s for s in course.corpus_for(args.profile).sources if s not in corpus.missing]
    used = (f"{corpus.source}: {' + '.join(sources)}, {len(corpus.train):,} training sentences"
            + (f"; WITHOUT {', '.join(corpus.missing)} (not found: the smaller corpus)" if corpus.missing else ""))
    rows = [
        ("device", f"{name}, torch {torch.__version__}"),
        ("profile, model", f"{args.profile}: {config.n_layers} layers x {config.d_model}, {config.n_heads} heads, "
                           f"vocab {config.vocab_size}, batch {spec.batch_size} x {config.max_seq_len}, "
                           f"dropout {config.dropout}, {precision}"),
        ("steps timed", f"{len(starts) - 1 - warm} (steps {warm + 1}-{len(starts) - 1} of {args.steps}; "
                        f"the first {warm} warm up)"),
        ("steps/s", f"{1 / seconds_per_step:.2f}"),
        ("tokens/s (block positions)", f"{tokens_per_step / seconds_per_step:,.0f}"),
        ("FLOPs per step (counted)", f"{flops / 1e9:,.1f} GFLOP"),
        ("achieved", f"{flops / seconds_per_step / 1e12:.2f} TFLOP/s"),
        ("peak memory", peak),
        (f"held-out MLM loss / accuracy after {args.steps} steps", f"{final['loss']:.3f} / {final['accuracy']:.1%}"),
        (f"estimated full profile ({spec.max_steps:,} steps)", f"{full / 60:.1f} min of training steps"),
        ("corpus", used),
        (f"passes of the {args.steps} steps", f"{args.steps * spec.batch_size / blocks:.2f} over the {blocks:,} blocks "
                                              f"packed for them ({packed:,} sentences)"),
        (f"passes of the full profile ({spec.max_steps:,} steps)",
         f"{spec.max_steps * spec.batch_size / all_blocks:.1f} over the corpus's "
         + (f"{blocks:,} blocks" if packed == len(corpus.train) else f"~{all_blocks:,.0f} blocks (estimated)")),
    ]
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The `gpu` profile on a real GPU, in one command of at most ~8 minutes: the figures the GPU table of
docs/training-beyond-one-machine.md needs, and every training path the lessons take run once on CUDA.

A maintainer with a CUDA GPU (a Colab T4, say) runs, from the repository root,

    BERTCOURSE_DATA=/path/to/data python benchmarks/gpu_smoke.py      # ~3-8 min on a T4 (an estimate)
    python benchmarks/gpu_smoke.py --steps 1000 --precision fp16         # a longer look at one precision

and pastes the markdown it prints (also written to `--out`: gpu_smoke.md and gpu_smoke.json) into
benchmarks/README.md ("The GPU check") and docs/training-beyond-one-machine.md ("The `gpu` profile"). Its parts:

1. **pretraining** (lesson 3's path, `bertcourse.training.pretrain.pretrain`, the profile's model, batch, schedule and
   precision: `auto` is bf16 on a GPU with bf16 in hardware, compute capability 8.0+, and fp16 with loss
   scaling below, a T4) for `--steps` steps:
   - steps/s and tokens/s of the steady state (the steps after the first tenth, timed between the starts of
     consecutive steps; the loop reads the losses every 10 steps, so the times average over those waits);
   - FLOPs per step, counted by `torch.utils.flop_counter.FlopCounterMode` on one training step of the
     profile's model (matmuls and attention, forward and backward, as benchmarks/pretraining.py counts
     them), and the achieved TFLOP/s they give at the measured step rate;
   - peak GPU memory (`torch.cuda.max_memory_allocated`: tensors only, not the allocator's reserve);
   - the held-out MLM loss and accuracy after the `--steps` steps (the schedule is the profile's over
     `--steps`, warm-up a tenth of them: a smoke test that the run learns, not the full profile's result);
   - the estimated time of the full profile (its `max_steps` at the measured step rate; evaluation,
     checkpoints, tokenizer and packing not included);
   - the corpus it trained on and the passes its steps make over the blocks packed for them (the first
     sentences holding steps x batch x 128 tokens, as `bertcourse pretrain` packs), and the passes of the
     full profile over the whole corpus, ESTIMATED from the blocks per character of the part packed (exact
     when the steps packed all of it). By default (`--corpus course`) the course corpus: WikiText-103's
     data work alone takes ~15 minutes on Colab's CPUs (docs/), past this check's budget; step times and
     memory do not depend on the corpus. `--corpus profile` takes the profile's own (WikiText-103 too);
2. **precisions**: `--precision-steps` steps of the profile's model on fixed random batches through the
   loop's own step (`bertcourse.training.loop.TrainStep`: autocast, fp16 loss scaling, clipping, fused AdamW) in
   fp16, bf16 and fp32 each: ms a step, tokens/s, peak memory, the last loss (finite, and whether the fp16
   scaler skipped steps). On a T4 bf16 runs, emulated, only because it is asked for explicitly;
3. **the loss against the CPU's**: the `--short-profile` (cpu-quick) pretraining for its steps, dropout off,
   in fp32 on the GPU and on the CPU, and in `auto` on the GPU: the held-out losses and their differences
   (kernels differ, so they agree closely, not bit for bit; the table flags a gap above 0.05);
4. **lesson 3's GPT and lesson 4's fine-tuning** on CUDA: the parameter-matched GPT pretrained for
   `--finetune-steps` steps, then `bertcourse.training.finetune.finetune` for `--finetune-steps` steps of each regime
   (full, LoRA, probe) from part 1's BERT and of full fine-tuning from the GPT (pooling at its last token),
   in the same precision rule: the SST-2 validation accuracy and seconds of each (a path check, not a result).

A part that fails is recorded with its error and the others still run; the exit status is then 1.
Without a GPU it refuses (exit status 2) unless `--allow-cpu` is given: a dry run on the CPU (fp16 is
refused there, as `bertcourse pretrain` refuses it), which proves the script end to end
(tests/test_gpu_smoke.py) and prints the profile's FLOP count, but whose figures say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import resource
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pretraining import CPU_ATTENTION_FLOPS, make_batches  # noqa: E402  (the benchmarks folder is no package)

from bertcourse.course import load_course  # noqa: E402
from bertcourse.data import load_corpus  # noqa: E402
from bertcourse.errors import BertcourseError  # noqa: E402
from bertcourse.model import ModelConfig, build_model  # noqa: E402
from bertcourse.training.devices import autocast_dtype, precision_name  # noqa: E402
from bertcourse.training.loop import TrainStep  # noqa: E402
from bertcourse.training.optim import adamw  # noqa: E402

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


def timed_pretraining(args: argparse.Namespace, device: torch.device, out_dir: str | Path,
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


def table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table with these columns."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows])


def synchronize(device: torch.device) -> None:
    """Wait for the GPU's queued work (a no-op on the CPU), so that a clock reading covers it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB"
    return f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB resident (CPU: no GPU memory)"


def pretraining_part(args: argparse.Namespace, device: torch.device, name: str, course, corpus,
                     out_dir: Path) -> dict:
    """Part 1: the profile's BERT pretrained for --steps through `bertcourse.training.pretrain.pretrain`, timed."""
    spec = course.profile(args.profile).pretrain
    precision = precision_name(autocast_dtype(device, args.precision))
    reset_peak(device)
    result, starts = timed_pretraining(args, device, out_dir, corpus)
    peak = peak_memory(device)
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
    sources = [s for s in course.corpus_for(args.profile if args.corpus == "profile" else None).sources
               if s not in corpus.missing]
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
    return {"rows": rows, "markdown": markdown(rows), "precision": precision, "seconds_per_step": seconds_per_step,
            "flops_per_step": flops, "peak_memory": peak, "final_eval": final, "config": config.to_dict(),
            "checkpoint": str(out_dir)}


def precision_part(args: argparse.Namespace, device: torch.device, config: ModelConfig, batch_size: int) -> dict:
    """Part 2: --precision-steps steps of the profile's model in fp16, bf16 and fp32 through `TrainStep`."""
    batches = [{k: v.to(device) for k, v in b.items()} for b in make_batches(config, batch_size, 4)]
    results, rows = [], []
    for name in ("fp16", "bf16", "fp32"):
        try:
            dtype = autocast_dtype(device, name)
        except BertcourseError as exc:  # fp16 on the CPU
            results.append({"precision": name, "refused": str(exc)})
            rows.append([name, "refused here", "", "", "", str(exc).split(":")[0]])
            continue
        torch.manual_seed(0)
        model = build_model(config).to(device).train()
        step = TrainStep(adamw(model, 1e-4, 0.01, betas=(0.9, 0.98), eps=1e-6), model.parameters(), device=device,
                         dtype=dtype, grad_clip=1.0)
        reset_peak(device)
        warm = max(2, args.precision_steps // 10)
        losses = []
        for i in range(warm + args.precision_steps):
            if i == warm:
                synchronize(device)
                started = time.perf_counter()
            with step.autocast():
                loss = model(**batches[i % len(batches)]).loss
            step.backward(loss)
            step.step()
            losses.append(loss.detach())
        synchronize(device)
        seconds = (time.perf_counter() - started) / args.precision_steps
        last = float(losses[-1])
        scale = step.scaler.get_scale() if step.scaler.is_enabled() else None
        results.append({"precision": name, "ms_per_step": seconds * 1e3,
                        "tokens_per_s": batch_size * config.max_seq_len / seconds, "peak_memory": peak_memory(device),
                        "last_loss": last, "finite": math.isfinite(last), "final_loss_scale": scale})
        rows.append([name, f"{seconds * 1e3:.1f}", f"{batch_size * config.max_seq_len / seconds:,.0f}",
                     peak_memory(device), f"{last:.3f}", f"loss scale {scale:g}" if scale else "no scaler"])
        del model, step
    measured = {r["precision"]: r["ms_per_step"] for r in results if "ms_per_step" in r}
    if "fp32" in measured:
        for row in rows:
            if row[0] in measured and row[0] != "fp32":
                row[1] += f" ({measured['fp32'] / measured[row[0]]:.2f}x fp32)"
    text = table(["precision", "ms/step", "tokens/s", "peak memory", f"loss after {args.precision_steps} steps",
                  "scaler"], rows)
    return {"results": results, "markdown": text, "steps": args.precision_steps}


def cpu_comparison_part(args: argparse.Namespace, device: torch.device, course, out_dir: Path) -> dict:
    """Part 3: the --short-profile pretraining in fp32 on the device and on the CPU, and in auto on the device."""
    from bertcourse.data import load_corpus
    from bertcourse.training.pretrain import PretrainOptions, pretrain

    corpus = load_corpus(course, data_dir=args.data_dir, source=args.source, profile=args.short_profile)
    runs = [("cpu", "fp32"), (device.type, "fp32"), (device.type, "auto")]
    if device.type == "cpu":  # a dry run: the second would repeat the first
        runs.pop(1)
    results = []
    for where, precision in runs:
        options = PretrainOptions(profile=args.short_profile, out_dir=out_dir / f"short-{where}-{precision}",
                                  device=where, precision=precision, progress=False, max_steps=args.short_steps,
                                  model_overrides={"dropout": 0.0})
        started = time.perf_counter()
        result = pretrain(options, corpus=corpus)
        results.append({"device": where, "precision": precision, "held_out_loss": result.final_eval["loss"],
                        "held_out_accuracy": result.final_eval["accuracy"], "steps": result.history["step"][-1],
                        "seconds": time.perf_counter() - started,
                        "precision_used": json.loads((options.out_dir / "metrics.json").read_text())["precision"]})
    cpu_loss = results[0]["held_out_loss"]
    rows = []
    for r in results:
        gap = r["held_out_loss"] - cpu_loss
        r["gap_to_cpu"] = gap
        rows.append([f"{r['device']} {r['precision']} ({r['precision_used']})", f"{r['held_out_loss']:.4f}",
                     f"{r['held_out_accuracy']:.1%}", f"{gap:+.4f}" + (" **above 0.05**" if abs(gap) > 0.05 else ""),
                     f"{r['seconds']:.0f} s"])
    text = table([f"{args.short_profile}, {results[0]['steps']} steps, dropout 0", "held-out loss", "accuracy",
                  "minus the CPU's", "wall (data work included)"], rows)
    return {"results": results, "markdown": text}


def lesson_paths_part(args: argparse.Namespace, device: torch.device, course, corpus, bert_dir: Path,
                      out_dir: Path) -> dict:
    """Part 4: lesson 3's GPT pretraining and lesson 4's fine-tuning runs, a few steps each, on the device."""
    from bertcourse.training.checkpoint import CHECKPOINT_NAME
    from bertcourse.training.finetune import FinetuneOptions, finetune
    from bertcourse.training.pretrain import PretrainOptions, pretrain

    steps = args.finetune_steps
    started = time.perf_counter()
    gpt_dir = out_dir / "gpt"
    gpt = pretrain(PretrainOptions(arch="gpt", profile=args.profile, out_dir=gpt_dir, max_steps=steps,
                                   eval_every=steps, checkpoint_every=steps, progress=False, device=device.type,
                                   precision=args.precision), corpus=corpus)
    rows = [["pretrain gpt (lesson 3)", f"{steps} steps", f"held-out next-token loss {gpt.final_eval['loss']:.3f}",
             f"{time.perf_counter() - started:.0f} s"]]
    results = [{"path": "pretrain gpt", "final_eval": gpt.final_eval}]
    for arch, regime, folder in (("bert", "full", bert_dir), ("bert", "lora", bert_dir), ("bert", "probe", bert_dir),
                                 ("gpt", "full", gpt_dir)):
        started = time.perf_counter()
        run = finetune(FinetuneOptions(arch=arch, regime=regime, profile=args.profile,
                                       pretrained=folder / CHECKPOINT_NAME, data_dir=args.data_dir,
                                       out_dir=out_dir / f"finetune-{arch}-{regime}", source=args.source,
                                       device=device.type, precision=args.precision, progress=False,
                                       max_steps=steps))
        m = run.metrics
        results.append({"path": f"finetune {arch} {regime}", "accuracy": m["accuracy"], "precision": m["precision"],
                        "steps": m["history"]["step"][-1], "train_seconds": m["train_seconds"],
                        "last_loss": m["history"]["loss"][-1]})
        rows.append([f"finetune {arch} {regime} (lesson 4)", f"{m['history']['step'][-1]} steps, {m['precision']}",
                     f"SST-2 validation accuracy {m['accuracy']:.3f}, last loss {m['history']['loss'][-1]:.3f}",
                     f"{time.perf_counter() - started:.0f} s"])
    return {"results": results, "markdown": table(["path", "run", "result", "wall"], rows)}


def run_part(name: str, parts: dict, work: Callable[[], dict]) -> dict | None:
    """Run one part; a failure is recorded (error and traceback) and the other parts still run."""
    started = time.perf_counter()
    try:
        parts[name] = work()
    except Exception as exc:  # noqa: BLE001  (a smoke check reports every failure, then exits 1)
        parts[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(),
                       "markdown": f"FAILED: {type(exc).__name__}: {exc}"}
        print(traceback.format_exc(), file=sys.stderr)
    parts[name]["seconds"] = round(time.perf_counter() - started, 1)
    return parts[name] if "error" not in parts[name] else None


TITLES = {"pretraining": "Pretraining (lesson 3's BERT)", "precisions": "fp16 / bf16 / fp32",
          "cpu_comparison": "The loss against the CPU's", "lesson_paths": "Lessons 3 and 4 on the device"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="gpu", help="course.yml profile (default gpu)")
    parser.add_argument("--steps", type=int, default=300, help="pretraining steps to run and time (default 300)")
    parser.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp16", "fp32"],
                        help="as `bertcourse pretrain --precision` (auto: bf16 on a GPU with bf16 in hardware, "
                        "sm_80+; fp16 with loss scaling below, a T4)")
    parser.add_argument("--corpus", default="course", choices=["course", "profile"],
                        help="course: the course corpus (default; seconds of data work); profile: the profile's "
                        "own (gpu: WikiText-103 too, ~15 min of data work on a first run)")
    parser.add_argument("--precision-steps", type=int, default=50, help="steps timed per precision (default 50)")
    parser.add_argument("--short-profile", default="cpu-quick",
                        help="the profile run on the GPU and the CPU to compare losses (default cpu-quick)")
    parser.add_argument("--short-steps", type=int, default=None,
                        help="steps of the short runs compared with the CPU (default: the short profile's max_steps)")
    parser.add_argument("--finetune-steps", type=int, default=50,
                        help="steps of the GPT pretraining and of each fine-tuning run (default 50)")
    parser.add_argument("--skip", action="append", default=[], choices=["precisions", "cpu_comparison", "lesson_paths"],
                        help="leave a part out (repeatable)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"),
                        help="folder for gpu_smoke.json and gpu_smoke.md (default benchmarks/results)")
    parser.add_argument("--data-dir", default=None, help="as `bertcourse pretrain --data-dir`")
    parser.add_argument("--source", default="auto", help="as `bertcourse pretrain --source`")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="without a GPU, run a dry run on the CPU instead of refusing (its figures are no GPU's)")
    args = parser.parse_args(argv)
    if args.steps < 10:
        parser.error(f"--steps must be at least 10 (the first tenth is warm-up), got {args.steps}")
    for flag in ("precision_steps", "finetune_steps", "short_steps"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
    if torch.cuda.is_available():
        device = torch.device("cuda")
        name = torch.cuda.get_device_name(device)
        capability = ".".join(map(str, torch.cuda.get_device_capability(device)))
        name = f"{name} (sm {capability})"
    elif args.allow_cpu:
        device, name = torch.device("cpu"), "CPU (dry run with --allow-cpu: not a GPU figure)"
    else:
        print("gpu_smoke.py measures the gpu profile on a CUDA GPU, and torch sees none here "
              f"(torch {torch.__version__}, torch.cuda.is_available() is False). Run it on a machine with "
              "a GPU (Colab: Runtime > Change runtime type > T4 GPU), or pass --allow-cpu for a dry run "
              "of the script on the CPU.", file=sys.stderr)
        return NO_GPU

    began = time.perf_counter()
    course = load_course()
    spec = course.profile(args.profile).pretrain
    corpus = load_corpus(course, data_dir=args.data_dir, source=args.source,
                         profile=args.profile if args.corpus == "profile" else None)
    parts: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        pretrained = run_part("pretraining", parts,
                              lambda: pretraining_part(args, device, name, course, corpus, work_dir / "bert"))
        if pretrained is not None:
            print(pretrained["markdown"], flush=True)  # the README's table first, as soon as it is measured
        if "precisions" not in args.skip:
            config = (ModelConfig.from_dict(pretrained["config"]) if pretrained
                      else course.profile(args.profile).model.for_arch("bert"))
            run_part("precisions", parts, lambda: precision_part(args, device, config, spec.batch_size))
        if "cpu_comparison" not in args.skip:
            run_part("cpu_comparison", parts, lambda: cpu_comparison_part(args, device, course, work_dir))
        if "lesson_paths" not in args.skip and pretrained is not None:
            run_part("lesson_paths", parts,
                     lambda: lesson_paths_part(args, device, course, corpus, work_dir / "bert", work_dir))
    total = time.perf_counter() - began
    sections = [f"# benchmarks/gpu_smoke.py on {name}",
                f"{datetime.date.today().isoformat()}, torch {torch.__version__}, `python benchmarks/gpu_smoke.py "
                f"{' '.join(argv if argv is not None else sys.argv[1:])}`, {total / 60:.1f} min in all"]
    for key, part in parts.items():
        sections.append(f"## {TITLES[key]} ({part['seconds']:.0f} s)\n\n{part['markdown']}")
    text = "\n\n".join(sections) + "\n"
    print("\n\n" + "\n\n".join(f"## {TITLES[key]} ({part['seconds']:.0f} s)\n\n{part['markdown']}"
                                 for key, part in parts.items() if part is not pretrained))
    summary = {"device": name, "torch": torch.__version__, "date": datetime.date.today().isoformat(),
               "arguments": vars(args), "total_seconds": round(total, 1),
               "parts": {k: {key: v for key, v in part.items() if key != "markdown"} for k, part in parts.items()}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_smoke.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    (out / "gpu_smoke.md").write_text(text)
    print(f"\nwrote {out / 'gpu_smoke.md'} and {out / 'gpu_smoke.json'}")
    failed = [k for k, part in parts.items() if "error" in part]
    if failed:
        print(f"FAILED parts: {', '.join(failed)} (their errors are in gpu_smoke.json)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

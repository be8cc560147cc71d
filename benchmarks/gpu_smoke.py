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

5. **environment**: torch, CUDA and cuDNN versions, the GPU (name, compute capability, memory), what `auto`
   resolves to, and the attention kernel each model's training forward actually gets (each of
   `torch.nn.attention.SDPBackend`'s kernels tried alone, in torch's order of preference: the first that runs
   is the one used);
6. **where a step's time goes** (the profile's BERT and GPT): the aten ops a step dispatches and the syncs it
   forces (CUDA: `torch.cuda.set_sync_debug_mode` counts them; the CPU: the ops that would), the share of the
   wall time the GPU is busy (`torch.profiler`'s kernel time), the CPU's wait to send a batch from pinned
   memory against pageable memory with the GPU busy, and a GPT step with its head in one chunk against the
   CPU's 16 MB chunks;
7. **fine-tuning steps**: ms per step of full, LoRA and probe fine-tuning at the profile's batch and length, and
   per op (`training.budget`'s op counts) -- the two rates the plans assume; on a GPU they are written to
   `--out`/gpu_rates.json (benchmarks/results/ by default, where `training.budget.plan_rates` reads them);
8. **resume**: the short profile pretrained straight through, and stopped half-way then resumed, in the
   run's precision (fp16: the loss scale is saved and restored): the two final losses;
9. **the other lessons' paths** on the device, a few steps each: lesson 2's whole-word pretraining, lesson 4's
   task head (`task_heads.train_head`) and label-curve run (`data_efficiency.train_with_dev`), lesson 6's pair variant
   (`after_bert.runner.run_variant`, reading the data as the commands do: $BERTCOURSE_DATA) and lesson 7's
   distillation.

Every part records the peak memory of its phase. A part that fails is recorded with its error and the others
still run; the exit status is then 1. Without a GPU it refuses (exit status 2) unless `--allow-cpu` is given: a
dry run on the CPU (fp16 is refused there, as `bertcourse pretrain` refuses it), which proves the script end to
end (tests/test_gpu_smoke.py) and prints the profile's FLOP count, but whose figures say nothing about a GPU. A
dry run takes small sizes where none are given (`DRY_RUN`: cpu-quick, 10 steps, ...) and runs every part in a
few minutes on two cores; it writes no gpu_rates.json.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import math
import resource
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pretraining import CPU_ATTENTION_FLOPS, make_batches  # noqa: E402  (the benchmarks folder is no package)

from bertcourse.course import load_course  # noqa: E402
from bertcourse.data import load_corpus  # noqa: E402
from bertcourse.errors import BertcourseError  # noqa: E402
from bertcourse.model import ModelConfig, build_model  # noqa: E402
from bertcourse.training.devices import autocast_dtype, precision_name, to_device  # noqa: E402
from bertcourse.training.loop import TrainStep  # noqa: E402
from bertcourse.training.optim import adamw  # noqa: E402

NO_GPU = 2  # exit status without a GPU (and without --allow-cpu)
# the sizes of a dry run on the CPU, where an argument is not given (every part in a few minutes on 2 cores)
DRY_RUN = {"profile": "cpu-quick", "steps": 10, "precision_steps": 2, "short_steps": 4, "finetune_steps": 2}
# on a GPU, where an argument is not given
GPU_RUN = {"profile": "gpu", "steps": 300, "precision_steps": 50, "short_steps": None, "finetune_steps": 50}
RATES_NAME = "gpu_rates.json"  # what training.budget.plan_rates reads (benchmarks/results/ by default)


def flops_per_step(config: ModelConfig, batch_size: int, device: torch.device) -> int:
    """FLOPs of one training step (forward, loss, backward) of a fresh model of `config` on one batch.

    Counted in fp32: a count of operations, the same under autocast; the optimizer's elementwise update is
    not counted (as in benchmarks/pretraining.py).
    """
    model = build_model(config).to(device).train()
    batch = to_device(make_batches(config, batch_size, 1)[0], device)
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
    batches = [to_device(b, device) for b in make_batches(config, batch_size, 4)]
    results, rows = [], []
    for name in ("fp16", "bf16", "fp32"):
        try:
            dtype = autocast_dtype(device, name)
        except BertcourseError as exc:  # fp16 on the CPU
            results.append({"precision": name, "refused": str(exc)})
            rows.append([name, "refused here", "", "", "", str(exc).split(":")[0], ""])
            continue
        torch.manual_seed(0)
        model = build_model(config).to(device).train()
        step = TrainStep(adamw(model, 1e-4, 0.01, betas=(0.9, 0.98), eps=1e-6), model.parameters(), device=device,
                         dtype=dtype, grad_clip=1.0)
        reset_peak(device)
        warm = max(2, args.precision_steps // 10)
        losses, scales = [], []
        for i in range(warm + args.precision_steps):
            if i == warm:
                synchronize(device)
                started = time.perf_counter()
            with step.autocast():
                loss = model(**batches[i % len(batches)]).loss
            step.backward(loss)
            step.step()
            losses.append(loss.detach())
            if step.scaler.is_enabled():  # kept on the device: read after the timing
                scales.append(step.scaler._scale.detach().clone())
        synchronize(device)
        seconds = (time.perf_counter() - started) / args.precision_steps
        last = float(losses[-1])
        scale = step.scaler.get_scale() if step.scaler.is_enabled() else None
        # a step the scaler skipped (fp16 overflow) is one after which the scale went down
        skipped = sum(b < a for a, b in zip(scales, scales[1:])) + int(bool(scales) and float(scales[0]) < 65536.0)
        tail = torch.stack(losses[-10:]).float().mean().item()
        results.append({"precision": name, "ms_per_step": seconds * 1e3,
                        "tokens_per_s": batch_size * config.max_seq_len / seconds, "peak_memory": peak_memory(device),
                        "last_loss": last, "finite": math.isfinite(last), "final_loss_scale": scale,
                        "skipped_steps": int(skipped) if scales else None, "mean_last_losses": tail})
        rows.append([name, f"{seconds * 1e3:.1f}", f"{batch_size * config.max_seq_len / seconds:,.0f}",
                     peak_memory(device), f"{last:.3f}", f"loss scale {scale:g}, {skipped} steps skipped" if scale
                     else "no scaler", ""])
        del model, step
    fp32 = next((r["mean_last_losses"] for r in results if r["precision"] == "fp32" and "ms_per_step" in r), None)
    for result, row in zip(results, rows):
        if fp32 is not None and "mean_last_losses" in result:
            result["loss_gap_to_fp32"] = result["mean_last_losses"] - fp32
            row[-1] = f"{result['loss_gap_to_fp32']:+.4f}"
    measured = {r["precision"]: r["ms_per_step"] for r in results if "ms_per_step" in r}
    if "fp32" in measured:
        for row in rows:
            if row[0] in measured and row[0] != "fp32":
                row[1] += f" ({measured['fp32'] / measured[row[0]]:.2f}x fp32)"
    text = table(["precision", "ms/step", "tokens/s", "peak memory", f"loss after {args.precision_steps} steps",
                  "scaler", "mean of the last 10 losses minus fp32's"], rows)
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


def environment_part(device: torch.device, name: str, config: ModelConfig, batch_size: int,
                     precision: str) -> dict:
    """Part 5: versions, the device, what `auto` means here, the attention kernel each model's forward gets."""
    dtype = autocast_dtype(device, precision)
    rows = [("device", name), ("torch", torch.__version__), ("CUDA (torch built with)", str(torch.version.cuda)),
            ("cuDNN", str(torch.backends.cudnn.version()) if device.type == "cuda" else "n/a"),
            (f"--precision {precision}", precision_name(dtype)), ("CPU threads", str(torch.get_num_threads()))]
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        rows.append(("GPU memory", f"{properties.total_memory / 2**30:.1f} GiB"))
    kernels = {}
    for arch in ("bert", "gpt"):
        kernels[arch] = attention_kernels(config.for_arch(arch), device, dtype, batch_size)
        used = kernels[arch][0] if kernels[arch] else "none ran"
        also = f" (also runs: {', '.join(kernels[arch][1:])})" if len(kernels[arch]) > 1 else ""
        rows.append((f"attention kernel, {arch} training forward", used + also))
    return {"rows": rows, "markdown": markdown(rows), "attention_kernels": kernels}


def attention_kernels(config: ModelConfig, device: torch.device, dtype: torch.dtype | None,
                      batch_size: int) -> list[str]:
    """The scaled-dot-product kernels that run this model's training forward (its padding mask included), in
    torch's order of preference: the first is the one it uses when free to choose."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    order = [getattr(SDPBackend, n) for n in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")
             if hasattr(SDPBackend, n)]
    model = build_model(config).to(device).train()
    batch = to_device(make_batches(config, min(batch_size, 8), 1)[0], device)
    if config.arch == "gpt":
        from bertcourse.training.objectives import next_token_labels

        batch["labels"] = next_token_labels(batch["input_ids"], batch["attention_mask"])
    working = []
    for backend in order:
        autocast = torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()
        try:
            with warnings.catch_warnings(), sdpa_kernel([backend]), autocast:
                warnings.simplefilter("ignore")  # torch says why each kernel it cannot use was left out
                model(**batch).loss.backward()
            working.append(backend.name)
        except RuntimeError:
            pass
    return working


class _Ops(TorchDispatchMode):
    """The aten ops dispatched inside it, and those of them that make the CPU wait for a GPU."""

    SYNCING = ("aten._local_scalar_dense", "aten.nonzero", "aten.masked_select", "aten.unique", "aten.equal")

    def __init__(self) -> None:
        super().__init__()
        self.ops, self.syncs = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        name = str(func.overloadpacket)
        bool_index = name == "aten.index" and any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
                                                  for i in (args[1] if len(args) > 1 else []) if i is not None)
        self.syncs += name in self.SYNCING or bool_index
        return func(*args, **(kwargs or {}))


def _train_step(config: ModelConfig, device: torch.device, dtype: torch.dtype | None):
    """A fresh model of `config` on `device` and a function taking one course training step on a batch."""
    model = build_model(config).to(device).train()
    step = TrainStep(adamw(model, 1e-4, 0.01), model.parameters(), device=device, dtype=dtype, grad_clip=1.0)

    def once(batch: dict) -> torch.Tensor:
        with step.autocast():
            loss = model(**batch).loss
        step.backward(loss)
        step.step()
        return loss.detach()

    return model, once


def _ms_per_step(once: Callable[[dict], torch.Tensor], batches: list[dict], device: torch.device, steps: int) -> float:
    for batch in batches[:2]:  # warm-up: allocations, kernel choices, AdamW's state
        once(batch)
    synchronize(device)
    started = time.perf_counter()
    for i in range(steps):
        once(batches[i % len(batches)])
    synchronize(device)
    return (time.perf_counter() - started) / steps * 1e3


def anatomy_part(args: argparse.Namespace, device: torch.device, config: ModelConfig, batch_size: int) -> dict:
    """Part 6: where a pretraining step's time goes: ops, syncs, GPU-busy share, pinned against pageable copies, and
    the GPT's head in one chunk against the CPU's chunks."""
    import bertcourse.model as model_module
    from bertcourse.training.budget import pretraining_batch_seconds
    from bertcourse.training.objectives import next_token_labels

    dtype = autocast_dtype(device, args.precision)
    steps = max(2, args.precision_steps)
    rows, results = [], {}
    for arch in ("bert", "gpt"):
        arch_config = config.for_arch(arch)
        batches = [to_device(b, device) for b in make_batches(arch_config, batch_size, 2)]
        if arch == "gpt":
            for b in batches:
                b["labels"] = next_token_labels(b["input_ids"], b["attention_mask"])
        model, once = _train_step(arch_config, device, dtype)
        once(batches[0])
        with _Ops() as counted:
            once(batches[1])
        syncs, how = counted.syncs, "ops that wait, counted at dispatch"
        if device.type == "cuda":  # the driver's own count: every synchronizing call warns once
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                try:
                    once(batches[0])
                finally:
                    torch.cuda.set_sync_debug_mode("default")
            syncs, how = sum("synchroniz" in str(w.message) for w in caught), "torch.cuda.set_sync_debug_mode"
        ms = _ms_per_step(once, batches, device, steps)
        busy = gpu_busy_share(once, batches, device) if device.type == "cuda" else None
        results[arch] = {"ops_per_step": counted.ops, "syncs_per_step": syncs, "syncs_counted_by": how,
                         "ms_per_step": ms, "gpu_busy_share": busy,
                         "cpu_batch_ms": pretraining_batch_seconds(arch_config, batch_size) * 1e3}
        rows.append([f"{arch} step", f"{ms:.1f}", f"{counted.ops:,}", f"{syncs} ({how})",
                     f"{busy:.0%}" if busy is not None else "n/a (no GPU)",
                     f"{results[arch]['cpu_batch_ms']:.2f}"])
        del model, once
    # the GPT's head: one chunk (CUDA's rule) against the CPU's 16 MB chunks
    gpt = config.for_arch("gpt")
    batches = [to_device(b, device) for b in make_batches(gpt, batch_size, 2)]
    for b in batches:
        b["labels"] = next_token_labels(b["input_ids"], b["attention_mask"])
    chunks = {}
    rule = model_module.rows_per_chunk
    for label, chunk_rows in (("one chunk", 2**40), ("16 MB chunks", max(1, model_module.LOGITS_CHUNK_BYTES
                                                                            // (4 * gpt.vocab_size)))):
        model_module.rows_per_chunk = lambda vocab, where, n=chunk_rows: n
        try:
            _, once = _train_step(gpt, device, dtype)
            once(batches[0])
            with _Ops() as counted:
                once(batches[1])
            chunks[label] = {"ms_per_step": _ms_per_step(once, batches, device, steps), "ops_per_step": counted.ops}
        finally:
            model_module.rows_per_chunk = rule
        rows.append([f"gpt step, head in {label}", f"{chunks[label]['ms_per_step']:.1f}",
                     f"{chunks[label]['ops_per_step']:,}", "", "", ""])
    copies = copy_wait(device, make_batches(config, batch_size, 1)[0])
    text = table(["step", "ms", "aten ops", "syncs", "GPU busy", "CPU batch ms"], rows)
    text += "\n\n" + markdown([(f"CPU wait to send a batch, {k}", f"{v * 1e3:.3f} ms") for k, v in copies.items()])
    return {"steps": results, "head_chunks": chunks, "copy_wait_seconds": copies, "markdown": text}


def gpu_busy_share(once: Callable[[dict], torch.Tensor], batches: list[dict], device: torch.device,
                   steps: int = 10) -> float:
    """The share of `steps` steps' wall time the GPU spends in kernels (`torch.profiler`, CUDA activity)."""
    from torch.profiler import ProfilerActivity, profile

    synchronize(device)
    started = time.perf_counter()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(steps):
            once(batches[i % len(batches)])
        synchronize(device)
    wall = time.perf_counter() - started
    busy_us = sum(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0))
                  for e in prof.key_averages())
    return busy_us / 1e6 / wall


def copy_wait(device: torch.device, batch: dict, repeats: int = 20) -> dict[str, float]:
    """The CPU's wait to send `batch` while the GPU is busy (a queued matmul): from pinned memory without a wait
    (`devices.to_device`), and from pageable memory with `non_blocking=True` (the driver waits for the queue)."""
    size = 2048 if device.type == "cuda" else 64  # on a CPU there is no queue to wait for: a token matmul
    busy = torch.randn(size, size, device=device)
    out = {}
    for label, send in (("pinned, non_blocking (to_device)", lambda: to_device(batch, device)),
                        ("pageable, non_blocking", lambda: {k: v.to(device, non_blocking=True)
                                                            for k, v in batch.items()})):
        waits = []
        for _ in range(repeats):
            for _ in range(4):
                busy = busy @ busy / size  # keeps the GPU's queue full (a CPU does it at once)
            started = time.perf_counter()
            send()
            waits.append(time.perf_counter() - started)
            synchronize(device)
        out[label] = statistics.median(waits)
    return out


def finetune_steps_part(args: argparse.Namespace, device: torch.device, config: ModelConfig, profile) -> dict:
    """Part 7: ms per step of full, LoRA and probe fine-tuning at the profile's batch and length, and per op."""
    from bertcourse.classifier import build_classifier
    from bertcourse.training.budget import finetuning_step_ops
    from bertcourse.training.finetune import PROBE_BATCH

    tune = profile.finetuning()
    dtype = autocast_dtype(device, args.precision)
    steps = max(2, args.precision_steps)
    generator = torch.Generator().manual_seed(0)
    rows, results = [], {}
    for regime in ("full", "lora", "probe"):
        torch.manual_seed(0)
        model = build_classifier(build_model(config), regime).to(device).train()
        head = model if regime != "probe" else model.head  # a probe trains the head on cached vectors
        trained = [p for p in model.parameters() if p.requires_grad]
        step = TrainStep(adamw(model, 1e-4, 0.01), trained, device=device, dtype=dtype, grad_clip=1.0)
        if regime == "probe":
            batches = [{"pooled": torch.randn(PROBE_BATCH, config.d_model, generator=generator),
                        "labels": torch.randint(0, 2, (PROBE_BATCH,), generator=generator)} for _ in range(2)]
        else:
            batches = [{"input_ids": torch.randint(5, config.vocab_size, (tune.batch_size, tune.max_seq_len),
                                                   generator=generator),
                        "attention_mask": torch.ones(tune.batch_size, tune.max_seq_len, dtype=torch.long),
                        "labels": torch.randint(0, 2, (tune.batch_size,), generator=generator)} for _ in range(2)]
        batches = [to_device(b, device) for b in batches]

        def once(batch: dict, head=head, step=step) -> torch.Tensor:
            with step.autocast():
                loss = head(**batch).loss
            step.backward(loss)
            step.step()
            return loss.detach()

        ms = _ms_per_step(once, batches, device, steps)
        ops = finetuning_step_ops(config, regime, tune.max_seq_len) if regime != "probe" else None
        results[regime] = {"ms_per_step": ms, "ops_per_step": ops,
                           "us_per_op": ms * 1e3 / ops if ops else None}
        rows.append([regime, f"{ms:.2f}", f"{ops:,}" if ops else "(head only)",
                     f"{ms * 1e3 / ops:.1f}" if ops else ""])
        del model, step
    text = table([f"fine-tuning step (batch {tune.batch_size} x {tune.max_seq_len}; probe {PROBE_BATCH} vectors)",
                  "ms", "aten ops", "us per op"], rows)
    return {"steps": results, "markdown": text}


def resume_part(args: argparse.Namespace, device: torch.device, course, out_dir: Path) -> dict:
    """Part 8: the short profile straight through, and stopped half-way then resumed: the two final losses."""
    from bertcourse.training.pretrain import PretrainOptions, pretrain

    corpus = load_corpus(course, data_dir=args.data_dir, source=args.source, profile=args.short_profile)
    steps = max(4, args.short_steps or course.profile(args.short_profile).pretrain.max_steps)

    def options(folder: str, **more) -> PretrainOptions:
        return PretrainOptions(profile=args.short_profile, out_dir=out_dir / folder, device=device.type,
                               precision=args.precision, progress=False, max_steps=steps, checkpoint_every=steps // 2,
                               eval_every=steps, **more)

    straight = pretrain(options("straight"), corpus=corpus).final_eval["loss"]
    with contextlib.suppress(KeyboardInterrupt):  # killed a step after the half-way checkpoint: it resumes from it
        pretrain(options("resumed", stop_after=steps // 2 + 1), corpus=corpus)
    resumed = pretrain(options("resumed", resume=True), corpus=corpus).final_eval["loss"]
    rows = [(f"{args.short_profile}, {steps} steps straight through", f"held-out loss {straight:.4f}"),
            (f"stopped at step {steps // 2 + 1}, resumed from step {steps // 2}", f"held-out loss {resumed:.4f} "
                                                         f"(difference {resumed - straight:+.2e})")]
    return {"straight_loss": straight, "resumed_loss": resumed, "steps": steps, "markdown": markdown(rows)}


def other_lessons_part(args: argparse.Namespace, device: torch.device, course, corpus, bert_dir: Path,
                       out_dir: Path) -> dict:
    """Part 9: lesson 2's whole-word pretraining, lesson 4's task head and label-curve run, lesson 6's pair variant
    and lesson 7's distillation, a few steps each on the device. Every path runs; the part fails if one did."""
    from bertcourse.training.checkpoint import CHECKPOINT_NAME, load_pretrained
    from bertcourse.training.pretrain import PretrainOptions, pretrain

    steps = args.finetune_steps
    teacher, tokenizer = load_pretrained(bert_dir / CHECKPOINT_NAME, device=device)
    rows, results, failed = [], {}, []

    def whole_word() -> str:
        run = pretrain(PretrainOptions(arch="bert", profile=args.profile, out_dir=out_dir / "wwm", max_steps=steps,
                                       eval_every=steps, checkpoint_every=steps, progress=False, device=device.type,
                                       precision=args.precision, whole_word=True), corpus=corpus)
        return f"held-out loss {run.final_eval['loss']:.3f}"

    def task_head() -> str:
        from bertcourse.heads import TAG_NAMES, TokenClassifier, encode_tagged_words, number_date_tags
        from bertcourse.training.task_heads import train_head

        words = [s.split() for s in corpus.train[:64]]
        tags = [[TAG_NAMES.index(t) for t in number_date_tags(w)] for w in words]
        batch = encode_tagged_words(tokenizer, words, tags, max_length=64)
        tagger = TokenClassifier(copy.deepcopy(teacher), n_labels=len(TAG_NAMES)).to(device)
        losses = train_head(tagger, [{k: batch[k] for k in ("input_ids", "attention_mask", "labels")}], steps, 1e-4,
                            device, progress=False, precision=args.precision)
        return f"loss {losses[0]:.3f} -> {losses[-1]:.3f}"

    def label_curve_run() -> str:
        from bertcourse.classifier import build_classifier
        from bertcourse.training.data_efficiency import LabelRecipe, train_with_dev

        generator = torch.Generator().manual_seed(0)
        rows_ = [torch.randint(5, len(tokenizer), (int(n),), generator=generator).tolist()
                 for n in torch.randint(4, 40, (80,), generator=generator)]
        labels = torch.randint(0, 2, (80,), generator=generator)
        model = build_classifier(copy.deepcopy(teacher), "full").to(device)
        run = train_with_dev(model, (rows_[:64], labels[:64]), (rows_[64:], labels[64:]), learning_rate=1e-4,
                             batch_size=16, weight_decay=0.01, warmup_fraction=0.1, recipe=LabelRecipe(),
                             steps_cap=steps, seed=0, device=device, precision=args.precision)
        return f"{run['steps_run']} steps, dev accuracy {run['dev_curve']['dev_accuracy'][-1]:.3f}"

    def pair_variant() -> str:
        from bertcourse.after_bert.runner import course_data, run_variant
        from bertcourse.data import DATA_ENV

        # lesson 6 reads the data as the commands do ($BERTCOURSE_DATA): --data-dir stands in for it here
        with _environment(DATA_ENV, args.data_dir):
            course_data.cache_clear()
            try:
                run = run_variant("mlm+sop", profile=args.short_profile, steps=steps, probe_rows=200,
                                  heldout_pairs=20, device=device.type, precision=args.precision, progress=False,
                                  out_root=out_dir / "after-bert")
            finally:
                course_data.cache_clear()  # read under this setting: not for a later caller
        return f"SOP held-out accuracy {run.aux['accuracy']:.3f}, MLM loss {run.mlm['loss']:.3f}"

    def distillation() -> str:
        from bertcourse.after_bert.distillation import distil, student_from_teacher
        from bertcourse.training.objectives import MaskedLM
        from bertcourse.training.packing import pack_sentences, tokenize

        data = pack_sentences(tokenize(tokenizer, corpus.train[:2000], progress=False).ids,
                              teacher.config.max_seq_len, tokenizer.cls_token_id, tokenizer.sep_token_id)
        student = student_from_teacher(teacher, [0]).to(device)
        losses = distil(student, teacher, MaskedLM(tokenizer, course.masking), data, steps=steps, batch_size=16,
                        learning_rate=1e-4, progress=False, dtype=autocast_dtype(device, args.precision))
        return f"loss {losses[0]:.3f} -> {losses[-1]:.3f}"

    for name, path in (("whole-word pretraining (lesson 2)", whole_word), ("task head (lesson 4)", task_head),
                       ("label-curve run (lesson 4)", label_curve_run),
                       ("pair variant mlm+sop (lesson 6)", pair_variant), ("distillation (lesson 7)", distillation)):
        started = time.perf_counter()
        try:
            outcome = path()
        except Exception as exc:  # noqa: BLE001  (every path runs; the part reports them all)
            outcome = f"FAILED: {type(exc).__name__}: {exc}"
            failed.append(name)
            print(traceback.format_exc(), file=sys.stderr)
        results[name] = outcome
        rows.append([name, outcome, f"{time.perf_counter() - started:.0f} s"])
    text = table(["path", f"{steps} steps", "wall"], rows)
    if failed:
        raise RuntimeError(f"{', '.join(failed)} failed:\n{text}")
    return {"results": results, "markdown": text}


@contextlib.contextmanager
def _environment(name: str, value: str | None):
    """$`name` set to `value` inside the block (unchanged when None), as it was after it."""
    import os

    before = os.environ.get(name)
    if value is not None:
        os.environ[name] = str(value)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def measured_rates(parts: dict, gpu: str) -> dict | None:
    """The rates the plans assume, measured: FLOP/s of the pretraining step (FLOP-bound) and seconds an op of the
    fine-tuning steps (launch-bound); None when a part they come from did not run."""
    pretraining, steps = parts.get("pretraining", {}), parts.get("finetune_steps", {}).get("steps")
    if "seconds_per_step" not in pretraining or not steps:
        return None
    per_op = [r["us_per_op"] for r in steps.values() if r.get("us_per_op")]
    return {"gpu": gpu, "flops_per_s": pretraining["flops_per_step"] / pretraining["seconds_per_step"],
            "op_seconds": statistics.median(per_op) / 1e6, "date": datetime.date.today().isoformat(),
            "from": "benchmarks/gpu_smoke.py: pretraining part (FLOP/s), fine-tuning steps (us per op)"}


def run_part(name: str, parts: dict, work: Callable[[], dict], device: torch.device | None = None) -> dict | None:
    """Run one part; a failure is recorded (error and traceback) and the other parts still run. The peak memory
    of the part's phase is recorded with it."""
    started = time.perf_counter()
    if device is not None:
        reset_peak(device)
    try:
        parts[name] = work()
    except Exception as exc:  # noqa: BLE001  (a smoke check reports every failure, then exits 1)
        parts[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(),
                       "markdown": f"FAILED: {type(exc).__name__}: {exc}"}
        print(traceback.format_exc(), file=sys.stderr)
    parts[name]["seconds"] = round(time.perf_counter() - started, 1)
    if device is not None:
        parts[name]["phase_peak_memory"] = peak_memory(device)
    return parts[name] if "error" not in parts[name] else None


TITLES = {"environment": "Environment", "pretraining": "Pretraining (lesson 3's BERT)",
          "precisions": "fp16 / bf16 / fp32", "anatomy": "Where a step's time goes",
          "finetune_steps": "Fine-tuning steps", "cpu_comparison": "The loss against the CPU's",
          "resume": "Resume", "lesson_paths": "Lessons 3 and 4 on the device",
          "other_lessons": "Lessons 2, 4, 6 and 7 on the device"}
OPTIONAL = ("precisions", "anatomy", "finetune_steps", "cpu_comparison", "resume", "lesson_paths", "other_lessons")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default=None, help="course.yml profile (default gpu; a dry run cpu-quick)")
    parser.add_argument("--steps", type=int, default=None,
                        help="pretraining steps to run and time (default 300; a dry run 10)")
    parser.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp16", "fp32"],
                        help="as `bertcourse pretrain --precision` (auto: bf16 on a GPU with bf16 in hardware, "
                        "sm_80+; fp16 with loss scaling below, a T4)")
    parser.add_argument("--corpus", default="course", choices=["course", "profile"],
                        help="course: the course corpus (default; seconds of data work); profile: the profile's "
                        "own (gpu: WikiText-103 too, ~15 min of data work on a first run)")
    parser.add_argument("--precision-steps", type=int, default=None,
                        help="steps timed per precision and per step measured (default 50; a dry run 2)")
    parser.add_argument("--short-profile", default="cpu-quick",
                        help="the profile run on the GPU and the CPU to compare losses (default cpu-quick)")
    parser.add_argument("--short-steps", type=int, default=None,
                        help="steps of the short runs compared with the CPU and resumed (default: the short profile's "
                        "max_steps; a dry run 4)")
    parser.add_argument("--finetune-steps", type=int, default=None,
                        help="steps of the GPT pretraining, of each fine-tuning run and of each other lesson's path "
                        "(default 50; a dry run 2)")
    parser.add_argument("--skip", action="append", default=[], choices=list(OPTIONAL),
                        help="leave a part out (repeatable)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"),
                        help="folder for gpu_smoke.json and gpu_smoke.md (default benchmarks/results)")
    parser.add_argument("--data-dir", default=None, help="as `bertcourse pretrain --data-dir`")
    parser.add_argument("--source", default="auto", help="as `bertcourse pretrain --source`")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="without a GPU, run a dry run on the CPU instead of refusing (its figures are no GPU's)")
    args = parser.parse_args(argv)
    dry_run = not torch.cuda.is_available()
    for flag, value in (DRY_RUN if dry_run else GPU_RUN).items():  # the sizes not given on the command line
        if getattr(args, flag) is None:
            setattr(args, flag, value)
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
    profile = course.profile(args.profile)
    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        pretrained = run_part("pretraining", parts,
                              lambda: pretraining_part(args, device, name, course, corpus, work_dir / "bert"), device)
        if pretrained is not None:
            print(pretrained["markdown"], flush=True)  # the README's table first, as soon as it is measured
        config = (ModelConfig.from_dict(pretrained["config"]) if pretrained
                  else profile.model.for_arch("bert", vocab_size=profile.vocab_size))
        run_part("environment", parts,
                 lambda: environment_part(device, name, config, spec.batch_size, args.precision), device)
        chosen = {
            "precisions": lambda: precision_part(args, device, config, spec.batch_size),
            "anatomy": lambda: anatomy_part(args, device, config, spec.batch_size),
            "finetune_steps": lambda: finetune_steps_part(args, device, config, profile),
            "cpu_comparison": lambda: cpu_comparison_part(args, device, course, work_dir),
            "resume": lambda: resume_part(args, device, course, work_dir / "resume"),
            "lesson_paths": lambda: lesson_paths_part(args, device, course, corpus, work_dir / "bert", work_dir),
            "other_lessons": lambda: other_lessons_part(args, device, course, corpus, work_dir / "bert",
                                                        work_dir / "other"),
        }
        for part in OPTIONAL:
            needs_bert = part in ("lesson_paths", "other_lessons")
            if part not in args.skip and (pretrained is not None or not needs_bert):
                run_part(part, parts, chosen[part], device)
    total = time.perf_counter() - began
    sections = [f"# benchmarks/gpu_smoke.py on {name}",
                f"{datetime.date.today().isoformat()}, torch {torch.__version__}, `python benchmarks/gpu_smoke.py "
                f"{' '.join(argv if argv is not None else sys.argv[1:])}`, {total / 60:.1f} min in all"]
    def heading(key: str, part: dict) -> str:
        return f"## {TITLES[key]} ({part['seconds']:.0f} s, peak memory {part['phase_peak_memory']})"

    for key, part in parts.items():
        sections.append(f"{heading(key, part)}\n\n{part['markdown']}")
    text = "\n\n".join(sections) + "\n"
    print("\n\n" + "\n\n".join(f"{heading(key, part)}\n\n{part['markdown']}"
                                 for key, part in parts.items() if part is not pretrained))
    summary = {"device": name, "torch": torch.__version__, "date": datetime.date.today().isoformat(),
               "arguments": vars(args), "total_seconds": round(total, 1),
               "parts": {k: {key: v for key, v in part.items() if key != "markdown"} for k, part in parts.items()}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_smoke.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    (out / "gpu_smoke.md").write_text(text)
    print(f"\nwrote {out / 'gpu_smoke.md'} and {out / 'gpu_smoke.json'}")
    rates = measured_rates(parts, torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    if rates is not None:  # the plans read these instead of their assumptions (training.budget.plan_rates)
        (out / RATES_NAME).write_text(json.dumps(rates, indent=1) + "\n")
        print(f"wrote {out / RATES_NAME}: {rates['flops_per_s'] / 1e12:.1f} TFLOP/s, "
              f"{rates['op_seconds'] * 1e6:.1f} us an op (the lessons' plans now use them)")
    elif device.type != "cuda":
        print(f"no {RATES_NAME}: a dry run on the CPU measures no GPU")
    failed = [k for k, part in parts.items() if "error" in part]
    if failed:
        print(f"FAILED parts: {', '.join(failed)} (their errors are in gpu_smoke.json)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Pretraining the tiny BERT (masked LM) or its parameter-matched GPT (next token): the training loop.

The loop is deliberately plain: one function, `pretrain`, that you can read top to bottom. What it
adds over a textbook loop is what a real run needs:

- the objective owns the targets (`bertcourse.training.objectives`): BERT's batches are masked afresh every time
  a row is drawn (dynamic masking, RoBERTa), token by token or by whole words (`whole_word`), from a
  generator whose state is saved; the GPT's are shifted by one;
- AdamW with linear warm-up and cosine decay, gradient clipping, and autocast where it pays: bf16 (or fp16
  with loss scaling) on CUDA, bf16 on a CPU that computes bf16 in hardware (`autocast_dtype`); the step
  itself is `bertcourse.training.loop.TrainStep`, which every training loop of the course takes;
- a fixed held-out evaluation (500 sentences, masks drawn once) so evaluations are comparable
  (`bertcourse.training.heldout`);
- atomic checkpoints holding everything the next step depends on (`bertcourse.training.checkpoint`): a run killed
  mid-way and resumed ends with exactly the weights of a run that was never interrupted;
- the same loop under `torchrun` (DistributedDataParallel, `bertcourse.training.distributed`): each process takes
  its share of every global batch, rank 0 alone evaluates, prints and saves.

The corpus is packed into blocks by `bertcourse.training.packing`, the curves drawn by `bertcourse.training.plotting`.
The profile comes resolved from the command or `compare` (`profile_spec`), or is selected here from
`options.profile` (a lesson); the modules above are handed what they need of it.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from bertcourse.config import ARCHITECTURES, ModelConfig
from bertcourse.course import Profile, given_profile, load_course, select_profile
from bertcourse.data import load_corpus
from bertcourse.errors import BertcourseError
from bertcourse.model import GPT, BertForMLM, build_model, describe
from bertcourse.prepare_data import profile_tokenizer
from bertcourse.progress import progress_bar
from bertcourse.run_folders import pretraining_folder
from bertcourse.training.checkpoint import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_NAME,
    CheckpointError,
    check_compatible,
    load_checkpoint,
    read_shipped,
    same_tokenizer,
    save_checkpoint,
    tokenizer_from_json,
)
from bertcourse.training.devices import autocast_dtype, native_bf16, precision_name, to_device
from bertcourse.training.distributed import Processes, is_main_process, rank_seed
from bertcourse.training.heldout import evaluate
from bertcourse.training.loop import LossLog, TrainStep
from bertcourse.training.objectives import Objective, objective_class
from bertcourse.training.optim import adamw, lr_factor
from bertcourse.training.packing import PackedData, batch_indices
from bertcourse.training.plotting import plot_history

LOG_EVERY = 10  # steps between reads of the losses (each read waits for the GPU); also at evaluations and checkpoints


@dataclass
class PretrainOptions:
    """What `bertcourse pretrain` can change; the rest comes from the course.yml profile."""

    arch: str = "bert"  # "bert" (masked LM) or "gpt" (next-token LM)
    profile: str | None = None  # a name; None: $BERTCOURSE_PROFILE, else gpu with CUDA, else cpu-quick (select_profile)
    out_dir: str | Path = "runs/pretrain"
    data_dir: str | Path | None = None
    source: str = "auto"
    resume: bool = False
    max_steps: int | None = None  # override the profile's max_steps (the schedule follows it)
    seed: int = 0
    compile: bool = False
    device: str | None = None  # default: cuda, else mps, else cpu
    eval_every: int | None = None  # override the profile
    checkpoint_every: int | None = None  # override the profile
    progress: bool = True
    stop_after: int | None = None  # stop abruptly after this step, as if killed (tests and demos)
    model_overrides: dict[str, Any] = field(default_factory=dict)  # e.g. {"dropout": 0.1}
    whole_word: bool = False  # BERT only: mask whole words (bertcourse.masking.whole_word_mask)
    precision: str = "auto"  # auto, bf16, fp16 or fp32: what the steps autocast to (`autocast_dtype`)
    init_from: str | Path | None = None  # a shipped model's folder: continue its weights instead of random ones


@dataclass
class PretrainResult:
    """What a run returns: the trained model, its tokenizer, the loss history and the held-out result."""

    model: BertForMLM | GPT
    tokenizer: Any
    history: dict[str, list]
    out_dir: Path
    final_eval: dict[str, float]
    train_data: PackedData | None = None  # the packed blocks the run drew its batches from
    heldout: list[dict[str, torch.Tensor]] = field(default_factory=list)  # the fixed held-out batches
    objective: Objective | None = None  # what the model was trained to predict
    packed_sentences: int | None = None  # how many of the corpus's training sentences went into train_data


def _run_precision(requested: str, device: torch.device, saved: dict | None, path: Path) -> str:
    """The precision this run trains in: a resumed run keeps the one it started with; one started in bf16 is
    refused where bf16 is only emulated (a T4), unless --precision bf16 asks for it."""
    autocast_dtype(device, requested)  # refuses an unknown or unsupported one before any work
    if saved is None:
        return precision_name(autocast_dtype(device, requested))
    started = saved["settings"].get("precision") or _legacy_precision(device)
    if requested not in ("auto", started):
        raise CheckpointError(f"{path}: this run was started in {started}; resume it with --precision {started} "
                              f"(or auto), not {requested}")
    autocast_dtype(device, started)  # e.g. an fp16 run started on CUDA cannot go on on the CPU
    if started == "bf16" and requested == "auto" and not native_bf16(device):
        where = torch.cuda.get_device_name(device) if device.type == "cuda" else "this CPU"
        raise CheckpointError(f"{path}: this run was started in bf16, which {where} only emulates (slower than "
                              "fp32): resume it where bf16 is native (a GPU of compute capability 8.0 or above), "
                              "or pass --precision bf16 to go on emulated")
    return started


def _legacy_precision(device: torch.device) -> str:
    """What a checkpoint written before the precision setting trained in: autocast on CUDA, fp32 elsewhere."""
    return precision_name(autocast_dtype(device, "auto")) if device.type == "cuda" else "fp32"


def _resume_settings(options: PretrainOptions, config: ModelConfig, spec: Any, max_steps: int, world_size: int,
                     start: dict | None = None) -> dict:
    """What must be identical between a run and the run that resumes it."""
    return {
        "init_from": start["card"]["sha256"]["model.safetensors"] if start else None,
        "arch": options.arch,
        "whole_word": options.whole_word,
        "profile": options.profile,
        "model_config": config.to_dict(),
        "seed": options.seed,
        "max_steps": max_steps,
        "batch_size": spec.batch_size,
        "learning_rate": spec.learning_rate,
        "warmup_steps": spec.warmup(max_steps),
        "weight_decay": spec.weight_decay,
        "grad_clip": spec.grad_clip,
        "precision": options.precision,
        "world_size": world_size,  # each process masks with its own generator: resumed on as many
    }


def _check_start(start: dict, config: ModelConfig, tokenizer: Any, folder: Path) -> None:
    """Refuse, naming the folder, a shipped model whose shape or token ids differ from this run's."""
    if start["settings"]["model_config"] != config.to_dict():
        raise BertcourseError(f"--init-from {folder}: its model ({start['settings']['model_config']}) is not this "
                              f"run's ({config.to_dict()}); choose a profile of its shape")
    if not same_tokenizer(start["tokenizer"], tokenizer):
        raise BertcourseError(f"--init-from {folder}: its tokenizer is not this run's (it reads other token ids)")


def repeats_notice(corpus: Any, n_blocks: int, steps: int, batch_size: int) -> str:
    """The notice a run prints when its profile's corpus fell back to a smaller one (`Corpus.missing`):
    how many passes over the smaller corpus its steps make. Empty when nothing is missing, or when the steps
    make fewer than two passes (a short try: no repeats to warn of)."""
    missing = getattr(corpus, "missing", None)
    if not missing or steps * batch_size < 2 * n_blocks:
        return ""
    return (f"NOTICE: without {', '.join(missing)} (not found, see above), these {steps:,} steps of {batch_size} "
            f"blocks are {steps * batch_size / n_blocks:,.0f} passes over the {n_blocks:,} blocks packed from the "
            "smaller corpus: the run mostly repeats it")


def pretrain(options: PretrainOptions | None = None, *, corpus: Any = None, tokenizer: Any = None,
             profile_spec: Profile | None = None) -> PretrainResult:
    """Pretrain (or resume) a model as `options` say; returns the model, tokenizer and history.

    `corpus` / `tokenizer` may be passed in to skip loading them (lessons that already have them);
    `profile_spec`, the profile the caller resolved (the command, `compare`), instead of `options.profile`'s.
    """
    options = options or PretrainOptions()
    objective_type = objective_class(options.arch, whole_word=options.whole_word)  # refuses gpt + whole_word
    course = load_course()
    profile_spec = given_profile(options.profile, profile_spec, course)
    options = replace(options, profile=profile_spec.name)
    spec = profile_spec.pretrain
    max_steps = options.max_steps or spec.max_steps
    eval_every = options.eval_every or spec.eval_every
    checkpoint_every = options.checkpoint_every or spec.checkpoint_every
    out_dir = Path(options.out_dir)
    checkpoint_path = out_dir / CHECKPOINT_NAME
    processes = Processes(options.device)  # one, or this one of several started by torchrun
    processes.start(spec.batch_size)
    device, main = processes.device, processes.is_main

    saved = None
    if options.resume:
        saved = load_checkpoint(checkpoint_path)
    elif checkpoint_path.exists():
        raise CheckpointError(f"{checkpoint_path} exists: pass --resume to continue it or choose another --out")
    options = replace(options, precision=_run_precision(options.precision, device, saved, checkpoint_path))
    amp_dtype = autocast_dtype(device, options.precision)  # a concrete name by now: bf16, fp16 or fp32

    if tokenizer is None and saved is not None:
        tokenizer = tokenizer_from_json(saved["tokenizer"])
    with processes.main_first():  # under torchrun rank 0 builds and caches the corpus and tokenizer, the rest read
        if corpus is None:
            corpus = load_corpus(course, data_dir=options.data_dir, source=options.source, profile_spec=profile_spec)
        if tokenizer is None:
            tokenizer = profile_tokenizer(profile_spec, course, corpus)
    config = profile_spec.model.for_arch(options.arch, **{"vocab_size": len(tokenizer), **options.model_overrides})
    start = read_shipped(options.init_from) if options.init_from else None  # hashes checked
    if start is not None:
        _check_start(start, config, tokenizer, Path(options.init_from))
    settings = _resume_settings(options, config, spec, max_steps, processes.world_size, start)
    if saved is not None:
        processes.check_resume(checkpoint_path, saved)
        check_compatible(checkpoint_path, {"precision": options.precision, **saved["settings"]}, settings)
        if not same_tokenizer(saved["tokenizer"], tokenizer):
            raise CheckpointError(f"{checkpoint_path}: its tokenizer differs from this run's tokenizer")

    # ---- data: pack the corpus once; held-out masks fixed
    objective = objective_type(tokenizer, course.masking)
    mask_id = tokenizer.mask_token_id if options.arch == "bert" else None  # held-out accuracy at [MASK] too
    budget = max_steps * spec.batch_size * config.max_seq_len
    with processes.main_first():  # rank 0 tokenizes and caches the tokens, the others read them
        train_data, n_sentences = objective.pack(corpus.train, config.max_seq_len, budget, options.progress and main)
    heldout = objective.heldout_batches(objective.pack(corpus.heldout, config.max_seq_len)[0])
    if len(train_data) < spec.batch_size:
        raise BertcourseError(f"the corpus fills only {len(train_data)} blocks, fewer than one batch")

    # ---- model, optimizer, schedule, random generators
    torch.manual_seed(options.seed)
    model = build_model(config).to(device)
    if start is not None and saved is None:
        model.load_state_dict(start["model"])
    optimizer = adamw(model, spec.learning_rate, spec.weight_decay, betas=(0.9, 0.98), eps=1e-6)
    warmup = spec.warmup(max_steps)
    # autocast, loss scaling (fp16 only), clipping after unscaling, the schedule (bertcourse.training.loop)
    train_step = TrainStep(optimizer, model.parameters(), device=device, dtype=amp_dtype, grad_clip=spec.grad_clip,
                           schedule=lambda step: lr_factor(step, warmup, max_steps))
    processes.reseed_dropout(options.seed)
    masking_generator = torch.Generator().manual_seed(rank_seed(options.seed + 1, processes.rank))
    history: dict[str, list] = {"step": [], "loss": [], "lr": [], "eval_step": [], "eval_loss": [], "eval_accuracy": []}
    step = 0
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        train_step.load_state_dict(saved)  # its scheduler and loss scaler
        rng = processes.own_rng(saved)
        torch.set_rng_state(rng["torch"])
        if device.type == "cuda" and rng.get("cuda") is not None:
            torch.cuda.set_rng_state(rng["cuda"])
        masking_generator.set_state(rng["masking"])
        history = saved["history"]
        step = saved["step"]
    forward = processes.wrap(model)  # DDP: averages the gradients across processes in backward()
    forward = torch.compile(forward) if options.compile else forward

    def checkpoint_state() -> dict:
        rngs = processes.gather({  # every process's generators (all processes take part in this)
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            "masking": masking_generator.get_state(),
        })
        return {
            "format": CHECKPOINT_FORMAT,
            "settings": settings,
            "step": step,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            **train_step.state_dict(),  # "scheduler", "scaler"
            "rng": rngs[0],
            **({"rng_by_rank": rngs} if processes.ddp else {}),
            "tokenizer": tokenizer.backend_tokenizer.to_str(),
            "history": history,
            "cost": cost(),
        }

    other = next(arch for arch in ARCHITECTURES if arch != options.arch)
    with torch.device("meta"):  # only to count its parameters: no memory, no random draws
        twin = build_model(profile_spec.model.for_arch(other, vocab_size=len(tokenizer)))
    if main:
        print(f"{describe(model)} (its {other} counterpart: {sum(p.numel() for p in twin.parameters()):,})")
        print(
            f"pretraining {options.arch} on {device} in {options.precision}: {n_sentences:,} sentences packed into "
            f"{len(train_data):,} blocks of <= {config.max_seq_len} tokens ({train_data.n_tokens:,} tokens), "
            f"{max_steps} steps of {spec.batch_size} blocks ({max_steps * spec.batch_size / len(train_data):,.1f} "
            "passes over them)" + (", whole-word masking" if options.whole_word else "")
            + (f", split across {processes.world_size} processes" if processes.ddp else "")
        )
        if notice := repeats_notice(corpus, len(train_data), max_steps, spec.batch_size):
            print(notice, file=sys.stderr)
        if saved is not None and step >= max_steps:
            print(f"already trained: its checkpoint is at step {step} of {max_steps}, so nothing is trained again")
        elif saved is not None:
            print(f"resuming from step {step} of {max_steps}")
    model.train()
    bar = progress_bar(total=max_steps, initial=step, desc=f"pretrain {options.arch}",
                       disable=not (options.progress and main))
    started, tokens_seen = time.perf_counter(), 0
    log = LossLog()  # the losses stay on the device until `read_log` (no wait for the GPU every step)
    # what the run spent before a resume (a checkpoint older than this record: counted from its step on)
    earlier = (saved or {}).get("cost") or {"tokens_seen": 0, "train_seconds": 0.0, "counted_from_step": step}

    def cost() -> dict:
        """Tokens (real ones, specials included) and loop seconds behind the model so far, across resumes."""
        return {**earlier, "tokens_seen": earlier["tokens_seen"] + tokens_seen,
                "train_seconds": round(earlier["train_seconds"] + time.perf_counter() - started, 1)}

    def read_log() -> None:
        """Move the logged losses and token counts into the history (the one wait for the device)."""
        nonlocal tokens_seen
        if not len(log):
            return
        values = log.read()
        history["loss"].extend(values["loss"])
        tokens_seen += sum(values["tokens"])
        rate = tokens_seen / max(time.perf_counter() - started, 1e-9)
        bar.set_postfix(loss=f"{history['loss'][-1]:.3f}", tok_s=f"{rate:,.0f}", refresh=False)

    while step < max_steps:
        step += 1
        indices = processes.shard(batch_indices(step, len(train_data), spec.batch_size, options.seed))
        batch = objective.batch(train_data, indices, masking_generator)
        batch = to_device(batch, device)
        with train_step.autocast():
            loss = objective.loss(forward, batch)
        loss, global_loss, batch_tokens = processes.global_mean(loss, batch)  # one process: unchanged
        train_step.backward(loss)
        train_step.step()

        history["step"].append(step)
        history["lr"].append(train_step.schedule.get_last_lr()[0])
        log.add(loss=global_loss, tokens=batch_tokens)
        if step % LOG_EVERY == 0:
            read_log()
        bar.update(1)
        if step % eval_every == 0 or step % checkpoint_every == 0 or step == max_steps:
            read_log()  # the history is complete before it is saved
        if main and (step % eval_every == 0 or step == max_steps):
            metrics = evaluate(model, heldout, device, mask_id=mask_id)
            history["eval_step"].append(step)
            history["eval_loss"].append(metrics["loss"])
            history["eval_accuracy"].append(metrics["accuracy"])
            bar.write(f"step {step}: held-out loss {metrics['loss']:.3f}, accuracy {metrics['accuracy']:.3f}"
                      + (f" ([MASK] positions: {metrics['mask_accuracy']:.3f})" if mask_id is not None else ""))
        if options.stop_after is not None and step >= options.stop_after and step < max_steps:
            bar.close()
            raise KeyboardInterrupt(f"stopped after step {step} (stop_after)")
        if step % checkpoint_every == 0 or step == max_steps:
            state = checkpoint_state()
            if main:
                save_checkpoint(checkpoint_path, state)
    bar.close()

    final = {}  # under torchrun, rank 0 alone evaluates and writes the report
    if main:
        final = evaluate(model, heldout, device, mask_id=mask_id)
        write_report(out_dir, history, final, options, model, cost=cost())
    processes.close()
    return PretrainResult(model, tokenizer, history, out_dir, final, train_data, heldout, objective, n_sentences)


def write_report(out_dir: Path, history: dict, final: dict, options: PretrainOptions, model: torch.nn.Module,
                 cost: dict | None = None) -> None:
    """metrics.json and loss_curve.png next to the checkpoint; `cost` ({"tokens_seen", "train_seconds"}, summed
    over resumes) is what `bertcourse compare` reports as the pretraining's price next to the accuracy."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = {
        "arch": options.arch,
        "profile": options.profile,
        "parameters": sum(p.numel() for p in model.parameters()),
        "precision": options.precision,
        "final_eval": final,
        **(cost or {}),
        "history": history,
    }
    if options.whole_word:
        summary["whole_word"] = True
    (out_dir / "metrics.json").write_text(json.dumps(summary, indent=1))
    masking = ", whole-word" if options.whole_word else ""
    plot_history(history, out_dir / "loss_curve.png", title=f"{options.arch} ({options.profile}{masking})")


def pretrain_command(args: Any) -> int:
    """`bertcourse pretrain`: run (or resume) pretraining and print where the results went."""
    objective_type = objective_class(args.arch, whole_word=args.whole_word)  # gpt + --whole-word: refused here
    profile_spec = select_profile(args.profile)  # the one look-up of the profile; passed down from here
    out = args.out or pretraining_folder(args.arch, profile_spec.name, whole_word=args.whole_word)
    options = PretrainOptions(
        arch=args.arch,
        profile=profile_spec.name,
        out_dir=out,
        data_dir=args.data_dir,
        source=args.source,
        resume=args.resume,
        max_steps=args.max_steps,
        seed=args.seed,
        compile=args.compile,
        device=args.device,
        progress=not args.no_progress,
        model_overrides={} if args.dropout is None else {"dropout": args.dropout},
        whole_word=args.whole_word,
        precision=args.precision,
        init_from=args.init_from,
    )
    if options.max_steps is not None and options.max_steps < 1:
        raise BertcourseError(f"--max-steps must be at least 1, got {options.max_steps}")
    if args.dropout is not None and not 0 <= args.dropout < 1:
        raise BertcourseError(f"--dropout must be at least 0 and below 1, got {args.dropout}")
    result = pretrain(options, profile_spec=profile_spec)
    if not is_main_process():  # under torchrun, rank 0 reports
        return 0
    final = result.final_eval
    print(f"held-out {objective_type.target_name} loss {final['loss']:.3f}, accuracy {final['accuracy']:.3f} "
          f"({final['targets']} targets)")
    if "mask_accuracy" in final:
        print(f"at the [MASK] positions alone: loss {final['mask_loss']:.3f}, accuracy {final['mask_accuracy']:.3f} "
              f"({final['mask_targets']} targets; the rest were random or kept tokens)")
    print(f"wrote {result.out_dir / CHECKPOINT_NAME}, metrics.json and loss_curve.png in {result.out_dir}")
    return 0


__all__ = ["LOG_EVERY", "PretrainOptions", "PretrainResult", "pretrain", "pretrain_command", "repeats_notice",
           "write_report"]

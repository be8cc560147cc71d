"""Pretraining the tiny BERT (masked LM) or its parameter-matched GPT (next token) on the real corpus.

The loop is deliberately plain: one function, `pretrain`, that you can read top to bottom. What it
adds over a textbook loop is what a real run needs:

- dynamic masking: every time a sequence is drawn it gets a fresh mask (RoBERTa), from a generator
  whose state is saved, so a run is reproducible;
- AdamW with linear warm-up and cosine decay, gradient clipping, autocast on CUDA;
- a fixed held-out evaluation (500 sentences, masks drawn once) so evaluations are comparable;
- atomic checkpoints holding everything the next step depends on (weights, optimizer, schedule, step,
  every random generator, the tokenizer and the config): a run killed mid-way and resumed ends with
  exactly the weights of a run that was never interrupted.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from bertcourse.config import MaskingProbs
from bertcourse.errors import BertcourseError
from bertcourse.model import GPT, IGNORE_INDEX, BertForMLM, ModelConfig, build_model, describe

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CHECKPOINT_NAME = "checkpoint.pt"
CHECKPOINT_FORMAT = "bertcourse-pretrain-1"
EVAL_MASK_SEED = 1234  # the held-out masks are the same in every run and every evaluation


class CheckpointError(BertcourseError):
    """A checkpoint that cannot be read or does not belong to the run that tries to resume from it."""


# ----------------------------------------------------------------------------- settings


@dataclass
class PretrainOptions:
    """What `bertcourse pretrain` can change; the rest comes from the course.yml profile."""

    arch: str = "bert"  # "bert" (masked LM) or "gpt" (next-token LM)
    profile: str | None = None  # None: $BERTCOURSE_PROFILE, else gpu with CUDA, else cpu-quick (resolve_profile)
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


@dataclass
class PretrainResult:
    model: BertForMLM | GPT
    tokenizer: Any
    history: dict[str, list]
    out_dir: Path
    final_eval: dict[str, float]
    train_data: PackedData | None = None  # the packed blocks the run drew its batches from
    heldout: list[dict[str, torch.Tensor]] = field(default_factory=list)  # the fixed held-out batches


def pick_device(requested: str | None = None) -> torch.device:
    """CUDA if present, else Apple's MPS, else the CPU (or what was asked for)."""
    if requested:
        return torch.device(requested)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


# ----------------------------------------------------------------------------- data


@dataclass
class PackedData:
    """Sentences packed into blocks `[CLS] s1 [SEP] s2 [SEP] ...` of at most max_seq_len tokens.

    Packing keeps almost every position a real token (sentences average ~28 tokens; padding them one
    per row would waste most of the compute). The first half of a block is segment A, the rest
    segment B, so the segment embedding learns two real values, as in BERT's sentence pairs.
    """

    blocks: list[list[int]]
    segments: list[list[int]]

    def __len__(self) -> int:
        return len(self.blocks)

    @property
    def n_tokens(self) -> int:
        return sum(len(b) for b in self.blocks)


def tokenize_sentences(tokenizer: Any, sentences: Sequence[str]) -> list[list[int]]:
    """Token ids of each sentence without specials, cached on disk (tokenizing 60k sentences takes
    ~10 s on 2 cores; a cached run should start at once)."""
    from bertcourse.data import cache_dir

    digest = hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode())
    for sentence in sentences:
        digest.update(sentence.encode())
        digest.update(b"\n")
    path = cache_dir() / "pretokenized" / f"{digest.hexdigest()[:24]}.npz"
    if path.is_file():
        try:
            with np.load(path) as saved:
                flat, offsets = saved["ids"], saved["offsets"]
            return [flat[offsets[i] : offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]
        except (OSError, ValueError, KeyError):
            pass  # a damaged cache file: tokenize again and overwrite it
    encodings = tokenizer.backend_tokenizer.encode_batch(list(sentences), add_special_tokens=False)
    ids = [e.ids for e in encodings]
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(x) for x in ids])
    flat = np.fromiter((t for x in ids for t in x), dtype=np.int32, count=int(offsets[-1]))
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f"{path.stem}.{os.getpid()}.partial.npz")
    np.savez(staging, ids=flat, offsets=offsets)
    os.replace(staging, path)
    return ids


def tokenize_prefix(tokenizer: Any, sentences: Sequence[str], budget: int, chunk: int = 2000) -> list[list[int]]:
    """The token ids of the first sentences that hold at least `budget` tokens (all when the corpus
    is smaller): a seconds-long run needs a few thousand sentences, not the time to tokenize 60,000."""
    ids: list[list[int]] = []
    total = 0
    for start in range(0, len(sentences), chunk):
        part = tokenize_sentences(tokenizer, sentences[start : start + chunk])
        ids.extend(part)
        total += sum(len(x) + 1 for x in part)
        if total >= budget:
            break
    return ids


def pack_sentences(sentence_ids: Sequence[Sequence[int]], max_seq_len: int, cls_id: int, sep_id: int) -> PackedData:
    """Greedy in-order packing; a sentence longer than a block is cut to fit."""
    blocks: list[list[int]] = []
    segments: list[list[int]] = []
    block: list[int] = [cls_id]
    segment: list[int] = [0]
    for ids in sentence_ids:
        piece = list(ids[: max_seq_len - 2]) + [sep_id]
        if len(block) + len(piece) > max_seq_len:
            blocks.append(block)
            segments.append(segment)
            block, segment = [cls_id], [0]
        kind = 0 if len(block) < max_seq_len // 2 else 1
        block.extend(piece)
        segment.extend([kind] * len(piece))
    if len(block) > 1:
        blocks.append(block)
        segments.append(segment)
    return PackedData(blocks, segments)


def _pad(rows: Sequence[Sequence[int]], value: int) -> torch.Tensor:
    from bertcourse.masking import pad_batch

    return pad_batch(rows, value)[0]


def make_batch(
    data: PackedData, indices: Sequence[int], arch: str, tokenizer: Any, generator: torch.Generator,
    masking: MaskingProbs | None = None,
) -> dict[str, torch.Tensor]:
    """The rows `indices` as a padded batch: masked fresh for BERT (`masking`: default BERT's recipe),
    with next-token labels for GPT."""
    from bertcourse.masking import collate_for_mlm, pad_batch

    rows = [data.blocks[i] for i in indices]
    if arch == "gpt":
        input_ids, attention_mask = pad_batch(rows, tokenizer.pad_token_id)
        labels = input_ids.masked_fill(attention_mask == 0, IGNORE_INDEX)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
    batch = collate_for_mlm(rows, tokenizer, generator=generator, **asdict(masking or MaskingProbs()))
    batch["token_type_ids"] = _pad([data.segments[i] for i in indices], 0)
    return batch


def batch_indices(step: int, n_blocks: int, batch_size: int, seed: int) -> list[int]:
    """The rows of training step `step` (1-based): a new shuffle each epoch, a pure function of
    (seed, step), so a resumed run draws exactly the batches an uninterrupted one would."""
    per_epoch = max(n_blocks // batch_size, 1)
    epoch, index = divmod(step - 1, per_epoch)
    order = torch.randperm(n_blocks, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
    return order[index * batch_size : (index + 1) * batch_size].tolist()


def eval_batches(data: PackedData, arch: str, tokenizer: Any, batch_size: int = 64,
                 masking: MaskingProbs | None = None) -> list[dict[str, torch.Tensor]]:
    """The held-out set as batches with masks drawn once from a fixed seed."""
    generator = torch.Generator().manual_seed(EVAL_MASK_SEED)
    return [
        make_batch(data, range(start, min(start + batch_size, len(data))), arch, tokenizer, generator, masking)
        for start in range(0, len(data), batch_size)
    ]


# ----------------------------------------------------------------------------- evaluation


@torch.no_grad()
def evaluate(model: BertForMLM | GPT, batches: Sequence[dict[str, torch.Tensor]], device: torch.device) -> dict:
    """Mean loss and accuracy over every target of the held-out batches (masked tokens for BERT,
    next tokens for GPT), weighted by target, not by batch."""
    was_training = model.training
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    for batch in batches:
        batch = {k: v.to(device) for k, v in batch.items()}
        out = model(**batch)
        targets = batch["labels"][:, 1:] if isinstance(model, GPT) else batch["labels"]
        targets = targets[targets != IGNORE_INDEX]
        total_loss += F.cross_entropy(out.logits.float(), targets, reduction="sum").item()
        correct += int((out.logits.argmax(-1) == targets).sum())
        count += len(targets)
    model.train(was_training)
    return {"loss": total_loss / max(count, 1), "accuracy": correct / max(count, 1), "targets": count}


def unigram_baseline(
    train: PackedData,
    batches: Sequence[dict[str, torch.Tensor]],
    vocab_size: int,
    arch: str,
    special_ids: Sequence[int] = (),
):
    """Loss and accuracy of a model that ignores the context and predicts by token frequency.

    It is the floor any pretrained model must beat: the loss is the entropy of the training unigram
    distribution measured on the held-out targets, the accuracy how often the most frequent token is
    right. For BERT pass the tokenizer's `special_ids`: they are never masked, so never a target.
    """
    flat = torch.tensor([t for block in train.blocks for t in block[1:]])  # [CLS] is never a target
    counts = torch.bincount(flat, minlength=vocab_size).double() + 1.0  # add-one: no target gets p = 0
    if arch == "bert" and len(special_ids):
        counts[torch.tensor(list(special_ids))] = 0.0
    log_probs = (counts / counts.sum()).log()
    targets = torch.cat([(b["labels"][:, 1:] if arch == "gpt" else b["labels"]).flatten() for b in batches])
    targets = targets[targets != IGNORE_INDEX]
    return {
        "loss": float(-log_probs[targets].mean()),
        "accuracy": float((targets == counts.argmax()).double().mean()),
        "targets": len(targets),
    }


# ----------------------------------------------------------------------------- checkpoints


def _settings(options: PretrainOptions, config: ModelConfig, spec: Any, max_steps: int) -> dict:
    """What must be identical between a run and the run that resumes it."""
    return {
        "arch": options.arch,
        "profile": options.profile,
        "model_config": config.to_dict(),
        "seed": options.seed,
        "max_steps": max_steps,
        "batch_size": spec.batch_size,
        "learning_rate": spec.learning_rate,
        "warmup_steps": spec.warmup_steps,
        "weight_decay": spec.weight_decay,
        "grad_clip": spec.grad_clip,
    }


def run_folder(name: str, profile: str, corpus: Any, course: Any = None) -> Path:
    """`runs/NAME-PROFILE-DIGEST`, the digest covering the profile's settings and the corpus.

    A notebook that reruns finds its own checkpoint and resumes; after a course update changes the
    profile (or with other data) it starts in a new folder instead of being refused by the resume check.
    """
    from bertcourse.course import load_course

    course = course or load_course()
    digest = hashlib.sha256(f"{course.profile(profile)!r}\n{corpus.fingerprint()}".encode()).hexdigest()[:12]
    return course.root / "runs" / f"{name}-{profile}-{digest}"


def save_checkpoint(path: Path, state: dict) -> None:
    """Write to a temporary file in the same folder, then rename: a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}.partial")
    torch.save(state, staging)
    os.replace(staging, path)


def load_checkpoint(path: str | Path) -> dict:
    """Read a checkpoint, with an error naming the file if it is missing, damaged or not ours."""
    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT_NAME
    if not path.is_file():
        raise CheckpointError(f"{path}: no checkpoint to resume from (is --out the folder of an earlier run?)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds for a truncated or foreign file
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(exc).__name__}: {exc})") from exc
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: not a bertcourse pretraining checkpoint (format {CHECKPOINT_FORMAT!r})")
    return state


def check_compatible(path: Path, saved: dict, expected: dict) -> None:
    """Refuse to resume with other settings, naming every setting that differs."""
    differences = []
    for key, value in expected.items():
        theirs = saved.get(key)
        if key == "model_config" and isinstance(theirs, dict):
            theirs = _as_current_config(theirs)
            differences += [
                f"model {k}: checkpoint {theirs.get(k)!r}, this run {v!r}"
                for k, v in value.items()
                if theirs.get(k) != v
            ]
        elif theirs != value:
            differences.append(f"{key}: checkpoint {theirs!r}, this run {value!r}")
    if differences:
        raise CheckpointError(f"{path} does not match this run: " + "; ".join(differences))


def _as_current_config(saved: dict) -> dict:
    """A saved model config in today's fields (one saved before `arch` replaced `causal` resumes too)."""
    try:
        return ModelConfig.from_dict(saved).to_dict()
    except (TypeError, ValueError):  # not a config this version can build: compared as it is
        return saved


def load_pretrained(path: str | Path, device: str | torch.device = "cpu") -> tuple[BertForMLM | GPT, Any]:
    """The model and tokenizer saved in a pretraining checkpoint (for fine-tuning and lessons)."""
    state = load_checkpoint(path)
    config = ModelConfig.from_dict(state["settings"]["model_config"])
    model = build_model(config)
    model.load_state_dict(state["model"])
    return model.to(device).eval(), _tokenizer_from_json(state["tokenizer"])


def _tokenizer_from_json(text: str) -> Any:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(text),
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


# ----------------------------------------------------------------------------- the loop


def lr_factor(step: int, warmup_steps: int, max_steps: int, final_fraction: float = 0.1) -> float:
    """Linear warm-up to the peak, then cosine decay to `final_fraction` of it at max_steps."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min((step - warmup_steps) / max(max_steps - warmup_steps, 1), 1.0)
    return final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * progress))


def _optimizer(model: torch.nn.Module, spec: Any) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only (biases and LayerNorm gains are not decayed).

    The fused implementation updates all parameters in one kernel: on the CPU it takes a quarter of the
    time of the default one, which matters for a model this small (benchmarks/README.md).
    """
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": spec.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    fused = next(model.parameters()).device.type in ("cpu", "cuda")
    return torch.optim.AdamW(groups, lr=spec.learning_rate, betas=(0.9, 0.98), eps=1e-6, fused=fused)


def pretrain(options: PretrainOptions | None = None, *, corpus: Any = None, tokenizer: Any = None) -> PretrainResult:
    """Pretrain (or resume) a model as `options` say; returns the model, tokenizer and history.

    `corpus` / `tokenizer` may be passed in to skip loading them (lessons that already have them).
    """
    from tqdm.auto import tqdm

    from bertcourse.course import load_course, resolve_profile

    options = options or PretrainOptions()
    if options.arch not in ("bert", "gpt"):
        raise BertcourseError(f"unknown --arch {options.arch!r}; choose bert or gpt")
    course = load_course()
    options = replace(options, profile=resolve_profile(options.profile, course))
    profile = course.profile(options.profile)
    spec = profile.pretrain
    max_steps = options.max_steps or spec.max_steps
    eval_every = options.eval_every or spec.eval_every
    checkpoint_every = options.checkpoint_every or spec.checkpoint_every
    out_dir = Path(options.out_dir)
    checkpoint_path = out_dir / CHECKPOINT_NAME
    device = pick_device(options.device)

    saved = None
    if options.resume:
        saved = load_checkpoint(checkpoint_path)
    elif checkpoint_path.exists():
        raise CheckpointError(f"{checkpoint_path} exists: pass --resume to continue it or choose another --out")

    if tokenizer is None and saved is not None:
        tokenizer = _tokenizer_from_json(saved["tokenizer"])
    if corpus is None:
        from bertcourse.data import load_corpus

        corpus = load_corpus(course, data_dir=options.data_dir, source=options.source)
    if tokenizer is None:
        from bertcourse.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(corpus, profile.vocab_size, profile.model.max_seq_len)
    config = profile.model.for_arch(options.arch, **{"vocab_size": len(tokenizer), **options.model_overrides})
    settings = _settings(options, config, spec, max_steps)
    if saved is not None:
        check_compatible(checkpoint_path, saved["settings"], settings)
        if saved["tokenizer"] != tokenizer.backend_tokenizer.to_str():
            raise CheckpointError(f"{checkpoint_path}: its tokenizer differs from this run's tokenizer")

    # ---- data: pack the corpus once; held-out masks fixed
    pack = dict(max_seq_len=config.max_seq_len, cls_id=tokenizer.cls_token_id, sep_id=tokenizer.sep_token_id)
    budget = max_steps * spec.batch_size * config.max_seq_len
    train_ids = tokenize_prefix(tokenizer, corpus.train, budget)
    n_sentences = len(train_ids)
    train_data = pack_sentences(train_ids, **pack)
    heldout_data = pack_sentences(tokenize_sentences(tokenizer, corpus.heldout), **pack)
    heldout = eval_batches(heldout_data, options.arch, tokenizer, masking=course.masking)
    if len(train_data) < spec.batch_size:
        raise BertcourseError(f"the corpus fills only {len(train_data)} blocks, fewer than one batch")

    # ---- model, optimizer, schedule, random generators
    torch.manual_seed(options.seed)
    model = build_model(config).to(device)
    optimizer = _optimizer(model, spec)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, spec.warmup_steps, max_steps))
    masking_generator = torch.Generator().manual_seed(options.seed + 1)
    use_autocast = device.type == "cuda"
    amp_dtype = torch.bfloat16 if use_autocast and torch.cuda.is_bf16_supported() else torch.float16
    scaler = torch.amp.GradScaler("cuda", enabled=use_autocast and amp_dtype == torch.float16)
    history: dict[str, list] = {"step": [], "loss": [], "lr": [], "eval_step": [], "eval_loss": [], "eval_accuracy": []}
    step = 0
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["scheduler"])
        scaler.load_state_dict(saved["scaler"])
        torch.set_rng_state(saved["rng"]["torch"])
        if device.type == "cuda" and saved["rng"].get("cuda") is not None:
            torch.cuda.set_rng_state(saved["rng"]["cuda"])
        masking_generator.set_state(saved["rng"]["masking"])
        history = saved["history"]
        step = saved["step"]
    forward = torch.compile(model) if options.compile else model

    def checkpoint_state() -> dict:
        return {
            "format": CHECKPOINT_FORMAT,
            "settings": settings,
            "step": step,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": schedule.state_dict(),
            "scaler": scaler.state_dict(),
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state() if device.type == "cuda" else None,
                "masking": masking_generator.get_state(),
            },
            "tokenizer": tokenizer.backend_tokenizer.to_str(),
            "history": history,
        }

    other = "gpt" if options.arch == "bert" else "bert"
    with torch.device("meta"):  # only to count its parameters: no memory, no random draws
        twin = build_model(profile.model.for_arch(other, vocab_size=len(tokenizer)))
    print(f"{describe(model)} (its {other} counterpart: {sum(p.numel() for p in twin.parameters()):,})")
    print(
        f"pretraining {options.arch} on {device}: {n_sentences:,} sentences packed into {len(train_data):,} "
        f"blocks of <= {config.max_seq_len} tokens ({train_data.n_tokens:,} tokens), "
        f"{max_steps} steps of {spec.batch_size} blocks"
    )
    model.train()
    bar = tqdm(total=max_steps, initial=step, desc=f"pretrain {options.arch}", disable=not options.progress)
    started, tokens_seen = time.perf_counter(), 0
    while step < max_steps:
        step += 1
        indices = batch_indices(step, len(train_data), spec.batch_size, options.seed)
        batch = make_batch(train_data, indices, options.arch, tokenizer, masking_generator, course.masking)
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        with torch.autocast(device.type, dtype=amp_dtype, enabled=use_autocast):
            loss = forward(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        schedule.step()

        history["step"].append(step)
        history["loss"].append(loss.item())
        history["lr"].append(schedule.get_last_lr()[0])
        tokens_seen += int(batch["attention_mask"].sum())
        rate = tokens_seen / max(time.perf_counter() - started, 1e-9)
        bar.set_postfix(loss=f"{history['loss'][-1]:.3f}", tok_s=f"{rate:,.0f}", refresh=False)
        bar.update(1)
        if step % eval_every == 0 or step == max_steps:
            metrics = evaluate(model, heldout, device)
            history["eval_step"].append(step)
            history["eval_loss"].append(metrics["loss"])
            history["eval_accuracy"].append(metrics["accuracy"])
            bar.write(f"step {step}: held-out loss {metrics['loss']:.3f}, accuracy {metrics['accuracy']:.3f}")
        if options.stop_after is not None and step >= options.stop_after and step < max_steps:
            bar.close()
            raise KeyboardInterrupt(f"stopped after step {step} (stop_after)")
        if step % checkpoint_every == 0 or step == max_steps:
            save_checkpoint(checkpoint_path, checkpoint_state())
    bar.close()

    final = evaluate(model, heldout, device)
    write_report(out_dir, history, final, options, model)
    return PretrainResult(model, tokenizer, history, out_dir, final, train_data, heldout)


def write_report(out_dir: Path, history: dict, final: dict, options: PretrainOptions, model: torch.nn.Module) -> None:
    """metrics.json and loss_curve.png next to the checkpoint."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = {
        "arch": options.arch,
        "profile": options.profile,
        "parameters": sum(p.numel() for p in model.parameters()),
        "final_eval": final,
        "history": history,
    }
    (out_dir / "metrics.json").write_text(json.dumps(summary, indent=1))
    plot_history(history, out_dir / "loss_curve.png", title=f"{options.arch} ({options.profile})")


def plot_history(history: dict, path: Path | None = None, title: str = "", baseline: dict | None = None,
                 fig: Figure | None = None) -> Figure:
    """Training loss (smoothed), held-out loss and held-out accuracy against the step.

    Library code must not touch the notebook's matplotlib backend or pyplot's list of figures, so this
    draws on `fig` (a notebook passes `plt.figure(...)` and then calls `plt.show()`) or, without one, on a
    `matplotlib.figure.Figure` of its own. Saves to `path` if given and returns the figure.
    """
    from matplotlib.figure import Figure

    fig = fig if fig is not None else Figure(figsize=(10, 3.6))
    ax_loss, ax_acc = fig.subplots(1, 2)
    losses = np.asarray(history["loss"])
    window = max(1, len(losses) // 50)
    smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
    ax_loss.plot(history["step"][window - 1 :], smooth, label="training (smoothed)")
    ax_loss.plot(history["eval_step"], history["eval_loss"], "o-", label="held-out")
    ax_acc.plot(history["eval_step"], history["eval_accuracy"], "o-", color="C1", label="held-out")
    if baseline:
        ax_loss.axhline(baseline["loss"], color="grey", ls="--", label="unigram baseline")
        ax_acc.axhline(baseline["accuracy"], color="grey", ls="--", label="unigram baseline")
    ax_loss.set(xlabel="step", ylabel="cross-entropy (nats)", title=f"loss {title}")
    ax_acc.set(xlabel="step", ylabel="accuracy", title=f"target-token accuracy {title}")
    ax_loss.legend()
    ax_acc.legend()
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


__all__ = [
    "CheckpointError",
    "PretrainOptions",
    "PretrainResult",
    "PackedData",
    "pretrain",
    "pick_device",
    "pack_sentences",
    "tokenize_sentences",
    "tokenize_prefix",
    "make_batch",
    "batch_indices",
    "eval_batches",
    "evaluate",
    "unigram_baseline",
    "load_checkpoint",
    "load_pretrained",
    "save_checkpoint",
    "run_folder",
    "plot_history",
    "lr_factor",
]


def pretrain_command(args: Any) -> int:
    """`bertcourse pretrain`: run (or resume) pretraining and print where the results went."""
    from bertcourse.course import resolve_profile

    profile = resolve_profile(args.profile)
    out = args.out or f"runs/pretrain-{args.arch}-{profile}"
    options = PretrainOptions(
        arch=args.arch,
        profile=profile,
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
    )
    if options.max_steps is not None and options.max_steps < 1:
        raise BertcourseError(f"--max-steps must be at least 1, got {options.max_steps}")
    if args.dropout is not None and not 0 <= args.dropout < 1:
        raise BertcourseError(f"--dropout must be at least 0 and below 1, got {args.dropout}")
    result = pretrain(options)
    final = result.final_eval
    what = "masked-token" if args.arch == "bert" else "next-token"
    print(f"held-out {what} loss {final['loss']:.3f}, accuracy {final['accuracy']:.3f} ({final['targets']} targets)")
    print(f"wrote {result.out_dir / CHECKPOINT_NAME}, metrics.json and loss_curve.png in {result.out_dir}")
    return 0

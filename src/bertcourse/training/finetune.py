"""Fine-tuning a pretrained (or a freshly initialised) course model on SST-2: one run, one folder.

`finetune(FinetuneOptions(...))` trains a `bertcourse.classifier.SequenceClassifier` in one regime and
writes `runs/finetune-ARCH-REGIME-INIT-PROFILE-seedN/`:

- `model.pt`: the classifier's weights, its model config, pooling, regime and the tokenizer;
- `metrics.json`: accuracy with its 95% bootstrap interval, macro-F1, MCC, the learning curve, the
  settings and the key they hash to (written last: its presence means the run finished);
- `predictions.tsv`: one line per validation sentence (label, prediction, P(positive), sentence).

The pretrained encoder is the course's own pretraining checkpoint, or a transformers checkpoint
(`--pretrained hf:ORG/NAME` or a folder written by `save_pretrained`, `bertcourse.hf_checkpoints`) read
with its own tokenizer: everything else (pooling, regimes, seeds, scores, the run folder) is the same, so
its row differs only in where the weights came from. `--init scratch` with such a checkpoint trains
the same architecture from random weights.

A finished folder with the same key is reused instead of trained again (what lets a killed `compare`
resume); a folder written with other settings is refused with its path. The numbers (batch, epochs,
learning rate by regime, rows) come from the profile's `finetune:` block in course.yml. Every run
trains on the same fixed subset of SST-2 train and is scored on all 872 validation sentences, so two
runs are paired sentence by sentence.

Under `torchrun` (one process per device, `bertcourse.training.distributed.Processes`, as pretraining uses it)
every process computes the same shuffled order and takes its own consecutive share of each global batch
of the profile's `batch_size` rows; the loss of each share is weighted by its rows, so the averaged
gradient is that of the whole batch, as in one process. Rank 0 alone tokenizes SST-2 (the others read its
token cache), evaluates and writes the run folder; the other processes then read it back, so every process
returns the same result. What differs from one process: the head's dropout draws its masks per process (a
tolerance, not equality; without dropout the runs agree to float rounding, tests/training/test_distributed.py),
and a probe's feature vectors are
computed by every process for all rows (cheap next to training). The process count enters the run's
settings (and key) when it is above one.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertcourse import metrics, stats
from bertcourse.classifier import SequenceClassifier, build_classifier, trainable_parameters
from bertcourse.config import ARCHITECTURES, INITS, REGIMES, ModelConfig
from bertcourse.course import Course, FinetuneSpec, Profile, given_profile, load_course, select_profile
from bertcourse.data import column, load_corpus, load_sst2
from bertcourse.errors import BertcourseError
from bertcourse.folders import file_sha256, write_atomic
from bertcourse.hf_checkpoints import (
    HFEncoder,
    encoder_from_saved,
    is_hf_spec,
    parse_spec,
    random_like,
    saved_encoder,
)
from bertcourse.hf_checkpoints import load_pretrained as load_hf
from bertcourse.masking import pad_batch
from bertcourse.model import build_model
from bertcourse.prepare_data import profile_tokenizer
from bertcourse.progress import progress_bar
from bertcourse.run_folders import finetuning_folder, pretraining_folder
from bertcourse.training.checkpoint import (
    CHECKPOINT_NAME,
    WEIGHTS_NAME,
    CheckpointError,
    is_shipped,
    load_checkpoint,
    read_saved_state,
    read_shipped,
    save_checkpoint,
    tokenizer_from_json,
)
from bertcourse.training.devices import DeviceRows, autocast_dtype, precision_name, to_device
from bertcourse.training.distributed import Processes, is_main_process
from bertcourse.training.loop import LossLog, TrainStep
from bertcourse.training.optim import adamw, linear_schedule
from bertcourse.training.packing import tokenize_sentences

FINETUNE_FORMAT = "bertcourse-finetune-1"
MODEL_NAME = "model.pt"
EVALUATIONS_PER_RUN = 8  # points on each run's learning curve
PROBE_BATCH = 256  # the probe trains a linear layer on cached vectors: large batches cost nothing


class FinetuneError(BertcourseError):
    """A fine-tuning run that cannot start or a run folder that belongs to other settings."""


@dataclass
class FinetuneOptions:
    """One fine-tuning run; what is not here comes from the profile's `finetune:` block."""

    arch: str | None = None  # bert or gpt; default bert, or what a transformers checkpoint is
    regime: str = "full"  # full, probe or lora
    init: str = "pretrained"  # pretrained: the pretraining checkpoint's weights; scratch: random ones
    seed: int = 0
    profile: str | None = None  # a name; None: select_profile's rule
    pooling: str | None = None  # default: cls for the BERT, last for the GPT
    pretrained: str | Path | None = None  # default runs/pretrain-ARCH-PROFILE/checkpoint.pt; or hf:ORG/NAME, a folder
    out_dir: str | Path | None = None  # default runs/finetune-ARCH-REGIME-INIT-PROFILE-seedN
    data_dir: str | Path | None = None
    source: str = "auto"
    device: str | None = None
    precision: str = "auto"  # as `bertcourse pretrain --precision`
    progress: bool = True
    max_steps: int | None = None  # stop early (tests); part of the key


@dataclass
class SST2Rows:
    """SST-2 as token-id rows ([CLS] ... [SEP], at most max_seq_len) and labels, ready to batch."""

    train_ids: list[list[int]]
    train_labels: torch.Tensor
    validation_ids: list[list[int]]
    validation_labels: torch.Tensor
    validation_sentences: list[str]
    train_rows: list[int] = field(default_factory=list)  # which SST-2 train rows (a fixed subset)


@dataclass
class FinetuneResult:
    """What a run returns (and what a reused folder gives back)."""

    out_dir: Path
    metrics: dict[str, Any]
    predictions: np.ndarray  # P(label) per validation sentence, [872, 2]
    model: SequenceClassifier | None = None  # None when the folder was reused


def sentence_rows(tokenizer: Any, texts: list[str], max_seq_len: int) -> list[list[int]]:
    """Token-id rows `[CLS] ... [SEP]` of at most `max_seq_len` (longer sentences cut): what a classifier reads
    (`encode_sst2` and `bertcourse evaluate` both encode through it, so a saved model sees its training format).
    A tokenizer without [CLS]/[SEP] (a public decoder's) adds its own special tokens, as it was pretrained."""
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        from bertcourse.hf_checkpoints import encode_sentences

        return encode_sentences(tokenizer, texts, max_seq_len)
    cut = max_seq_len - 2
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    return [[cls, *ids[:cut], sep] for ids in tokenize_sentences(tokenizer, texts)]


def training_rows(n_train: int, spec: FinetuneSpec) -> list[int]:
    """Which of SST-2's `n_train` training rows every run trains on: all, or the profile's fixed random
    `train_rows` of them (in order)."""
    if spec.train_rows is not None and spec.train_rows < n_train:
        return sorted(np.random.default_rng(0).permutation(n_train)[: spec.train_rows].tolist())
    return list(range(n_train))


def encode_sst2(tokenizer: Any, spec: FinetuneSpec, *, data_dir: str | Path | None = None,
                source: str = "auto", course: Course | None = None) -> SST2Rows:
    """Tokenize SST-2 once for a tokenizer (compare reuses it across runs)."""
    train = load_sst2("train", data_dir, source, course)
    validation = load_sst2("validation", data_dir, source, course)
    chosen = training_rows(len(train), spec)
    sentences, labels = column(train, "sentence"), column(train, "label")

    def rows(texts: list[str]) -> list[list[int]]:
        return sentence_rows(tokenizer, texts, spec.max_seq_len)

    val_sentences = column(validation, "sentence")
    return SST2Rows(
        rows([sentences[i] for i in chosen]), torch.tensor([labels[i] for i in chosen]),
        rows(val_sentences), torch.tensor(column(validation, "label")), val_sentences, chosen,
    )


def default_out_dir(options: FinetuneOptions, profile: str) -> Path:
    """`RUNS/finetune-ARCH-REGIME-INIT-PROFILE-seedN` (`run_folders`): one folder per setting, so a rerun finds
    its run; a transformers checkpoint's name stands for ARCH (`finetune-hf-ORG--NAME-...`)."""
    model = options.arch or "bert"
    if is_hf_spec(options.pretrained):
        model = parse_spec(options.pretrained).slug
    return finetuning_folder(model, options.regime, options.init, profile, options.seed)


def default_pretrained(arch: str, profile: str) -> Path:
    """The checkpoint `bertcourse pretrain --arch ARCH --profile PROFILE` writes by default."""
    return pretraining_folder(arch, profile) / CHECKPOINT_NAME


def read_pretrained(path: Path) -> tuple[dict, str]:
    """A pretraining checkpoint file and the digest of its bytes, read once per file version (`_read_pretrained`)."""
    stat = path.stat()
    return _read_pretrained(path.resolve(), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=2)
def _read_pretrained(path: Path, mtime_ns: int, size: int) -> tuple[dict, str]:
    """A pretraining checkpoint and the digest of its bytes, read once per file version: `compare` starts
    36 runs from the same two checkpoints (mtime and size in the key: a resumed pretraining is read again).
    A shipped model's weights file (`checkpoint.read_shipped`) is read with its card, its hashes checked."""
    if path.name == WEIGHTS_NAME and is_shipped(path.parent):
        saved = read_shipped(path.parent)
        return saved, saved["card"]["sha256"][WEIGHTS_NAME][:16]
    return load_checkpoint(path), file_sha256(path)[:16]


def _hf_starting_point(options: FinetuneOptions) -> tuple[dict, Any, dict]:
    """A transformers checkpoint's config, tokenizer and {"encoder": its pretrained encoder, "described"}."""
    encoder, tokenizer, info = load_hf(options.pretrained)
    if options.arch is not None and options.arch != info["arch"]:
        kind = "an encoder" if info["arch"] == "bert" else "a decoder"
        raise FinetuneError(f"{info['checkpoint']} is {kind} ({info['model_type']}), pooled as --arch "
                            f"{info['arch']}; leave --arch out or set it to {info['arch']}")
    if options.regime == "lora" and not info["lora_targets"]:
        raise FinetuneError(f"{info['checkpoint']}: peft knows no LoRA target modules for {info['model_type']}; "
                            "use --regime full or probe")
    described = {"checkpoint": info["checkpoint"] if info["source"] == "hub" else None, "path": info.get("path"),
                 "model_type": info["model_type"], "revision": info["revision"], "digest": info["digest"]}
    config = {"encoder": "transformers", "model_type": info["model_type"], "config": info["config"]}
    return config, tokenizer, {"encoder": encoder, "info": info, "described": described}


def _starting_point(options: FinetuneOptions, profile_spec: Profile, data_dir: Any,
                    source: str) -> tuple[dict, Any, dict]:
    """(model config dict, tokenizer, {"state": pretrained weights or None, "described": their identity or None})."""
    if is_hf_spec(options.pretrained):
        return _hf_starting_point(options)
    profile = profile_spec.name
    path = Path(options.pretrained) if options.pretrained else default_pretrained(options.arch, profile)
    if path.is_dir() and is_shipped(path):
        path = path / WEIGHTS_NAME
    elif path.is_dir():
        if not (path / CHECKPOINT_NAME).is_file() and options.pretrained:
            raise FinetuneError(f"{path}: neither a course pretraining folder (no {CHECKPOINT_NAME}) nor a "
                                "transformers checkpoint (no config.json)")
        path = path / CHECKPOINT_NAME
    if path.is_file():
        saved, digest = read_pretrained(path)
        config = saved["settings"]["model_config"]
        if options.arch is not None and config.get("arch", "bert") != options.arch:  # None: read from it
            raise FinetuneError(f"{path} holds a {config.get('arch')} model, not a {options.arch}")
        described = {"path": str(path), "digest": digest, "step": saved["step"],
                     "history": {k: saved["history"].get(k) for k in ("eval_step", "eval_loss", "eval_accuracy")}}
        return config, tokenizer_from_json(saved["tokenizer"]), {"state": saved["model"], "described": described}
    if options.init == "pretrained":
        raise FinetuneError(f"{path}: no pretraining checkpoint; run `bertcourse pretrain --arch {options.arch} "
                            f"--profile {profile}` first (or pass --pretrained PATH, or --init scratch)")
    course = load_course()  # scratch without a checkpoint: the profile's model and tokenizer (of its corpus)
    corpus = load_corpus(course, data_dir=data_dir, source=source, profile_spec=profile_spec)
    tokenizer = profile_tokenizer(profile_spec, course, corpus, progress=options.progress)
    config = profile_spec.model.for_arch(options.arch, vocab_size=len(tokenizer)).to_dict()
    return config, tokenizer, {"state": None, "described": None}


def run_key(settings: dict) -> str:
    """The hash of everything that decides a run's result (its folder is reused only under the same key).

    The pretrained checkpoint enters by its content digest, not by the path it was read from: the same
    checkpoint named `runs/...` from the command line and by an absolute path from a notebook is one run.
    """
    pretrained = settings.get("pretrained")
    if isinstance(pretrained, dict):
        settings = {**settings, "pretrained": {k: v for k, v in pretrained.items() if k != "path"}}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def read_finished(out_dir: Path, key: str | None = None) -> FinetuneResult | None:
    """The result of a finished run in `out_dir`, None if it did not finish; refused if its key differs."""
    metrics_path = out_dir / "metrics.json"
    if not metrics_path.is_file():
        return None
    try:
        saved = json.loads(metrics_path.read_text())
        probabilities = np.loadtxt(out_dir / "predictions.tsv", delimiter="\t", skiprows=1, usecols=(3,),
                                   ndmin=1, comments=None)
    except (OSError, ValueError) as exc:
        raise FinetuneError(f"{out_dir}: a damaged fine-tuning run ({type(exc).__name__}: {exc}); delete the "
                            "folder to run it again") from exc
    if saved.get("format") != FINETUNE_FORMAT:
        raise FinetuneError(f"{metrics_path}: not a bertcourse fine-tuning run")
    if key is not None and saved.get("key") != key:
        raise FinetuneError(f"{out_dir} holds a run with other settings (key {saved.get('key')}, this run {key}); "
                            "choose another --out or delete the folder")
    return FinetuneResult(out_dir, saved, np.stack([1 - probabilities, probabilities], axis=1))


def _batches(ids: list[list[int]], order: list[int], size: int):
    for start in range(0, len(order), size):
        index = order[start : start + size]
        yield index, *pad_batch([ids[i] for i in index], 0)


@torch.no_grad()
def predict_rows(model: SequenceClassifier, ids: list[list[int]], device: torch.device,
                 batch_size: int = 256) -> np.ndarray:
    """P(label) [N, L] for token-id rows, in eval mode (rows sorted by length: less padding)."""
    model.eval()
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = np.zeros((len(ids), model.classifier.out_features), dtype=np.float64)
    for index, batch_ids, attention in _batches(ids, order, batch_size):
        logits = model(*to_device((batch_ids, attention), device)).logits
        out[index] = torch.softmax(logits.float(), -1).cpu().numpy()
    return out


@torch.no_grad()
def pooled_features(model: SequenceClassifier, ids: list[list[int]], device: torch.device) -> torch.Tensor:
    """The frozen encoder's sentence vectors [N, D], computed once for a probe."""
    model.eval()
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = torch.zeros(len(ids), model.classifier.in_features)
    for index, batch_ids, attention in _batches(ids, order, 256):
        out[index] = model.pool(*to_device((batch_ids, attention), device)).float().cpu()
    return out


class _ProbeHead(torch.nn.Module):
    """The classifier's head as a module of its own, so that DistributedDataParallel sees a probe's forward."""

    def __init__(self, model: SequenceClassifier):
        super().__init__()
        self.model = model

    def forward(self, pooled: torch.Tensor, labels: torch.Tensor) -> Any:
        """Dropout + linear + loss on cached vectors (`SequenceClassifier.head`)."""
        return self.model.head(pooled, labels)


def _train(model: SequenceClassifier, data: SST2Rows, spec: FinetuneSpec, options: FinetuneOptions,
           processes: Processes) -> tuple[dict[str, list], np.ndarray | None]:
    """The loop of one run; returns its learning curve and the validation probabilities of its last evaluation
    (at the last step: the final model's, so the caller need not predict again; None for a probe, whose head is
    rescaled after the loop, and on ranks above 0). A probe trains the head on cached vectors.

    Under torchrun each process trains on its share of every global batch (`processes.shard`) and only
    rank 0 evaluates; the loss on the curve is the mean over the global batch on every process.

    The probe standardises the vectors (each feature to mean 0, variance 1 on the training rows) as a
    logistic-regression probe does: a random encoder's [CLS] vectors differ from sentence to sentence by
    little, and an unscaled linear layer trained for a few epochs would read them as one constant. The
    scaling is folded into the linear layer afterwards, so the saved classifier takes raw vectors.
    """
    probe = options.regime == "probe"
    device, main = processes.device, processes.is_main
    if probe:
        train_x = pooled_features(model, data.train_ids, device)
        val_x = pooled_features(model, data.validation_ids, device)
        mean, std = train_x.mean(0), train_x.std(0).clamp(min=1e-6)
        # on the device once: a step then indexes them there (no copy of its rows, no wait)
        train_x, val_x = to_device(((train_x - mean) / std, (val_x - mean) / std), device)
        train_labels = to_device(data.train_labels, device)
        epochs, batch_size = spec.probe_epochs, PROBE_BATCH
    else:  # the sentences padded once, on the device (a step indexes them)
        rows = DeviceRows(data.train_ids, device, labels=data.train_labels)
        epochs, batch_size = spec.epochs, spec.batch_size
    steps_per_epoch = math.ceil(len(data.train_ids) / batch_size)
    total = min(epochs * steps_per_epoch, options.max_steps or math.inf)
    optimizer = adamw(model, spec.learning_rate[options.regime], spec.weight_decay)
    warmup = max(1, int(spec.warmup_fraction * total))
    # autocast, loss scaling (fp16 only), clipping after unscaling, the schedule (bertcourse.training.loop)
    train_step = TrainStep(optimizer, [p for _, p in trainable_parameters(model)], device=device,
                           dtype=autocast_dtype(device, options.precision), grad_clip=1.0,
                           schedule=linear_schedule(total, warmup))
    evaluate_at = {round(total * (k + 1) / EVALUATIONS_PER_RUN) for k in range(EVALUATIONS_PER_RUN)}
    log = LossLog()  # the losses stay on the device until an evaluation reads them
    generator = torch.Generator().manual_seed(options.seed)
    history: dict[str, list] = {"step": [], "loss": [], "eval_step": [], "eval_accuracy": []}
    probabilities = None
    bar = progress_bar(total=total, desc=f"finetune {options.arch} {options.regime} {options.init}",
                       disable=not (options.progress and main))
    # DDP: gradients averaged across processes in backward(); the MLM head of a full run trains nothing
    forward = processes.wrap(_ProbeHead(model) if probe else model, find_unused=options.regime == "full")
    step = 0
    while step < total:
        order = torch.randperm(len(data.train_ids), generator=generator).tolist()
        for start in range(0, len(order), batch_size):
            index = processes.shard(order[start : start + batch_size])  # one process: the whole batch
            if probe:
                picked = to_device(torch.tensor(index), device)
                batch = {"pooled": train_x[picked], "labels": train_labels[picked]}
            else:
                batch = rows.batch(index)
            labels = batch["labels"]
            model.train()
            with train_step.autocast():
                loss = forward(**batch).loss
            # weighted by this share's rows (one target per row); the curve gets the global batch's mean
            loss, global_loss, _ = processes.global_mean(loss, {"labels": labels, "attention_mask": labels})
            train_step.backward(loss)
            train_step.step()
            step += 1
            history["step"].append(step)
            log.add(loss=global_loss)
            bar.update(1)
            if step in evaluate_at or step >= total:
                history["loss"].extend(log.read()["loss"])
                bar.set_postfix(loss=f"{history['loss'][-1]:.3f}", refresh=False)
            if step in evaluate_at and main:
                if probe:
                    model.eval()
                    with torch.no_grad():
                        predicted = model.head(val_x).logits.argmax(-1).cpu()
                else:
                    probabilities = predict_rows(model, data.validation_ids, device)
                    predicted = torch.from_numpy(probabilities.argmax(1))
                history["eval_step"].append(step)
                history["eval_accuracy"].append(float((predicted == data.validation_labels).float().mean()))
            if step >= total:
                break
    bar.close()
    if probe:  # W (x - mean) / std + b  ==  (W / std) x + (b - W (mean / std))
        with torch.no_grad():
            weight = model.classifier.weight / std.to(device)
            model.classifier.bias -= weight @ mean.to(device)
            model.classifier.weight.copy_(weight)
    return history, probabilities  # the last evaluation is at the last step (`total` is in evaluate_at)


def scores(labels: Any, predicted: Any, *, seed: int = 0) -> dict[str, Any]:
    """Accuracy with its 95% bootstrap interval over sentences, macro-F1 and MCC (bertcourse.metrics)."""
    labels, predicted = list(map(int, labels)), list(map(int, predicted))
    interval = stats.bootstrap_ci(labels, predicted, "accuracy", seed=seed)
    return {
        "accuracy": metrics.accuracy(labels, predicted),
        "accuracy_interval": [interval.low, interval.high],
        "macro_f1": metrics.precision_recall_f1(labels, predicted, average="macro").f1,
        "mcc": metrics.matthews_corrcoef(labels, predicted),
    }


def finetune(options: FinetuneOptions | None = None, *, data: SST2Rows | None = None,
             profile_spec: Profile | None = None) -> FinetuneResult:
    """Run (or reuse) one fine-tuning run as `options` say. `data`: SST-2 already encoded (see compare);
    `profile_spec`: the profile the caller resolved (the command, `compare`), instead of `options.profile`'s."""
    options = options or FinetuneOptions()
    if not is_hf_spec(options.pretrained):
        options = dataclasses.replace(options, arch=options.arch or "bert")
    for name, value, allowed in (("arch", options.arch or "bert", ARCHITECTURES), ("regime", options.regime, REGIMES),
                                 ("init", options.init, INITS)):
        if value not in allowed:
            raise FinetuneError(f"--{name} must be one of {', '.join(allowed)}, got {value!r}")
    course = load_course()
    profile_spec = given_profile(options.profile, profile_spec, course)
    profile = profile_spec.name
    spec = profile_spec.finetuning()
    out_dir = Path(options.out_dir) if options.out_dir else default_out_dir(options, profile)
    config_dict, tokenizer, start = _starting_point(options, profile_spec, options.data_dir, options.source)
    hf = start.get("info")  # a transformers checkpoint's description, None for the course's models
    if hf is not None:
        options = dataclasses.replace(options, arch=hf["arch"])
    config = start["encoder"].config if hf is not None else ModelConfig.from_dict(config_dict)
    if spec.max_seq_len > config.max_seq_len:
        raise FinetuneError(f"profile {profile}: finetune.max_seq_len {spec.max_seq_len} exceeds the model's "
                            f"max_seq_len {config.max_seq_len}")
    settings = {
        "format": FINETUNE_FORMAT, "arch": options.arch, "regime": options.regime, "init": options.init,
        "seed": options.seed, "profile": profile, "pooling": options.pooling, "finetune": asdict(spec),
        "model_config": config_dict if hf is not None else config.to_dict(), "max_steps": options.max_steps,
        "pretrained": start["described"] if options.init == "pretrained" else None,
        "tokenizer": hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode()).hexdigest()[:16],
    }
    if options.regime == "probe":  # the probe's vectors are standardised (see _train); not the other regimes'
        settings["probe_features"] = "standardised"
    processes = Processes(options.device)  # one, or this one of several started by torchrun
    if processes.ddp:  # the head's dropout masks depend on the split (one process: the key as before)
        settings["world_size"] = processes.world_size
    key = run_key(settings)
    finished = read_finished(out_dir, key)
    if finished is not None:
        return finished

    batch_size = PROBE_BATCH if options.regime == "probe" else spec.batch_size
    if data is not None:
        n_rows = len(data.train_ids)
    else:  # counted from the table alone: a split that cannot work is refused before any process group is joined
        n_rows = len(training_rows(len(load_sst2("train", options.data_dir, options.source, course)), spec))
    last_batch = n_rows % batch_size or batch_size
    if processes.ddp and last_batch < processes.world_size:
        raise FinetuneError(f"the last batch of an epoch holds {last_batch} of the {n_rows} training "
                            f"rows, fewer than the {processes.world_size} processes: run fewer processes or "
                            "change train_rows")
    processes.start(batch_size)
    if data is None:
        with processes.main_first():  # under torchrun rank 0 tokenizes SST-2 and caches the tokens, the rest read
            data = encode_sst2(tokenizer, spec, data_dir=options.data_dir, source=options.source, course=course)
    device = processes.device
    torch.manual_seed(options.seed)
    if hf is not None:  # the checkpoint's weights, or its architecture freshly initialised (seeded above)
        encoder = start["encoder"] if options.init == "pretrained" else random_like(hf)
    else:
        encoder = build_model(config)
        if options.init == "pretrained":
            encoder.load_state_dict(start["state"])
    model = build_classifier(encoder, options.regime, pooling=options.pooling, dropout=spec.dropout,
                             lora_rank=spec.lora_rank, lora_alpha=spec.lora_alpha).to(device)
    processes.reseed_dropout(options.seed)  # ranks above 0: their own dropout stream
    started = time.perf_counter()
    history, probabilities = _train(model, data, spec, options, processes)
    train_seconds = time.perf_counter() - started
    if not processes.is_main:  # rank 0 evaluates and writes; the others return what it wrote
        processes.close()
        finished = read_finished(out_dir, key)
        if finished is None:
            raise FinetuneError(f"{out_dir}: rank 0 finished without writing the run")
        return FinetuneResult(out_dir, finished.metrics, finished.predictions, model)
    if probabilities is None:  # a probe: its head was rescaled after the last evaluation
        probabilities = predict_rows(model, data.validation_ids, device)
    predicted = probabilities.argmax(1)
    result = {
        "format": FINETUNE_FORMAT, "key": key, "settings": settings,
        **scores(data.validation_labels.tolist(), predicted.tolist(), seed=options.seed),
        "train_seconds": round(train_seconds, 1), "train_rows": len(data.train_ids),
        "trainable_parameters": sum(p.numel() for _, p in trainable_parameters(model)),
        "parameters": sum(p.numel() for p in model.parameters()), "pooling": model.pooling,
        "precision": precision_name(autocast_dtype(device, options.precision)),
        "history": history,
    }
    _write_run(out_dir, model, tokenizer, config, options, data, probabilities, result)
    processes.close()  # waits until every process has finished training
    return FinetuneResult(out_dir, result, probabilities, model)


def _lora_settings(model: SequenceClassifier) -> dict[str, int]:
    """The rank and alpha of the first LoRA layer in the encoder (all share them)."""
    layer = next(m for m in model.encoder.modules() if isinstance(getattr(m, "r", None), dict) and "default" in m.r)
    return {"rank": layer.r["default"], "alpha": layer.lora_alpha["default"]}


def _write_run(out_dir: Path, model: SequenceClassifier, tokenizer: Any, config: Any,
               options: FinetuneOptions, data: SST2Rows, probabilities: np.ndarray, result: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "metrics.json").unlink(missing_ok=True)  # unfinished until rewritten below
    hf = isinstance(model.encoder, HFEncoder)
    state = {"format": FINETUNE_FORMAT, "model_config": None if hf else config.to_dict(), "regime": options.regime,
             "pooling": model.pooling, "n_labels": model.classifier.out_features, "dropout": model.dropout.p,
             "lora": _lora_settings(model) if options.regime == "lora" else None,
             "max_seq_len": result["settings"]["finetune"]["max_seq_len"],
             "tokenizer": tokenizer.backend_tokenizer.to_str(),
             "weights": {k: v.cpu() for k, v in model.state_dict().items()}}
    if hf:  # a transformers encoder: its architecture and its own tokenizer, to rebuild it without the hub
        state["transformers"] = saved_encoder(model.encoder, tokenizer)
    save_checkpoint(out_dir / MODEL_NAME, state)
    lines = ["index\tlabel\tprediction\tp_positive\tsentence"] + [
        f"{i}\t{int(y)}\t{int(p.argmax())}\t{p[1]:.6f}\t{s}"
        for i, (y, p, s) in enumerate(zip(data.validation_labels.tolist(), probabilities, data.validation_sentences))
    ]
    write_atomic(out_dir / "predictions.tsv", "\n".join(lines) + "\n")
    write_atomic(out_dir / "metrics.json", json.dumps(result, indent=1))


def load_classifier(path: str | Path, device: str | torch.device = "cpu") -> tuple[SequenceClassifier, Any, dict]:
    """A saved classifier (`model.pt` or its folder), its tokenizer and its metadata, ready to predict."""
    state = read_saved_state(path, MODEL_NAME, FINETUNE_FORMAT, "fine-tuned classifier", "classifier",
                             error=FinetuneError,
                             missing="no fine-tuned classifier there (`bertcourse finetune` writes model.pt)")
    path = Path(path) / MODEL_NAME if Path(path).is_dir() else Path(path)
    if state.get("transformers"):
        encoder, tokenizer = encoder_from_saved(state["transformers"])
    else:
        encoder = build_model(ModelConfig.from_dict(state["model_config"]))
        tokenizer = tokenizer_from_json(state["tokenizer"])
    lora = state["lora"] or {}
    model = build_classifier(encoder, state["regime"], pooling=state["pooling"], dropout=state["dropout"],
                             lora_rank=lora.get("rank", 8), lora_alpha=lora.get("alpha", 16))
    try:
        model.load_state_dict(state["weights"])
    except RuntimeError as exc:
        raise CheckpointError(f"{path}: the weights do not fit the saved model config ({exc})") from exc
    return model.to(device).eval(), tokenizer, state


def finetune_command(args: Any) -> int:
    """`bertcourse finetune`: one run; prints its accuracy and where its folder is."""
    profile_spec = select_profile(args.profile)  # the one look-up of the profile; passed down from here
    options = FinetuneOptions(
        arch=args.arch, regime=args.regime, init=args.init, seed=args.seed, profile=profile_spec.name,
        pooling=args.pooling, pretrained=args.pretrained, out_dir=args.out, data_dir=args.data_dir,
        source=args.source, device=args.device, precision=args.precision, progress=not args.no_progress,
        max_steps=args.max_steps,
    )
    result = finetune(options, profile_spec=profile_spec)
    if not is_main_process():  # under torchrun: rank 0 prints
        return 0
    m = result.metrics
    low, high = m["accuracy_interval"]
    reused = " (reused: the folder already held this run)" if result.model is None else ""
    name = result.metrics["settings"]["arch"]
    if is_hf_spec(options.pretrained):
        name = f"{options.pretrained} ({name})"
    print(f"{name} {options.regime} from {options.init}: SST-2 validation accuracy {m['accuracy']:.3f} "
          f"(95% interval {low:.3f}-{high:.3f}), macro-F1 {m['macro_f1']:.3f}, MCC {m['mcc']:.3f}{reused}")
    print(f"wrote model.pt, metrics.json and predictions.tsv in {result.out_dir}")
    return 0


__all__ = [
    "FINETUNE_FORMAT", "INITS", "REGIMES", "FinetuneError", "FinetuneOptions", "FinetuneResult", "SST2Rows",
    "default_out_dir", "default_pretrained", "encode_sst2", "finetune", "finetune_command",
    "load_classifier", "pooled_features", "predict_rows", "read_finished", "run_key", "scores", "sentence_rows",
    "training_rows",
]

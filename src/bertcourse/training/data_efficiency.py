"""Where pretraining pays: SST-2 validation accuracy against the number of labelled training rows.

`label_curve(profile, budgets=...)` (and `bertcourse labels`) fine-tunes every model both from its
pretrained weights and from scratch on n labelled SST-2 train rows for each budget n and seed, fits
TF-IDF + logistic regression on the same n rows, and writes `results/labels-PROFILE/`: results.json,
results.md and accuracy_vs_labels.png.

The recipe for small label budgets (`LabelRecipe`, reported in results.md), chosen so that nothing is
tuned on the validation set:

- Labels are drawn per seed: one seeded permutation of SST-2 train; budget n takes its first n rows, so
  the subsets are nested (the 100 rows hold the 50) and a seed changes which rows, not how many.
- The n labels are all a run may use. Every `dev_every`-th of them (in the seed's order, at most
  `max_dev_rows`) is a dev split carved from them; the network trains on the rest. Both parts are nested
  across budgets too.
- The network trains for at most `max_epochs` passes or `max_steps` steps (fewer rows: more passes),
  checks the dev split `evaluations` times along the way, keeps the weights with the best dev accuracy
  (ties: lower dev loss) and stops after `patience` checks without improvement. Those weights are then
  scored once on the 872 validation sentences. The training function never receives the validation labels.
- TF-IDF + LR (lesson 5's recipe, fixed C, nothing to stop early) fits on all n labelled rows.

Each network run is a folder `RUNS/labels-PROFILE/MODEL-INIT-nBUDGET-seedS/` (metrics.json, written
last, and predictions.tsv); a finished one with the same settings key is reused, so a killed run
resumes, and a folder holding other settings is refused with its path.

The statistics are `bertcourse.training.compare`'s: each (model, init, budget) holds K seeds scored on the same
872 sentences; its interval is the percentile bootstrap of the seed-averaged accuracy with the sentences
resampled (seeds held fixed), and the paired tests (pretrained vs scratch, pretrained vs TF-IDF, per
budget) resample sentences and seeds, with Holm's correction over the family.

A model is the course's `bert` or `gpt` (pretrained weights from `RUNS/pretrain-ARCH-PROFILE`, trained
first when missing, as `compare` does), a name of course.yml's `public_checkpoints` (`bert-tiny`: from the
hub, left out with one notice when it cannot be reached), or `NAME=PRETRAINED`: whatever `bertcourse finetune
--pretrained` accepts, given by the same `pretrained` value (`CurveModel.pretrained`); `_starting_point` is
the one place that reads it.
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertcourse.errors import BertcourseError
from bertcourse.folders import read_results
from bertcourse.run_folders import pretraining_folder, run_folder
from bertcourse.run_folders import runs_dir as default_runs_dir

LABELS_FORMAT = "bertcourse-labels-1"
RUN_FORMAT = "bertcourse-labels-run-1"
DEFAULT_BUDGETS = (50, 100, 300, 1000, 3000, 10000, "all")
INITS = ("pretrained", "scratch")
COURSE_MODELS = ("bert", "gpt")


class LabelCurveError(BertcourseError):
    """An experiment that cannot run as asked, or a run folder that belongs to other settings."""


@dataclass(frozen=True)
class LabelRecipe:
    """How a network is fine-tuned on n labels (the profile's finetune: block gives batch, learning rate,
    weight decay, warm-up and head dropout; these are what small budgets need on top)."""

    dev_every: int = 5  # every 5th labelled row is dev (20%) ...
    max_dev_rows: int = 1000  # ... up to this many: a large budget's dev need not cost more than training
    max_epochs: int = 40  # few rows: many passes (40 rows x 40 epochs at batch 32 = 80 steps)
    max_steps: int | None = None  # None: max(MIN_STEP_CAP, the profile's compare run's steps)
    evaluations: int = 20  # dev checks spread over the planned steps
    patience: int = 6  # stop after this many checks without a better dev accuracy
    # Levers (benchmarks/README.md measures them; at their defaults the recipe is the profile's, as before them):
    learning_rate: float | None = None  # None: the profile's full fine-tuning rate
    pooling: str | None = None  # None: the architecture's (BERT [CLS], GPT the last token); "mean" reads every token
    frozen_fraction: float = 0.0  # share of the planned steps that train the head alone, the encoder frozen (LP-FT)
    layer_decay: float = 1.0  # each block down learns at this factor of the rate above it (optim.layerwise_lr_scale)

    def settings(self) -> dict[str, Any]:
        """The recipe as a run's settings hold it; a lever at its default is left out, so that the runs made
        before the levers existed keep their keys (and are reused)."""
        return {k: v for k, v in asdict(self).items() if not (k in LEVERS and v == LEVERS[k][1])}

    @property
    def tag(self) -> str:
        """What the folders of runs and report add to their names for the levers set away from their defaults
        (`-lr0.0001-poolmean`), so that curves of several recipes sit side by side; '' for the default recipe."""
        return "".join(f"-{LEVERS[k][0]}{v:g}" if isinstance(v, float) else f"-{LEVERS[k][0]}{v}"
                       for k, v in self.settings().items() if k in LEVERS)

    def steps_cap(self, epochs: int, train_rows: int | None, batch_size: int) -> int:
        """The cap on steps: given, or the steps of the profile's own fine-tuning run (at least MIN_STEP_CAP)."""
        if self.max_steps is not None:
            return self.max_steps
        return max(MIN_STEP_CAP, epochs * math.ceil((train_rows or 67_349) / batch_size))


MIN_STEP_CAP = 200


def default_out(profile: str, recipe: LabelRecipe) -> Path:
    """The report folder when none is given: `results/labels-PROFILE[TAG]` (`LabelRecipe.tag`)."""
    return Path("results") / f"labels-{profile}{recipe.tag}"

# Each lever of LabelRecipe: (its short name in folder names, its default)
LEVERS = {"learning_rate": ("lr", None), "pooling": ("pool", None), "frozen_fraction": ("frozen", 0.0),
          "layer_decay": ("layerdecay", 1.0)}


@dataclass(frozen=True)
class CurveModel:
    """One model of the experiment: `pretrained` is what `FinetuneOptions.pretrained` takes (None: the course's
    own checkpoint for `arch` in the runs folder). A checkpoint's arch is read from it unless `arch_given`
    (`NAME:gpt=...`), which the checkpoint must then agree with."""

    name: str
    arch: str = "bert"
    pretrained: str | Path | None = None
    arch_given: bool = field(default=False, compare=False)


def parse_model(text: str, public: Mapping[str, Any] | None = None) -> CurveModel:
    """`bert`, `gpt`, a name of course.yml's `public_checkpoints` (`public`: e.g. `bert-tiny`, from the hub), or
    `NAME=PRETRAINED` (a checkpoint path, or whatever `--pretrained` accepts), whose arch is read from the
    checkpoint; `NAME:gpt=...` states it, and the checkpoint must agree."""
    if "=" not in text:
        if public and text in public:
            from bertcourse.hf_checkpoints import public_source

            return CurveModel(text, public[text].arch, public_source(public[text]), arch_given=True)
        if text not in COURSE_MODELS:
            names = f", a public checkpoint ({', '.join(public)})" if public else ""
            raise LabelCurveError(f"--model {text!r}: give bert, gpt{names} or NAME=PRETRAINED (a checkpoint)")
        return CurveModel(text, text)
    name, pretrained = text.split("=", 1)
    name, _, arch = name.partition(":")
    if not name or not pretrained or not name.replace("-", "").replace("_", "").isalnum():
        raise LabelCurveError(f"--model {text!r}: NAME=PRETRAINED with a NAME of letters, digits, - or _")
    if arch and arch not in COURSE_MODELS:
        raise LabelCurveError(f"--model {text!r}: the arch after NAME: is bert or gpt, not {arch!r}")
    return CurveModel(name, arch or "bert", pretrained, arch_given=bool(arch))


def parse_budgets(values: Sequence[int | str], available: int) -> list[int]:
    """Budgets as sorted row counts ('all' = every SST-2 train row); each must leave training and dev rows."""
    budgets = set()
    for value in values:
        n = available if str(value).strip().lower() == "all" else _as_int(value)
        if not 2 <= n <= available:
            raise LabelCurveError(f"budget {value!r}: a number of labelled rows from 2 to {available:,} (or 'all')")
        budgets.add(n)
    if not budgets:
        raise LabelCurveError("no label budget given")
    return sorted(budgets)


def _as_int(value: int | str) -> int:
    try:
        return int(str(value).replace(",", "").replace("_", ""))
    except ValueError:
        raise LabelCurveError(f"budget {value!r} is not a whole number of rows (or 'all')") from None


def labelled_rows(n_train: int, budget: int, seed: int, recipe: LabelRecipe) -> tuple[list[int], list[int]]:
    """(train rows, dev rows) of SST-2 train for `budget` labels and `seed`: the first `budget` rows of the seed's
    permutation, every `dev_every`-th of them dev (at most `max_dev_rows`). Nested across budgets."""
    order = np.random.default_rng(seed).permutation(n_train)[:budget]
    dev_position = (np.arange(budget) % recipe.dev_every == recipe.dev_every - 1)
    dev_position &= np.arange(budget) < recipe.dev_every * recipe.max_dev_rows
    if not dev_position.any():  # a budget below dev_every: its last row
        dev_position[-1] = True
    return order[~dev_position].tolist(), order[dev_position].tolist()


@dataclass(frozen=True)
class RunSpec:
    """One network run of the experiment."""

    model: str
    init: str
    budget: int
    seed: int

    @property
    def row(self) -> str:
        """The run's label in the report: model, start and label budget."""
        return f"{self.model} {self.init} n={self.budget}"

    def folder(self, runs_dir: Path, profile: str, tag: str = "") -> Path:
        """`RUNS/labels-PROFILE/MODEL-INIT-nBUDGET-seedS[TAG]` (the experiment's folder named by `run_folder`;
        `tag`: `LabelRecipe.tag`)."""
        name = f"{self.model}-{self.init}-n{self.budget}-seed{self.seed}{tag}"
        return run_folder("labels", profile, runs=runs_dir) / name


def run_plan(models: Sequence[CurveModel], budgets: Sequence[int], seeds: int, first_seed: int = 0) -> list[RunSpec]:
    """Every run: model, then init, then budget (small first), then seed (first_seed .. first_seed + seeds - 1)."""
    return [RunSpec(m.name, init, n, s) for m in models for init in INITS for n in budgets
            for s in seed_range(seeds, first_seed)]


def seed_range(seeds: int, first_seed: int = 0) -> range:
    """The seeds of every point. A later first seed gives fresh draws of rows and initialisations: a check on
    seeds that played no part in choosing the recipe (benchmarks/README.md's confirmatory runs)."""
    return range(first_seed, first_seed + seeds)


# ----------------------------------------------------------------------------- one run


def _starting_point(model: CurveModel, profile_spec: Any, runs_dir: Path, data_dir: Any, source: str) -> dict[str, Any]:
    """{config, tokenizer, described, arch, build}: what every run of `model` starts from. `build(seed, init,
    dropout, pooling)` returns a fresh classifier (pretrained weights or random ones of the same shape).

    The pretrained value is read as `bertcourse finetune` reads it (its `_starting_point`): the course's
    checkpoint, or a transformers one (a hub id or a `save_pretrained` folder) with its own tokenizer and its
    scratch twin initialised by transformers (`hf_checkpoints.random_like`); the arch is the checkpoint's.
    """
    from bertcourse.classifier import build_classifier
    from bertcourse.config import ModelConfig
    from bertcourse.hf_checkpoints import random_like
    from bertcourse.model import build_model
    from bertcourse.training.finetune import FinetuneOptions
    from bertcourse.training.finetune import _starting_point as finetune_start

    pretrained = model.pretrained or pretraining_folder(model.arch, profile_spec.name, runs=runs_dir)
    own_arch = model.pretrained is None or model.arch_given  # else read from the checkpoint
    options = FinetuneOptions(arch=model.arch if own_arch else None, init="pretrained",
                              profile=profile_spec.name, pretrained=pretrained, data_dir=data_dir, source=source,
                              progress=False)
    config_dict, tokenizer, start = finetune_start(options, profile_spec, data_dir, source)
    hf = start.get("info")  # a transformers checkpoint's description, None for the course's models
    config = None if hf is not None else ModelConfig.from_dict(config_dict)

    def build(seed: int, init: str, dropout: float, pooling: str | None = None) -> Any:
        torch.manual_seed(seed)
        if hf is not None:  # every run fine-tunes its own copy of the loaded weights
            encoder = copy.deepcopy(start["encoder"]) if init == "pretrained" else random_like(hf)
        else:
            encoder = build_model(config)
            if init == "pretrained":
                encoder.load_state_dict(start["state"])
        return build_classifier(encoder, "full", pooling=pooling, dropout=dropout)

    return {"config": config_dict, "tokenizer": tokenizer, "described": start["described"], "info": hf,
            "arch": hf["arch"] if hf is not None else config.arch, "build": build}


def _starting_points(models: Sequence[CurveModel], profile_spec: Any, runs_dir: Path, data_dir: Any,
                     source: str) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Each model's `_starting_point`, and {name: why} of those left out because the hub could not be reached:
    one notice line for all of them, and the rest of the experiment runs (refused if none is left)."""
    from bertcourse.hf_checkpoints import HubUnreachable

    starts, skipped = {}, {}
    for m in models:
        try:
            starts[m.name] = _starting_point(m, profile_spec, runs_dir, data_dir, source)
        except HubUnreachable as exc:
            skipped[m.name] = str(exc)
    if skipped and not starts:
        raise LabelCurveError("no model could be loaded: " + "; ".join(skipped.values()))
    if skipped:
        print(f"notice: left out {', '.join(skipped)} (the hub could not be reached: {next(iter(skipped.values()))})")
    return starts, skipped


def _pretraining_cost(model: CurveModel, start: dict[str, Any], course: Any) -> dict[str, Any]:
    """What the model's pretraining cost, as `compare` reports it: a course run's counted tokens and FLOPs, a
    transformers checkpoint's estimate from its paper's recipe (course.yml's `public_checkpoints`; not known for
    others)."""
    from bertcourse.training.compare import pretraining_cost, public_cost, public_entry
    from bertcourse.training.finetune import read_pretrained

    select_prob = course.masking.select_prob
    if start["info"] is not None:
        known = public_entry(model.name, course) or public_entry(str(model.pretrained), course)
        return public_cost(known[1] if known else None, start["info"], select_prob)
    path = Path(start["described"]["path"])
    return pretraining_cost(path.parent, read_pretrained(path)[0], select_prob)


def _dev_scores(model: Any, ids: list[list[int]], labels: torch.Tensor, device: torch.device) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) on the dev rows."""
    from bertcourse.training.finetune import predict_rows

    probabilities = torch.from_numpy(predict_rows(model, ids, device))
    picked = probabilities[torch.arange(len(labels)), labels].clamp(min=1e-12)
    return float((probabilities.argmax(1) == labels).float().mean()), float(-picked.log().mean())


def train_with_dev(model: Any, train: tuple[list[list[int]], torch.Tensor], dev: tuple[list[list[int]], torch.Tensor],
                   *, learning_rate: float, batch_size: int, weight_decay: float, warmup_fraction: float,
                   recipe: LabelRecipe, steps_cap: int, seed: int, device: torch.device, precision: str = "auto",
                   progress: bool = False) -> dict[str, Any]:
    """Fine-tune `model` on `train` (token rows, labels), early-stopped on `dev`; the best dev weights are left
    in `model`. Returns the dev curve, the planned steps and the step chosen. Sees no validation data."""
    from bertcourse.classifier import trainable_parameters
    from bertcourse.progress import progress_bar
    from bertcourse.training.devices import DeviceRows, autocast_dtype
    from bertcourse.training.loop import TrainStep
    from bertcourse.training.optim import adamw, layerwise_lr_scale, linear_schedule

    train_ids, train_labels = train
    rows = DeviceRows(train_ids, device, labels=train_labels)  # padded once, on the device: a step indexes them
    planned = min(recipe.max_epochs * math.ceil(len(train_ids) / batch_size), steps_cap)
    check_every = max(1, math.ceil(planned / recipe.evaluations))
    # the course's one training step: autocast, fp16 loss scaling, clipping after unscaling, the schedule
    lr_scale = layerwise_lr_scale(model, recipe.layer_decay) if recipe.layer_decay != 1 else None
    train_step = TrainStep(adamw(model, learning_rate, weight_decay, lr_scale=lr_scale),
                           [p for _, p in trainable_parameters(model)],
                           device=device, dtype=autocast_dtype(device, precision), grad_clip=1.0,
                           schedule=linear_schedule(planned, max(1, int(warmup_fraction * planned))))
    # LP-FT: the head learns first on fixed features; frozen after the optimizer is built, which holds every parameter
    frozen_steps = round(recipe.frozen_fraction * planned)
    _freeze_encoder(model, frozen_steps > 0)
    generator = torch.Generator().manual_seed(seed)
    curve: dict[str, list] = {"step": [], "dev_accuracy": [], "dev_loss": []}
    best: tuple[float, float] | None = None
    best_state, best_step, waited, step = None, 0, 0, 0
    bar = progress_bar(total=planned, desc="fine-tune", disable=not progress, leave=False)
    while step < planned and waited < recipe.patience:
        order = torch.randperm(len(train_ids), generator=generator).tolist()
        for start in range(0, len(order), batch_size):
            index = order[start : start + batch_size]
            model.train()
            with train_step.autocast():
                loss = model(**rows.batch(index)).loss
            train_step.backward(loss)
            train_step.step()
            step += 1
            bar.update(1)
            if step == frozen_steps:
                _freeze_encoder(model, False)
            if step % check_every == 0 or step == planned:
                accuracy, dev_loss = _dev_scores(model, *dev, device)
                curve["step"].append(step)
                curve["dev_accuracy"].append(accuracy)
                curve["dev_loss"].append(dev_loss)
                if best is None or (accuracy, -dev_loss) > best:
                    best, best_step, waited = (accuracy, -dev_loss), step, 0
                    best_state = copy.deepcopy(model.state_dict())
                elif step > frozen_steps:  # patience counts once the whole model trains
                    waited += 1
            if step >= planned or waited >= recipe.patience:
                break
    bar.close()
    _freeze_encoder(model, False)  # an early stop inside the frozen steps: the model is handed back whole
    if best_state is not None:
        model.load_state_dict(best_state)
    return {"planned_steps": planned, "frozen_steps": frozen_steps, "steps_run": step, "selected_step": best_step,
            "check_every": check_every,
            "dev_curve": curve, "stopped_early": step < planned}


def _freeze_encoder(model: Any, frozen: bool) -> None:
    """Stop (or restart) the encoder's learning: a frozen parameter gets no gradient, so AdamW skips it
    (no update, no weight decay) while the head trains."""
    for parameter in model.encoder.parameters():
        parameter.requires_grad_(not frozen)


def _read_run(folder: Path, key: str) -> dict | None:
    """A finished run's metrics (with its predictions) or None; refused when it holds other settings."""
    path = folder / "metrics.json"
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text())
        predicted = np.loadtxt(folder / "predictions.tsv", delimiter="\t", skiprows=1, usecols=(1,), dtype=int,
                               ndmin=1)
    except (OSError, ValueError) as exc:
        raise LabelCurveError(f"{folder}: a damaged run ({type(exc).__name__}: {exc}); delete the folder to run "
                              "it again") from exc
    if saved.get("format") != RUN_FORMAT:
        raise LabelCurveError(f"{path}: not a run of `bertcourse labels`")
    if saved.get("key") != key:
        raise LabelCurveError(f"{folder} holds a run with other settings (key {saved.get('key')}, this run {key}); "
                              "choose another --runs-dir or delete the folder")
    return {**saved, "predicted": predicted}


def _write_run(folder: Path, metrics: dict, predicted: np.ndarray) -> None:
    from bertcourse.folders import write_atomic

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").unlink(missing_ok=True)  # unfinished until rewritten below
    write_atomic(folder / "predictions.tsv", "index\tprediction\n" + "".join(f"{i}\t{int(p)}\n"
                                                                           for i, p in enumerate(predicted)))
    write_atomic(folder / "metrics.json", json.dumps(metrics, indent=1))


# ----------------------------------------------------------------------------- the experiment


def tfidf_predictions(sentences: list[str], labels: list[int], validation: list[str]) -> np.ndarray:
    """TF-IDF + LR fitted on the labelled rows; a single-class sample predicts that class (LR needs two)."""
    from bertcourse.evaluation import fit_tfidf_baseline

    if len(set(labels)) < 2:
        return np.full(len(validation), labels[0])
    return np.asarray(fit_tfidf_baseline(sentences, labels).predict(validation), dtype=int)


def curve_row(name: str, kind: str, budget: int, labels: np.ndarray, predicted: np.ndarray, counts: np.ndarray,
         **extra: Any) -> dict[str, Any]:
    """One row of a curve's report: its name, kind (pretrained, scratch, tfidf), budget, `extra` fields and the
    accuracy of each seed's predictions ([K, n]) with their mean, sd and seed-averaged interval."""
    from bertcourse.stats import seed_averaged_interval

    per_seed = (predicted == labels[None]).mean(1).tolist()
    accuracy = {"per_seed": per_seed, "mean": float(np.mean(per_seed)),
                "sd": float(np.std(per_seed, ddof=1)) if len(per_seed) > 1 else None,
                "interval": seed_averaged_interval(predicted == labels[None], counts)}
    return {"name": name, "kind": kind, "budget": budget, **extra, "accuracy": accuracy}


RESULTS_FIELDS = {
    "format": f"'{LABELS_FORMAT}'",
    "profile": "the course.yml profile (model shapes, tokenizer, finetune block)",
    "budgets": "labelled SST-2 train rows per point (train + dev), sorted",
    "seeds": "seeds per point (first_seed .. first_seed + seeds - 1); a seed draws the rows and initialises the run",
    "first_seed": "the first of them (0 unless --first-seed)",
    "skipped": "{name: why} of each model left out because the hub could not be reached (offline)",
    "models": "name, arch, pretrained source and pretraining cost of each model (compare's: counted for the course's "
              "runs, the paper's recipe for a public checkpoint, an estimate said so)",
    "recipe": "LabelRecipe, the finetune block's numbers used, and the step cap",
    "validation_sentences": "SST-2 validation sentences every run is scored on once (872)",
    "rows": "one per model x init x budget and per TF-IDF budget: kind (pretrained, scratch, tfidf), accuracy "
            "{per_seed, mean, sd, interval}, train_rows/dev_rows, selected_step and planned_steps per seed, folders",
    "tests": "paired tests per budget (pretrained vs scratch, pretrained vs TF-IDF): difference, interval, p, p_holm",
    "statistics": "how the interval and the tests are computed",
    "timing": "wall seconds (pretraining, runs, total)",
    "fields": "this description",
}


def label_curve(profile: str | None = None, budgets: Sequence[int | str] = DEFAULT_BUDGETS, seeds: int = 3,
                models: Sequence[CurveModel | str] = COURSE_MODELS, out: str | Path | None = None, *,
                first_seed: int = 0,
                recipe: LabelRecipe | None = None, runs_dir: str | Path | None = None,
                data_dir: str | Path | None = None, source: str = "auto", device: str | None = None,
                precision: str = "auto", progress: bool = True,
                after_run: Callable[[RunSpec, bool], None] | None = None) -> dict[str, Any]:
    """Run (or resume) the experiment and write its report; returns results.json's content.

    `after_run(spec, reused)` is called after every network run (a seam for notebooks and for tests that stop
    the experiment part-way).
    """
    from bertcourse.classifier import POOLINGS
    from bertcourse.course import load_course, select_profile
    from bertcourse.data import column, load_sst2
    from bertcourse.progress import progress_bar
    from bertcourse.stats import ALPHA, BOOTSTRAP_RESAMPLES, holm, paired_seed_bootstrap, sentence_resamples
    from bertcourse.training.compare import STATISTICS_INTERVAL, STATISTICS_TEST, ensure_pretrained
    from bertcourse.training.data_efficiency_report import write_results
    from bertcourse.training.devices import pick_device
    from bertcourse.training.finetune import encode_sst2, predict_rows, run_key
    from bertcourse.training.optim import check_layer_decay

    began = time.perf_counter()
    recipe = recipe or LabelRecipe()
    if seeds < 1:
        raise LabelCurveError(f"--seeds must be at least 1, got {seeds}")
    if first_seed < 0:
        raise LabelCurveError(f"--first-seed must be 0 or more, got {first_seed}")
    if recipe.dev_every < 2 or recipe.max_dev_rows < 1 or recipe.patience < 1 or recipe.evaluations < 1:
        raise LabelCurveError(f"recipe {recipe}: dev_every >= 2, max_dev_rows, patience and evaluations >= 1")
    if not 0 <= recipe.frozen_fraction < 1:
        raise LabelCurveError(f"--frozen-fraction must be at least 0 and below 1, got {recipe.frozen_fraction}")
    try:
        check_layer_decay(recipe.layer_decay, "--layer-decay")
    except ValueError as exc:
        raise LabelCurveError(str(exc)) from None
    if recipe.pooling is not None and recipe.pooling not in POOLINGS:
        raise LabelCurveError(f"--pooling must be one of {', '.join(POOLINGS)}, got {recipe.pooling!r}")
    if recipe.learning_rate is not None and not recipe.learning_rate > 0:
        raise LabelCurveError(f"--learning-rate must be positive, got {recipe.learning_rate}")
    course = load_course()
    models = [m if isinstance(m, CurveModel) else parse_model(m, course.public_checkpoints) for m in models]
    if len({m.name for m in models}) != len(models) or not models:
        raise LabelCurveError(f"models need distinct names, got {[m.name for m in models]}")
    profile_spec = select_profile(profile, course)  # the one look-up of the profile; passed down from here
    profile = profile_spec.name
    spec = profile_spec.finetuning()
    out = Path(out) if out is not None else default_out(profile, recipe)
    runs_dir = Path(runs_dir) if runs_dir is not None else default_runs_dir()  # $BERTCOURSE_RUNS, else runs/
    train_table = load_sst2("train", data_dir, source)
    budgets = parse_budgets(budgets, len(train_table))
    steps_cap = recipe.steps_cap(spec.epochs, spec.train_rows, spec.batch_size)
    learning_rate = recipe.learning_rate or spec.learning_rate["full"]

    for m in models:  # the course's checkpoints, pretrained first when missing (as compare does)
        if m.pretrained is None:
            ensure_pretrained(m.arch, profile, runs_dir, data_dir=data_dir, source=source, device=device,
                              progress=progress, profile_spec=profile_spec)
    pretrained_seconds = time.perf_counter() - began
    starts, skipped = _starting_points(models, profile_spec, runs_dir, data_dir, source)
    models = [replace(m, arch=starts[m.name]["arch"]) for m in models if m.name in starts]  # a checkpoint's own arch
    costs = {m.name: _pretraining_cost(m, starts[m.name], course) for m in models}
    everything = replace(spec, train_rows=None)  # all 67,349 rows encoded once per tokenizer
    tokenizer_digest = {name: _tokenizer_digest(s["tokenizer"]) for name, s in starts.items()}
    encoded: dict[str, Any] = {}
    for m in models:
        digest = tokenizer_digest[m.name]
        if digest not in encoded:
            encoded[digest] = encode_sst2(starts[m.name]["tokenizer"], everything, data_dir=data_dir, source=source)
        starts[m.name]["data"] = encoded[digest]
    device_ = pick_device(device)

    plan = run_plan(models, budgets, seeds, first_seed)
    done: dict[RunSpec, dict] = {}
    by_name = {m.name: m for m in models}
    with progress_bar(total=len(plan), desc=f"labels {profile}", unit="run", disable=not progress) as bar:
        for number, run in enumerate(plan, 1):
            model, start = by_name[run.model], starts[run.model]
            data = start["data"]
            train_rows, dev_rows = labelled_rows(len(data.train_ids), run.budget, run.seed, recipe)
            settings = {"format": RUN_FORMAT, "model": run.model, "arch": model.arch, "init": run.init,
                        "budget": run.budget, "seed": run.seed, "profile": profile, "finetune": asdict(spec),
                        "recipe": recipe.settings(), "steps_cap": steps_cap, "model_config": start["config"],
                        "sst2_train_rows": len(data.train_ids), "tokenizer": tokenizer_digest[run.model],
                        "pretrained": start["described"] if run.init == "pretrained" else None}
            key = run_key(settings)
            folder = run.folder(runs_dir, profile, recipe.tag)
            finished = _read_run(folder, key)
            if finished is None:
                classifier = start["build"](run.seed, run.init, spec.dropout, recipe.pooling).to(device_)
                started = time.perf_counter()
                trained = train_with_dev(
                    classifier, (_take(data.train_ids, train_rows), data.train_labels[train_rows]),
                    (_take(data.train_ids, dev_rows), data.train_labels[dev_rows]),
                    learning_rate=learning_rate, batch_size=spec.batch_size,
                    weight_decay=spec.weight_decay, warmup_fraction=spec.warmup_fraction, recipe=recipe,
                    steps_cap=steps_cap, seed=run.seed, device=device_, precision=precision)
                predicted = predict_rows(classifier, data.validation_ids, device_).argmax(1)
                finished = {"format": RUN_FORMAT, "key": key, "settings": settings, "train_rows": len(train_rows),
                            "dev_rows": len(dev_rows), **trained,
                            "train_seconds": round(time.perf_counter() - started, 2)}
                _write_run(folder, finished, predicted)
                finished["predicted"] = predicted
                reused = False
            else:
                reused = True
            done[run] = {**finished, "folder": str(folder)}
            accuracy = float((finished["predicted"] == data.validation_labels.numpy()).mean())
            bar.write(f"[{number}/{len(plan)}] {run.row} seed {run.seed}: accuracy {accuracy:.3f} "
                      f"({'reused' if reused else str(finished['train_seconds']) + ' s'}, step "
                      f"{finished['selected_step']} of {finished['planned_steps']} chosen on {finished['dev_rows']} "
                      "dev rows)")
            bar.update(1)
            if after_run is not None:
                after_run(run, reused)
    runs_seconds = time.perf_counter() - began - pretrained_seconds

    first = starts[models[0].name]["data"]
    labels = first.validation_labels.numpy()
    counts = sentence_resamples(len(labels))
    sentences, train_labels = column(train_table, "sentence"), column(train_table, "label")
    rows, correct = [], {}
    for n in budgets:
        predicted = []
        for s in seed_range(seeds, first_seed):
            chosen = sum(labelled_rows(len(sentences), n, s, recipe), [])
            predicted.append(tfidf_predictions([sentences[i] for i in chosen], [train_labels[i] for i in chosen],
                                                first.validation_sentences))
        predicted = np.stack(predicted)
        correct[("TF-IDF", n)] = predicted == labels[None]
        rows.append(curve_row(f"TF-IDF + LR n={n}", "tfidf", n, labels, predicted, counts, model="TF-IDF",
                         train_rows=n, dev_rows=0))
    for m in models:
        for init in INITS:
            for n in budgets:
                runs = [done[RunSpec(m.name, init, n, s)] for s in seed_range(seeds, first_seed)]
                predicted = np.stack([r["predicted"] for r in runs])
                correct[(m.name, init, n)] = predicted == labels[None]
                rows.append(curve_row(f"{m.name} {init} n={n}", init, n, labels, predicted, counts, model=m.name,
                                 arch=m.arch, train_rows=runs[0]["train_rows"], dev_rows=runs[0]["dev_rows"],
                                 selected_step=[r["selected_step"] for r in runs],
                                 planned_steps=[r["planned_steps"] for r in runs],
                                 stopped_early=[r["stopped_early"] for r in runs],
                                 train_seconds=[r["train_seconds"] for r in runs],
                                 folders=[r["folder"] for r in runs]))
    pairs = [((m.name, "pretrained", n), (m.name, "scratch", n), "pretrained vs scratch") for m in models
             for n in budgets]
    pairs += [((m.name, "pretrained", n), ("TF-IDF", n), "pretrained vs TF-IDF") for m in models for n in budgets]
    tests = [{"kind": kind, "model": a[0], "budget": a[-1], "a": " ".join(map(str, a)), "b": " ".join(map(str, b)),
              **paired_seed_bootstrap(correct[a], correct[b], counts)} for a, b, kind in pairs]
    for test, adjusted in zip(tests, holm([t["p"] for t in tests])):
        test["p_holm"] = adjusted

    results = {
        "format": LABELS_FORMAT, "profile": profile, "budgets": budgets, "seeds": seeds, "first_seed": first_seed,
        "skipped": skipped,
        "models": [{"name": m.name, "arch": m.arch, "pretrained": str(m.pretrained or runs_dir /
                                                                      f"pretrain-{m.arch}-{profile}"),
                    "pretraining": costs[m.name]} for m in models],
        "recipe": {**asdict(recipe), "steps_cap": steps_cap, "learning_rate": learning_rate,
                   "batch_size": spec.batch_size, "weight_decay": spec.weight_decay,
                   "warmup_fraction": spec.warmup_fraction, "head_dropout": spec.dropout,
                   "max_seq_len": spec.max_seq_len, "regime": "full"},
        "validation_sentences": len(labels),
        "rows": rows, "tests": tests,
        "statistics": {"interval": STATISTICS_INTERVAL, "test": STATISTICS_TEST,
                       "bootstrap_resamples": BOOTSTRAP_RESAMPLES, "alpha": ALPHA},
        "timing": {"pretraining_seconds": round(pretrained_seconds, 1), "runs_seconds": round(runs_seconds, 1),
                   "total_seconds": round(time.perf_counter() - began, 1)},
        "fields": RESULTS_FIELDS,
    }
    write_results(results, out)
    return results


def _take(rows: list, index: list[int]) -> list:
    return [rows[i] for i in index]


def _tokenizer_digest(tokenizer: Any) -> str:
    import hashlib

    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else json.dumps(tokenizer.get_vocab(), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_results(folder: str | Path) -> dict[str, Any]:
    """results.json of a finished `bertcourse labels` (its folder or the file), checked to be one."""
    return read_results(folder, LABELS_FORMAT, "labels", LabelCurveError)


def labels_command(args: Any) -> int:
    """`bertcourse labels`: the experiment end to end; prints the table and where the report is."""
    from bertcourse.training.data_efficiency_report import curve_table

    recipe = LabelRecipe(**{k: v for k, v in (("max_steps", args.max_steps), ("patience", args.patience),
                                              ("max_epochs", args.max_epochs),
                                              ("learning_rate", args.learning_rate), ("pooling", args.pooling),
                                              ("frozen_fraction", args.frozen_fraction),
                                              ("layer_decay", args.layer_decay)) if v is not None})
    budgets = [b for part in args.budgets for b in part.split(",") if b.strip()] if args.budgets else DEFAULT_BUDGETS
    results = label_curve(args.profile, budgets, seeds=args.seeds, first_seed=args.first_seed,
                          models=args.model or COURSE_MODELS, out=args.out,
                          recipe=recipe, runs_dir=args.runs_dir, data_dir=args.data_dir, source=args.source,
                          device=args.device, precision=args.precision, progress=not args.no_progress)
    out = Path(args.out) if args.out else default_out(results["profile"], recipe)
    print(curve_table(results))
    print(f"wrote results.json, results.md and accuracy_vs_labels.png in {out} "
          f"({results['timing']['total_seconds']:.0f} s)")
    return 0


__all__ = [
    "COURSE_MODELS", "CurveModel", "DEFAULT_BUDGETS", "LABELS_FORMAT", "LabelCurveError", "LabelRecipe", "RunSpec",
    "default_out", "label_curve", "labelled_rows", "labels_command", "load_results", "parse_budgets", "parse_model",
    "run_plan", "seed_range", "tfidf_predictions", "train_with_dev", "curve_row",
]

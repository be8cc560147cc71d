"""The course's headline experiment: the tiny BERT against its parameter-matched GPT on SST-2, as a paper reports it.

`compare(profile)` (and `bertcourse compare`) runs everything the table needs and writes `results/sst2-PROFILE/`:

1. pretraining of both models, unless `RUNS/pretrain-ARCH-PROFILE/metrics.json` says it finished (a
   checkpoint without it is resumed);
2. every fine-tuning run: {bert, gpt} x {full, probe, lora} x {pretrained, scratch} x seeds (the profile's
   `finetune.seeds` unless given), SST-2 encoded once per tokenizer. Each run is a `bertcourse.training.finetune`
   folder; a finished one is reused through its settings key, so a killed compare resumes where it
   stopped, and a folder holding other settings is refused with its path;
3. two baselines on the same training rows: the majority class and TF-IDF + logistic regression
   (`bertcourse.evaluation.fit_tfidf_baseline`, unigrams, the lesson 5 recipe);
4. optionally (`public=`, `--public`), the published checkpoints of course.yml's `public_checkpoints`
   (BERT-Tiny, BERT-Mini, Pythia-14M) or any transformers checkpoint, fine-tuned by exactly the same runs
   with their own tokenizers (`bertcourse.hf_checkpoints`): one row per regime, tested against the course's
   pretrained row of the same arch and regime. A hub that cannot be reached leaves them out with ONE notice;
5. the statistics, the report and three figures.

The statistics. Every row (model x regime x init) holds K seeds, all scored on the same 872 validation
sentences. Per-seed scores (accuracy, macro-F1, MCC) come from `bertcourse.metrics` through
`finetune.scores`; the row reports their mean and standard deviation over seeds. The row's interval is a
95% percentile bootstrap of the *seed-averaged* accuracy in which only the sentences are resampled:
each of `BOOTSTRAP_RESAMPLES` resamples draws 872 sentence indices with replacement, scores every seed of
the row on those same sentences and averages the K accuracies; the seeds stay fixed. So the interval is
the test-set part of the uncertainty and the sd the training-seed part. All rows share the same
resamples. With K = 1 this is exactly `stats.bootstrap_ci`'s accuracy interval (a test checks that the
two agree); `bertcourse.metrics` itself resamples one prediction vector (or a pair), not K seeds of one
model, which is why the resampling is written apart, in `bertcourse.stats`.

The paired tests (BERT vs GPT at the same regime and init; pretrained vs scratch at the same arch and
regime) are a paired bootstrap over sentences AND seeds: each resample draws the sentences once for both
models (paired) and, for each model on its own, K seeds with replacement from its K runs; the statistic is
the difference of seed-averaged accuracies, centred on the observed difference as in
`stats.paired_bootstrap_test` (p = (1 + #{|d* - d| >= |d|}) / (1 + B)). Why not exact McNemar on the
majority vote of the seeds: the vote is an ensemble, a different (usually better) model than the single
runs the table reports, with ties at even K; and McNemar holds the trained models fixed, so a difference
that one lucky seed makes passes it. Holm's correction over the family of tests is reported beside p.

results.json (`COMPARE_FORMAT`); `RESULTS_FIELDS` documents every top-level field and is written into
the file as `fields`. Figures are drawn on `matplotlib.figure.Figure` objects: no pyplot state is touched.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bertcourse.errors import BertcourseError
from bertcourse.folders import read_results
from bertcourse.run_folders import finetuning_folder, pretraining_folder
from bertcourse.run_folders import runs_dir as default_runs_dir
from bertcourse.stats import (
    ALPHA,
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    holm,
    paired_seed_bootstrap,
    seed_averaged_interval,
    sentence_resamples,
)
from bertcourse.training.compare_report import (
    ARCHS,
    FLOPS_FORMULA,
    INITS,
    REGIMES,
    results_markdown,
    seconds_text,
    write_results,
)

if TYPE_CHECKING:
    from bertcourse.course import Profile

COMPARE_FORMAT = "bertcourse-compare-1"

# Published and measured reference points; GLUE's test labels are hidden, so the published numbers are
# test-set scores from the GLUE server, not comparable point for point with validation accuracy.
ANCHORS = [
    {"name": "TF-IDF + logistic regression (unigrams), all 67,349 SST-2 train phrases", "accuracy": 0.821,
     "split": "validation", "source": "measured here (bertcourse.evaluation.fit_tfidf_baseline; lesson 5)"},
    {"name": "BERT-Tiny (2 layers x 128, 4.4M parameters, pretrained on BooksCorpus + Wikipedia)",
     "accuracy": 0.832, "split": "test", "source": "Turc et al. 2019, Well-Read Students Learn Better, GLUE test"},
    {"name": "BERT-base (12 layers x 768, 110M parameters)", "accuracy": 0.935, "split": "test",
     "source": "Devlin et al. 2019, BERT, Table 1 (GLUE test)"},
]

RESULTS_FIELDS = {
    "format": f"'{COMPARE_FORMAT}'",
    "profile": "the course.yml profile the runs used",
    "seeds": "seeds per row (0 .. seeds-1)",
    "validation_sentences": "SST-2 validation sentences every run is scored on (872)",
    "train_rows": "SST-2 train rows every run (and both baselines) trained on",
    "settings": "the profile's finetune block, bootstrap resamples, alpha, bootstrap seed, runs folder",
    "statistics": "plain-language description of the interval and of the paired test",
    "rows": "one per arch x regime x init: accuracy/macro_f1/mcc {per_seed, mean, sd}, accuracy.interval "
            "[low, high] (seed-averaged, sentences resampled), confusion [[TN, FP], [FN, TP]] summed over seeds, "
            "predicted_positive (each seed's share of sentences predicted positive: 0 or 1 is a collapsed run), "
            "trainable_parameters, parameters, finetune_seconds {per_seed, mean}, runs [{seed, folder, "
            "curve: {step, accuracy}}]",
    "baselines": "majority class and TF-IDF + LR on the same rows, in the rows' shape (one 'seed')",
    "tests": "paired tests: a, b (row names), difference (accuracy of a - b, seed-averaged), interval, p, p_holm",
    "pretraining": "by arch: parameters, body/head parameters, steps, tokens_seen (tokens_recorded: false when "
                   "estimated as steps x batch x max_seq_len), train_seconds, flops, held-out loss and accuracy",
    "flops_formula": "how `pretraining.*.flops` is estimated",
    "anchors": "published and measured reference accuracies (split says which)",
    "public": "the public checkpoints asked for (--public): requested, skipped (hub unreachable), notice, and by "
              "name their pretraining cost: checkpoint, arch, model_type, parameters (counted), body/head "
              "parameters, tokens_seen and flops ESTIMATED from the paper's recipe (recipe, source, data, "
              "differences); their rows are in `rows` with `public` (the name) and `checkpoint` set",
    "timing": "wall seconds of this compare call (fine-tuning, pretraining, total)",
    "fields": "this description",
}


class CompareError(BertcourseError):
    """A comparison that cannot run or a results folder that cannot be read."""


@dataclass(frozen=True)
class RunSpec:
    """One fine-tuning run of the experiment."""

    arch: str
    regime: str
    init: str
    seed: int
    public: str | None = None  # a public checkpoint's name (its rows: `run_public`)

    @property
    def row(self) -> str:
        """The label of its row in the results table: the runs that differ only in seed share it."""
        return f"{self.public or self.arch} {self.regime} {self.init}"

    def folder(self, runs_dir: Path, profile: str) -> Path:
        """`RUNS/finetune-ARCH-REGIME-INIT-PROFILE-seedN`, the name `bertcourse finetune` gives it."""
        return finetuning_folder(self.arch, self.regime, self.init, profile, self.seed, runs=runs_dir)


def run_plan(seeds: int) -> list[RunSpec]:
    """Every run, a row's seeds one after the other (arch, then init, then regime)."""
    return [RunSpec(arch, regime, init, seed) for arch in ARCHS for init in INITS for regime in REGIMES
            for seed in range(seeds)]


# ----------------------------------------------------------------------------- rows of the table


def _spread(values: list[float]) -> dict[str, Any]:
    return {"per_seed": values, "mean": float(np.mean(values)),
            "sd": float(np.std(values, ddof=1)) if len(values) > 1 else None}


def _confusion(labels: np.ndarray, predicted: np.ndarray) -> list[list[int]]:
    """[[TN, FP], [FN, TP]] (rows: true label, columns: prediction), summed over the seeds in `predicted` [K, n]."""
    from bertcourse.metrics import confusion_matrix

    total = np.zeros((2, 2), dtype=int)
    for row in np.atleast_2d(predicted):
        total += confusion_matrix(labels.tolist(), row.tolist(), labels=[0, 1]).numpy().astype(int)
    return total.tolist()


def _row(name: str, labels: np.ndarray, predicted: np.ndarray, per_seed: list[dict], counts: np.ndarray,
         **extra: Any) -> dict[str, Any]:
    """A table row from K seeds' predictions [K, n] and their scores (`finetune.scores` dicts)."""
    correct = predicted == labels[None]
    accuracy = _spread([s["accuracy"] for s in per_seed])
    accuracy["interval"] = seed_averaged_interval(correct, counts)
    return {"name": name, **extra, "accuracy": accuracy, "macro_f1": _spread([s["macro_f1"] for s in per_seed]),
            "mcc": _spread([s["mcc"] for s in per_seed]), "confusion": _confusion(labels, predicted),
            "predicted_positive": [float(np.mean(row == 1)) for row in np.atleast_2d(predicted)]}


# ----------------------------------------------------------------------------- the runs


def ensure_pretrained(arch: str, profile: str, runs_dir: str | Path | None = None, *, data_dir: Any = None,
                      source: str = "auto", device: str | None = None, precision: str = "auto",
                      progress: bool = True, profile_spec: Profile | None = None) -> Path:
    """The pretraining folder of `arch`, pretrained first when its metrics.json is missing (resumed when a
    checkpoint is there: a killed pretraining continues instead of starting over), in `precision` (as
    `bertcourse pretrain --precision`; a resumed run keeps the one it started in, another is refused).
    `profile_spec`: the `Profile` named `profile` when the caller has resolved it (`compare`)."""
    from bertcourse.training.checkpoint import CHECKPOINT_NAME
    from bertcourse.training.pretrain import PretrainOptions, pretrain

    folder = pretraining_folder(arch, profile, runs=runs_dir)
    if not (folder / "metrics.json").is_file():
        resume = (folder / CHECKPOINT_NAME).is_file()
        print(f"{'resuming' if resume else 'running'} the {arch} pretraining in {folder}")
        pretrain(PretrainOptions(arch=arch, profile=profile, out_dir=folder, data_dir=data_dir, source=source,
                                 resume=resume, device=device, precision=precision, progress=progress),
                 profile_spec=profile_spec)
    else:
        from bertcourse.course import given_profile

        _notice_other_length(folder, arch, given_profile(profile, profile_spec))
    return folder


def _notice_other_length(folder: Path, arch: str, profile_spec: Profile) -> None:
    """One line when a finished pretraining is reused whose length is not the profile's (a folder written before
    the profile changed, or by a shorter run): it is used as it is, and the line says how to pretrain anew."""
    steps = steps_run(json.loads((folder / "metrics.json").read_text()))
    wanted = profile_spec.pretrain.max_steps
    if steps is not None and steps != wanted:
        print(f"notice: reusing the {arch} pretraining in {folder}: {steps:,} steps, where profile "
              f"{profile_spec.name} asks for {wanted:,}; move the folder away to pretrain anew")


def steps_run(summary: dict) -> int | None:
    """The steps a pretraining run took, from its metrics.json (None when it recorded no step)."""
    steps = summary.get("history", {}).get("step")
    return steps[-1] if steps else None


def pretraining_cost(folder: Path, saved: dict, select_prob: float) -> dict[str, Any]:
    """What a pretraining run cost (`FLOPS_FORMULA`), from its metrics.json and checkpoint."""
    import torch

    from bertcourse.config import ModelConfig
    from bertcourse.model import build_model

    summary = json.loads((folder / "metrics.json").read_text())
    settings = saved["settings"]
    config = ModelConfig.from_dict(settings["model_config"])
    with torch.device("meta"):  # counting only: no memory, no random draws
        model = build_model(config)
    total = sum(p.numel() for p in model.parameters())
    tables = sum(p.numel() for name, p in model.embeddings.named_parameters() if name.endswith("embedding.weight"))
    head_own = sum(p.numel() for name, p in model.head.named_parameters() if not name.startswith("decoder"))
    body = total - tables - head_own
    head = head_own + config.vocab_size * config.d_model  # the decoder is the token embedding (tied)
    steps = steps_run(summary) or saved["step"]
    tokens = summary.get("tokens_seen")
    recorded = tokens is not None and summary.get("counted_from_step", 0) == 0
    if tokens is None:  # a run written before tokens were recorded: the upper bound of full blocks
        tokens = steps * settings["batch_size"] * config.max_seq_len
    share = select_prob if config.arch == "bert" else 1.0
    return {
        "folder": str(folder), "parameters": summary.get("parameters", total), "body_parameters": body,
        "head_parameters": head, "head_share": share, "steps": steps, "batch_size": settings["batch_size"],
        "tokens_seen": int(tokens), "tokens_recorded": recorded, "train_seconds": summary.get("train_seconds"),
        "flops": 6.0 * tokens * (body + share * head), "precision": summary.get("precision"),
        "heldout_loss": summary["final_eval"]["loss"], "heldout_accuracy": summary["final_eval"]["accuracy"],
    }


def _predicted(folder: Path) -> np.ndarray:
    """The prediction column of a run's predictions.tsv: the same labels whether the run was just trained or
    reused (the probabilities are stored rounded, so argmax on them could flip an exact tie)."""
    return np.loadtxt(folder / "predictions.tsv", delimiter="\t", skiprows=1, usecols=(2,), dtype=int, ndmin=1,
                      comments=None)


def _baselines(data: Any, labels: np.ndarray, counts: np.ndarray, data_dir: Any, source: str,
               course: Any) -> list[dict]:
    """Majority class and TF-IDF + LR, trained on the fine-tuning runs' rows of SST-2 train."""
    from bertcourse.data import column, load_sst2
    from bertcourse.evaluation import fit_tfidf_baseline
    from bertcourse.training.finetune import scores

    train = load_sst2("train", data_dir, source, course)
    sentences = column(train, "sentence")
    train_x = [sentences[i] for i in data.train_rows]
    train_y = data.train_labels.tolist()
    rows = []
    majority = Counter(train_y).most_common(1)[0][0]
    started = time.perf_counter()
    tfidf = fit_tfidf_baseline(train_x, train_y)
    tfidf_pred = np.asarray(tfidf.predict(data.validation_sentences), dtype=int)
    tfidf_seconds = time.perf_counter() - started
    for name, predicted, seconds, trainable in (
        ("majority class", np.full(len(labels), majority), 0.0, 0),
        ("TF-IDF + LR", tfidf_pred, tfidf_seconds, int(tfidf[-1].coef_.size + tfidf[-1].intercept_.size)),
    ):
        per_seed = [scores(labels.tolist(), predicted.tolist())]
        rows.append(_row(name, labels, predicted[None], per_seed, counts, arch="baseline", regime=None, init=None,
                         trainable_parameters=trainable, parameters=trainable,
                         finetune_seconds=_spread([round(seconds, 2)])))
    return rows


STATISTICS_INTERVAL = (
    f"95% percentile bootstrap interval of the seed-averaged accuracy: {BOOTSTRAP_RESAMPLES:,} resamples of the "
    "validation sentences drawn with replacement (the same resamples for every row); each resample scores every "
    "seed of the row on the same sentences and averages them; the seeds are held fixed, so the interval is the "
    "test-set part of the uncertainty and the seeds' sd the training part.")
STATISTICS_TEST = (
    "Paired bootstrap over sentences and seeds, two-sided: each resample draws the sentences once for both models "
    "and, for each model separately, its seeds with replacement; the statistic is the difference of the "
    "seed-averaged accuracies, centred on the observed difference; p = (1 + #{|d* - d| >= |d|}) / (1 + B). "
    "Chosen over exact McNemar on the seeds' majority vote because the vote is an ensemble, not the single runs "
    "the table reports (and ties at an even number of seeds), and McNemar holds the trained models fixed: it "
    "ignores the seed-to-seed spread, which for small fine-tuned models is as large as many differences between "
    "rows. With K seeds the bootstrap sees the seed spread through K values only (it underestimates the seed "
    "variance by (K - 1) / K), so with 2-3 seeds the p-values lean optimistic. p_holm: Holm's correction over "
    "all the tests.")


def public_entry(item: str, course: Any) -> tuple[str, Any] | None:
    """(name, entry) of the course.yml public checkpoint that `item` names or gives by its spec (hf:ORG/NAME)
    or by the folder its installed package holds (`hf_checkpoints.public_source`)."""
    from bertcourse.hf_checkpoints import public_source

    if item in course.public_checkpoints:
        return item, course.public_checkpoints[item]
    return next(((name, e) for name, e in course.public_checkpoints.items()
                 if item in (e.spec, public_source(e))), None)


def resolve_public(requested: list[str] | tuple[str, ...], course: Any) -> list[tuple[str, str, Any]]:
    """(name, spec, course.yml entry or None) for each requested name: a name of `public_checkpoints`, `hf:ORG/NAME`
    or a save_pretrained folder; `[]`-like "all" is the caller's (an empty list asks for nothing)."""
    from bertcourse.hf_checkpoints import is_hf_spec, parse_spec, public_source

    chosen = []
    for item in requested:
        known = public_entry(item, course)
        if known is not None:
            name, entry = known
            chosen.append((name, public_source(entry), entry))
        elif is_hf_spec(item):
            chosen.append((parse_spec(item).slug, item, None))
        else:
            raise CompareError(f"--public {item!r}: neither a name in course.yml's public_checkpoints "
                               f"({', '.join(course.public_checkpoints)}) nor hf:ORG/NAME nor a save_pretrained folder")
    return chosen


def public_cost(entry: Any, info: dict[str, Any], select_prob: float) -> dict[str, Any]:
    """A public checkpoint's pretraining cost as `FLOPS_FORMULA` counts the course's, its parameters counted
    from the loaded model and its tokens from the paper's recipe (course.yml): an ESTIMATE, said so. The
    head is the vocab x d_model output matrix (plus BERT's d x d transform), which the base model lacks."""
    config = info["config"]
    d = config.get("hidden_size") or config.get("n_embd")
    vocab = config["vocab_size"]
    body = info["parameters"] - info["embedding_parameters"]
    head = vocab * d + (d * d + 2 * d + vocab if info["arch"] == "bert" else 0)
    share = select_prob if info["arch"] == "bert" else 1.0
    tokens = entry.tokens_seen if entry is not None else None
    return {
        "checkpoint": info["checkpoint"], "arch": info["arch"], "model_type": info["model_type"],
        "revision": info["revision"], "parameters": info["parameters"], "body_parameters": body,
        "head_parameters": head, "head_share": share, "tokens_seen": tokens,
        "flops": 6.0 * tokens * (body + share * head) if tokens else None, "estimate": True,
        "recipe": entry.recipe if entry is not None else "not known (not in course.yml's public_checkpoints)",
        "source": entry.source if entry is not None else None, "data": entry.data if entry is not None else None,
        "differences": entry.differences if entry is not None else None,
    }


def run_public(chosen: list[tuple[str, str, Any]], profile: str, seeds: int, runs_dir: Path, *, spec: Any,
               select_prob: float, data_dir: Any, source: str, device: str | None, precision: str,
               progress: bool, after_run: Callable[[RunSpec, Any], None] | None = None,
               max_steps: int | None = None, profile_spec: Profile | None = None,
               ) -> tuple[dict[str, Any], dict[RunSpec, tuple[dict, np.ndarray, Path]]]:
    """Fine-tune every regime x seed of each public checkpoint exactly as the course's rows (same training rows,
    same 872 sentences, same folders' format). Returns ({"requested", "skipped", "notice", "checkpoints"}, the
    finished runs by RunSpec); hub checkpoints that cannot be reached are skipped with ONE notice line.
    `max_steps` stops each run early (tests), as `FinetuneOptions.max_steps`; `profile_spec`: the `Profile`
    named `profile` when the caller has resolved it (`compare`)."""
    from bertcourse.hf_checkpoints import HubUnreachable, load_pretrained
    from bertcourse.training.finetune import FinetuneOptions, default_out_dir, encode_sst2, finetune

    summary: dict[str, Any] = {"requested": [name for name, _, _ in chosen], "skipped": [], "notice": None,
                               "checkpoints": {}}
    finished: dict[RunSpec, tuple[dict, np.ndarray, Path]] = {}
    reasons = []
    for name, checkpoint, entry in chosen:
        try:
            _, tokenizer, info = load_pretrained(checkpoint)
        except HubUnreachable as exc:
            summary["skipped"].append(name)
            reasons.append(str(exc))
            continue
        if entry is not None and entry.arch != info["arch"]:
            raise CompareError(f"course.yml public_checkpoints.{name}: arch {entry.arch} but {checkpoint} is a "
                               f"{info['model_type']} ({info['arch']})")
        summary["checkpoints"][name] = public_cost(entry, info, select_prob)
        data = encode_sst2(tokenizer, spec, data_dir=data_dir, source=source)
        for regime in REGIMES:
            for seed in range(seeds):
                run = RunSpec(info["arch"], regime, "pretrained", seed, public=name)
                options = FinetuneOptions(regime=regime, init="pretrained", seed=seed, profile=profile,
                                          pretrained=checkpoint, data_dir=data_dir, source=source, device=device,
                                          precision=precision, progress=False, max_steps=max_steps)
                options.out_dir = runs_dir / default_out_dir(options, profile).name
                result = finetune(options, data=data, profile_spec=profile_spec)
                finished[run] = (result.metrics, _predicted(options.out_dir), options.out_dir)
                if progress:
                    how = "reused" if result.model is None else f"{result.metrics['train_seconds']:.0f} s"
                    print(f"{run.row} seed {seed}: accuracy {result.metrics['accuracy']:.3f} ({how}) {options.out_dir}")
                if after_run is not None:
                    after_run(run, result)
    if summary["skipped"]:
        summary["notice"] = (f"notice: the public checkpoints {', '.join(summary['skipped'])} are left out "
                             f"({reasons[0].split(': ', 1)[-1]})")
        print(summary["notice"])
    return summary, finished


def compare(profile: str | None = None, seeds: int | None = None, out: str | Path | None = None, *,
            runs_dir: str | Path | None = None, data_dir: str | Path | None = None, source: str = "auto",
            device: str | None = None, precision: str = "auto", progress: bool = True,
            after_run: Callable[[RunSpec, Any], None] | None = None,
            public: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Run (or resume) the whole experiment and write its report; returns results.json's content.

    `public`: public checkpoints to add as rows (names of course.yml's `public_checkpoints`, hf:ORG/NAME or
    save_pretrained folders; none by default, so that an offline compare never reaches for the hub).

    `runs_dir` holds the pretraining and fine-tuning folders (tests pass a temporary one); `out` the report
    (default results/sst2-PROFILE). `after_run(spec, result)` is called after every fine-tuning run, reused
    or trained (a seam for a notebook's own display, and for tests that stop a compare part-way).
    """
    from bertcourse.progress import progress_bar
    from bertcourse.training.checkpoint import CHECKPOINT_NAME, load_checkpoint, tokenizer_from_json
    from bertcourse.training.distributed import launched_by_torchrun

    if launched_by_torchrun():  # a second process group in the same torchrun processes hung when tried
        raise BertcourseError("`bertcourse compare` runs on one process: start it without torchrun (its "
                              "pretraining and single fine-tuning runs can use torchrun: "
                              "docs/training-beyond-one-machine.md)")
    from bertcourse.course import load_course, select_profile
    from bertcourse.training.finetune import FinetuneOptions, encode_sst2, finetune

    began = time.perf_counter()
    course = load_course()
    profile_spec = select_profile(profile, course)  # the one look-up of the profile; passed down from here
    profile = profile_spec.name
    spec = profile_spec.finetuning()
    seeds = spec.seeds if seeds is None else seeds
    if seeds < 1:
        raise CompareError(f"--seeds must be at least 1, got {seeds}")
    out = Path(out) if out is not None else Path("results") / f"sst2-{profile}"
    runs_dir = Path(runs_dir) if runs_dir is not None else default_runs_dir()

    folders = {arch: ensure_pretrained(arch, profile, runs_dir, data_dir=data_dir, source=source, device=device,
                                       precision=precision, progress=progress, profile_spec=profile_spec)
               for arch in ARCHS}
    pretrained_seconds = time.perf_counter() - began
    saved = {arch: load_checkpoint(folder) for arch, folder in folders.items()}
    cost = {arch: pretraining_cost(folders[arch], saved[arch], course.masking.select_prob) for arch in ARCHS}
    encoded: dict[str, Any] = {}  # SST-2 encoded once per tokenizer
    for arch in ARCHS:
        if saved[arch]["tokenizer"] not in encoded:
            tokenizer = tokenizer_from_json(saved[arch]["tokenizer"])
            encoded[saved[arch]["tokenizer"]] = encode_sst2(tokenizer, spec, data_dir=data_dir, source=source,
                                                            course=course)
    data = {arch: encoded[saved[arch]["tokenizer"]] for arch in ARCHS}
    del saved  # the checkpoints' optimizer states are not needed any more

    plan = run_plan(seeds)
    finished: dict[RunSpec, tuple[dict, np.ndarray, Path]] = {}
    with progress_bar(total=len(plan), desc=f"compare {profile}", unit="run", disable=not progress) as bar:
        for number, run in enumerate(plan, 1):
            folder = run.folder(runs_dir, profile)
            options = FinetuneOptions(arch=run.arch, regime=run.regime, init=run.init, seed=run.seed,
                                      profile=profile, pretrained=folders[run.arch] / CHECKPOINT_NAME,
                                      out_dir=folder, data_dir=data_dir, source=source, device=device,
                                      precision=precision, progress=False)
            result = finetune(options, data=data[run.arch], profile_spec=profile_spec)
            finished[run] = (result.metrics, _predicted(folder), folder)
            how = "reused" if result.model is None else f"{result.metrics['train_seconds']:.0f} s"
            bar.write(f"[{number}/{len(plan)}] {run.row} seed {run.seed}: accuracy "
                      f"{result.metrics['accuracy']:.3f} ({how}) {folder}")
            bar.update(1)
            if after_run is not None:
                after_run(run, result)
    chosen = resolve_public(list(public), course)
    public_summary, public_runs = run_public(
        chosen, profile, seeds, runs_dir, spec=spec, select_prob=course.masking.select_prob, data_dir=data_dir,
        source=source, device=device, precision=precision, progress=progress, after_run=after_run,
        profile_spec=profile_spec)
    finished.update(public_runs)
    finetuned_seconds = time.perf_counter() - began - pretrained_seconds

    labels = data["bert"].validation_labels.numpy()
    counts = sentence_resamples(len(labels))
    rows, correct = [], {}
    for arch in ARCHS:
        for init in INITS:
            for regime in REGIMES:
                runs = [RunSpec(arch, regime, init, seed) for seed in range(seeds)]
                metrics = [finished[r][0] for r in runs]
                predicted = np.stack([finished[r][1] for r in runs])  # [K, n]
                correct[runs[0].row] = predicted == labels[None]
                rows.append(_row(
                    runs[0].row, labels, predicted, metrics, counts, arch=arch, regime=regime, init=init,
                    trainable_parameters=metrics[0]["trainable_parameters"], parameters=metrics[0]["parameters"],
                    finetune_seconds=_spread([m["train_seconds"] for m in metrics]),
                    runs=[{"seed": r.seed, "folder": str(finished[r][2]),
                           "curve": {"step": m["history"]["eval_step"], "accuracy": m["history"]["eval_accuracy"]}}
                          for r, m in zip(runs, metrics)],
                ))
    for name, checkpoint, _ in chosen:
        if name not in public_summary["checkpoints"]:
            continue
        arch = public_summary["checkpoints"][name]["arch"]
        for regime in REGIMES:
            runs = [r for r in public_runs if r.public == name and r.regime == regime]
            metrics = [finished[r][0] for r in runs]
            predicted = np.stack([finished[r][1] for r in runs])
            correct[runs[0].row] = predicted == labels[None]
            rows.append(_row(
                runs[0].row, labels, predicted, metrics, counts, arch=arch, regime=regime, init="pretrained",
                public=name, checkpoint=checkpoint,
                trainable_parameters=metrics[0]["trainable_parameters"], parameters=metrics[0]["parameters"],
                finetune_seconds=_spread([m["train_seconds"] for m in metrics]),
                runs=[{"seed": r.seed, "folder": str(finished[r][2]),
                       "curve": {"step": m["history"]["eval_step"], "accuracy": m["history"]["eval_accuracy"]}}
                      for r, m in zip(runs, metrics)],
            ))
    pairs = [(f"bert {regime} {init}", f"gpt {regime} {init}", "bert vs gpt") for init in INITS for regime in REGIMES]
    pairs += [(f"{arch} {regime} pretrained", f"{arch} {regime} scratch", "pretrained vs scratch")
              for arch in ARCHS for regime in REGIMES]
    pairs += [(f"{name} {regime} pretrained", f"{cost['arch']} {regime} pretrained", "public vs course")
              for name, cost in public_summary["checkpoints"].items() for regime in REGIMES]
    tests = [{"kind": kind, "a": a, "b": b, **paired_seed_bootstrap(correct[a], correct[b], counts)}
             for a, b, kind in pairs]
    for test, adjusted in zip(tests, holm([t["p"] for t in tests])):
        test["p_holm"] = adjusted

    results = {
        "format": COMPARE_FORMAT, "profile": profile, "seeds": seeds, "validation_sentences": len(labels),
        "train_rows": len(data["bert"].train_ids),
        "settings": {"finetune": asdict(spec), "bootstrap_resamples": BOOTSTRAP_RESAMPLES, "alpha": ALPHA,
                     "bootstrap_seed": BOOTSTRAP_SEED, "runs_dir": str(runs_dir)},
        "statistics": {"interval": STATISTICS_INTERVAL, "test": STATISTICS_TEST},
        "rows": rows,
        "baselines": _baselines(data["bert"], labels, counts, data_dir, source, course),
        "tests": tests,
        "pretraining": cost,
        "flops_formula": FLOPS_FORMULA,
        "anchors": ANCHORS,
        "public": public_summary,
        "fields": RESULTS_FIELDS,
        "timing": {"pretraining_seconds": round(pretrained_seconds, 1),
                   "finetuning_seconds": round(finetuned_seconds, 1),
                   "total_seconds": round(time.perf_counter() - began, 1)},  # the report and figures: ~5 s more
    }
    write_results(results, out)
    return results


def load_results(folder: str | Path) -> dict[str, Any]:
    """results.json of a finished compare (`folder` or the file itself), checked to be one."""
    return read_results(folder, COMPARE_FORMAT, "compare", CompareError)


def compare_command(args: Any) -> int:
    """`bertcourse compare`: the experiment end to end; prints the table and where the report is."""
    from bertcourse.course import load_course

    public = getattr(args, "public", None)
    if public is not None and not public:  # `--public` alone: every checkpoint course.yml lists
        public = list(load_course().public_checkpoints)
    results = compare(args.profile, seeds=args.seeds, out=args.out, runs_dir=args.runs_dir, data_dir=args.data_dir,
                      source=args.source, device=args.device, precision=args.precision,
                      progress=not args.no_progress, public=public or ())
    out = Path(args.out) if args.out else Path("results") / f"sst2-{results['profile']}"
    table = results_markdown(results).split("\n## ")[0].split("\n", 2)[2]
    print(table.rstrip())
    print(f"wrote results.json, results.md, accuracy.png, learning_curves.png and confusion_matrices.png in {out} "
          f"({seconds_text(results['timing']['total_seconds'])})")
    return 0


__all__ = [
    "ANCHORS", "COMPARE_FORMAT", "CompareError", "RESULTS_FIELDS", "RunSpec", "compare", "compare_command",
    "ensure_pretrained", "load_results", "pretraining_cost", "public_cost", "resolve_public", "run_plan",
    "run_public",
]

"""What came after BERT, measured on the course's own models (lessons 6 and 7): one function trains any variant.

`run_variant(name)` pretrains one of `VARIANTS` on the course corpus for a budget of steps with the
course's pieces (packing, dynamic masking, AdamW with the profile's warm-up and cosine schedule,
autocast where it pays, a tqdm bar) and measures it three ways:

- held-out masked LM loss / accuracy on the course's 500 held-out sentences, masks fixed (where the
  model has an MLM head; ELECTRA's is its generator's, reported apart);
- the auxiliary task's held-out accuracy with a 95% bootstrap interval: NSP / SOP on the pairs of
  held-out WikiText articles, never trained on; ELECTRA's replaced-token detection on the held-out rows;
- SST-2 through a linear probe on the frozen encoder: standardised [CLS] and mean-pooled vectors of a
  fixed subset of SST-2 train (`finetune.encode_sst2`, `finetune.pooled_features`), logistic regression
  with C chosen by 3-fold cross-validation on those rows (as `benchmarks/transfer.py`'s study), scored
  on the 872 validation sentences with a 95% bootstrap interval (`finetune.scores`).

ELECTRA is compared at matched compute: the FLOPs of one training step (forward and backward, counted
by `bertcourse.training.flops`) of ELECTRA and of the MLM BERT are measured on the same batch, and ELECTRA
trains `round(steps * flops_mlm / flops_electra)` steps, `steps` being the MLM budget.

Each run is kept in `runs/after-bert/VARIANT-PROFILE-KEY/` (`result.json`, `model.pt`), KEY hashing
every setting that decides its result, so a lesson that runs again reads its results at once. This
module reads course.yml (the profile's sizes, `lesson_sizes["lesson06-after-bert"]`), as the commands do.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertcourse import metrics, stats
from bertcourse.after_bert.electra import Electra, rtd_evaluate
from bertcourse.after_bert.sentence_objectives import (
    BertWithPairHead,
    PairData,
    PairMLM,
    pair_predictions,
    pair_rows,
    span_documents,
    with_unlabelled,
)
from bertcourse.after_bert.sentence_pairs import documents_from_lines
from bertcourse.after_bert.variants import VariantSpec, build_variant
from bertcourse.classifier import build_classifier
from bertcourse.config import ModelConfig
from bertcourse.course import load_course, select_profile
from bertcourse.data import Corpus, load_corpus, wikitext_lines
from bertcourse.errors import BertcourseError
from bertcourse.model import BertForMLM, build_model, count_parameters
from bertcourse.prepare_data import profile_tokenizer
from bertcourse.progress import progress_bar
from bertcourse.run_folders import run_folder, runs_dir
from bertcourse.training.devices import autocast_dtype, pick_device, precision_name, to_device
from bertcourse.training.finetune import SST2Rows, encode_sst2, pooled_features, scores
from bertcourse.training.flops import step_flops
from bertcourse.training.heldout import evaluate, target_blocks, target_losses, unigram_baseline
from bertcourse.training.loop import LossLog, TrainStep
from bertcourse.training.objectives import MaskedLM, Objective
from bertcourse.training.optim import adamw, lr_factor
from bertcourse.training.packing import PackedData, batch_indices, pack_sentences, tokenize, tokenize_prefix

LESSON_ID = "lesson06-after-bert"
RESULT_FORMAT = "bertcourse-after-bert-2"  # 2: per-target losses and per-sentence probe hits kept, `start`
PAIR_SEED = 4321  # the pairs (which B is random / which pair is swapped) are drawn once, the same every run
VARIANTS = {
    "random": "the course BERT untrained: the floor every probe must beat",
    "mlm": "the course BERT, masked LM alone (lesson 3's recipe)",
    "mlm+nsp": "masked LM + next-sentence prediction on span pairs (BERT)",
    "mlm+sop": "masked LM + sentence-order prediction on span pairs (ALBERT)",
    "albert-shared": "cross-layer sharing alone: one block's parameters at every layer, the same compute",
    "albert": "ALBERT: factorised embedding (E = d_model / 4) and cross-layer sharing",
    "rope": "rotary position embeddings in attention instead of the learned position table (ModernBERT)",
    "electra": "ELECTRA: a 1/4-width generator fills the masks, the discriminator labels every token",
}
CONTINUABLE = ("mlm", "mlm+nsp", "mlm+sop")  # the variants of BERT's own shape: they can continue its pretraining


class AfterBertError(BertcourseError):
    """An unknown variant, or a run that cannot be made (e.g. pair tasks without WikiText documents)."""


@dataclass
class VariantResult:
    """One variant's run: what it cost and what it reached (see the module docstring for each measure)."""

    variant: str
    profile: str
    steps: int  # optimizer steps actually trained (ELECTRA: the matched number)
    parameters: int  # distinct parameters of everything trained (ELECTRA: generator + discriminator)
    encoder_parameters: int  # those of the model kept afterwards (what the probe reads)
    flops_per_step: int
    train_seconds: float
    mlm: dict[str, Any] | None  # held-out {"loss", "accuracy", "targets", "loss_sd", "unigram": {"loss", "accuracy"}}
    aux: dict[str, Any] | None  # {"task", "accuracy", "interval", "pairs"} (NSP / SOP)
    rtd: dict[str, float] | None  # ELECTRA's held-out replaced-token detection
    generator_mlm: dict[str, float] | None  # ELECTRA's generator on the held-out masks
    probe: dict[str, dict[str, Any]]  # by pooling ("cls", "mean"): accuracy, accuracy_interval, macro_f1, mcc
    history: dict[str, list]
    settings: dict[str, Any]
    key: str
    out_dir: Path
    start: str = "scratch"  # "scratch", or "pretrained": the run continued the profile's pretrained BERT
    model: nn.Module | None = field(default=None, repr=False)  # None when read back from the run folder

    @property
    def label(self) -> str:
        """The variant's name, with where it started when that was not from scratch."""
        return self.variant if self.start == "scratch" else f"{self.variant} (continued)"

    def summary(self) -> dict[str, Any]:
        """The result as plain JSON data (no model, no per-step history)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("model", "history")}
        return {**data, "out_dir": str(self.out_dir)}


# ----------------------------------------------------------------------------- models


def build_variant_model(variant: str, config: ModelConfig, seed: int = 0) -> nn.Module:
    """The untrained model `variant` trains (`VARIANTS`), from the profile's BERT `config`."""
    if variant not in VARIANTS:
        raise AfterBertError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    torch.manual_seed(seed)
    if variant in ("random", "mlm"):
        return build_model(config)
    if variant in ("mlm+nsp", "mlm+sop"):
        return BertWithPairHead(build_model(config), variant.removeprefix("mlm+"))  # type: ignore[arg-type]
    if variant == "albert-shared":
        return build_variant(config, VariantSpec(share_layers=True))
    if variant == "albert":
        return build_variant(config, VariantSpec(embedding_size=config.d_model // 4, share_layers=True))
    if variant == "rope":
        return build_variant(config, VariantSpec(positions="rope"))
    return Electra(config, seed=seed)


def kept_encoder(model: nn.Module) -> nn.Module:
    """The part of a trained variant that is kept and probed (the BERT, ELECTRA's discriminator)."""
    if isinstance(model, BertWithPairHead):
        return model.bert
    if isinstance(model, Electra):
        return model.discriminator
    return model


def mlm_model(model: nn.Module) -> BertForMLM | None:
    """The part with an MLM head the held-out masks are scored with (ELECTRA: None; see its generator)."""
    if isinstance(model, Electra):
        return None
    return model.bert if isinstance(model, BertWithPairHead) else model  # type: ignore[return-value]


# ----------------------------------------------------------------------------- data


@dataclass
class CourseData:
    """Everything the runs of one profile share: corpus, tokenizer, documents, held-out rows, SST-2 rows."""

    profile: str
    course: Any
    corpus: Any
    tokenizer: Any
    config: ModelConfig
    heldout: list[dict[str, torch.Tensor]]  # the 500 held-out sentences, masked once (fixed seed)
    cache: dict[str, Any] = field(default_factory=dict)

    def packed(self, budget: int) -> PackedData:
        """The corpus's first sentences holding `budget` tokens, packed as `bertcourse pretrain` packs them."""
        if ("packed", budget) not in self.cache:
            ids = tokenize_prefix(self.tokenizer, self.corpus.train, budget).ids
            self.cache[("packed", budget)] = pack_sentences(ids, self.config.max_seq_len, self.tokenizer.cls_token_id,
                                                            self.tokenizer.sep_token_id)
        return self.cache[("packed", budget)]

    def documents(self, heldout_pairs: int) -> tuple[list[list[str]], list[list[str]]]:
        """(training, held-out) WikiText articles: the held-out ones from the end, enough for
        `heldout_pairs` span pairs; the corpus's held-out MLM sentences removed from both."""
        if ("documents", heldout_pairs) not in self.cache:
            lines = wikitext_lines(self.course)
            if not lines:
                raise AfterBertError("NSP / SOP need WikiText articles; the corpus is the synthetic sample "
                                     "(set BERTCOURSE_DATA or go online)")
            excluded = set(self.corpus.heldout)
            documents = [[s for s in doc if s not in excluded]
                         for doc in documents_from_lines(lines, min_words=self.course.corpus.min_words)]
            documents = [doc for doc in documents if len(doc) >= 2]
            spans = span_documents(documents, self.tokenizer, (self.config.max_seq_len - 3) // 2)
            held, pairs = [], 0
            while documents and pairs < heldout_pairs:  # the last articles, until they give enough pairs
                held.insert(0, documents.pop())
                pairs += len(spans.pop()) - 1
            self.cache[("documents", heldout_pairs)] = (documents, held)
        return self.cache[("documents", heldout_pairs)]

    def pairs(self, task: str, heldout_pairs: int, budget: int) -> tuple[PairData, PairData]:
        """(training rows: pairs of the training articles + the corpus's SST-2 phrases packed without a pair
        label; held-out pair rows), pairs drawn once with `PAIR_SEED`."""
        key = ("pairs", task, heldout_pairs, budget)
        if key not in self.cache:
            train_docs, held_docs = self.documents(heldout_pairs)
            n_sst = self.corpus.counts.get("sst2 kept", 0)
            sst = self.corpus.train[len(self.corpus.train) - n_sst :]
            seq = self.config.max_seq_len
            train = pair_rows(train_docs, self.tokenizer, seq, task, torch.Generator().manual_seed(PAIR_SEED))
            cls, sep = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
            if sst and train.n_tokens < budget:
                train = with_unlabelled(train, pack_sentences(tokenize(self.tokenizer, sst).ids, seq, cls, sep))
            held = pair_rows(held_docs, self.tokenizer, seq, task, torch.Generator().manual_seed(PAIR_SEED + 1))
            self.cache[key] = (train, held)
        return self.cache[key]

    def sst2(self, probe_rows: int) -> SST2Rows:
        """SST-2 rows for the probe: a fixed `probe_rows` of train (finetune's subset rule) and validation."""
        if ("sst2", probe_rows) not in self.cache:
            spec = dataclasses.replace(self.course.profile(self.profile).finetuning(), train_rows=probe_rows)
            self.cache[("sst2", probe_rows)] = encode_sst2(self.tokenizer, spec)
        return self.cache[("sst2", probe_rows)]


PAIR_SOURCES = ("wikitext2", "sst2")  # what NSP / SOP rows are built from: WikiText-2's articles, SST-2's phrases


def lesson_corpus(corpus: Corpus) -> Corpus:
    """The corpus every variant of lessons 6 and 7 reads: `corpus` without the sentences of sources the pair
    variants cannot read (only WikiText-2's articles are split into documents here; `gpu` adds WikiText-103).

    Why: on `gpu` the MLM variant would read ~82M tokens of WikiText-103 once while NSP / SOP repeat
    WikiText-2's ~1.4M 50-60 times, and the verdict would measure repetition, not the objective. Unchanged
    where the corpus is WikiText-2 and SST-2 alone (the cpu profiles). The slices follow `load_corpus`'s
    layout: WikiText-2's training sentences first, then each other source's in the order of its counts.
    """
    sources = [key.removesuffix(" kept") for key in corpus.counts if key.endswith(" kept")]
    if set(sources) <= set(PAIR_SOURCES):
        return corpus
    sizes = {name: corpus.counts[f"{name} kept"] - corpus.counts.get(f"{name} equal to a held-out sentence, dropped", 0)
             for name in sources if name != "wikitext2"}
    start = len(corpus.train) - sum(sizes.values())
    if start < 0:
        raise AfterBertError(f"the corpus's counts ({corpus.counts}) do not match its {len(corpus.train)} sentences")
    train = corpus.train[:start]
    for name, size in sizes.items():
        if name in PAIR_SOURCES:
            train += corpus.train[start : start + size]
        start += size
    left_out = {f"{name} left out for lessons 6-7": size for name, size in sizes.items() if name not in PAIR_SOURCES}
    return dataclasses.replace(corpus, train=train, counts={**corpus.counts, **left_out})


@functools.lru_cache(maxsize=2)
def course_data(profile: str | None = None) -> CourseData:
    """The shared data of the profile named `profile` (select_profile's rule), loaded once per process: the
    profile's corpus and its one tokenizer (`profile_tokenizer`), the ones its pretrained BERT (`ensure_pretrained`,
    lesson 3) was trained with, so the teacher and generator of lesson 7 read the same ids as its runs. The
    runs read the sentences every variant can read (`lesson_corpus`), said in one line where that leaves
    some out."""
    course = load_course()
    profile_spec = select_profile(profile, course)
    full = load_corpus(course, profile_spec=profile_spec)
    tokenizer = profile_tokenizer(profile_spec, course, full, progress=False)
    corpus = lesson_corpus(full)
    if corpus is not full:
        print(f"lessons 6-7 read WikiText-2 and SST-2 ({len(corpus.train):,} sentences; "
              f"{', '.join(k.split()[0] for k in corpus.counts if k.endswith('for lessons 6-7'))} left out): "
              "NSP / SOP need WikiText-2's "
              "articles, and every variant reads the same sentences", file=sys.stderr)
    config = profile_spec.model.for_arch("bert", vocab_size=len(tokenizer))
    ids = tokenize(tokenizer, corpus.heldout).ids
    heldout = MaskedLM(tokenizer, course.masking).heldout_batches(
        pack_sentences(ids, config.max_seq_len, tokenizer.cls_token_id, tokenizer.sep_token_id))
    return CourseData(profile_spec.name, course, corpus, tokenizer, config, heldout)


def pretrained_bert(profile: str | None = None, device: Any = "cpu") -> tuple[BertForMLM, dict[str, Any]]:
    """(the profile's pretrained BERT in eval mode, where it came from): the start of lesson 6's continued runs and
    lesson 7's teacher and generator. The shipped 18,000-step BERT where it reads the profile's token ids with the
    profile's shape (the cpu profiles), else the profile's own pretraining (lesson 3's; `ensure_pretrained`
    pretrains it first when it is missing: seconds on cpu-quick, the gpu profile's long run on a GPU)."""
    from bertcourse.training.checkpoint import load_pretrained, load_shipped, matching_shipped
    from bertcourse.training.compare import ensure_pretrained

    shared = course_data(profile)
    if (shipped := matching_shipped("bert", shared.tokenizer, shared.config)) is not None:
        model, _, card = load_shipped(folder=shipped, device=device)
        source = {"name": "the shipped 18,000-step BERT (bert-cpu-long)", "steps": card["steps"],
                  "sha256": card["sha256"]["model.safetensors"]}
        return model, source
    folder = ensure_pretrained("bert", shared.profile, runs_dir(shared.course))
    model, _ = load_pretrained(folder / "checkpoint.pt", device)
    steps = torch.load(folder / "checkpoint.pt", map_location="cpu", weights_only=True)["step"]
    source = {"name": f"the {shared.profile} profile's pretrained BERT (lesson 3)", "folder": folder.name,
              "steps": int(steps)}
    return model.eval(), source


# ----------------------------------------------------------------------------- measuring


def linear_probe(encoder: nn.Module, rows: SST2Rows, device: torch.device, seed: int = 0) -> dict[str, dict]:
    """SST-2 validation scores of a logistic-regression probe on the frozen encoder's [CLS] and mean vectors."""
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    out = {}
    for pooling in ("cls", "mean"):
        classifier = build_classifier(copy.deepcopy(encoder).float(), "probe", pooling=pooling).to(device)
        train_x = pooled_features(classifier, rows.train_ids, device).numpy()
        val_x = pooled_features(classifier, rows.validation_ids, device).numpy()
        probe = make_pipeline(StandardScaler(), LogisticRegressionCV(Cs=[0.001, 0.01, 0.1, 1.0], cv=3, max_iter=3000))
        with warnings.catch_warnings():  # scikit-learn's notices of future defaults, not about this fit
            warnings.simplefilter("ignore", FutureWarning)
            probe.fit(train_x, rows.train_labels.numpy())
        predicted = probe.predict(val_x)
        truth = rows.validation_labels.numpy()
        out[pooling] = {**scores(truth.tolist(), predicted.tolist(), seed=seed), "train_rows": len(rows.train_ids),
                        "correct": (predicted == truth).astype(int).tolist()}  # per sentence: for paired tests
    return out


def pair_accuracy(model: BertWithPairHead, rows: PairData, device: torch.device, seed: int = 0) -> dict[str, Any]:
    """The pair head's held-out accuracy with its 95% bootstrap interval over the pairs."""
    predicted = pair_predictions(model, rows, device)
    interval = stats.bootstrap_ci(rows.pair_labels, predicted, "accuracy", seed=seed)
    return {"task": model.task, "accuracy": metrics.accuracy(rows.pair_labels, predicted),
            "interval": [interval.low, interval.high], "pairs": len(rows)}


def mlm_scores(model: nn.Module, shared: CourseData, budget: int, device: torch.device) -> dict[str, Any]:
    """Held-out masked-LM loss and accuracy, the per-target loss's sd (for an interval on the loss) and the
    unigram model's loss and accuracy on the same targets (its accuracy is the frequent-token level: always
    predicting the corpus's most frequent token)."""
    losses = target_losses(model, shared.heldout, device)
    unigram = unigram_baseline(shared.packed(budget), shared.heldout, len(shared.tokenizer), "bert",
                               shared.tokenizer.all_special_ids)
    return {**evaluate(model, shared.heldout, device), "loss_sd": float(losses.std()) if len(losses) > 1 else None,
            "unigram": {"loss": unigram["loss"], "accuracy": unigram["accuracy"]},
            # kept for paired tests of two runs on the same targets (`variant_report.verdict`)
            "target_losses": [round(x, 5) for x in losses.tolist()],
            "target_blocks": target_blocks(shared.heldout).tolist()}


def _loss_of(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    out = model(**batch)
    return out.loss, getattr(out, "parts", None) or {"mlm": out.loss}


def training_flops(model: nn.Module, batch: dict[str, torch.Tensor]) -> int:
    """FLOPs of one training step (forward and backward) of `model` on `batch`; its gradients are cleared."""
    flops = step_flops(lambda: _loss_of(model, batch)[0])
    model.zero_grad(set_to_none=True)
    return flops


# ----------------------------------------------------------------------------- the run


def run_variant(variant: str, *, profile: str | None = None, steps: int | None = None, probe_rows: int | None = None,
                heldout_pairs: int | None = None, seed: int = 0, device: str | None = None, precision: str = "auto",
                progress: bool = True, out_root: str | Path | None = None, start: str = "scratch") -> VariantResult:
    """Pretrain `variant` for `steps` (None: the profile's `training_steps` for lessons 6 and 7; ELECTRA: the MLM
    budget, matched in FLOPs), measure it, and keep the result; a finished run with the same settings is
    read back instead (its `model` is then None). `start="pretrained"` (mlm, mlm+nsp, mlm+sop) continues the
    profile's pretrained BERT (`pretrained_bert`) for `steps` (None: the profile's `continue_steps`) instead of
    starting from random weights: a pair head learns only on an encoder that already reads the text."""
    if variant not in VARIANTS:
        raise AfterBertError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    if start not in ("scratch", "pretrained"):
        raise AfterBertError(f"start must be 'scratch' or 'pretrained', got {start!r}")
    if start == "pretrained" and variant not in CONTINUABLE:
        raise AfterBertError(f"{variant!r} changes the model's shape, so it cannot continue the pretrained BERT; "
                             f"only {', '.join(CONTINUABLE)} can")
    shared = course_data(profile)
    sizes = shared.course.profile(shared.profile).sizes(LESSON_ID)
    if steps is None:
        steps = sizes["continue_steps"] if start == "pretrained" else sizes["training_steps"]
    probe_rows = probe_rows or sizes["probe_rows"]
    heldout_pairs = heldout_pairs or sizes["heldout_pairs"]
    if steps < 0:
        raise AfterBertError(f"steps must be at least 0, got {steps}")
    spec = shared.course.profile(shared.profile).pretrain
    config = shared.config
    torch_device = pick_device(device)
    amp = autocast_dtype(torch_device, precision)

    # data and objective
    budget = max(steps, 1) * spec.batch_size * config.max_seq_len
    held_pairs = None
    objective: Objective
    if variant in ("mlm+nsp", "mlm+sop"):
        data, held_pairs = shared.pairs(variant.removeprefix("mlm+"), heldout_pairs, budget)
        objective = PairMLM(shared.tokenizer, shared.course.masking)
    else:
        data = shared.packed(budget)
        objective = MaskedLM(shared.tokenizer, shared.course.masking)

    model = build_variant_model(variant, config, seed)
    started_from = None
    if start == "pretrained":
        pretrained, started_from = pretrained_bert(shared.profile)
        mlm_model(model).load_state_dict(pretrained.state_dict())  # type: ignore[union-attr]
    model = model.to(torch_device)
    first = to_device(objective.batch(data, batch_indices(1, len(data), spec.batch_size, seed),
                                      torch.Generator().manual_seed(seed)), torch_device)
    flops = training_flops(model, first)
    train_steps = 0 if variant == "random" else steps
    matched = None
    if variant == "electra":
        mlm_flops = training_flops(build_model(config).to(torch_device), first)
        train_steps = max(1, round(steps * mlm_flops / flops)) if steps else 0
        matched = {"mlm_budget_steps": steps, "mlm_flops_per_step": mlm_flops}

    settings = {"format": RESULT_FORMAT, "variant": variant, "profile": shared.profile, "steps": train_steps,
                "model_config": config.to_dict(), "pretrain": dataclasses.asdict(spec), "seed": seed,
                "probe_rows": probe_rows, "heldout_pairs": heldout_pairs if held_pairs is not None else None,
                "precision": precision_name(amp), "corpus": shared.corpus.fingerprint(),
                "tokenizer": hashlib.sha256(shared.tokenizer.backend_tokenizer.to_str().encode()).hexdigest()[:16],
                "matched_compute": matched, **({"sampler": "inverse-cdf"} if variant == "electra" else {}),
                **({"start": started_from} if started_from else {})}
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    out_dir = run_folder(variant, shared.profile, tag=key,
                         runs=Path(out_root) if out_root else runs_dir(shared.course) / "after-bert")
    finished = read_result(out_dir, key)
    if finished is not None:
        return finished

    history = train(model, objective, data, steps=train_steps, spec=spec, seed=seed, device=torch_device,
                    amp=amp, progress=progress, desc=variant)
    seconds = history.pop("train_seconds")[0] if history.get("train_seconds") else 0.0
    scorer = mlm_model(model)
    result = VariantResult(
        variant=variant, profile=shared.profile, steps=train_steps, parameters=count_parameters(model),
        encoder_parameters=count_parameters(kept_encoder(model)), flops_per_step=flops, train_seconds=seconds,
        mlm=mlm_scores(scorer, shared, budget, torch_device) if scorer is not None else None,
        aux=pair_accuracy(model, held_pairs, torch_device, seed) if isinstance(model, BertWithPairHead) else None,
        rtd=rtd_evaluate(model, shared.heldout, torch_device) if isinstance(model, Electra) else None,
        generator_mlm=evaluate(model.generator, shared.heldout, torch_device) if isinstance(model, Electra) else None,
        probe=linear_probe(kept_encoder(model), shared.sst2(probe_rows), torch_device, seed),
        history=history, settings=settings, key=key, out_dir=out_dir, start=start, model=model,
    )
    write_result(result)
    return result


def train(model: nn.Module, objective: Objective, data: PackedData, *, steps: int, spec: Any, seed: int,
          device: torch.device, amp: torch.dtype | None, progress: bool = True, desc: str = "") -> dict[str, list]:
    """The course's pretraining steps (as `bertcourse.training.pretrain.pretrain`: AdamW, warm-up + cosine, clipping,
    dynamic masking, rows drawn by `batch_indices`, `loop.TrainStep`) for any model whose output has `.loss`
    (and `.parts`)."""
    optimizer = adamw(model, spec.learning_rate, spec.weight_decay, betas=(0.9, 0.98), eps=1e-6)
    warmup = spec.warmup(steps)
    train_step = TrainStep(optimizer, model.parameters(), device=device, dtype=amp, grad_clip=spec.grad_clip,
                           schedule=lambda s: lr_factor(s, warmup, steps))
    generator = torch.Generator().manual_seed(seed + 1)
    history: dict[str, list] = {"step": [], "loss": []}
    log = LossLog()  # read once at the end: no wait for the device every step
    model.train()
    started = time.perf_counter()
    for step in progress_bar(range(1, steps + 1), desc=f"pretrain {desc}", disable=not progress):
        batch = objective.batch(data, batch_indices(step, len(data), spec.batch_size, seed), generator)
        batch = to_device(batch, device)
        with train_step.autocast():
            loss, parts = _loss_of(model, batch)
        train_step.backward(loss)
        train_step.step()
        history["step"].append(step)
        log.add(loss=loss, **parts)
    for name, values in log.read().items():
        history.setdefault(name, []).extend(values)
    history["train_seconds"] = [round(time.perf_counter() - started, 1)]
    return history


# ----------------------------------------------------------------------------- the run folder


def write_result(result: VariantResult) -> None:
    """result.json (written last: its presence means the run finished) and model.pt in the run folder."""
    result.out_dir.mkdir(parents=True, exist_ok=True)
    if result.model is not None:
        torch.save({"variant": result.variant, "model_config": result.settings["model_config"],
                    "weights": {k: v.cpu() for k, v in result.model.state_dict().items()}}, result.out_dir / "model.pt")
    path = result.out_dir / "result.json"
    staging = path.with_suffix(".partial")
    staging.write_text(json.dumps({**result.summary(), "history": result.history}, indent=1))
    staging.replace(path)


def read_result(out_dir: Path, key: str | None = None) -> VariantResult | None:
    """A finished run's result from its folder (None if it has not finished, or was made with another key)."""
    path = Path(out_dir) / "result.json"
    if not path.is_file():
        return None
    saved = json.loads(path.read_text())
    if saved.get("settings", {}).get("format") != RESULT_FORMAT or (key is not None and saved.get("key") != key):
        return None
    return result_from_summary({**saved, "out_dir": str(out_dir)})


def results_table(results: list[VariantResult]) -> str:
    """The results as a markdown table (one row per variant)."""

    def pct(d: dict | None, name: str = "accuracy", interval: str | None = None) -> str:
        if not d:
            return "-"
        text = f"{100 * d[name]:.1f}"
        return f"{text} [{100 * d[interval][0]:.1f}, {100 * d[interval][1]:.1f}]" if interval else text

    lines = ["| variant | steps | parameters (kept) | GFLOP/step | train min | held-out MLM loss / acc % "
             "| auxiliary task acc % [95%] | SST-2 probe CLS % [95%] | probe mean % [95%] |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        mlm = r.mlm or r.generator_mlm
        mlm_text = f"{mlm['loss']:.3f} / {100 * mlm['accuracy']:.1f}" if mlm else "-"
        if r.generator_mlm:
            mlm_text += " (generator)"
        aux = (f"{r.aux['task'].upper()} {pct(r.aux, interval='interval')}" if r.aux
               else f"RTD {pct(r.rtd)} (replaced {100 * r.rtd['replaced_fraction']:.1f}%)" if r.rtd else "-")
        lines.append(f"| {r.label} | {r.steps:,} | {r.parameters:,} ({r.encoder_parameters:,}) "
                     f"| {r.flops_per_step / 1e9:.2f} | {r.train_seconds / 60:.1f} | {mlm_text} | {aux} "
                     f"| {pct(r.probe['cls'], interval='accuracy_interval')} "
                     f"| {pct(r.probe['mean'], interval='accuracy_interval')} |")
    return "\n".join(lines)


def result_from_summary(summary: dict[str, Any]) -> VariantResult:
    """A `VariantResult` (no model, no history) from `VariantResult.summary()`'s JSON data."""
    names = {f.name for f in dataclasses.fields(VariantResult)}
    values = {k: v for k, v in summary.items() if k in names}
    return VariantResult(**{"history": {}, **values, "out_dir": Path(summary.get("out_dir", ".")), "model": None})


def measured_results(path: str | Path | None = None) -> dict[str, Any]:
    """The committed measurements the lesson quotes (benchmarks/results/after_bert_cpu.json): the JSON's
    fields ("command", "date", "profile", "threads", "wall_minutes", ...) with "results" as `VariantResult`s."""
    path = Path(path) if path else load_course().root / "benchmarks" / "results" / "after_bert_cpu.json"
    saved = json.loads(path.read_text())
    return {**saved, "results": [result_from_summary(s) for s in saved["results"]]}


def corpus_documents(heldout_pairs: int | None = None, profile: str | None = None
                     ) -> tuple[list[list[str]], list[list[str]]]:
    """(training, held-out) WikiText articles as lists of sentences, as the NSP / SOP runs split them
    (`heldout_pairs` None: the profile's lesson-6 size)."""
    shared = course_data(profile)
    sizes = shared.course.profile(shared.profile).sizes(LESSON_ID)
    return shared.documents(heldout_pairs or sizes["heldout_pairs"])


__all__ = [
    "LESSON_ID", "RESULT_FORMAT", "VARIANTS", "AfterBertError", "VariantResult", "build_variant_model", "kept_encoder",
    "mlm_model", "CourseData", "course_data", "linear_probe", "pair_accuracy", "training_flops", "run_variant",
    "train", "write_result", "read_result", "result_from_summary", "results_table", "measured_results",
    "corpus_documents", "mlm_scores", "CONTINUABLE", "pretrained_bert",
]

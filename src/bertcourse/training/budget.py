"""What a lesson costs on a free Colab GPU, planned from counted costs, and printed before its long cells start.

No GPU has timed the course yet, so the plan is an ESTIMATE from three counts of each training step, made on
the CPU once per model shape:

- its FLOPs (`torch.utils.flop_counter`, forward and backward, one batch of the real model), turned into time
  at an ASSUMED `ASSUMED_UTILISATION` (20%) of the GPU's fp16/bf16 tensor-core peak (a T4's 65 TFLOP/s where
  no GPU is found; `GPU_PEAKS` by the name `torch.cuda.get_device_name` gives);
- its ops: every aten op a step dispatches (forward under autocast, backward, clipping, AdamW; counted with a
  `TorchDispatchMode`), each costing the GPU at least `ASSUMED_OP_SECONDS` of the CPU's time to dispatch and
  launch it. A small model's step is launch-bound: a fine-tuning step at batch 32 is ~840 ops, 13-20 ms on a
  T4, where its FLOPs alone say 2.6 ms. A step takes the LONGER of the two;
- the CPU's time to build its batch (measured here: masking, labels, picking rows), added to it.

Evaluation and checkpoints are not counted; early stopping (the label curve) can only end sooner. When
`benchmarks/gpu_smoke.py` has measured a GPU, its rates (`RATES_FILE`) replace the assumed ones (`plan_rates`).

The first run of the gpu profile also prepares WikiText-103 on Colab's two CPUs (`data_seconds`), from rates
measured on this project's loaded 2-core machine: building the corpus 0.6M words/s, counting words 2.2M
words/s, tokenizing 215k tokens/s, and the vocabulary learner, whose time grows with the word types as
types^1.5 (3.5 s at the course corpus's 16,131 types; ~64x that, 3-4 minutes, at WikiText-103's ~270k).

`SESSION_MINUTES` is the plan's limit for one lesson: Colab publishes no figure for its free GPU time, so
the course plans each lesson to finish within 90 minutes at the assumed rate (course.yml's gpu sizes are cut
to fit; tests/test_budget.py checks they do).
"""

from __future__ import annotations

import functools
import json
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

T4_FP16_PEAK = 65e12  # FLOP/s, tensor cores (NVIDIA T4 datasheet)
# dense fp16/bf16 tensor-core peaks (FLOP/s, NVIDIA datasheets), by a piece of the name the GPU reports
GPU_PEAKS = {"T4": T4_FP16_PEAK, "V100": 125e12, "A10": 125e12, "L4": 121e12, "A100": 312e12, "L40": 181e12,
             "H100": 989e12, "H200": 989e12}
ASSUMED_UTILISATION = 0.20  # of that peak: an assumption until benchmarks/gpu_smoke.py has measured it
# the CPU's time to dispatch and launch one op in eager PyTorch: the review's 837-op step at 13-20 ms on a T4
ASSUMED_OP_SECONDS = 18e-6
OP_SECONDS_RANGE = (15e-6, 24e-6)
RATES_FILE = Path("benchmarks") / "results" / "gpu_rates.json"  # in the course root; gpu_smoke.py writes it
SESSION_MINUTES = 90.0

# WikiText-103's train split (Merity et al. 2016, table 1: 103,227,021 words; ~270k word types) and the
# WordPiece tokens a word at WikiText-2's measured rate (benchmarks/README.md, "gpu plan"; likely low).
WIKITEXT103_WORDS = 103_227_021
WIKITEXT103_TYPES = 270_000
TOKENS_PER_WORD = 1.03
CORPUS_WORDS_PER_S = 0.6e6
COUNT_WORDS_PER_S = 2.2e6
TOKENIZE_TOKENS_PER_S = 215e3
VOCABULARY_SECONDS = 3.5  # learn_vocabulary at ...
VOCABULARY_TYPES = 16_131  # ... the course corpus's word types
VOCABULARY_GROWTH = 1.5  # time ~ types^1.5: ~64x from 16k to 270k types


def gpu_name() -> str:
    """The GPU the plan is for, named as it names itself (`torch.cuda.get_device_name`); a Colab T4 where this
    machine has none (the course's free GPU)."""
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "Tesla T4 (Colab's free GPU)"


def peak_flops(name: str) -> float:
    """The tensor-core peak of the GPU called `name` (`GPU_PEAKS`; a T4's where the name is not known)."""
    return next((GPU_PEAKS[key] for key in sorted(GPU_PEAKS, key=len, reverse=True) if key in name), T4_FP16_PEAK)


@dataclass(frozen=True)
class Rates:
    """What a plan turns counts into time with: FLOP/s, seconds an op, and where they come from."""

    gpu: str
    flops_per_s: float
    op_seconds: float
    source: str  # "assumed", or what measured them

    @property
    def measured(self) -> bool:
        """True when a GPU check measured these rates (benchmarks/gpu_smoke.py), False for the assumed ones."""
        return self.source != "assumed"


def plan_rates(utilisation: float = ASSUMED_UTILISATION, root: Path | None = None) -> Rates:
    """The rates every plan uses, in one place: those `benchmarks/gpu_smoke.py` measured (`RATES_FILE`) when
    they are for this GPU (or no GPU is here), else `utilisation` of the GPU's peak and `ASSUMED_OP_SECONDS`."""
    from bertcourse.course import CourseError, find_root

    name = gpu_name()
    try:
        path = (root or find_root()) / RATES_FILE
    except CourseError:
        path = None
    if path is not None and path.is_file():
        saved = json.loads(path.read_text())
        if saved["gpu"] == name or not torch.cuda.is_available():
            return Rates(saved["gpu"], float(saved["flops_per_s"]), float(saved["op_seconds"]),
                         f"measured by benchmarks/gpu_smoke.py ({saved.get('date', 'no date')})")
    return Rates(name, utilisation * peak_flops(name), ASSUMED_OP_SECONDS, "assumed")


def _assumed(utilisation: float) -> Rates:
    return Rates("Tesla T4", utilisation * T4_FP16_PEAK, ASSUMED_OP_SECONDS, "assumed")


@dataclass(frozen=True)
class Item:
    """One piece of a lesson's work: `steps` training steps (each `step_flops`, `step_ops` dispatched ops and
    `batch_seconds` of the CPU's batch building) and/or `cpu_seconds` of data preparation."""

    what: str
    steps: float = 0
    step_flops: float = 0.0
    step_ops: int = 0
    batch_seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def gpu_flops(self) -> float:
        """All the item's counted FLOPs."""
        return self.steps * self.step_flops

    def seconds(self, rates: Rates | float | None = None) -> float:
        """Each step the longer of its FLOPs at the rate and its ops at the op cost, plus its batch; then the
        data work. `rates` as a number: that utilisation of a T4 (the assumed op cost)."""
        if not isinstance(rates, Rates):
            rates = _assumed(ASSUMED_UTILISATION if rates is None else rates)
        step = max(self.step_flops / rates.flops_per_s, self.step_ops * rates.op_seconds) + self.batch_seconds
        return self.steps * step + self.cpu_seconds

    def minutes(self, rates: Rates | float | None = None) -> float:
        """`seconds` in minutes."""
        return self.seconds(rates) / 60


def vocabulary_seconds(word_types: int) -> float:
    """The vocabulary learner's time for `word_types` distinct words (measured 3.5 s at 16,131, ~types^1.5)."""
    return VOCABULARY_SECONDS * (word_types / VOCABULARY_TYPES) ** VOCABULARY_GROWTH


def data_seconds(words: int = WIKITEXT103_WORDS, word_types: int = WIKITEXT103_TYPES,
                 tokens_per_word: float = TOKENS_PER_WORD) -> float:
    """A first run's data work on the CPU: corpus, word counts, vocabulary, tokens (cached afterwards)."""
    return (words / CORPUS_WORDS_PER_S + words / COUNT_WORDS_PER_S + vocabulary_seconds(word_types)
            + words * tokens_per_word / TOKENIZE_TOKENS_PER_S)


def _count(run: Any) -> int:
    from bertcourse.training.flops import step_flops

    return step_flops(run)


@functools.lru_cache(maxsize=16)
def pretraining_step_flops(config: Any, batch_size: int) -> int:
    """Counted FLOPs of one pretraining step of `config` (a ModelConfig: BERT masks 15%, GPT predicts every
    next token) on a batch of full blocks. Counted at the real batch size: the count is not linear in the rows
    (the kernels torch picks change with the shapes)."""
    from bertcourse.masking import mask_tokens
    from bertcourse.model import build_model
    from bertcourse.training.objectives import next_token_labels

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, config.vocab_size, (batch_size, config.max_seq_len), generator=generator)
    mask = torch.ones_like(ids)
    model = build_model(config).train()
    if config.arch == "gpt":
        batch = {"input_ids": ids, "attention_mask": mask, "labels": next_token_labels(ids, mask)}
    else:
        inputs, labels = mask_tokens(ids, mask_token_id=4, vocab_size=config.vocab_size, special_ids=[0, 1, 2, 3, 4],
                                     generator=generator, select_prob=0.15, mask_prob=0.8, random_prob=0.1)
        batch = {"input_ids": inputs, "attention_mask": mask, "labels": labels}
    return _count(lambda: model(**batch).loss)


@functools.lru_cache(maxsize=16)
def finetuning_step_flops(config: Any, regime: str, batch_size: int, max_seq_len: int) -> int:
    """Counted FLOPs of one SST-2 fine-tuning step (full or LoRA) of `config`'s model on a full batch."""
    from bertcourse.classifier import build_classifier
    from bertcourse.model import build_model

    model = build_classifier(build_model(config), regime).train()
    ids = torch.randint(5, config.vocab_size, (batch_size, max_seq_len), generator=torch.Generator().manual_seed(0))
    labels = torch.zeros(batch_size, dtype=torch.long)
    return _count(lambda: model(ids, torch.ones_like(ids), labels=labels).loss)


class _OpCounter(TorchDispatchMode):
    """Counts the aten ops dispatched inside it (each one a kernel launch, or more, on a GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops += 1
        return func(*args, **(kwargs or {}))


def _step_ops(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> int:
    """The aten ops of one training step as the course's loop takes it (`loop.TrainStep`: the forward under
    autocast, backward, clipping, fused AdamW), counted on the second step (the first also creates AdamW's
    state). The count barely depends on the batch's rows (the GPT's head is one chunk on CUDA), so it is taken
    on a small batch."""
    from bertcourse.training.loop import TrainStep
    from bertcourse.training.optim import adamw

    trained = [p for p in model.parameters() if p.requires_grad]
    step = TrainStep(adamw(model, 1e-4, 0.01), trained, device="cpu", dtype=torch.bfloat16, grad_clip=1.0)

    def once() -> None:
        with step.autocast():
            loss = model(**batch).loss
        step.backward(loss)
        step.step()

    once()
    with _OpCounter() as counter:
        once()
    return counter.ops


def _seconds(work: Any, repeats: int = 5) -> float:
    """The shortest wall time of `work()` on this CPU over `repeats` calls, after one warm-up call: the time the
    work itself takes (other processes on a busy machine only ever add to it)."""
    work()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def _pretraining_batch(config: Any, rows: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """A pretraining batch of full blocks as the objectives build it: BERT's 15% masked, GPT's next tokens."""
    from bertcourse.masking import mask_tokens
    from bertcourse.training.objectives import next_token_labels

    ids = torch.randint(5, config.vocab_size, (rows, config.max_seq_len), generator=generator)
    mask = torch.ones_like(ids)
    if config.arch == "gpt":
        return {"input_ids": ids, "attention_mask": mask, "labels": next_token_labels(ids, mask)}
    inputs, labels = mask_tokens(ids, mask_token_id=4, vocab_size=config.vocab_size, special_ids=[0, 1, 2, 3, 4],
                                 generator=generator, select_prob=0.15, mask_prob=0.8, random_prob=0.1)
    return {"input_ids": inputs, "attention_mask": mask, "labels": labels}


@functools.lru_cache(maxsize=16)
def pretraining_step_ops(config: Any) -> int:
    """Counted aten ops of one pretraining step of `config`'s model (`_step_ops`), once per model shape."""
    from bertcourse.model import build_model

    with torch.random.fork_rng(devices=[]):  # the model's initialisation draws: the caller's generator is untouched
        torch.manual_seed(0)
        return _step_ops(build_model(config).train(), _pretraining_batch(config, 2, torch.Generator().manual_seed(0)))


@functools.lru_cache(maxsize=16)
def finetuning_step_ops(config: Any, regime: str, max_seq_len: int) -> int:
    """Counted aten ops of one SST-2 fine-tuning step (full or LoRA) of `config`'s model, once per shape. A task
    head's step (lesson 4's tagger and reader) is the full regime's, its head a linear layer too."""
    from bertcourse.classifier import build_classifier
    from bertcourse.model import build_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build_classifier(build_model(config), regime).train()
        ids = torch.randint(5, config.vocab_size, (2, max_seq_len), generator=torch.Generator().manual_seed(0))
        return _step_ops(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                                 "labels": torch.zeros(2, dtype=torch.long)})


@functools.lru_cache(maxsize=16)
def pretraining_batch_seconds(config: Any, batch_size: int) -> float:
    """This CPU's time to build one pretraining batch (the masking or the next-token labels of full blocks)."""
    generator = torch.Generator().manual_seed(0)
    return _seconds(lambda: _pretraining_batch(config, batch_size, generator))


@functools.lru_cache(maxsize=16)
def finetuning_batch_seconds(batch_size: int, max_seq_len: int) -> float:
    """This CPU's time to pick one fine-tuning batch from rows kept padded (`devices.DeviceRows`)."""
    from bertcourse.training.devices import DeviceRows

    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, max_seq_len + 1, (4 * batch_size,), generator=generator).tolist()
    rows = DeviceRows([[5] * n for n in lengths], "cpu", labels=torch.zeros(len(lengths), dtype=torch.long))
    index = list(range(0, 4 * batch_size, 4))
    return _seconds(lambda: rows.batch(index))


def _pretraining(what: str, steps: int, config: Any, batch_size: int) -> Item:
    return Item(what, steps, pretraining_step_flops(config, batch_size), pretraining_step_ops(config),
                pretraining_batch_seconds(config, batch_size))


def _finetuning(what: str, steps: float, config: Any, regime: str, batch_size: int, max_seq_len: int) -> Item:
    return Item(what, steps, finetuning_step_flops(config, regime, batch_size, max_seq_len),
                finetuning_step_ops(config, regime, max_seq_len), finetuning_batch_seconds(batch_size, max_seq_len))


def label_curve_steps(profile_spec: Any, budgets: list[int], seeds: int) -> int:
    """The planned fine-tuning steps of lesson 4's label curve (the BERT, pretrained and scratch, each budget and
    seed): `data_efficiency.train_with_dev`'s plan, an upper bound (early stopping can only end a run sooner)."""
    from bertcourse.training.data_efficiency import LabelRecipe, labelled_rows

    recipe, tune = LabelRecipe(), profile_spec.finetuning()
    cap = recipe.steps_cap(tune.epochs, tune.train_rows, tune.batch_size)
    per_seed = sum(min(recipe.max_epochs * math.ceil(len(labelled_rows(n, n, 0, recipe)[0]) / tune.batch_size), cap)
                   for n in budgets)
    return 2 * seeds * per_seed


LESSON04_CURVE_BUDGETS = (50, 300, 1000, 3000)  # the label budgets lesson 4's curve draws from (up to its maximum)
LESSON04_HEADS = 3  # lesson 4 trains three task heads: two taggers (first piece, all pieces) and a reader (QA)


def lesson_plan(lesson_id: str, profile: str, course: Any = None, *, pretraining_reused: bool = False,
                vocab_size: int | None = None) -> list[Item]:
    """The work of `lesson_id` on `profile`, item by item (`pretraining_reused`: lesson 3's BERT is found): every
    training call of the lesson's notebook.

    `vocab_size` defaults to the profile's. Lessons 0, 1 and 5 train nothing long: their plan is empty.
    """
    from bertcourse.course import load_course

    course = course or load_course()
    profile_spec = course.profile(profile)
    bert = profile_spec.model.for_arch("bert", vocab_size=vocab_size or profile_spec.vocab_size)
    gpt = bert.for_arch("gpt")
    batch, steps = profile_spec.pretrain.batch_size, profile_spec.pretrain.max_steps
    sizes = profile_spec.lesson_sizes.get(lesson_id, {})
    first_run = "wikitext103" in course.corpus_of(profile_spec).sources
    data = [Item("preparing WikiText-103 on the CPU (first run only: cached after)", cpu_seconds=data_seconds())]
    pretraining = _pretraining(f"pretraining the BERT, {steps:,} steps", steps, bert, batch)
    if lesson_id == "lesson02-wwm":
        two = sizes["training_steps"]
        return [_pretraining(f"two BERTs, {two:,} steps each", 2 * two, bert, batch)]
    if lesson_id == "lesson03-tiny-bert":  # a short live run; the 18,000-step BERT is loaded, shipped
        live = sizes["live_steps"]
        live_run = _pretraining(f"pretraining a fresh BERT, {live:,} steps", live, bert, batch)
        return [*(data if first_run else []), live_run]
    if lesson_id == "lesson04-finetuning":  # the shipped BERT and GPT are loaded: nothing is pretrained
        tune = profile_spec.finetuning()
        items = []
        if "curve_max_labels" in sizes:  # the probe curve: one forward over its rows per encoder (~1/3 of a step)
            budgets = [n for n in LESSON04_CURVE_BUDGETS if n <= sizes["curve_max_labels"]]
            rows = sizes["curve_seeds"] * max(budgets) + course.datasets["sst2"].splits["validation"]
            for model in (bert, gpt):
                forward = _finetuning("", 2 * rows / tune.batch_size, model, "full", tune.batch_size, tune.max_seq_len)
                items.append(replace(forward, what=f"the {model.arch} probe curve's vectors (pretrained and random "
                                                   f"weights): {rows:,} rows each", step_flops=forward.step_flops / 3,
                                     step_ops=forward.step_ops // 3))
            curve = label_curve_steps(profile_spec, budgets, sizes["curve_seeds"])
            items.append(_finetuning(f"the label curve: {len(budgets)} budgets x 2 inits x {sizes['curve_seeds']} "
                                     f"seeds, at most {curve:,} steps", curve, bert, "full", tune.batch_size,
                                     tune.max_seq_len))
        if "head_steps" in sizes:
            items.append(_finetuning(f"task heads: {LESSON04_HEADS} x {sizes['head_steps']:,} steps",
                                     LESSON04_HEADS * sizes["head_steps"], bert, "full", tune.batch_size,
                                     tune.max_seq_len))
        return items
    if lesson_id == "lesson06-after-bert":  # two runs from scratch; three continue the pretrained BERT (lesson 3's)
        scratch, more = sizes["training_steps"], sizes.get("continue_steps", 0)
        return [*([] if pretraining_reused else [*(data if first_run else []), pretraining]),
                _pretraining(f"2 variants from scratch (mlm, electra matched in FLOPs), {scratch:,} steps each",
                             2 * scratch, bert, batch),
                _pretraining(f"3 variants continuing the pretrained BERT (mlm, mlm+nsp, mlm+sop), {more:,} steps each",
                             3 * more, bert, batch)]
    if lesson_id == "lesson07-after-bert-models":  # lesson 6's runs and sizes, its MLM BERT the baseline
        sizes = profile_spec.lesson_sizes.get("lesson06-after-bert", {})
        variants = 4  # albert-shared, albert, rope, and mlm from scratch (lesson 6's: counted, reused when found)
        bert_step = _pretraining("", 1, bert, batch)
        # each step: the teacher's forward (~1/3 of a training step) and a 1-layer student's training step
        per_step = 1 / 3 + 1 / bert.n_layers
        distil = replace(bert_step, what=f"two students distilled, {sizes['distil_steps']:,} steps each",
                         steps=2 * sizes["distil_steps"], step_flops=bert_step.step_flops * per_step,
                         step_ops=round(bert_step.step_ops * per_step))
        return [*([] if pretraining_reused else [*(data if first_run else []), pretraining]),
                _pretraining(f"{variants} variants (lesson 6's MLM BERT among them, reused when found), "
                             f"{sizes['training_steps']:,} steps each", variants * sizes["training_steps"], bert,
                             batch),
                distil]
    return []


def print_budget(lesson_id: str, profile: str, *, pretraining_reused: bool = False, course: Any = None,
                 utilisation: float = ASSUMED_UTILISATION) -> float:
    """Print `lesson_plan` in minutes on this GPU (a Colab T4 where none is found) before a long cell starts, at the
    rates `plan_rates` gives (in brackets: 1.5x and half the FLOP rate, the op cost's range); returns the total
    minutes. Says so when the plan exceeds one session. Without a GPU it prints nothing and returns 0.0: a
    GPU's plan means nothing to a CPU run (a lesson's CPU time is in its provenance, `wall_time_s`)."""
    import torch

    if not torch.cuda.is_available():
        return 0.0
    items = lesson_plan(lesson_id, profile, course, pretraining_reused=pretraining_reused)
    rates = plan_rates(utilisation, course.root if course is not None else None)
    fast = replace(rates, flops_per_s=rates.flops_per_s * 1.5, op_seconds=min(OP_SECONDS_RANGE[0], rates.op_seconds))
    slow = replace(rates, flops_per_s=rates.flops_per_s / 2, op_seconds=max(OP_SECONDS_RANGE[1], rates.op_seconds))
    total = sum(item.minutes(rates) for item in items)
    if rates.measured:
        how = (f"from counted FLOPs and ops at the rates {rates.source}: {rates.flops_per_s / 1e12:.1f} TFLOP/s, "
               f"{rates.op_seconds * 1e6:.0f} us an op")
    else:
        how = (f"ESTIMATED from counted FLOPs at an assumed {utilisation:.0%} of its "
               f"{peak_flops(rates.gpu) / 1e12:.0f} TFLOP/s peak and counted ops at an assumed "
               f"{rates.op_seconds * 1e6:.0f} us each (a step takes the longer), plus this CPU's batch time")
    print(f"planned on {rates.gpu} ({profile} profile): {how}")
    for item in items:
        spread = f"({item.minutes(fast):.1f}-{item.minutes(slow):.1f})" if item.steps else "(CPU)"
        print(f"  {item.minutes(rates):6.1f} min {spread:<12} {item.what}")
    print(f"  {total:6.1f} min in all" + (f": MORE than the {SESSION_MINUTES:.0f} minutes this course plans a session "
                                          "for" if total > SESSION_MINUTES else ""))
    return total


__all__ = ["ASSUMED_OP_SECONDS", "ASSUMED_UTILISATION", "GPU_PEAKS", "Item", "RATES_FILE", "Rates", "SESSION_MINUTES",
           "T4_FP16_PEAK", "data_seconds", "finetuning_batch_seconds", "finetuning_step_flops", "finetuning_step_ops",
           "gpu_name", "label_curve_steps", "lesson_plan", "peak_flops", "plan_rates", "pretraining_batch_seconds",
           "pretraining_step_flops", "pretraining_step_ops", "print_budget", "vocabulary_seconds"]

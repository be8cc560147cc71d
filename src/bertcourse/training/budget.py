"""What a lesson costs on a free Colab T4, planned from counted FLOPs, and printed before its long cells start.

No GPU has timed the course yet, so the plan is an ESTIMATE: the FLOPs of each training step are counted
(`torch.utils.flop_counter` on the CPU, forward and backward, on one batch of the real model) and turned into
minutes at an ASSUMED `ASSUMED_UTILISATION` (20%) of the T4's 65 TFLOP/s fp16 tensor-core peak (the range
10-30% is what `benchmarks/gpu_plan.py` tabulates; `benchmarks/gpu_smoke.py` measures the real rate).
Elementwise work, evaluation and checkpoints are not counted.

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
import math
from dataclasses import dataclass
from typing import Any

import torch

T4_FP16_PEAK = 65e12  # FLOP/s, tensor cores (NVIDIA T4 datasheet)
ASSUMED_UTILISATION = 0.20  # of that peak: an assumption until benchmarks/gpu_smoke.py has measured it
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


@dataclass(frozen=True)
class Item:
    """One piece of a lesson's work: `gpu_flops` on the GPU and/or `cpu_seconds` of data preparation."""

    what: str
    gpu_flops: float = 0.0
    cpu_seconds: float = 0.0

    def minutes(self, utilisation: float = ASSUMED_UTILISATION) -> float:
        """GPU minutes at `utilisation` of a T4's fp16 peak, plus the CPU-side data work."""
        return (self.gpu_flops / (utilisation * T4_FP16_PEAK) + self.cpu_seconds) / 60


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


def lesson_plan(lesson_id: str, profile: str, course: Any = None, *, pretraining_reused: bool = False,
                vocab_size: int | None = None) -> list[Item]:
    """The work of `lesson_id` on `profile`, item by item (`pretraining_reused`: lesson 3's BERT is found).

    `vocab_size` defaults to the profile's. Lessons 0, 1 and 5 train nothing long: their plan is empty.
    """
    from bertcourse.course import load_course

    course = course or load_course()
    profile_spec = course.profile(profile)
    bert = profile_spec.model.for_arch("bert", vocab_size=vocab_size or profile_spec.vocab_size)
    batch, steps = profile_spec.pretrain.batch_size, profile_spec.pretrain.max_steps
    sizes = profile_spec.lesson_sizes.get(lesson_id, {})
    first_run = "wikitext103" in course.corpus_of(profile_spec).sources
    data = [Item("preparing WikiText-103 on the CPU (first run only: cached after)", cpu_seconds=data_seconds())]
    bert_step = pretraining_step_flops(bert, batch)
    pretraining = Item(f"pretraining the BERT, {steps:,} steps", gpu_flops=steps * bert_step)
    if lesson_id == "lesson02-wwm":
        two = sizes["training_steps"]
        return [Item(f"two BERTs, {two:,} steps each", gpu_flops=2 * two * bert_step)]
    if lesson_id == "lesson03-tiny-bert":
        return [*(data if first_run else []), pretraining]
    if lesson_id == "lesson04-finetuning":
        tune = profile_spec.finetuning()
        gpt_step = pretraining_step_flops(bert.for_arch("gpt"), batch)
        rows = tune.train_rows or course.datasets["sst2"].splits["train"]
        run_steps = tune.epochs * math.ceil(rows / tune.batch_size)
        runs = 2 * tune.seeds  # both inits
        tuning = sum(runs * run_steps * finetuning_step_flops(model, regime, tune.batch_size, tune.max_seq_len)
                     for model in (bert, bert.for_arch("gpt")) for regime in ("full", "lora"))
        # the probe: one forward over the rows per run (its head then trains on the stored vectors)
        probe = sum(2 * tune.seeds * rows / tune.batch_size * finetuning_step_flops(model, "probe", tune.batch_size,
                                                                                   tune.max_seq_len) / 3
                    for model in (bert, bert.for_arch("gpt")))
        return [*([] if pretraining_reused else [*(data if first_run else []), pretraining]),
                Item(f"pretraining the GPT, {steps:,} steps", gpu_flops=steps * gpt_step),
                Item(f"fine-tuning: 2 models x 3 regimes x 2 inits x {tune.seeds} seeds, {tune.epochs} epoch(s) of "
                     f"{rows:,} rows", gpu_flops=tuning + probe)]
    if lesson_id == "lesson06-after-bert":  # every model trained from scratch: no pretrained BERT, only its data
        variants = 4  # mlm, mlm+nsp, mlm+sop, electra (matched compute); random: none
        return [*(data if first_run and not pretraining_reused else []),
                Item(f"{variants} variants, {sizes['training_steps']:,} steps each",
                     gpu_flops=variants * sizes["training_steps"] * bert_step)]
    if lesson_id == "lesson07-after-bert-models":  # lesson 6's runs and sizes, its MLM BERT the baseline
        sizes = profile_spec.lesson_sizes.get("lesson06-after-bert", {})
        variants = 4  # albert-shared, albert, rope, and mlm (lesson 6's run: counted, though reused when found)
        # each step: the teacher's forward (~1/3 of a training step) and a 1-layer student's training step
        distil = sizes["distil_steps"] * 2 * (bert_step / 3 + bert_step / bert.n_layers)
        return [*([] if pretraining_reused else [*(data if first_run else []), pretraining]),
                Item(f"{variants} variants (lesson 6's MLM BERT among them, reused when found), "
                     f"{sizes['training_steps']:,} steps each",
                     gpu_flops=variants * sizes["training_steps"] * bert_step),
                Item(f"two students distilled, {sizes['distil_steps']:,} steps each", gpu_flops=distil)]
    return []


def print_budget(lesson_id: str, profile: str, *, pretraining_reused: bool = False, course: Any = None,
                 utilisation: float = ASSUMED_UTILISATION) -> float:
    """Print `lesson_plan` in minutes on a T4 (at the assumed utilisation; in brackets at 1.5x and half it) before a
    long cell starts; returns the total minutes. Says so when the plan exceeds one session."""
    items = lesson_plan(lesson_id, profile, course, pretraining_reused=pretraining_reused)
    total = sum(item.minutes(utilisation) for item in items)
    print(f"planned on a Colab T4 ({profile} profile): ESTIMATED from counted FLOPs at an assumed "
          f"{utilisation:.0%} of its {T4_FP16_PEAK / 1e12:.0f} TFLOP/s fp16 peak")
    for item in items:
        low, high = item.minutes(utilisation * 1.5), item.minutes(utilisation / 2)
        spread = f"({low:.1f}-{high:.1f})" if item.gpu_flops else "(CPU)"
        print(f"  {item.minutes(utilisation):6.1f} min {spread:<12} {item.what}")
    print(f"  {total:6.1f} min in all" + (f": MORE than the {SESSION_MINUTES:.0f} minutes this course plans a session "
                                          "for" if total > SESSION_MINUTES else ""))
    return total


__all__ = ["ASSUMED_UTILISATION", "Item", "SESSION_MINUTES", "T4_FP16_PEAK", "data_seconds", "finetuning_step_flops",
           "lesson_plan", "pretraining_step_flops", "print_budget", "vocabulary_seconds"]

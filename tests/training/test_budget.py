"""The lessons' GPU budgets: planned from FLOPs that are counted, not typed in, and within one session on gpu."""

import pytest
import torch

from bertcourse.config import ModelConfig
from bertcourse.course import load_course
from bertcourse.training.budget import (
    SESSION_MINUTES,
    T4_FP16_PEAK,
    data_seconds,
    finetuning_step_flops,
    lesson_plan,
    pretraining_step_flops,
    print_budget,
    vocabulary_seconds,
)

TINY = ModelConfig(vocab_size=300, n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=16)


def _counted(config, rows):
    from torch.utils.flop_counter import FlopCounterMode

    from bertcourse.model import build_model
    from bertcourse.training.flops import CPU_ATTENTION_FLOPS
    from bertcourse.training.objectives import next_token_labels

    ids = torch.randint(5, config.vocab_size, (rows, config.max_seq_len), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION_FLOPS) as counter:
        build_model(config)(input_ids=ids, attention_mask=mask, labels=next_token_labels(ids, mask)).loss.backward()
    return counter.get_total_flops()


def test_step_flops_are_counted_and_scale_with_the_batch():
    gpt = TINY.for_arch("gpt")
    assert pretraining_step_flops(gpt, 8) == _counted(gpt, 8)  # a GPT's step: every position, no draw
    # the 6ND rule of thumb (N body + head parameters, D tokens) agrees within its assumptions
    n = sum(p.numel() for p in __import__("bertcourse.model", fromlist=["build_model"]).build_model(gpt).parameters())
    assert 0.5 < pretraining_step_flops(gpt, 8) / (6 * n * 8 * gpt.max_seq_len) < 3
    bert = TINY.for_arch("bert")
    assert pretraining_step_flops(bert, 8) < pretraining_step_flops(gpt, 8)  # the BERT's head sees 15% only
    full, lora = (finetuning_step_flops(bert, regime, 8, 16) for regime in ("full", "lora"))
    assert 0 < lora < full  # LoRA computes no weight gradients of the frozen matrices


def test_the_vocabulary_learner_takes_minutes_at_wikitext_103s_word_types():
    assert vocabulary_seconds(16_131) == pytest.approx(3.5)
    assert vocabulary_seconds(2 * 16_131) == pytest.approx(3.5 * 2 ** 1.5)
    assert 2 * 60 <= vocabulary_seconds(270_000) <= 4 * 60  # ~64x the course corpus's 3.5 s
    assert data_seconds() > data_seconds(word_types=16_131) + 3 * 60


@pytest.mark.slow  # counts a step of the gpu profile's BERT on the CPU
def test_minutes_follow_the_counted_flops_at_the_assumed_rate():
    course = load_course()
    spec = course.profile("gpu")
    plan = lesson_plan("lesson03-tiny-bert", "gpu", course)
    step = pretraining_step_flops(spec.model.for_arch("bert", vocab_size=spec.vocab_size), spec.pretrain.batch_size)
    assert plan[-1].gpu_flops == spec.pretrain.max_steps * step
    assert plan[-1].minutes(0.2) == pytest.approx(spec.pretrain.max_steps * step / (0.2 * T4_FP16_PEAK) / 60)
    assert any(item.cpu_seconds and not item.gpu_flops for item in plan), "a first gpu run prepares WikiText-103"


@pytest.mark.slow  # counts steps of the gpu profile's models on the CPU (minutes on a loaded 2-core machine)
@pytest.mark.parametrize("lesson", ["lesson02-wwm", "lesson03-tiny-bert", "lesson04-finetuning", "lesson06-after-bert",
                                    "lesson07-after-bert-models"])
def test_every_lesson_fits_one_session_on_the_gpu_profile_even_without_reuse(lesson, capsys):
    total = print_budget(lesson, "gpu")
    shown = capsys.readouterr().out
    assert "ESTIMATED" in shown and "20%" in shown and f"{total:.1f} min in all" in shown
    assert 0 < total <= SESSION_MINUTES, shown
    if lesson in ("lesson04-finetuning", "lesson07-after-bert-models"):
        reused = sum(i.minutes() for i in lesson_plan(lesson, "gpu", pretraining_reused=True))
        assert reused < total - 20, "reusing lesson 3's pretraining saves its half hour"

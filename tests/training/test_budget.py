"""The lessons' GPU budgets: planned from FLOPs that are counted, not typed in, and within one session on gpu."""

import json

import nbformat
import pytest
import torch

from bertcourse.config import ModelConfig
from bertcourse.course import load_course
from bertcourse.training.budget import (
    ASSUMED_OP_SECONDS,
    RATES_FILE,
    SESSION_MINUTES,
    T4_FP16_PEAK,
    Item,
    data_seconds,
    finetuning_batch_seconds,
    finetuning_step_flops,
    finetuning_step_ops,
    lesson_plan,
    peak_flops,
    plan_rates,
    pretraining_batch_seconds,
    pretraining_step_flops,
    pretraining_step_ops,
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
def test_minutes_follow_the_counted_flops_and_ops_at_the_assumed_rates():
    course = load_course()
    spec = course.profile("gpu")
    plan = lesson_plan("lesson03-tiny-bert", "gpu", course)
    bert = spec.model.for_arch("bert", vocab_size=spec.vocab_size)
    step = pretraining_step_flops(bert, spec.pretrain.batch_size)
    ops, batch = pretraining_step_ops(bert), pretraining_batch_seconds(bert, spec.pretrain.batch_size)
    live = spec.sizes("lesson03-tiny-bert")["live_steps"]  # the lesson's own run; the long one is shipped
    assert plan[-1].gpu_flops == live * step and plan[-1].step_ops == ops > 500
    expected = live * (max(step / (0.2 * T4_FP16_PEAK), ops * ASSUMED_OP_SECONDS) + batch)
    assert plan[-1].minutes(0.2) == pytest.approx(expected / 60)
    assert any(item.cpu_seconds and not item.gpu_flops for item in plan), "a first gpu run prepares WikiText-103"


@pytest.mark.slow  # counts steps of the gpu profile's models on the CPU (minutes on a loaded 2-core machine)
@pytest.mark.parametrize("lesson", [
    "lesson02-wwm", "lesson03-tiny-bert", "lesson04-finetuning", "lesson06-after-bert",
    "lesson07-after-bert-models"])
def test_every_lesson_fits_one_session_on_the_gpu_profile_even_without_reuse(lesson, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a plan is printed on a GPU only
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    total = print_budget(lesson, "gpu")
    shown = capsys.readouterr().out
    assert "ESTIMATED" in shown and "20%" in shown and f"{total:.1f} min in all" in shown
    assert 0 < total <= SESSION_MINUTES, shown
    if lesson == "lesson07-after-bert-models":
        reused = sum(i.minutes() for i in lesson_plan(lesson, "gpu", pretraining_reused=True))
        assert reused < total - 20, "reusing lesson 3's pretraining saves its half hour"


# ----------------------------------------------------------------------------- what a step costs on a GPU


def test_a_fine_tuning_step_on_a_t4_is_launch_bound_within_the_reviews_range():
    """The review counted 837 ops (LoRA 934) in an fp16 fine-tuning step at batch 32, 13-20 ms on a T4, where its
    FLOPs alone plan 2.6 ms: the plan's step is the ops' time."""
    spec = load_course().profile("gpu")
    bert, tune = spec.model.for_arch("bert", vocab_size=spec.vocab_size), spec.finetuning()
    full, lora = (finetuning_step_ops(bert, regime, tune.max_seq_len) for regime in ("full", "lora"))
    assert 700 <= full < lora <= 1100
    step = Item("one step", 1, finetuning_step_flops(bert, "full", tune.batch_size, tune.max_seq_len), full,
                finetuning_batch_seconds(tune.batch_size, tune.max_seq_len))
    assert step.step_flops / (0.2 * T4_FP16_PEAK) < 0.005  # FLOPs alone: a few ms
    assert 0.013 <= step.seconds() <= 0.020


def test_counting_a_step_leaves_the_callers_random_state_alone():
    state = torch.get_rng_state()
    pretraining_step_ops(TINY.for_arch("bert", dropout=0.05))  # a shape not counted before in this process
    assert torch.equal(torch.get_rng_state(), state)


def test_the_gpu_is_named_as_it_is_with_its_own_peak(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA L4")
    rates = plan_rates(root=tmp_path)
    assert (rates.gpu, rates.flops_per_s, rates.measured) == ("NVIDIA L4", 0.2 * 121e12, False)
    assert peak_flops("NVIDIA A100-SXM4-40GB") == 312e12 and peak_flops("NVIDIA A10G") == 125e12
    assert peak_flops("Tesla T4") == T4_FP16_PEAK == peak_flops("a GPU nobody listed")
    print_budget("lesson02-wwm", "cpu-quick", course=load_course())
    assert capsys.readouterr().out.startswith("planned on NVIDIA L4 (cpu-quick profile): ESTIMATED")


def test_without_a_gpu_no_plan_is_printed(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert print_budget("lesson02-wwm", "cpu-quick", course=load_course()) == 0.0
    assert capsys.readouterr().out == ""


def test_the_rates_the_gpu_check_measured_replace_the_assumed_ones(monkeypatch, tmp_path):
    saved = tmp_path / RATES_FILE
    saved.parent.mkdir(parents=True)
    saved.write_text(json.dumps({"gpu": "Tesla T4", "flops_per_s": 9e12, "op_seconds": 2.2e-5, "date": "2027-01-02"}))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rates = plan_rates(root=tmp_path)
    assert (rates.gpu, rates.flops_per_s, rates.op_seconds) == ("Tesla T4", 9e12, 2.2e-5) and rates.measured
    assert "2027-01-02" in rates.source
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # another GPU than the one measured
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-40GB")
    assert not plan_rates(root=tmp_path).measured


# every training call a lesson makes, and the words its plan item says it with
TRAINING_CALLS = {"pretrain(": ("pretraining", "BERTs"), "compare(": ("fine-tuning",), "label_curve(": ("label curve",),
                  "train_head(": ("task heads",), "run_variant(": ("variants",), "distil(": ("distilled",)}


def test_every_training_call_of_every_notebook_is_in_its_lessons_plan():
    course = load_course()
    for lesson in course.lessons:
        cells = nbformat.read(course.root / lesson.notebook, as_version=4).cells
        code = "\n".join(cell.source for cell in cells if cell.cell_type == "code")
        calls = [call for call in TRAINING_CALLS if call in code]
        items = " | ".join(item.what for item in lesson_plan(lesson.id, "cpu-quick", course))
        missing = [call for call in calls if not any(word in items for word in TRAINING_CALLS[call])]
        assert not missing, f"{lesson.notebook} calls {missing} but its plan holds only: {items or 'nothing'}"
        assert ("print_budget(" in code) == bool(calls), f"{lesson.notebook}: trains and prints no plan, or vice versa"

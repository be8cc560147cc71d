"""Exercise 8's own comparison (`bertcourse.training.own_comparison`): what it hands the student's functions is lesson
2's test set and fresh classifiers on the shipped models, as the notebook's text says."""

from __future__ import annotations

from pathlib import Path

import torch

from bertcourse.masking import IGNORE_INDEX
from bertcourse.training.checkpoint import load_shipped
from bertcourse.training.own_comparison import (
    lesson2_models,
    lesson2_test_batches,
    mlm_logits,
    shipped_maker,
    sst2_label_budget,
)

SENTENCES = ["the television actor performed in the royal court theatre .", "a film was made in 2001 .",
             "robert is an english actor ."]


def test_lesson2_test_batches_mask_every_target_the_same_way_each_time():
    _, tokenizer = shipped_maker("bert")
    first = lesson2_test_batches(tokenizer, SENTENCES, 64, size=2)
    again = lesson2_test_batches(tokenizer, SENTENCES, 64, size=2)
    assert [len(batch["input_ids"]) for batch in first] == [2, 1]
    for batch, other in zip(first, again, strict=True):
        targets = batch["labels"] != IGNORE_INDEX
        assert targets.any(1).all(), "every sentence has a target"
        assert (batch["input_ids"][targets] == tokenizer.mask_token_id).all(), "every target shows [MASK]"
        assert torch.equal(batch["labels"], other["labels"]), "the test masks are drawn once, from a fixed seed"


def test_mlm_logits_score_every_position_in_eval_mode():
    mlm, tokenizer, _ = load_shipped("bert")
    batch = lesson2_test_batches(tokenizer, SENTENCES, 64)[0]
    logits = mlm_logits(mlm.train(), batch)
    assert logits.shape == (*batch["input_ids"].shape, len(tokenizer)) and logits.dtype == torch.float32
    assert not mlm.training, "scored without dropout"


def test_missing_lesson2_runs_read_as_none(tmp_path):
    assert lesson2_models({"token-level": tmp_path / "a", "whole-word": tmp_path / "b"}) is None


def test_shipped_maker_builds_a_fresh_classifier_from_the_global_generator():
    make_model, tokenizer = shipped_maker("gpt")
    torch.manual_seed(3)
    first = make_model()
    torch.manual_seed(3)
    second = make_model()
    third = make_model()
    assert not first.training, "handed over in eval mode, as a loaded model is"
    assert torch.equal(first.classifier.weight, second.classifier.weight)
    assert not torch.equal(second.classifier.weight, third.classifier.weight)
    assert first.encoder is not second.encoder, "each model trains its own copy of the encoder"
    ids = torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]])
    logits = first(ids)
    assert logits.shape == (2, 2)
    assert torch.allclose(first(ids[:1, :3]), logits[:1], atol=1e-5), "padding does not change a row's logits"
    assert tokenizer.pad_token_id == 0


def test_sst2_label_budget_is_balanced_fixed_and_batched(data_dir):
    _, tokenizer = shipped_maker("bert")
    train, (eval_ids, eval_labels) = sst2_label_budget(tokenizer, 40, batch_size=16, data_dir=data_dir)
    again, _ = sst2_label_budget(tokenizer, 40, batch_size=16, data_dir=data_dir)
    labels = torch.cat([y for _, y in train])
    assert [len(y) for _, y in train] == [16, 16, 8] and int(labels.sum()) == 20
    assert all(torch.equal(x, y) for (x, _), (y, _) in zip(train, again, strict=True))
    assert eval_ids.shape[0] == len(eval_labels) == 872 and eval_ids.shape[1] <= 64


def test_lesson2_folders_follow_lesson_2s_names(corpus, quick_tokenizer):
    from bertcourse.course import load_course
    from bertcourse.training.own_comparison import lesson2_folders, lesson2_start

    spec = load_course().profile("cpu-quick")
    start = lesson2_start(quick_tokenizer, spec.model)
    assert start is None, "cpu-quick's vocabulary is not the shipped BERT's: lesson 2 starts from random weights"
    scratch = lesson2_folders("cpu-quick", corpus, None)
    continued = lesson2_folders("cpu-quick", corpus, Path("shipped"))
    assert scratch["whole-word"].name.startswith("lesson02-whole-word-cpu-quick-")
    assert continued["token-level"].name.startswith("lesson02-token-level-continued-cpu-quick-")

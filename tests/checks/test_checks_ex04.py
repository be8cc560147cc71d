"""Proof of the hidden checks of ex04-finetuning: each misconception fails exactly the checks aimed at it
(every other check still passes it, so a mistake costs its own points and no others), several different
correct implementations (indexing or gather, loops or vectorised, inline or function pooling, any way of
freezing, zero_grad before or after the step) pass every check and every visible test, and stubs and the
release score 0.

Each source is graded by the real engine (worker, sandbox, judge) through `bertcourse.authoring.proofs`,
so a proof here is a proof of what a student's notebook would get.
"""

from __future__ import annotations

import os
from unittest import mock

import pytest
from check_proofs import (
    assert_bundle_caught,
    assert_bundles_sound,
    assert_every_check_targeted,
    assert_passes_every_check,
    assert_points_add_up,
    assert_release_scores_zero,
    assert_scores_zero,
    bundle_ids,
    bundle_misconceptions,
    checks_of,
    graded_cells,
    notebook_cells,
    reference_source,
    stubbed,
    wrong_entry,
)

pytestmark = pytest.mark.slow  # every proof grades a notebook with the real engine

CHECKS = "autograder/checks/ex04_finetuning.py"
NOTEBOOK = "solutions/ex04-finetuning/finetuning.ipynb"
RELEASE = "exercises/ex04-finetuning/finetuning.ipynb"

PRELUDE = """
import copy
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import SGD
from bertcourse.model import ModelConfig, build_model
"""



def solution_source() -> str:
    """The solution notebook's own solution cells, after the imports of its set-up cell."""
    return reference_source(NOTEBOOK, PRELUDE)


# ----------------------------------------------------------------------------- other correct implementations

GATHER = '''
def cls_pool(hidden, attention_mask):
    return hidden.select(1, 0)


def last_token_pool(hidden, attention_mask):
    seq = attention_mask.shape[1]
    last = seq - 1 - attention_mask.flip(1).argmax(dim=1)  # the first 1 seen from the end
    index = last.view(-1, 1, 1).expand(-1, 1, hidden.shape[-1])
    return hidden.gather(1, index).squeeze(1)


def mean_pool(hidden, attention_mask):
    real = attention_mask.bool().unsqueeze(-1)
    return hidden.masked_fill(~real, 0.0).sum(1) / real.sum(1)


class SequenceClassifier(nn.Module):
    def __init__(self, encoder, n_labels=2, pooling="cls", dropout=0.1):
        super().__init__()
        self.encoder = encoder
        self.pooling = pooling
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.d_model, n_labels)

    def forward(self, input_ids, attention_mask, token_type_ids=None, labels=None):
        hidden = self.encoder.encode(input_ids, attention_mask, token_type_ids)
        pool = {"cls": cls_pool, "last": last_token_pool, "mean": mean_pool}[self.pooling]
        logits = self.classifier(self.dropout(pool(hidden, attention_mask)))
        loss = F.cross_entropy(logits, labels, reduction="sum") / len(labels) if labels is not None else None
        return loss, logits


def freeze_encoder(model):
    for name, parameter in model.named_parameters():
        if not name.startswith("classifier."):
            parameter.requires_grad = False
    return model


def train_step(model, batch, optimizer):
    model.train()
    model.zero_grad(set_to_none=False)
    loss, _ = model(**batch)
    loss.backward()
    optimizer.step()
    return float(loss)
'''

LOOPS = '''
def cls_pool(hidden, attention_mask):
    return torch.stack([row[0] for row in hidden])


def last_token_pool(hidden, attention_mask):
    rows = []
    for b in range(hidden.shape[0]):
        positions = [t for t in range(hidden.shape[1]) if attention_mask[b, t] == 1]
        rows.append(hidden[b, positions[-1]])
    return torch.stack(rows)


def mean_pool(hidden, attention_mask):
    return torch.stack([hidden[b][attention_mask[b].bool()].mean(0) for b in range(hidden.shape[0])])


class SequenceClassifier(nn.Module):
    def __init__(self, encoder, n_labels=2, pooling="cls", dropout=0.1):
        super().__init__()
        self.encoder, self.pooling = encoder, pooling
        self.dropout = nn.Dropout(p=dropout)
        self.classifier = nn.Linear(self.encoder.config.d_model, n_labels)

    def forward(self, input_ids, attention_mask, token_type_ids=None, labels=None):
        hidden = self.encoder.encode(input_ids, attention_mask, token_type_ids=token_type_ids)
        if self.pooling == "cls":
            pooled = hidden[:, 0, :]
        elif self.pooling == "last":
            pooled = last_token_pool(hidden, attention_mask)
        else:
            pooled = mean_pool(hidden, attention_mask)
        logits = self.classifier(F.dropout(pooled, self.dropout.p, training=self.training))
        if labels is None:
            return None, logits
        return F.nll_loss(F.log_softmax(logits, dim=-1), labels), logits


def freeze_encoder(model):
    model.encoder.requires_grad_(False)
    return model


def train_step(model, batch, optimizer):
    model.train()
    outputs = model(batch["input_ids"], batch["attention_mask"], token_type_ids=batch.get("token_type_ids"),
                    labels=batch["labels"])
    loss = outputs[0]
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()  # after the step: the next call starts from clean gradients
    return loss.item()
'''

EINSUM = '''
def cls_pool(hidden, attention_mask):
    return hidden[:, 0].clone()


def last_token_pool(hidden, attention_mask):
    positions = torch.arange(attention_mask.shape[1])
    last = torch.where(attention_mask == 1, positions, torch.full_like(positions, -1)).amax(dim=1)
    one_hot = F.one_hot(last, attention_mask.shape[1]).to(hidden.dtype)
    return torch.einsum("bs,bsd->bd", one_hot, hidden)


def mean_pool(hidden, attention_mask):
    weights = attention_mask.float()
    weights = weights / weights.sum(dim=1, keepdim=True)
    return torch.einsum("bs,bsd->bd", weights, hidden)


class SequenceClassifier(nn.Module):
    POOLS = {"cls": "cls_pool", "last": "last_token_pool", "mean": "mean_pool"}

    def __init__(self, encoder, n_labels=2, pooling="cls", dropout=0.1):
        super().__init__()
        self.encoder = encoder
        self.pool_name = self.POOLS[pooling]
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.d_model, n_labels)

    def forward(self, input_ids, attention_mask, token_type_ids=None, labels=None):
        hidden = self.encoder.encode(input_ids, attention_mask, token_type_ids)
        pooled = globals()[self.pool_name](hidden, attention_mask)
        logits = self.classifier(self.dropout(pooled))
        loss = None
        if labels is not None:
            loss = -logits.log_softmax(-1).gather(1, labels[:, None]).mean()
        return loss, logits


def freeze_encoder(model):
    for parameter in model.encoder.parameters():
        parameter.requires_grad_(False)
    for parameter in model.classifier.parameters():
        parameter.requires_grad_(True)
    return model


def train_step(model, batch, optimizer):
    model.train(True)
    optimizer.zero_grad(set_to_none=True)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    loss, logits = model(**inputs, labels=batch["labels"])
    loss.backward()
    optimizer.step()
    return loss.detach().item()
'''

ANSWERS = 'answer_q1, answer_q2, answer_q3, answer_q4 = "c", " A", "(d)", "b"\n'

CORRECT = {
    "solution": solution_source,
    "gather, flip, named_parameters, model.zero_grad": lambda: PRELUDE + GATHER + ANSWERS,
    "loops, inline cls, nll_loss, requires_grad_ on the encoder, zero_grad after the step":
        lambda: PRELUDE + LOOPS + ANSWERS,
    "one-hot einsum, pooling by name, gathered log-softmax": lambda: PRELUDE + EINSUM + ANSWERS,
}


@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_implementations_pass_every_check(name):
    assert_passes_every_check(CHECKS, CORRECT[name](), name)


# ----------------------------------------------------------------------------- misconceptions

BASE = PRELUDE + GATHER + ANSWERS
LOOPED = PRELUDE + LOOPS + ANSWERS

POOLING = {"test_cls_pool_reads_position_0", "test_last_token_pool_on_right_padded_rows",
           "test_last_token_pool_on_left_padded_rows", "test_last_token_pool_on_rows_without_padding",
           "test_mean_pool_over_real_tokens_only"}
CLASSIFIER = {"test_classifier_logits_with_cls_pooling", "test_classifier_uses_the_chosen_pooling",
              "test_loss_is_cross_entropy_of_the_raw_logits", "test_loss_is_averaged_over_the_batch",
              "test_classifier_dropout_on_the_pooled_vector_in_training_only",
              "test_full_fine_tuning_reaches_the_encoder"}
STEP = {"test_train_step_returns_the_batch_loss_as_a_float", "test_train_step_takes_one_gradient_step",
        "test_train_step_does_not_accumulate_gradients", "test_train_step_trains_in_training_mode"}


def mutate(old: str, new: str, base: str = BASE) -> str:
    assert base.count(old) == 1, old
    return base.replace(old, new)


def everything_else(*targeted: str) -> frozenset[str]:
    """Every other check must still pass: a mistake costs only the checks aimed at it."""
    return frozenset(set(checks_of(CHECKS)) - set(targeted))


def wrong(source: str, *targeted: str) -> tuple[str, set[str], frozenset[str]]:
    return source, set(targeted), everything_else(*targeted)


NO_STEP = ("test_train_step_takes_one_gradient_step", "test_train_step_does_not_accumulate_gradients",
           # a side condition, credited only once a step is taken
           "test_train_step_trains_in_training_mode")

WRONG = {
    # pooling
    "cls_pool reads the last position": wrong(
        mutate("return hidden.select(1, 0)", "return hidden[:, -1]"), "test_cls_pool_reads_position_0"),
    "last token at position 0 (a decoder pooled like BERT)": wrong(
        mutate("    seq = attention_mask.shape[1]\n", "    return hidden[:, 0]\n"),
        "test_last_token_pool_on_right_padded_rows", "test_last_token_pool_on_left_padded_rows",
        "test_last_token_pool_on_rows_without_padding"),
    "last token at index -1, padding included": wrong(
        mutate("    seq = attention_mask.shape[1]\n", "    return hidden[:, -1]\n"),
        "test_last_token_pool_on_right_padded_rows"),
    "mask.sum(1) - 1, right for right padding only": wrong(
        mutate("last = seq - 1 - attention_mask.flip(1).argmax(dim=1)", "last = attention_mask.sum(1) - 1"),
        "test_last_token_pool_on_left_padded_rows"),
    "first padding position - 1, clamped at 0": wrong(
        mutate("last = seq - 1 - attention_mask.flip(1).argmax(dim=1)",
               "last = ((attention_mask == 0).long().argmax(dim=1) - 1).clamp(min=0)"),
        "test_last_token_pool_on_left_padded_rows", "test_last_token_pool_on_rows_without_padding"),
    "mean over padding too": wrong(
        mutate("return hidden.masked_fill(~real, 0.0).sum(1) / real.sum(1)", "return hidden.mean(1)"),
        "test_mean_pool_over_real_tokens_only"),
    "masked sum divided by the sequence length": wrong(
        mutate("return hidden.masked_fill(~real, 0.0).sum(1) / real.sum(1)",
               "return hidden.masked_fill(~real, 0.0).sum(1) / hidden.shape[1]"),
        "test_mean_pool_over_real_tokens_only"),
    # the classifier
    "pooling argument ignored ([CLS] always)": wrong(
        mutate('pool = {"cls": cls_pool, "last": last_token_pool, "mean": mean_pool}[self.pooling]',
               "pool = cls_pool"),
        "test_classifier_uses_the_chosen_pooling"),
    "token_type_ids not passed to the encoder": wrong(
        mutate("hidden = self.encoder.encode(input_ids, attention_mask, token_type_ids)",
               "hidden = self.encoder.encode(input_ids, attention_mask)"),
        "test_classifier_logits_with_cls_pooling", "test_classifier_uses_the_chosen_pooling"),
    "a copy of the encoder": wrong(
        mutate("self.encoder = encoder\n", "self.encoder = copy.deepcopy(encoder)\n"),
        "test_classifier_logits_with_cls_pooling"),
    "two labels whatever n_labels": wrong(
        mutate("self.classifier = nn.Linear(encoder.config.d_model, n_labels)",
               "self.classifier = nn.Linear(encoder.config.d_model, 2)"),
        *CLASSIFIER),  # the training checks use two labels: a part-2 mistake costs part 2 only
    "softmax before cross-entropy": wrong(
        mutate('F.cross_entropy(logits, labels, reduction="sum")',
               'F.cross_entropy(logits.softmax(-1), labels, reduction="sum")'),
        "test_loss_is_cross_entropy_of_the_raw_logits"),
    "loss summed over the batch": wrong(
        mutate('F.cross_entropy(logits, labels, reduction="sum") / len(labels)',
               'F.cross_entropy(logits, labels, reduction="sum")'),
        "test_loss_is_averaged_over_the_batch"),
    "dropout forgotten": wrong(
        mutate("self.classifier(self.dropout(pool(hidden, attention_mask)))",
               "self.classifier(pool(hidden, attention_mask))"),
        "test_classifier_dropout_on_the_pooled_vector_in_training_only"),
    "dropout also in eval mode": wrong(
        mutate("F.dropout(pooled, self.dropout.p, training=self.training)", "F.dropout(pooled, self.dropout.p)",
               LOOPED),
        "test_classifier_dropout_on_the_pooled_vector_in_training_only"),
    "dropout rate fixed at 0.1": wrong(
        mutate("self.dropout = nn.Dropout(dropout)", "self.dropout = nn.Dropout(0.1)"),
        "test_classifier_dropout_on_the_pooled_vector_in_training_only"),
    "dropout rate 1 - p": wrong(
        mutate("self.dropout = nn.Dropout(dropout)", "self.dropout = nn.Dropout(1 - dropout)"),
        "test_classifier_dropout_on_the_pooled_vector_in_training_only"),
    "dropout on the logits": wrong(
        mutate("logits = self.classifier(self.dropout(pool(hidden, attention_mask)))",
               "logits = self.dropout(self.classifier(pool(hidden, attention_mask)))"),
        "test_classifier_dropout_on_the_pooled_vector_in_training_only"),
    "encoder run under torch.no_grad() (features, not fine-tuning)": wrong(
        mutate("        hidden = self.encoder.encode(input_ids, attention_mask, token_type_ids)\n",
               "        with torch.no_grad():\n"
               "            hidden = self.encoder.encode(input_ids, attention_mask, token_type_ids)\n"),
        "test_full_fine_tuning_reaches_the_encoder"),
    "pooled vector detached": wrong(
        mutate("self.classifier(self.dropout(pool(hidden, attention_mask)))",
               "self.classifier(self.dropout(pool(hidden, attention_mask).detach()))"),
        "test_full_fine_tuning_reaches_the_encoder"),
    # the probe
    "probe freezes the head too": wrong(
        mutate('        if not name.startswith("classifier."):\n            parameter.requires_grad = False\n',
               "        parameter.requires_grad = False\n"),
        "test_probe_still_trains_the_head"),
    "probe freezes only the embeddings": wrong(
        mutate('if not name.startswith("classifier."):', 'if name.startswith("encoder.embeddings."):'),
        "test_probe_freezes_every_encoder_parameter"),
    "probe by eval mode instead of requires_grad": wrong(
        mutate('    for name, parameter in model.named_parameters():\n'
               '        if not name.startswith("classifier."):\n            parameter.requires_grad = False\n',
               "    model.encoder.eval()\n"),
        "test_probe_freezes_every_encoder_parameter", "test_probe_still_trains_the_head",
        "test_probe_returns_the_model_it_froze"),  # side conditions, credited only once something is frozen
    "probe frozen but not returned": wrong(
        mutate("            parameter.requires_grad = False\n    return model\n",
               "            parameter.requires_grad = False\n"),
        "test_probe_returns_the_model_it_froze"),
    # the training step
    "returns the loss tensor": wrong(
        mutate("    return float(loss)\n", "    return loss\n"), "test_train_step_returns_the_batch_loss_as_a_float"),
    "returns the loss after the step": wrong(
        mutate("    return float(loss)\n", "    return float(model(**batch)[0])\n"),
        "test_train_step_returns_the_batch_loss_as_a_float"),
    "no zero_grad: gradients accumulate": wrong(
        mutate("    model.zero_grad(set_to_none=False)\n", ""), "test_train_step_does_not_accumulate_gradients"),
    "no model.train(): trains in whatever mode it finds": wrong(
        mutate("    model.train()\n    model.zero_grad", "    model.zero_grad"),
        "test_train_step_trains_in_training_mode"),
    "model.eval() in the training step": wrong(
        mutate("    model.train()\n    model.zero_grad", "    model.eval()\n    model.zero_grad"),
        "test_train_step_trains_in_training_mode"),
    "no optimizer.step()": wrong(mutate("    optimizer.step()\n    return float(loss)", "    return float(loss)"),
                                 *NO_STEP),
    "step before backward": wrong(
        mutate("    loss.backward()\n    optimizer.step()\n", "    optimizer.step()\n    loss.backward()\n"), *NO_STEP),
    "gradients zeroed between backward and step": wrong(
        mutate("    model.zero_grad(set_to_none=False)\n    loss, _ = model(**batch)\n    loss.backward()\n",
               "    loss, _ = model(**batch)\n    loss.backward()\n    model.zero_grad(set_to_none=False)\n"),
        *NO_STEP),
    # concepts
    "Q1: [CLS] thought to be masked in pretraining": wrong(
        mutate('"c", " A", "(d)", "b"', '"a", " A", "(d)", "b"'), "test_q1_what_makes_cls_a_sentence_summary"),
    "Q2: a causal decoder's states thought to see the whole sentence": wrong(
        mutate('"c", " A", "(d)", "b"', '"c", "b", "(d)", "b"'), "test_q2_mean_pooling_a_decoder"),
    "Q3: full fine-tuning's tie read as the verdict on pretraining": wrong(
        mutate('"c", " A", "(d)", "b"', '"c", " A", "b", "b"'), "test_q3_what_a_probe_measures"),
    "Q4: padding thought to zero the outputs": wrong(
        mutate('"c", " A", "(d)", "b"', '"c", " A", "(d)", "a"'), "test_q4_position_minus_1_of_a_right_padded_row"),
}


BUNDLES = bundle_misconceptions(CHECKS, WRONG, BASE)


@pytest.mark.parametrize("bundle", BUNDLES, ids=bundle_ids(BUNDLES))
def test_each_misconception_fails_exactly_the_checks_aimed_at_it(bundle):
    """Misconceptions that cannot move each other's checks, graded in one notebook (check_proofs.py)."""
    assert_bundle_caught(CHECKS, WRONG, BASE, bundle)


def test_bundled_misconceptions_cannot_move_each_others_checks():
    assert_bundles_sound(CHECKS, WRONG, BASE, BUNDLES)


def test_every_check_is_the_target_of_a_misconception():
    cells = set(graded_cells(NOTEBOOK))
    assert_every_check_targeted(CHECKS, WRONG, cells)


def test_check_points_add_up_to_the_autograded_cells():
    assert_points_add_up(CHECKS, NOTEBOOK)


# ----------------------------------------------------------------------------- stubs earn nothing



@pytest.mark.parametrize("stub", ["return", "return behind the real __init__"])  # raise: the release
def test_a_stub_notebook_scores_zero(stub):
    cells = {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"]) for c in notebook_cells(NOTEBOOK)
             if c["metadata"].get("nbgrader", {}).get("solution")}
    sources = {}
    for grade_id, source in cells.items():  # cell by cell, as nbgrader stubs them
        sources[grade_id] = stubbed(source, stub.split()[0], keep_init="__init__" in stub)
        assert sources[grade_id] != source, grade_id
        compile(sources[grade_id], grade_id, "exec")
    first = next(iter(sources))
    sources[first] = PRELUDE + sources[first]
    assert_scores_zero(CHECKS, sources, f"a {stub} stub")


def test_the_release_scores_zero():
    assert_release_scores_zero(RELEASE, "ex04-finetuning")


# ----------------------------------------------------------------------------- visible tests agree


def visible_cells() -> list[tuple[str, str]]:
    return [(c["metadata"]["nbgrader"]["grade_id"], "".join(c["source"])) for c in notebook_cells(NOTEBOOK)
            if c["metadata"].get("nbgrader", {}).get("grade")]


def visible_failures(source: str) -> list[str]:
    """The visible test cells that fail when run in this process after `source`."""
    import torch

    import bertcourse.selfcheck

    namespace = {name: getattr(bertcourse.selfcheck, name) for name in bertcourse.selfcheck.__all__}
    exec(source, namespace)  # noqa: S102 - the course's own test sources
    failed = []
    # as nbgrader runs them: a failing visible cell raises (for a student it reports and Run All goes on)
    with torch.random.fork_rng(), mock.patch.dict(os.environ, {bertcourse.selfcheck.GRADING_VARIABLE: "validate"}):
        torch.manual_seed(0)
        for grade_id, cell in visible_cells():
            try:
                exec(cell, namespace)  # noqa: S102
            except AssertionError:
                failed.append(grade_id)
    return failed


@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_implementations_pass_the_visible_tests(name):
    """No correct answer that the hidden checks accept fails a visible test."""
    assert visible_failures(CORRECT[name]()) == []


@pytest.mark.parametrize("name", ["last token at index -1, padding included", "mask.sum(1) - 1, right for right "
                                  "padding only", "softmax before cross-entropy", "loss summed over the batch",
                                  "pooled vector detached", "probe freezes the head too",
                                  "no zero_grad: gradients accumulate", "no model.train(): trains in whatever "
                                  "mode it finds"])
def test_the_visible_tests_catch_the_classic_mistakes_too(name):
    source, targeted, _ = wrong_entry(WRONG[name])
    cells = {checks_of(CHECKS)[check]["cell"] for check in targeted}
    assert cells <= set(visible_failures(source)), name

"""Hidden checks of ex04-finetuning: the student's `cls_pool`, `last_token_pool`, `mean_pool`,
`SequenceClassifier`, `freeze_encoder`, `train_step` and four concept answers.

The encoders are the course's own (`bertcourse.model.build_model`), built in the student's worker through
the notebook's `ModelConfig` and `build_model` and loaded with the judge's weights, random EVERYWHERE
(`randomize_`, std 0.2), so the judge computes the same hidden states. Batches are padded on the right
(BERT) or on the left (a decoder) to lengths that differ row by row, with rows of one token and rows
without padding, so position 0, position -1 and `mask.sum(1) - 1` each land on a wrong vector somewhere.

Each check aims at one property and is built so that mistakes elsewhere do not trip it:

- the classifier checks accept the logits of the reference pooling OR of the student's own pooling
  function (a wrong `last_token_pool` costs part 1, not part 2);
- the loss checks compare the loss with the student's own logits and the student's own single-row losses;
- the training-step checks run the student's own `SequenceClassifier` (its dropout set to 0 where dropout
  is not what is checked), and expect exactly the SGD step that the student's own loss gives: they need
  part 2 to run and return a differentiable loss, not to be right.

No default hides a mistake: dropout is checked at p = 0.25 (not 0.1, not 0.5 = 1 - 0.5) in both modes, with
an identity head so that every logit shows whether its feature was dropped or scaled by 1 / (1 - p);
n_labels is 3 or d_model, never the default 2; the training-mode check hands `train_step` a model in eval
mode with dropout on. A side condition (the head still trains, the model left in training mode) is
credited only with a valid result (something frozen, a step taken), so a notebook of stubs scores 0.
Nothing depends on the order of random draws: dropout is read off exactly, and its share is tested
against an exact binomial range (tail 1e-8).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _common import concept_answer, rate_ok, shaped, tensor

from bertcourse.classifier import cls_pool, last_token_pool, mean_pool
from bertcourse.grading import NotData, Remote, StudentError
from bertcourse.model import ModelConfig, build_model
from bertcourse.model_support import randomize_

VOCAB, D_MODEL, SEQ = 40, 16, 10
PAD = 0
TOL = dict(atol=1e-4, rtol=1e-4)
P_DROP = 0.25  # neither a default (0.1, 0.0) nor its own complement: nn.Dropout(1 - p) is caught too
LR = 0.5  # SGD without momentum: a step is exactly lr * grad

BERT = ModelConfig(vocab_size=VOCAB, n_layers=2, d_model=D_MODEL, n_heads=2, d_ff=32, max_seq_len=16, dropout=0.0)
GPT = BERT.for_arch("gpt")

# Row lengths: one full row, rows of one and two tokens, the rest in between (SEQ = 10).
LENGTHS = torch.tensor([10, 7, 4, 1, 9, 2])
PADDED = torch.tensor([7, 4, 1, 9, 2, 6])  # every row padded: position -1 is never real on the right


# ----------------------------------------------------------------------------- references


# the package's poolings are the references (bertcourse.classifier; tests/test_classifier.py pins them)
POOLS = {"cls": ("cls_pool", cls_pool), "last": ("last_token_pool", last_token_pool),
         "mean": ("mean_pool", mean_pool)}


def real_positions(lengths: torch.Tensor, side: str) -> torch.Tensor:
    """[B, SEQ] bool: True at real tokens, padded on `side` ("right" or "left") to `lengths`."""
    positions = torch.arange(SEQ)
    if side == "right":
        return positions < lengths[:, None]
    return positions >= SEQ - lengths[:, None]


def hidden_states(seed: int, real: torch.Tensor) -> torch.Tensor:
    """Random [B, SEQ, D]; padded positions hold large values, so that reading or averaging them shows."""
    hidden = torch.randn(real.shape[0], SEQ, D_MODEL, generator=torch.Generator().manual_seed(seed))
    return torch.where(real[..., None], hidden, 20.0 + 5.0 * hidden)


def make_batch(seed: int, lengths: torch.Tensor = LENGTHS, side: str = "right", n_labels: int = 3,
               segments: bool = True):
    """(input_ids, attention_mask, token_type_ids or None, labels): padding id 0, segment B in the second
    half of each right-padded row, one label per row."""
    g = torch.Generator().manual_seed(seed)
    real = real_positions(lengths, side)
    ids = torch.randint(5, VOCAB, real.shape, generator=g).masked_fill(~real, PAD)
    types = None
    if segments and side == "right":
        types = ((torch.arange(SEQ) >= (lengths[:, None] + 1) // 2) & real).long()
    labels = torch.randint(0, n_labels, (len(lengths),), generator=g)
    return ids, real.long(), types, labels


def reference_encoder(config: ModelConfig, seed: int) -> torch.nn.Module:
    return randomize_(build_model(config), torch.Generator().manual_seed(seed)).eval()


def encoder_parameters(config: ModelConfig = BERT) -> list[str]:
    """The encoder's parameter names (the tied decoder weight under its embedding's name)."""
    return [name for name, _ in build_model(config).named_parameters()]


def encoder_modules(config: ModelConfig = BERT) -> list[str]:
    return [name for name, _ in build_model(config).named_modules() if name]


def head_weights(seed: int, n_labels: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return 0.5 * torch.randn(n_labels, D_MODEL, generator=g), torch.randn(n_labels, generator=g)


def student_encoder(student, reference: torch.nn.Module):
    """The same encoder in the worker: built with the notebook's ModelConfig and build_model, the judge's
    weights loaded."""
    config = student.call("ModelConfig", **reference.config.to_dict())
    encoder = student.call("build_model", config)
    student.call_method(encoder, "load_state_dict", reference.state_dict())
    return encoder


def student_classifier(student, reference: torch.nn.Module, *, n_labels: int, pooling: str, dropout: float,
                       weight: torch.Tensor, bias: torch.Tensor, return_encoder: bool = False):
    """The student's SequenceClassifier on a copy of `reference`, its head loaded with (weight, bias)."""
    encoder = student_encoder(student, reference)
    model = student.call("SequenceClassifier", encoder, n_labels=n_labels, pooling=pooling, dropout=dropout)
    shape = student.getattr(model, "classifier.weight")
    assert isinstance(shape, torch.Tensor) and tuple(shape.shape) == (n_labels, D_MODEL), (
        "classifier is not nn.Linear(encoder.config.d_model, n_labels)")
    student.call_method(student.getattr(model, "classifier"), "load_state_dict", {"weight": weight, "bias": bias})
    return (model, encoder) if return_encoder else model


def without_dropout(student, model) -> None:
    """Set the head's dropout to 0 where dropout is not what a check looks at (so that a wrong rate costs
    only the dropout check); a model without a `dropout` attribute is left as it is."""
    try:
        student.call_method(student.getattr(model, "dropout"), "__setattr__", "p", 0.0)
    except StudentError:
        pass


def loss_and_logits(result, batch_size: int, n_labels: int) -> tuple[object, torch.Tensor]:
    """(loss as returned, logits [B, n_labels]) of a forward call."""
    assert isinstance(result, (tuple, list)) and len(result) == 2, "forward must return (loss, logits)"
    return result[0], shaped(result[1], (batch_size, n_labels), "forward's logits")


def scalar(value, what: str) -> float:
    assert isinstance(value, torch.Tensor) and value.numel() == 1, f"{what} must be a tensor holding one number"
    return float(value)


def forward(student, model, ids, mask, types=None, labels=None):
    return student.call_method(model, "forward", ids, mask, token_type_ids=types, labels=labels)


# ----------------------------------------------------------------------------- part 1: pooling


@pytest.mark.check(cell="pooling_checks", points=1.0,
                   feedback="cls_pool returns the final hidden state at position 0 ([CLS]) of every row, "
                   "shape [batch, d_model]")
def test_cls_pool_reads_position_0(student):
    real = real_positions(PADDED, "right")
    hidden = hidden_states(1, real)
    got = shaped(student.call("cls_pool", hidden, real.long()), (len(PADDED), D_MODEL), "cls_pool")
    assert torch.allclose(got, cls_pool(hidden, real.long()), **TOL), (
        "the vectors are not the hidden states at position 0")


@pytest.mark.check(cell="pooling_checks", points=1.0,
                   feedback="last_token_pool reads each row's last REAL token: on a right-padded batch, "
                   "position -1 is padding in every row shorter than the batch")
def test_last_token_pool_on_right_padded_rows(student):
    real = real_positions(PADDED, "right")
    hidden = hidden_states(2, real)
    got = shaped(student.call("last_token_pool", hidden, real.long()), (len(PADDED), D_MODEL), "last_token_pool")
    assert not torch.allclose(got, hidden[:, -1], **TOL), "on a right-padded batch it reads position -1, a [PAD]"
    assert torch.allclose(got, last_token_pool(hidden, real.long()), **TOL), (
        "on a right-padded batch the vectors are not those of each row's last real token")


@pytest.mark.check(cell="pooling_checks", points=1.0,
                   feedback="last_token_pool reads each row's last real token: on a left-padded batch position 0 "
                   "is padding, and the count of real tokens gives the last one's position only with right padding")
def test_last_token_pool_on_left_padded_rows(student):
    real = real_positions(PADDED, "left")
    hidden = hidden_states(3, real)
    got = shaped(student.call("last_token_pool", hidden, real.long()), (len(PADDED), D_MODEL), "last_token_pool")
    assert not torch.allclose(got, hidden[:, 0], **TOL), "on a left-padded batch it reads position 0, a [PAD]"
    counted = hidden[torch.arange(len(PADDED)), PADDED - 1]
    assert not torch.allclose(got, counted, **TOL), (
        "on a left-padded batch it reads position (number of real tokens - 1), which is padding there")
    assert torch.allclose(got, last_token_pool(hidden, real.long()), **TOL), (
        "on a left-padded batch the vectors are not those of each row's last real token")


@pytest.mark.check(cell="pooling_checks", points=1.0,
                   feedback="last_token_pool must also handle rows without padding (every mask value 1): "
                   "their last real token is the last position")
def test_last_token_pool_on_rows_without_padding(student):
    real = torch.ones(4, SEQ, dtype=torch.bool)
    hidden = hidden_states(4, real)
    got = shaped(student.call("last_token_pool", hidden, real.long()), (4, D_MODEL), "last_token_pool")
    assert torch.allclose(got, hidden[:, -1], **TOL), "on rows without padding it does not read the last position"


@pytest.mark.check(cell="pooling_checks", points=1.0,
                   feedback="mean_pool averages over the real tokens only (mask 1): padding is neither summed "
                   "nor counted")
def test_mean_pool_over_real_tokens_only(student):
    for side, seed in (("right", 5), ("left", 6)):
        real = real_positions(LENGTHS, side)
        hidden = hidden_states(seed, real)
        got = shaped(student.call("mean_pool", hidden, real.long()), (len(LENGTHS), D_MODEL), "mean_pool")
        assert not torch.allclose(got, hidden.mean(1), **TOL), "the mean includes the padded positions"
        assert torch.allclose(got, mean_pool(hidden, real.long()), **TOL), (
            f"on a {side}-padded batch the vectors are not the means over each row's real tokens")


# ----------------------------------------------------------------------------- part 2: the classifier


def pooled_candidates(student, pooling: str, hidden: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    """The pooled vectors a right classifier may read: the reference pooling's, and the student's own pooling
    function's (so that a mistake in part 1 is not charged again here)."""
    name, reference = POOLS[pooling]
    candidates = [reference(hidden, mask)]
    try:
        own = student.call(name, hidden, mask)
    except StudentError:
        return candidates
    if isinstance(own, torch.Tensor) and tuple(own.shape) == tuple(candidates[0].shape):
        candidates.append(own.detach().float())
    return candidates


def assert_logits_of_pooling(student, model, reference, pooling: str, batch, weight, bias) -> None:
    ids, mask, types, _ = batch
    result = forward(student, model, ids, mask, types)
    loss, logits = loss_and_logits(result, len(ids), len(bias))
    assert loss is None, "without labels, forward must return None as the loss"
    with torch.no_grad():
        hidden = reference.encode(ids, mask, types)
    expected = [pooled @ weight.T + bias for pooled in pooled_candidates(student, pooling, hidden, mask)]
    assert any(torch.allclose(logits, e, **TOL) for e in expected), (
        f"with pooling={pooling!r} the logits are not the linear layer applied to the {pooling!r} pooling of "
        "the encoder's hidden states")


@pytest.mark.check(cell="classifier_checks", points=1.0,
                   feedback="SequenceClassifier keeps the encoder it is given and a linear layer from d_model to "
                   "n_labels; without labels forward returns no loss and the logits: the linear layer applied, "
                   "after dropout, to the hidden state at [CLS]")
def test_classifier_logits_with_cls_pooling(student):
    reference = reference_encoder(BERT, seed=11)
    weight, bias = head_weights(11, n_labels=3)
    model, encoder = student_classifier(student, reference, n_labels=3, pooling="cls", dropout=P_DROP,
                                        weight=weight, bias=bias, return_encoder=True)
    assert student.same(student.getattr(model, "encoder", as_remote=True), encoder), (
        "model.encoder is not the encoder given to SequenceClassifier")
    without_dropout(student, model)
    student.call_method(model, "eval")
    assert_logits_of_pooling(student, model, reference, "cls", make_batch(11), weight, bias)


@pytest.mark.check(cell="classifier_checks", points=1.0,
                   feedback="pooling='last' and pooling='mean' must pool the encoder's hidden states with "
                   "last_token_pool and mean_pool (a causal decoder has no sentence summary at position 0)")
def test_classifier_uses_the_chosen_pooling(student):
    for pooling, config, side, seed in (("last", GPT, "left", 12), ("mean", BERT, "right", 13)):
        reference = reference_encoder(config, seed=seed)
        weight, bias = head_weights(seed, n_labels=3)
        model = student_classifier(student, reference, n_labels=3, pooling=pooling, dropout=P_DROP,
                                   weight=weight, bias=bias)
        without_dropout(student, model)
        student.call_method(model, "eval")
        batch = make_batch(seed, side=side, segments=config.type_vocab_size > 0)
        assert_logits_of_pooling(student, model, reference, pooling, batch, weight, bias)


def loss_setup(student, seed: int):
    reference = reference_encoder(BERT, seed=seed)
    weight, bias = head_weights(seed, n_labels=3)
    model = student_classifier(student, reference, n_labels=3, pooling="cls", dropout=0.0, weight=weight, bias=bias)
    without_dropout(student, model)
    student.call_method(model, "eval")
    return model, make_batch(seed)


def row_losses(student, model, batch) -> list[tuple[float, torch.Tensor]]:
    """(loss, logits [1, 3]) of each row of `batch` given alone."""
    ids, mask, types, labels = batch
    rows = []
    for i in range(len(ids)):
        result = forward(student, model, ids[i:i + 1], mask[i:i + 1], types[i:i + 1], labels[i:i + 1])
        loss, logits = loss_and_logits(result, 1, 3)
        rows.append((scalar(loss, "with labels, the loss"), logits))
    return rows


@pytest.mark.check(cell="classifier_checks", points=1.0,
                   feedback="the loss is the cross-entropy of the raw logits: cross-entropy applies the log-softmax "
                   "itself, so a softmax before it is applied twice")
def test_loss_is_cross_entropy_of_the_raw_logits(student):
    model, batch = loss_setup(student, seed=14)
    labels = batch[3]
    for i, (loss, logits) in enumerate(row_losses(student, model, batch)):
        expected = float(F.cross_entropy(logits, labels[i:i + 1]))
        twice = float(F.cross_entropy(logits.softmax(-1), labels[i:i + 1]))
        assert math.isclose(loss, expected, rel_tol=1e-4, abs_tol=1e-5), (
            "the loss returned is the cross-entropy of the softmax of its logits, as if they were scores"
            if math.isclose(loss, twice, rel_tol=1e-4, abs_tol=1e-5) else
            f"a sentence given alone got the loss {loss:.4g}, another number than the cross-entropy of its logits")


@pytest.mark.check(cell="classifier_checks", points=1.0,
                   feedback="the loss is averaged over the batch (cross-entropy's default), not summed: a summed "
                   "loss grows with the batch size")
def test_loss_is_averaged_over_the_batch(student):
    model, batch = loss_setup(student, seed=15)
    ids, mask, types, labels = batch
    rows = [loss for loss, _ in row_losses(student, model, batch)]
    assert all(math.isfinite(r) and r > 0 for r in rows) and max(rows) - min(rows) > 1e-3, (
        "the loss of a single row is not a positive number that depends on the row")
    result = forward(student, model, ids, mask, types, labels)
    loss, _ = loss_and_logits(result, len(ids), 3)
    assert isinstance(loss, torch.Tensor) and loss.numel() == 1, "the loss must be one number for the whole batch"
    mean = sum(rows) / len(rows)
    assert not math.isclose(float(loss), sum(rows), rel_tol=1e-4), "the batch's loss is the sum of its rows' losses"
    assert math.isclose(float(loss), mean, rel_tol=1e-4, abs_tol=1e-5), (
        "the batch's loss is not the mean of its rows' losses")


@pytest.mark.check(cell="classifier_checks", points=1.0,
                   feedback="dropout(p=dropout) acts on the pooled vector before the linear layer, in training "
                   "mode only: on in training mode, off in evaluation mode")
def test_classifier_dropout_on_the_pooled_vector_in_training_only(student):
    # An identity head with a random bias: logits - bias is the pooled vector itself, so each logit shows
    # whether dropout zeroed its feature or kept it scaled by 1 / (1 - p), whatever the order of the draws.
    reference = reference_encoder(BERT, seed=16)
    bias = torch.randn(D_MODEL, generator=torch.Generator().manual_seed(16))
    model = student_classifier(student, reference, n_labels=D_MODEL, pooling="cls", dropout=P_DROP,
                               weight=torch.eye(D_MODEL), bias=bias)
    ids, mask, types, _ = make_batch(16)
    shape = (len(ids), D_MODEL)
    student.call_method(model, "eval")
    evaluated = loss_and_logits(forward(student, model, ids, mask, types), *shape)[1]
    again = loss_and_logits(forward(student, model, ids, mask, types), *shape)[1]
    assert torch.equal(evaluated, again), "after .eval() the logits change from call to call: dropout must be off"
    pooled = evaluated - bias
    assert float(pooled.abs().max()) > 0.1, "the pooled vector is zero"
    student.call_method(model, "train")
    informative = pooled.abs() > 0.05
    kept = trials = 0
    for _ in range(4):
        trained = loss_and_logits(forward(student, model, ids, mask, types), *shape)[1] - bias
        zeroed = trained.abs() <= 1e-4
        scaled = (trained - pooled / (1 - P_DROP)).abs() <= 1e-4 * (1 + pooled.abs())
        assert bool((zeroed | scaled).all()), (
            "after .train() the logits are not those of the pooled vector with some features zeroed and the "
            "others scaled by 1 / (1 - dropout)")
        kept += int((scaled & informative).sum())
        trials += int(informative.sum())
    assert kept < trials, "after .train() nothing was dropped"
    assert rate_ok(kept, trials, 1 - P_DROP), (
        f"after .train() dropout kept {kept} of {trials} features, far from a share 1 - dropout")


@pytest.mark.check(cell="classifier_checks", points=1.0,
                   feedback="in full fine-tuning the loss's gradient must reach the encoder: nothing may cut the graph "
                   "between the encoder's hidden states, the pooled vector and the loss")
def test_full_fine_tuning_reaches_the_encoder(student):
    reference = reference_encoder(BERT, seed=17)
    weight, bias = head_weights(17, n_labels=3)
    model = student_classifier(student, reference, n_labels=3, pooling="cls", dropout=0.0, weight=weight, bias=bias)
    without_dropout(student, model)
    ids, mask, types, labels = make_batch(17)
    try:
        student.backward(model, "forward", ids, mask, token_type_ids=types, labels=labels,
                         grad_outputs=(torch.tensor(1.0), None))
    except NotData:
        raise AssertionError("the loss does not depend on the model's parameters through autograd") from None
    head = student.getattr(model, "classifier.weight.grad")
    assert isinstance(head, torch.Tensor) and float(head.abs().sum()) > 0, "the classifier got no gradient"
    names = ("embeddings.token_embedding.weight", "embeddings.position_embedding.weight",
             "blocks.0.attention.qkv.weight", f"blocks.{BERT.n_layers - 1}.ffn.fc_out.weight")
    for name in names:
        grad = student.getattr(model, f"encoder.{name}.grad")
        assert isinstance(grad, torch.Tensor) and float(grad.abs().sum()) > 0, (
            "the encoder's parameters got no gradient from the loss")


# ----------------------------------------------------------------------------- part 3: probe, train step


def probe(student, seed: int):
    reference = reference_encoder(BERT, seed=seed)
    weight, bias = head_weights(seed, n_labels=2)
    model = student_classifier(student, reference, n_labels=2, pooling="cls", dropout=0.0, weight=weight, bias=bias)
    student.call("freeze_encoder", model)
    return {name: student.getattr(model, f"encoder.{name}.requires_grad") for name in encoder_parameters()}, model


@pytest.mark.check(cell="training_checks", points=0.5,
                   feedback="a probe trains no encoder parameter: requires_grad must be False on every "
                   "parameter of model.encoder")
def test_probe_freezes_every_encoder_parameter(student):
    flags, _ = probe(student, seed=21)
    trainable = [name for name, flag in flags.items() if flag is not False]
    assert not trainable, f"{len(trainable)} of the encoder's {len(flags)} parameters still train"


@pytest.mark.check(cell="training_checks", points=0.5,
                   feedback="freeze_encoder changes the model it is given in place and also returns that same "
                   "model, as its specification says")
def test_probe_returns_the_model_it_froze(student):
    reference = reference_encoder(BERT, seed=23)
    weight, bias = head_weights(23, n_labels=2)
    model = student_classifier(student, reference, n_labels=2, pooling="cls", dropout=0.0, weight=weight, bias=bias)
    returned = student.call("freeze_encoder", model)
    flags = [student.getattr(model, f"encoder.{name}.requires_grad") for name in encoder_parameters()]
    assert any(flag is False for flag in flags), "not credited until freeze_encoder freezes the encoder"
    assert isinstance(returned, Remote) and student.same(returned, model), (
        "freeze_encoder did not return the model it was given")


@pytest.mark.check(cell="training_checks", points=1.0,
                   feedback="a probe still trains its head: model.classifier's weight and bias keep "
                   "requires_grad True")
def test_probe_still_trains_the_head(student):
    flags, model = probe(student, seed=22)
    assert any(flag is False for flag in flags.values()), "not credited until freeze_encoder freezes the encoder"
    for name in ("weight", "bias"):
        assert student.getattr(model, f"classifier.{name}.requires_grad") is True, "the head was frozen too"


def training_model(student, seed: int, dropout: float = 0.0):
    """The student's classifier on a BERT with random weights; dropout 0 everywhere unless `dropout`."""
    reference = reference_encoder(BERT, seed=seed)
    weight, bias = head_weights(seed, n_labels=2)
    model = student_classifier(student, reference, n_labels=2, pooling="cls", dropout=dropout,
                               weight=weight, bias=bias)
    if dropout == 0.0:
        without_dropout(student, model)
    return model


def batch_dict(seed: int) -> dict[str, torch.Tensor]:
    ids, mask, _, labels = make_batch(seed, n_labels=2, segments=False)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def sgd(student, model, lr: float):
    return student.call("SGD", student.call_method(model, "parameters"), lr=lr)


def parameter_names() -> list[str]:
    return [f"encoder.{name}" for name in encoder_parameters()] + ["classifier.weight", "classifier.bias"]


def parameters(student, model) -> dict[str, torch.Tensor]:
    return {name: tensor(student.getattr(model, name), name) for name in parameter_names()}


def gradients(student, model, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor | None]:
    """The gradient of the student's own loss on `batch` (training mode) for every parameter, then zeroed."""
    student.call_method(model, "train")
    student.backward(model, "forward", batch["input_ids"], batch["attention_mask"], labels=batch["labels"],
                     grad_outputs=(torch.tensor(1.0), None))
    grads = {name: student.getattr(model, f"{name}.grad") for name in parameter_names()}
    student.call_method(model, "zero_grad")
    return {name: g if isinstance(g, torch.Tensor) else None for name, g in grads.items()}


def stepped(before: dict[str, torch.Tensor], *grads: dict[str, torch.Tensor | None]) -> dict[str, torch.Tensor]:
    """The parameters after an SGD step at LR on the sum of `grads`."""
    after = {}
    for name, value in before.items():
        total = [g[name] for g in grads if g[name] is not None]
        after[name] = value - LR * sum(total) if total else value
    return after


def moved_as(after: dict[str, torch.Tensor], before: dict[str, torch.Tensor],
             expected: dict[str, torch.Tensor]) -> bool:
    return all(torch.allclose(after[n] - before[n], expected[n] - before[n], atol=1e-5, rtol=1e-3) for n in before)


def returned_loss(value) -> float:
    assert isinstance(value, float) and not isinstance(value, bool), (
        f"train_step must return the loss as a Python float, not a {type(value).__name__}")
    assert math.isfinite(value), "train_step returned a loss that is not finite"
    return value


@pytest.mark.check(cell="training_checks", points=1.0,
                   feedback="train_step returns the batch's loss, computed before the step, as a Python float "
                   "(a number, not a tensor)")
def test_train_step_returns_the_batch_loss_as_a_float(student):
    twin, model = training_model(student, seed=31), training_model(student, seed=31)
    batch = batch_dict(31)
    student.call_method(twin, "train")
    result = student.call_method(twin, "forward", batch["input_ids"], batch["attention_mask"], labels=batch["labels"])
    assert isinstance(result, (tuple, list)) and len(result) == 2, "the classifier's forward must return (loss, logits)"
    expected = scalar(result[0], "the classifier's loss")
    got = returned_loss(student.call("train_step", model, batch, sgd(student, model, LR)))
    assert math.isclose(got, expected, rel_tol=1e-4, abs_tol=1e-5), (
        "train_step did not return the loss of the batch before the step")


@pytest.mark.check(cell="training_checks", points=1.0,
                   feedback="train_step backpropagates the batch's loss, then lets the optimizer take its step: the "
                   "parameters move by one step along the batch's gradient")
def test_train_step_takes_one_gradient_step(student):
    twin, model = training_model(student, seed=32), training_model(student, seed=32)
    batch = batch_dict(32)
    grads = gradients(student, twin, batch)
    before = parameters(student, model)
    student.call("train_step", model, batch, sgd(student, model, LR))
    after = parameters(student, model)
    assert any(not torch.equal(after[n], before[n]) for n in before), "no parameter moved"
    assert moved_as(after, before, stepped(before, grads)), (
        "the parameters did not move by one optimizer step along the gradient of the batch's loss")


@pytest.mark.check(cell="training_checks", points=1.0,
                   feedback="zero the gradients in every step: without zeroing, backpropagation adds this batch's "
                   "gradients to those left by the previous step")
def test_train_step_does_not_accumulate_gradients(student):
    # A first step at lr 0 leaves the parameters where they were and its gradients in .grad; the second
    # step must then move by the second batch's gradient alone.
    twin, model = training_model(student, seed=33), training_model(student, seed=33)
    first, second = batch_dict(33), batch_dict(34)
    grads_first, grads_second = gradients(student, twin, first), gradients(student, twin, second)
    before = parameters(student, model)
    student.call("train_step", model, first, sgd(student, model, 0.0))
    student.call("train_step", model, second, sgd(student, model, LR))
    after = parameters(student, model)
    assert any(not torch.equal(after[n], before[n]) for n in before), "no parameter moved"
    assert not moved_as(after, before, stepped(before, grads_first, grads_second)), (
        "the second step moved by the gradients of both batches")
    assert moved_as(after, before, stepped(before, grads_second)), (
        "the second step did not move by the gradient of its own batch")


@pytest.mark.check(cell="training_checks", points=1.0,
                   feedback="train_step puts the model in training mode: a model that arrives in "
                   "eval mode, after an evaluation, would otherwise train without dropout")
def test_train_step_trains_in_training_mode(student):
    model = training_model(student, seed=35, dropout=P_DROP)
    student.call_method(model, "eval")
    before = parameters(student, model)
    student.call("train_step", model, batch_dict(35), sgd(student, model, LR))  # what it returns: another check
    after = parameters(student, model)
    assert any(not torch.equal(after[n], before[n]) for n in before), "not credited until train_step takes a step"
    names = ["", "encoder", "dropout", "classifier"] + [f"encoder.{name}" for name in encoder_modules()]
    in_eval = [name for name in names if student.getattr(model, f"{name}.training" if name else "training") is not True]
    assert not in_eval, f"after train_step, {len(in_eval)} of the model's {len(names)} modules are in eval mode"


# ----------------------------------------------------------------------------- part 4: concepts


@pytest.mark.check(cell="concepts_checks", points=0.5,
                   feedback="Q1: think about which outputs the MLM loss is computed on during pretraining")
def test_q1_what_makes_cls_a_sentence_summary(student):
    assert concept_answer(student, "answer_q1") == "c"


@pytest.mark.check(cell="concepts_checks", points=0.5,
                   feedback="Q2: ask which words each state of a causal decoder has seen, and so which words reach "
                            "most of the states")
def test_q2_mean_pooling_a_decoder(student):
    assert concept_answer(student, "answer_q2") == "a"


@pytest.mark.check(cell="concepts_checks", points=0.5,
                   feedback="Q3: ask what each comparison can show: a probe, what the frozen features hold; full "
                            "fine-tuning on many labels, what training can build")
def test_q3_what_a_probe_measures(student):
    assert concept_answer(student, "answer_q3") == "d"


@pytest.mark.check(cell="concepts_checks", points=0.5,
                   feedback="Q4: ask what a padded position may attend to in a causal model whose mask blocks only "
                            "padded keys")
def test_q4_position_minus_1_of_a_right_padded_row(student):
    assert concept_answer(student, "answer_q4") == "b"

"""DistilBERT's soft-target loss is the formula in its docstring, the student starts from the teacher's
layers, and the demo loop trains the student only."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertcourse.after_bert.distillation import DistillationError, distil, distillation_loss, student_from_teacher
from bertcourse.model import ModelConfig, build_model
from bertcourse.model_support import randomize_
from bertcourse.training.objectives import MaskedLM
from bertcourse.training.packing import PackedData
from bertcourse.tokenizer import train_tokenizer


def logits(seed: int, shape=(6, 11)) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 3


@pytest.mark.parametrize("temperature, alpha", [(1.0, 0.5), (2.0, 0.5), (4.0, 0.9), (2.0, 1.0), (3.0, 0.0)])
def test_the_loss_is_alpha_t_squared_kl_plus_the_hard_loss(temperature, alpha):
    student, teacher, labels = logits(0), logits(1), torch.tensor([0, 3, 5, 2, 10, 7])
    p_teacher = (teacher / temperature).softmax(-1)
    log_p_student = (student / temperature).log_softmax(-1)
    kl = (p_teacher * (p_teacher.log() - log_p_student)).sum(-1).mean()  # per row, averaged over rows
    expected = alpha * temperature**2 * kl + (1 - alpha) * F.cross_entropy(student, labels)
    assert torch.allclose(distillation_loss(student, teacher, labels, temperature, alpha), expected, atol=1e-5)


def test_the_soft_loss_is_zero_for_a_perfect_copy_and_t_squared_keeps_its_gradient_scale():
    teacher = logits(1)
    assert distillation_loss(teacher.clone(), teacher, temperature=3.0, alpha=1.0).abs() < 1e-6
    sizes = []
    for temperature in (4.0, 8.0):  # at high T the T^2-scaled gradient tends to (z_s - z_t) / (V n): no T left
        student = logits(0).requires_grad_()
        distillation_loss(student, teacher, temperature=temperature, alpha=1.0).backward()
        sizes.append(student.grad.norm().item())
    assert sizes[1] == pytest.approx(sizes[0], rel=0.1)


def test_the_teacher_gets_no_gradient():
    student, teacher = logits(0).requires_grad_(), logits(1).requires_grad_()
    distillation_loss(student, teacher, torch.zeros(6, dtype=torch.long)).backward()
    assert teacher.grad is None and student.grad is not None


@pytest.mark.parametrize("kwargs, message", [(dict(temperature=0.0), "temperature"), (dict(alpha=1.5), "alpha"),
                                             (dict(labels=None), "labels are needed")])
def test_bad_settings_are_refused(kwargs, message):
    options = dict(labels=torch.zeros(6, dtype=torch.long), temperature=2.0, alpha=0.5) | kwargs
    with pytest.raises(DistillationError, match=message):
        distillation_loss(logits(0), logits(1), **options)
    with pytest.raises(DistillationError, match="differ"):
        distillation_loss(logits(0), logits(1, (6, 12)), alpha=1.0)


TINY = ModelConfig(vocab_size=60, n_layers=2, d_model=16, n_heads=2, d_ff=32, max_seq_len=16, dropout=0.0)


def test_student_from_teacher_keeps_the_chosen_layers_and_leaves_the_teacher_alone():
    teacher = build_model(TINY)
    student = student_from_teacher(teacher, [1])
    assert len(student.blocks) == 1 and student.config.n_layers == 1 and len(teacher.blocks) == 2
    for a, b in zip(student.blocks[0].parameters(), teacher.blocks[1].parameters()):
        assert torch.equal(a, b) and a is not b
    assert student.head.decoder.weight is student.embeddings.token_embedding.weight  # still tied
    with pytest.raises(DistillationError, match="blocks of the teacher"):
        student_from_teacher(teacher, [2])


def test_distil_trains_the_student_towards_the_teacher_and_only_the_student():
    tokenizer = train_tokenizer(["the cat sat on the mat", "a dog sat on a log", "the dog ate the cat"] * 5, 60,
                                progress=False)
    ids = tokenizer(["the cat sat on the mat", "a dog ate the log", "the dog sat"] * 8)["input_ids"]
    data = PackedData(blocks=ids, segments=[[0] * len(row) for row in ids])
    torch.manual_seed(0)
    teacher = randomize_(build_model(TINY.for_arch("bert", vocab_size=len(tokenizer)))).eval()  # opinionated
    before = [p.clone() for p in teacher.parameters()]
    student = student_from_teacher(teacher, [0])
    objective = MaskedLM(tokenizer)
    probe = objective.heldout_batches(data, 24)[0]

    def gap():  # KL(teacher || student) at the probe's masked positions
        student.eval()
        with torch.no_grad():
            return distillation_loss(student(**probe).logits, teacher(**probe).logits, alpha=1.0).item()

    start = gap()
    losses = distil(student, teacher, objective, data, steps=20, batch_size=8, learning_rate=5e-3, alpha=1.0,
                    progress=False)
    assert len(losses) == 20 and all(torch.isfinite(torch.tensor(losses)))
    assert gap() < start / 2
    assert all(torch.equal(a, b) for a, b in zip(before, teacher.parameters()))
    hard = distil(student_from_teacher(teacher, [0]), None, objective, data, steps=5, batch_size=8,
                  learning_rate=3e-3, progress=False)
    assert len(hard) == 5

"""The one training step (`bertcourse.training.loop.TrainStep`) and the deferred loss log (`LossLog`), on the CPU.

torch autocasts to fp16 and scales gradients on the CPU as on CUDA (torch 2.13), so the fp16 path that
a T4 takes is tested here: the loss is scaled before backward, the gradients are unscaled before they are
clipped, a step whose gradients overflowed is skipped and the scale halved, and gradients too small for
fp16 survive scaling where a plain `backward()` loses them. bf16 and fp32 take no scaler: their step is
checked bit for bit against the plain loop the course's loops ran before.
"""

from __future__ import annotations

import pytest
import torch

from bertcourse.training.loop import LossLog, TrainStep


def tiny(seed: int = 0) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def batch(seed: int = 1, rows: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 8, generator=generator), torch.randint(3, (rows,), generator=generator)


def loss_of(model, x, y) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(model(x).float(), y)


def grads(model) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


def test_fp16_scales_the_loss_then_unscales_before_clipping():
    x, y = batch()
    reference = tiny()  # the true gradient of the same fp16 forward, without scaling
    with torch.autocast("cpu", dtype=torch.float16):
        loss = loss_of(reference, x, y)
    loss.backward()
    true_grads = grads(reference)
    true_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in true_grads]))

    model = tiny()
    step = TrainStep(torch.optim.SGD(model.parameters(), lr=0.1), model.parameters(), device="cpu",
                     dtype=torch.float16, grad_clip=float(true_norm) / 4)
    assert step.scaler.is_enabled() and step.scaler.get_scale() == 2.0**16
    with step.autocast():
        out = model(x)
        assert out.dtype == torch.float16  # autocast on the CPU, as on CUDA
        loss = torch.nn.functional.cross_entropy(out.float(), y)
    step.backward(loss)
    for scaled, true in zip(grads(model), true_grads):  # the gradients carry the scale before the step
        torch.testing.assert_close(scaled / 2.0**16, true, rtol=1e-3, atol=1e-7)
    before = [p.detach().clone() for p in model.parameters()]
    step.step()
    # after the step the gradients are unscaled and clipped to a norm of grad_clip: clipped before unscaling,
    # they would be 2**16 times smaller (the step a no-op) or, unscaled without clipping, four times larger
    clipped = grads(model)
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in clipped]))
    assert norm == pytest.approx(float(true_norm) / 4, rel=1e-3)
    for g, true in zip(clipped, true_grads):
        torch.testing.assert_close(g, true / 4, rtol=2e-3, atol=1e-7)
    for p, b, g in zip(model.parameters(), before, clipped):  # SGD: w - lr * the clipped, unscaled gradient
        torch.testing.assert_close(p.detach(), b - 0.1 * g)


def test_an_overflowing_fp16_step_is_skipped_and_the_scale_halved():
    model = tiny()
    step = TrainStep(torch.optim.AdamW(model.parameters(), lr=0.1, fused=True), model.parameters(), device="cpu",
                     dtype=torch.float16, schedule=lambda s: 1.0)
    x, y = batch()
    before = [p.detach().clone() for p in model.parameters()]
    with step.autocast():
        loss = loss_of(model, x, y) * float("inf")
    step.backward(loss)
    step.step()
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))  # no step with inf gradients
    assert step.scaler.get_scale() == 2.0**15
    with step.autocast():
        loss = loss_of(model, x, y)
    step.backward(loss)
    step.step()  # the next, finite step trains
    assert not all(torch.equal(p, b) for p, b in zip(model.parameters(), before))
    assert step.scaler.get_scale() == 2.0**15


def test_fp16_gradients_that_underflow_without_scaling_survive_with_it():
    """A loss whose gradient is below fp16's smallest number (~6e-8): plain fp16 backward loses it all."""
    x, y = batch()

    def small_loss(model):
        with torch.autocast("cpu", dtype=torch.float16):
            return model(x).float().sum() * 1e-9  # d loss / d output = 1e-9: 0 once cast to fp16

    plain = tiny()
    small_loss(plain).backward()
    lost = sum(int(torch.count_nonzero(p.grad)) for p in plain.parameters())

    model = tiny()
    step = TrainStep(torch.optim.SGD(model.parameters(), lr=0.1), model.parameters(), device="cpu",
                     dtype=torch.float16, grad_clip=None)
    step.backward(small_loss(model))
    step.scaler.unscale_(step.optimizer)
    kept = sum(int(torch.count_nonzero(p.grad)) for p in model.parameters())
    assert lost < kept / 2  # most of the gradient is gone without the scaler
    bias = model[2].bias.grad  # d loss / d bias = 1e-9 per row: 32e-9 a class
    torch.testing.assert_close(bias, torch.full_like(bias, 32e-9), rtol=1e-2, atol=0)


@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_bf16_and_fp32_take_no_scaler_and_step_exactly_as_the_plain_loop(dtype):
    def factor(s):
        return (s + 1) / 3 if s < 3 else 0.5

    plain, model = tiny(), tiny()
    optimizer = torch.optim.AdamW(plain.parameters(), lr=0.01, fused=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    step = TrainStep(torch.optim.AdamW(model.parameters(), lr=0.01, fused=True), model.parameters(), device="cpu",
                     dtype=dtype, grad_clip=0.5, schedule=factor)
    assert not step.scaler.is_enabled()
    for seed in range(5):
        x, y = batch(seed)
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = loss_of(plain, x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(plain.parameters(), 0.5)
        optimizer.step()
        schedule.step()
        with step.autocast():
            loss = loss_of(model, x, y)
        step.backward(loss)
        step.step()
        assert step.lr == schedule.get_last_lr()[0]
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), model.parameters()))


def test_accumulating_two_half_batches_takes_one_step_of_the_whole_batch():
    x, y = batch(rows=32)
    whole, halves = tiny(), tiny()
    one = TrainStep(torch.optim.SGD(whole.parameters(), lr=0.5), whole.parameters(), device="cpu", grad_clip=None)
    one.backward(loss_of(whole, x, y))
    one.step()
    two = TrainStep(torch.optim.SGD(halves.parameters(), lr=0.5), halves.parameters(), device="cpu", grad_clip=None,
                    accumulate=2, schedule=lambda s: 1.0)
    two.backward(loss_of(halves, x[:16], y[:16]))
    assert not two.ready
    two.backward(loss_of(halves, x[16:], y[16:]))
    assert two.ready
    two.step()
    assert two.schedule.last_epoch == 1  # one scheduler step per optimizer step, not per micro-batch
    for a, b in zip(whole.parameters(), halves.parameters()):
        torch.testing.assert_close(a, b)
    with pytest.raises(RuntimeError, match="step\\(\\) before any backward"):
        two.step()
    with pytest.raises(ValueError, match="accumulate must be at least 1"):
        TrainStep(two.optimizer, [], device="cpu", accumulate=0)


def test_the_state_of_the_schedule_and_the_scaler_round_trips():
    model = tiny()
    step = TrainStep(torch.optim.SGD(model.parameters(), lr=1.0), model.parameters(), device="cpu",
                     dtype=torch.float16, schedule=lambda s: 1 / (s + 1))
    for _ in range(3):
        with step.autocast():
            loss = loss_of(model, *batch())
        step.backward(loss * (float("inf") if _ == 0 else 1))
        step.step()
    saved = step.state_dict()
    other = TrainStep(torch.optim.SGD(tiny().parameters(), lr=1.0), [], device="cpu", dtype=torch.float16,
                      schedule=lambda s: 1 / (s + 1))
    other.load_state_dict(saved)
    assert other.scaler.get_scale() == step.scaler.get_scale() == 2.0**15
    assert other.schedule.last_epoch == 3 and other.schedule.get_last_lr() == [pytest.approx(0.25)]


def test_the_loss_log_reads_what_item_would_have_read_in_order():
    log = LossLog()
    values = [torch.tensor(1.5) / 3, torch.tensor(2.25), torch.tensor(0.1, dtype=torch.float32) * 7]
    for i, value in enumerate(values):
        log.add(loss=value.requires_grad_(False), tokens=torch.tensor(10 + i), step=i)
    assert len(log) == 3
    read = log.read()
    assert read == {"loss": [v.item() for v in values], "tokens": [10, 11, 12], "step": [0, 1, 2]}
    assert all(type(v) is float for v in read["loss"]) and all(type(v) is int for v in read["tokens"])
    assert len(log) == 0 and log.read() == {}

"""Pretraining precision: the rule that picks the autocast dtype per device, the runs that follow it and
record it, resumes that keep it, and the `--precision` flag.

The runs are cpu-quick on a slice of the real corpus (seconds each). bf16 is asked for explicitly where a
test needs it, so they run alike on CPUs with and without native bf16 (emulated bf16 is slower, not wrong).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from fake_gpu import fake_cuda

import bertcourse.training.devices as devices
import bertcourse.training.pretrain as train
from bertcourse.data import Corpus
from bertcourse.errors import BertcourseError
from bertcourse.training.checkpoint import CheckpointError, load_checkpoint
from bertcourse.training.devices import autocast_dtype
from bertcourse.training.pretrain import PretrainOptions, pretrain

BF16, FP16 = torch.bfloat16, torch.float16


@pytest.fixture(scope="module")
def small_corpus(corpus) -> Corpus:
    return Corpus(corpus.train[:2000], corpus.heldout[:100], corpus.source)


@pytest.fixture
def native_bf16(monkeypatch):
    """Set what the CPU detector answers: `native_bf16(False)` is a CPU that would only emulate bf16."""
    return lambda answer: monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: answer)


@pytest.mark.parametrize("device, precision, cpu_bf16, cuda_bf16, expected", [
    ("cpu", "auto", True, None, BF16),  # native bf16: 1.6x a step (benchmarks/README.md)
    ("cpu", "auto", False, None, None),  # emulated bf16 is slower than fp32
    ("cpu", "bf16", False, None, BF16),  # asked for: given, even where emulated
    ("cpu", "fp32", True, None, None),
    ("cuda", "auto", None, True, BF16),
    ("cuda", "auto", None, False, FP16),  # the loop then scales the loss
    ("cuda", "fp16", None, True, FP16),
    ("cuda", "bf16", None, False, BF16),
    ("cuda", "fp32", None, True, None),
    ("mps", "auto", None, None, None),
    ("mps", "fp32", None, None, None),
])
def test_autocast_dtype_follows_the_device_and_the_cpu(device, precision, cpu_bf16, cuda_bf16, expected,
                                                       native_bf16, monkeypatch):
    def not_asked():
        raise AssertionError("the rule asked the wrong device what it supports")

    monkeypatch.setattr(devices, "cpu_has_native_bf16", (lambda: cpu_bf16) if cpu_bf16 is not None else not_asked)
    if cuda_bf16 is not None:
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: cuda_bf16)
    assert autocast_dtype(torch.device(device), precision) == expected


def test_auto_asks_cuda_for_bf16_in_hardware_not_emulated(monkeypatch):
    asked = []

    def is_bf16_supported(*args, **kwargs):
        asked.append((args, kwargs))
        return kwargs.get("including_emulation", True)  # emulation would say yes; hardware says no here

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    assert autocast_dtype("cuda", "auto") == FP16
    assert asked == [((), {"including_emulation": False})]


@pytest.mark.parametrize("gpu, capability, expected", [
    ("Tesla T4", (7, 5), FP16),  # bf16 only emulated: fp16 with loss scaling, tensor cores, fused attention
    ("Tesla V100-SXM2-16GB", (7, 0), FP16),
    ("NVIDIA A100-SXM4-40GB", (8, 0), BF16),
    ("NVIDIA L4", (8, 9), BF16),
])
def test_auto_picks_fp16_below_sm_80_and_bf16_from_it_on_faked_devices(gpu, capability, expected, monkeypatch):
    """torch's own `is_bf16_supported` on a faked device whose bf16 tensors can be created (as on a T4)."""
    fake_cuda(monkeypatch, gpu, capability)
    assert torch.cuda.is_bf16_supported()  # what the default answers on every one of them
    assert autocast_dtype("cuda", "auto") == expected


@pytest.mark.parametrize("device, precision, message", [
    ("cpu", "fp16", "fp16 autocast on the CPU is not supported: use --precision bf16"),
    ("mps", "bf16", "bf16 autocast on mps is not supported: use --precision fp32"),
    ("mps", "fp16", "fp16 autocast on mps"),
    ("cpu", "fp8", "precision must be one of auto, bf16, fp16, fp32, got 'fp8'"),
])
def test_autocast_dtype_refuses_what_the_loop_cannot_train_in(device, precision, message):
    with pytest.raises(BertcourseError, match=message):
        autocast_dtype(device, precision)


@pytest.mark.parametrize("flags, native", [
    ({"architecture": "x86_64", "avx512_f": True, "avx512_bw": True}, False),  # AVX-512 alone: emulated bf16
    ({"architecture": "x86_64", "avx512_f": True, "avx512_bf16": True}, True),
    ({"architecture": "x86_64", "amx_bf16": True}, True),
    ({"architecture": "aarch64", "bf16": True}, False),  # not measured there: fp32 unless asked for
])
def test_the_detector_wants_bf16_instructions_not_just_avx512(flags, native, monkeypatch):
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: flags, raising=False)
    assert devices.cpu_has_native_bf16() is native


def test_the_detector_agrees_with_the_kernels_cpu_flags():
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file() or "flags" not in cpuinfo.read_text():
        pytest.skip("no x86 /proc/cpuinfo here")
    flags = set(next(line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")).split())
    assert devices.cpu_has_native_bf16() == bool({"avx512_bf16", "amx_bf16"} & flags)


def linear_output_dtypes(monkeypatch) -> set[tuple[bool, torch.dtype]]:
    """(training?, dtype) of every nn.Linear output of the models `pretrain` builds from now on."""
    seen: set[tuple[bool, torch.dtype]] = set()
    build = train.build_model

    def spied(config):
        model = build(config)
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.register_forward_hook(lambda m, args, out: seen.add((m.training, out.dtype)))
        return model

    monkeypatch.setattr(train, "build_model", spied)
    return seen


def run(out: Path, corpus, tokenizer, **kwargs):
    options = dict(profile="cpu-quick", out_dir=out, max_steps=8, eval_every=4, checkpoint_every=4, progress=False)
    return pretrain(PretrainOptions(**{**options, **kwargs}), corpus=corpus, tokenizer=tokenizer)


def test_a_bf16_run_learns_records_bf16_and_resumes_exactly_in_it(tmp_path, small_corpus, quick_tokenizer,
                                                                    monkeypatch):
    seen = linear_output_dtypes(monkeypatch)
    straight = run(tmp_path / "straight", small_corpus, quick_tokenizer, precision="bf16")
    assert seen == {(True, torch.bfloat16), (False, torch.float32)}  # trained in bf16, evaluated in fp32
    losses = straight.history["loss"]
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.2
    assert load_checkpoint(tmp_path / "straight")["settings"]["precision"] == "bf16"
    assert json.loads((tmp_path / "straight" / "metrics.json").read_text())["precision"] == "bf16"

    with pytest.raises(KeyboardInterrupt):  # killed at step 5: the checkpoint is from step 4
        run(tmp_path / "killed", small_corpus, quick_tokenizer, precision="bf16", stop_after=5)
    with pytest.raises(CheckpointError, match=r"started in bf16; resume it with --precision bf16 \(or auto\), "
                                              "not fp32") as refused:
        run(tmp_path / "killed", small_corpus, quick_tokenizer, precision="fp32", resume=True)
    assert str(tmp_path / "killed") in str(refused.value)
    resumed = run(tmp_path / "killed", small_corpus, quick_tokenizer, resume=True)  # auto: keeps bf16
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert straight.history == resumed.history
    assert json.loads((tmp_path / "killed" / "metrics.json").read_text())["precision"] == "bf16"


def test_auto_trains_in_fp32_without_native_bf16_and_a_checkpoint_older_than_the_setting_resumes_in_fp32(
        tmp_path, small_corpus, quick_tokenizer, native_bf16, monkeypatch):
    native_bf16(False)
    seen = linear_output_dtypes(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, small_corpus, quick_tokenizer, max_steps=6, stop_after=5)
    assert seen == {(True, torch.float32), (False, torch.float32)}
    path = tmp_path / train.CHECKPOINT_NAME
    state = load_checkpoint(path)
    assert state["settings"].pop("precision") == "fp32"
    torch.save(state, path)  # as written before the setting existed, when the CPU always trained in fp32

    native_bf16(True)  # auto would now pick bf16 for a new run, not for this one
    with pytest.raises(CheckpointError, match="started in fp32; resume it with --precision fp32"):
        run(tmp_path, small_corpus, quick_tokenizer, max_steps=6, resume=True, precision="bf16")
    seen.clear()
    run(tmp_path, small_corpus, quick_tokenizer, max_steps=6, resume=True)
    assert (True, torch.bfloat16) not in seen
    assert json.loads((tmp_path / "metrics.json").read_text())["precision"] == "fp32"


def test_the_precision_flag_reaches_the_loop_and_fp16_on_the_cpu_is_refused_before_any_work(tmp_path, capsys,
                                                                                           monkeypatch):
    from bertcourse import cli

    assert cli.build_parser().parse_args(["pretrain"]).precision == "auto"
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["pretrain", "--precision", "fp8"])
    assert "invalid choice: 'fp8'" in capsys.readouterr().err

    assert cli.main(["pretrain", "--profile", "cpu-quick", "--device", "cpu", "--precision", "fp16",
                     "--out", str(tmp_path / "fp16")]) == 2
    assert "fp16 autocast on the CPU is not supported" in capsys.readouterr().err
    assert not (tmp_path / "fp16").exists()

    received = []

    def fake_pretrain(options, **_):
        received.append(options)
        return SimpleNamespace(final_eval={"loss": 1.0, "accuracy": 0.5, "targets": 2}, out_dir=Path(options.out_dir))

    monkeypatch.setattr(train, "pretrain", fake_pretrain)
    assert cli.main(["pretrain", "--profile", "cpu-quick", "--precision", "bf16", "--out", str(tmp_path)]) == 0
    assert received[0].precision == "bf16"

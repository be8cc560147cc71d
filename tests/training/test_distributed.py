"""Pretraining and fine-tuning on several processes under torchrun (DistributedDataParallel, gloo on the CPU).

The end-to-end tests start `torchrun --nproc_per_node 2` on cpu-quick, one thread per process, and compare
with one process at the same global batch (the profile's 32 rows, 16 per process):

- the GPT draws no masks, so its two-process loss curve must match the single process up to float
  rounding: within 2e-5 a step in fp32 (measured 1.4e-6). This is the sharp check: averaging the
  processes' gradients without weighting them by their targets (`Processes.global_mean`) is off by 3e-4,
  and a shard taken twice or missed changes the batches (and `tokens_seen`, checked too);
- BERT's processes mask their rows with their own generators, so its masks, and its loss curve, differ
  from the single process's: within 0.15 a step over 12 steps (measured at most 0.064 with seed 0, the
  test's, and 0.095 with seed 1). The masks come from seeded generators, so the measured gap is the same
  on every machine; the tolerance only guards against a run that does not learn or diverges;
- a killed two-process run resumed on two processes ends with exactly the weights of an uninterrupted one;
- a checkpoint is resumed only by as many processes as wrote it.

Fine-tuning (`bertcourse finetune`), from a 4-step cpu-quick BERT:

- without the head's dropout nothing random depends on the split, so two processes must equal one up to
  float rounding: per-step losses within 1e-5 (measured 1.2e-7 full, 1.8e-7 probe) on 1,011 rows, whose
  last batch of 19 splits 9 + 10, and the predictions on the 872 validation sentences agree within 1e-3;
- the command itself under torchrun, with the profile's head dropout 0.1 (masks drawn per process):
  rank 0 prints once and writes the one folder, the run is reused by every process, and the probe's
  per-step loss stays within FINETUNE_LOSS_TOLERANCE and its accuracy within FINETUNE_ACCURACY_TOLERANCE
  of the single process's (measured 0.030 and 0.003 with this seed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_support import cli_in_this_process

from bertcourse.errors import BertcourseError
from bertcourse.training.checkpoint import CHECKPOINT_NAME, CheckpointError, load_checkpoint
from bertcourse.training.distributed import SEED_STRIDE, Processes, rank_seed

STEPS = 12
FINETUNE_LOSS_TOLERANCE = 0.1  # fine-tuning with the head's dropout, per step (measured at most 0.030)
FINETUNE_ACCURACY_TOLERANCE = 0.03  # of 872 validation sentences (measured 0.003: 3 sentences)


def as_rank(monkeypatch, rank: int, world_size: int) -> None:
    """What torchrun tells a process, without starting a process group."""
    for name, value in {"RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": world_size}.items():
        monkeypatch.setenv(name, str(value))


def test_one_process_without_torchrun_is_left_as_it_was(monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    single = Processes("cpu")
    single.start(batch_size=31)  # nothing to split: any batch size
    model = torch.nn.Linear(2, 2)
    assert not single.ddp and single.is_main and single.wrap(model) is model
    assert single.shard(list(range(32))) == list(range(32))
    loss = torch.tensor(2.5, requires_grad=True)
    batch = {"labels": torch.tensor([[1, -100, 3]]), "attention_mask": torch.tensor([[1, 1, 0]])}
    backprop, mean, tokens = single.global_mean(loss, batch)
    assert backprop is loss and not mean.requires_grad  # tensors, read when the loop logs (loop.LossLog)
    assert mean.item() == 2.5 and tokens.item() == 2
    with single.main_first():  # one process: the block runs, nothing waits
        ran = True
    assert ran
    assert rank_seed(7, 0) == 7 and single.gather("x") == ["x"]
    saved = {"rng": {"masking": "rank 0"}}  # a single-process checkpoint
    assert single.own_rng(saved) == {"masking": "rank 0"}


def test_each_rank_takes_its_consecutive_share_of_the_global_batch(monkeypatch):
    indices = list(range(100, 132))
    shares = []
    for rank in range(4):
        as_rank(monkeypatch, rank, 4)
        processes = Processes("cpu")
        shares.append(processes.shard(indices))
        assert processes.ddp and processes.is_main == (rank == 0)
    assert [len(s) for s in shares] == [8] * 4 and sum(shares, []) == indices
    last = list(range(19))  # a fine-tuning epoch's shorter last batch: split as evenly as it goes
    halves = []
    for rank in range(2):
        as_rank(monkeypatch, rank, 2)
        halves.append(Processes("cpu").shard(last))
    assert [len(h) for h in halves] == [9, 10] and sum(halves, []) == last
    assert rank_seed(1, 3) == 1 + 3 * SEED_STRIDE
    saved = {"rng": "rank 0", "rng_by_rank": ["rank 0", "rank 1", "rank 2", "rank 3"]}
    assert processes.own_rng(saved) == "rank 3"


def test_a_world_size_that_does_not_divide_the_batch_or_differs_from_the_checkpoints_is_refused(monkeypatch):
    as_rank(monkeypatch, 0, 3)
    processes = Processes("cpu")
    with pytest.raises(BertcourseError, match="batch of 32 rows cannot be split evenly across 3 processes"):
        processes.start(batch_size=32)
    processes.check_resume(Path("run/checkpoint.pt"), {"settings": {"world_size": 3}})
    with pytest.raises(CheckpointError, match=r"written by a run on 1 process\(es\), this run has 3: resume it on 1"):
        processes.check_resume(Path("run/checkpoint.pt"), {"settings": {}})  # older checkpoints: one process


def environment() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def pretrain_command(out: Path, data_dir: Path, *extra: str, capsys) -> subprocess.CompletedProcess:
    """`bertcourse pretrain` on cpu-quick in this process (the two-process runs: `two_process_pretraining`)."""
    args = ["pretrain", "--profile", "cpu-quick", "--max-steps", str(STEPS), "--data-dir", str(data_dir),
            "--source", "local", "--out", str(out), "--no-progress", "--precision", "fp32", *extra]
    return cli_in_this_process(args, capsys)


def losses(out: Path) -> list[float]:
    return json.loads((out / "metrics.json").read_text())["history"]["loss"]


# What both launch scripts print between their runs, rank 0 alone: marks that `printed_by` splits the output at
SAY = """

def say(line):
    if dist.get_rank() == 0:
        print(line, flush=True)

"""
TWO_PROCESS_PRETRAINING = """
import sys
import torch.distributed as dist
from bertcourse.cli import main
from bertcourse.training.pretrain import PretrainOptions, pretrain

data_dir, out, steps = sys.argv[1], sys.argv[2], sys.argv[3]
dist.init_process_group("gloo")  # one group for the launch's runs: each joins it and leaves it open
""" + SAY + """

for arch in ("gpt", "bert"):  # the command, as a user runs it under torchrun
    say(f"=== {arch}")
    code = main(["pretrain", "--profile", "cpu-quick", "--max-steps", steps, "--data-dir", data_dir, "--source",
                 "local", "--out", f"{out}/{arch}-two", "--no-progress", "--precision", "fp32", "--arch", arch])
    say(f"=== {arch} exit {code}")
# The uninterrupted run and the killed one of the resume test, with dropout on (the profile has it off): resuming
# must then also restore every process's random state
for name, stop_after in (("straight", None), ("killed", 7)):
    say(f"=== {name}")
    try:
        pretrain(PretrainOptions(profile="cpu-quick", out_dir=f"{out}/{name}", data_dir=data_dir, source="local",
                                 max_steps=10, eval_every=5, checkpoint_every=4, progress=False,
                                 stop_after=stop_after, model_overrides={"dropout": 0.1}))
    except KeyboardInterrupt as stopped:  # both processes stop at the same step, as a killed run would
        say(f"=== {name}: {stopped}")
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def two_process_pretraining(tmp_path_factory, data_dir) -> tuple[Path, subprocess.CompletedProcess]:
    """One `torchrun --nproc_per_node 2` launch for every two-process pretraining the tests read: the command on
    the GPT and on BERT, then an uninterrupted run and one stopped after step 7 (one launch, not four: starting
    two interpreters with torch costs more than these runs)."""
    out = tmp_path_factory.mktemp("two-processes")
    script = out / "runs.py"
    script.write_text(TWO_PROCESS_PRETRAINING)
    done = launch(2, str(script), str(data_dir), str(out), str(STEPS))
    assert done.returncode == 0, done.stderr
    return out, done


def printed_by(done: subprocess.CompletedProcess, run: str) -> str:
    """What the launch printed between the marks of `run` and the next run."""
    return done.stdout.split(f"=== {run}\n", 1)[1].split("\n=== ", 1)[0]


@pytest.mark.slow
def test_torchrun_on_two_processes_follows_the_single_process_run(tmp_path, data_dir, capsys,
                                                                   two_process_pretraining):
    out, done = two_process_pretraining
    for arch in ("gpt", "bert"):
        one, two = tmp_path / f"{arch}-one", out / f"{arch}-two"
        single = pretrain_command(one, data_dir, "--arch", arch, capsys=capsys)
        assert single.returncode == 0, single.stderr
        assert f"=== {arch} exit 0" in done.stdout
        said = printed_by(done, arch)
        assert said.count("pretraining") == 1 and "split across 2 processes" in said  # rank 0 prints
        assert said.count("wrote ") == 1
        assert sorted(p.name for p in two.iterdir()) == [CHECKPOINT_NAME, "loss_curve.png", "metrics.json"]
        saved = load_checkpoint(two)
        assert saved["step"] == STEPS and saved["settings"]["world_size"] == 2 and len(saved["rng_by_rank"]) == 2
        assert not torch.equal(saved["rng_by_rank"][0]["masking"], saved["rng_by_rank"][1]["masking"])
        a, b = losses(one), losses(two)
        assert len(a) == len(b) == STEPS
        tolerance = 2e-5 if arch == "gpt" else 0.15
        assert max(abs(x - y) for x, y in zip(a, b)) < tolerance, (arch, a, b)
        assert b[-1] < b[0] - 0.3  # it learns
        cost = json.loads((two / "metrics.json").read_text())["tokens_seen"]
        assert cost == json.loads((one / "metrics.json").read_text())["tokens_seen"]  # both processes' tokens

    refused = pretrain_command(out / "bert-two", data_dir, "--arch", "bert", "--resume", capsys=capsys)
    assert refused.returncode == 2
    assert "written by a run on 2 process(es), this run has 1" in refused.stderr
    assert "torchrun --nproc_per_node 2" in refused.stderr


RESUME_RUN = """
import sys
from bertcourse.training.pretrain import PretrainOptions, pretrain

data_dir, out_dir = sys.argv[1], sys.argv[2]
pretrain(PretrainOptions(profile="cpu-quick", out_dir=out_dir, data_dir=data_dir, source="local", max_steps=10,
                         eval_every=5, checkpoint_every=4, progress=False, resume=True,
                         model_overrides={"dropout": 0.1}))
"""


@pytest.mark.slow
def test_a_killed_two_process_run_resumes_to_the_weights_of_an_uninterrupted_one(tmp_path, data_dir,
                                                                                  two_process_pretraining):
    """The launch of `two_process_pretraining` stopped a run after step 7; a new launch resumes it (its own
    process group, as `bertcourse pretrain --resume` under torchrun) and ends on the uninterrupted run's weights."""
    out, done = two_process_pretraining
    assert "=== killed: stopped after step 7" in done.stdout
    assert load_checkpoint(out / "killed")["step"] == 4  # the last checkpoint before the stop
    script = tmp_path / "resume.py"
    script.write_text(RESUME_RUN)
    resumed = launch(2, str(script), str(data_dir), str(out / "killed"))
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.count("resuming from step 4 of 10") == 1  # rank 0 says it; a fresh start would not
    uninterrupted, after_kill = load_checkpoint(out / "straight"), load_checkpoint(out / "killed")
    assert after_kill["step"] == 10 and after_kill["settings"]["model_config"]["dropout"] == 0.1
    for name, weight in uninterrupted["model"].items():
        assert torch.equal(weight, after_kill["model"][name]), name
    assert uninterrupted["history"] == after_kill["history"]


# ---- fine-tuning under torchrun

FINETUNE_RUNS = """
real = Profile.finetuning  # a smaller class (1,011 rows: the last batch of 19 splits 9 + 10), no head dropout
Profile.finetuning = lambda self: dataclasses.replace(real(self), train_rows=1011, dropout=0.0)
for regime in ("full", "probe"):
    finetune(FinetuneOptions(profile="cpu-quick", regime=regime, pretrained=pretrained, out_dir=f"{out_dir}/{regime}",
                             data_dir=data_dir, source="local", progress=False, precision="fp32"))
Profile.finetuning = real
"""
FINETUNE_START = """
import dataclasses, os, sys
from bertcourse.course import Profile
from bertcourse.training.finetune import FinetuneOptions, finetune

pretrained, data_dir, out_dir = sys.argv[1:4]
"""
FINETUNE_RUN = FINETUNE_START + FINETUNE_RUNS  # one process: in the test's own
# Under torchrun, in one group: the same runs, then the command itself twice (the second finds the finished folder)
TWO_PROCESS_FINETUNING = FINETUNE_START + """
import torch.distributed as dist
from bertcourse.cli import main

dist.init_process_group("gloo")  # one group for the launch's runs: each joins it and leaves it open
""" + SAY + FINETUNE_RUNS + """
for attempt in ("first", "again"):
    say(f"=== {attempt}")
    code = main(sys.argv[4:])
    say(f"=== {attempt} exit {code}")
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, data_dir) -> Path:
    """A few steps of cpu-quick BERT pretraining: a checkpoint with a tokenizer to fine-tune from."""
    from bertcourse.training.pretrain import PretrainOptions, pretrain

    out = tmp_path_factory.mktemp("pretrain-bert")
    pretrain(PretrainOptions(profile="cpu-quick", out_dir=out, data_dir=data_dir, max_steps=4, progress=False))
    return out / CHECKPOINT_NAME


def launch(processes: int, *args: str) -> subprocess.CompletedProcess:
    """`python ARGS` alone, or under `torchrun --nproc_per_node PROCESSES`."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes), "--standalone"]
    command = [*launcher, *args] if processes > 1 else [sys.executable, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment())


def finished_run(out: Path) -> dict:
    return json.loads((out / "metrics.json").read_text())


def probabilities(out: Path) -> list[float]:
    return [float(line.split("\t")[3]) for line in (out / "predictions.tsv").read_text().splitlines()[1:]]


def finetune_args(out: Path, pretrained: Path, data_dir: Path) -> list[str]:
    """`bertcourse finetune` of a probe on cpu-quick (the profile's class of 2,000 rows, head dropout 0.1)."""
    return ["finetune", "--profile", "cpu-quick", "--regime", "probe", "--pretrained", str(pretrained), "--data-dir",
            str(data_dir), "--source", "local", "--out", str(out), "--precision", "fp32", "--no-progress"]


@pytest.fixture(scope="module")
def two_process_finetuning(tmp_path_factory, pretrained, data_dir) -> tuple[Path, subprocess.CompletedProcess]:
    """One `torchrun --nproc_per_node 2` launch for every two-process fine-tuning the tests read: both regimes
    without dropout on a class of 1,011 rows (out/equal), then `bertcourse finetune` twice on the same folder
    (out/command): a run, then its reuse."""
    out = tmp_path_factory.mktemp("two-process-finetuning")
    script = out / "finetune.py"
    script.write_text(TWO_PROCESS_FINETUNING)
    done = launch(2, str(script), str(pretrained), str(data_dir), str(out / "equal"),
                  *finetune_args(out / "command", pretrained, data_dir))
    assert done.returncode == 0, done.stderr
    return out, done


@pytest.mark.slow
def test_finetuning_on_two_processes_without_dropout_equals_one_process(tmp_path, pretrained, data_dir, monkeypatch,
                                                                        two_process_finetuning):
    """Without the head's dropout nothing random depends on the split: the two processes' shares of each
    global batch, weighted by their rows, must give the single process's run up to float rounding (full
    fine-tuning through DDP with the unused MLM head, and the probe on cached vectors). The same runs are made
    under torchrun (`two_process_finetuning`) and, for the single process, in this one."""
    from bertcourse.course import Profile

    out, _ = two_process_finetuning
    monkeypatch.setattr(Profile, "finetuning", Profile.finetuning)  # put back after the test, whatever happens
    monkeypatch.setattr(sys, "argv", ["finetune.py", str(pretrained), str(data_dir), str(tmp_path / "1")])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each of the two processes (OMP_NUM_THREADS=1)
    try:
        exec(compile(FINETUNE_RUN, "finetune.py", "exec"), {"__name__": "__main__"})
    finally:
        torch.set_num_threads(threads)
    for regime in ("full", "probe"):
        one, two = tmp_path / "1" / regime, out / "equal" / regime
        a, b = finished_run(one), finished_run(two)
        assert b["settings"]["world_size"] == 2 and "world_size" not in a["settings"]
        assert a["train_rows"] == b["train_rows"] == 1011
        assert len(a["history"]["loss"]) == len(b["history"]["loss"]) == (32 if regime == "full" else 4 * 30)
        gap = max(abs(x - y) for x, y in zip(a["history"]["loss"], b["history"]["loss"]))
        assert gap < 1e-5, (regime, gap)
        assert a["history"]["eval_accuracy"] == pytest.approx(b["history"]["eval_accuracy"], abs=2 / 872)
        assert max(abs(x - y) for x, y in zip(probabilities(one), probabilities(two))) < 1e-3
        assert sorted(p.name for p in two.iterdir()) == ["metrics.json", "model.pt", "predictions.tsv"]


@pytest.mark.slow
def test_bertcourse_finetune_under_torchrun_writes_one_run_close_to_the_single_process(tmp_path, pretrained,
                                                                                         data_dir, capsys,
                                                                                         two_process_finetuning):
    from bertcourse.course import Profile

    assert Profile.finetuning.__name__ == "finetuning"  # the profile as course.yml has it, not a test's stand-in
    out, launched = two_process_finetuning
    one, two = tmp_path / "one", out / "command"
    single = cli_in_this_process(finetune_args(one, pretrained, data_dir), capsys)
    assert single.returncode == 0, single.stderr
    assert "=== first exit 0" in launched.stdout and "=== again exit 0" in launched.stdout
    # rank 0 alone prints: once for each of the two calls
    assert launched.stdout.count("SST-2 validation accuracy") == 2 and launched.stdout.count("wrote ") == 2
    assert sorted(p.name for p in two.iterdir()) == ["metrics.json", "model.pt", "predictions.tsv"]
    a, b = finished_run(one), finished_run(two)
    assert b["settings"]["world_size"] == 2
    # the head's dropout draws other masks per process: close, not equal (measured in the module docstring)
    curve_a, curve_b = a["history"]["loss"], b["history"]["loss"]
    assert len(curve_a) == len(curve_b) == 8 * 30  # 2,000 rows in batches of 256, 30 epochs
    assert max(abs(x - y) for x, y in zip(curve_a, curve_b)) < FINETUNE_LOSS_TOLERANCE, (curve_a, curve_b)
    assert abs(a["accuracy"] - b["accuracy"]) < FINETUNE_ACCURACY_TOLERANCE, (a["accuracy"], b["accuracy"])
    assert b["accuracy"] > 0.52  # above the majority class (50.9%): measured 54.1% (one process: 53.8%)
    # the finished folder, reused by every process
    assert "reused" in printed_by(launched, "again") and launched.stdout.count("reused") == 1


@pytest.mark.slow
def test_more_processes_than_rows_in_the_last_batch_are_refused_before_joining(monkeypatch, pretrained, data_dir,
                                                                                tmp_path):
    from bertcourse.training.finetune import FinetuneError, FinetuneOptions, finetune

    as_rank(monkeypatch, 0, 32)  # cpu-quick: 2,000 rows in batches of 32 leave a last batch of 16
    options = FinetuneOptions(profile="cpu-quick", pretrained=pretrained, out_dir=tmp_path / "run",
                              data_dir=data_dir, source="local", progress=False)
    with pytest.raises(FinetuneError, match="last batch of an epoch holds 16 of the 2000 training rows, fewer "
                                            "than the 32 processes"):
        finetune(options)  # refused before any process group is joined: nothing waits for the other 31
    assert not (tmp_path / "run").exists()

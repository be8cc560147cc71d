"""benchmarks/gpu_smoke.py: refuses without a GPU, and its --allow-cpu dry run works end to end.

No GPU is needed: torch.cuda.is_available is made to answer False, so the same paths run on a machine
with one. The dry run trains 10 real steps of cpu-quick through `bertcourse.training.pretrain.pretrain` and the
test checks that the printed table is consistent with itself and with the profile: the steps, the FLOP
count of the profile's model, the achieved rate derived from both, and a held-out loss below a uniform
guess's. The other parts run a few steps each: the precisions (fp16 refused on the CPU, bf16 and fp32
timed), the short run against the CPU's, lesson 3's GPT and lesson 4's fine-tuning regimes, the environment, where
a step's time goes, the fine-tuning steps, a resume and the other lessons' paths; the summary files hold them all.
`--allow-cpu` alone takes a dry run's sizes and runs every part in under 5 minutes. A part that fails is reported
and the exit status is 1, the other parts still run.
"""

from __future__ import annotations

import importlib
import json
import math
import re
from pathlib import Path

import pytest
import torch

from bertcourse.course import load_course

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def smoke(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return importlib.import_module("gpu_smoke")


def test_without_a_gpu_it_refuses_with_a_reason_and_a_non_zero_status(smoke, capsys):
    assert smoke.main([]) == smoke.NO_GPU != 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "torch.cuda.is_available() is False" in captured.err and "--allow-cpu" in captured.err


def figures(table: str) -> dict[str, str]:
    """The first two-column table of `table`'s text (the pretraining figures), by name."""
    first = table.split("\n\n", 1)[0]
    rows = [line.strip("|").split("|") for line in first.splitlines() if line.startswith("| ")]
    return {name.strip(): value.strip() for name, value in rows[1:]}


def rows_of(markdown: str) -> dict[str, list[str]]:
    """A markdown table's rows by their first cell."""
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in markdown.splitlines()[2:]]
    return {row[0]: row[1:] for row in rows}


def number(text: str) -> float:
    return float(re.match(r"[\d,.]+", text).group().replace(",", ""))


@pytest.mark.slow
def test_the_cpu_dry_run_trains_and_prints_a_consistent_table(smoke, capsys, data_dir, corpus, tmp_path):
    later = ["--skip", "anatomy", "--skip", "finetune_steps", "--skip", "resume", "--skip", "other_lessons"]  # below
    status = smoke.main(["--allow-cpu", "--profile", "cpu-quick", "--steps", "10", "--data-dir", str(data_dir),
                         "--source", "local", "--precision-steps", "2", "--short-steps", "3", "--finetune-steps", "2",
                         *later, "--out", str(tmp_path)])
    assert status == 0
    table = capsys.readouterr().out.split("| figure | value |", 1)[1]
    got = figures("| figure | value |" + table)
    assert got["device"].startswith("CPU (dry run with --allow-cpu")
    assert got["steps timed"].startswith("8 (steps 2-9 of 10;")  # step 1 warms up; step 10 has no next start
    steps_per_s, flops = number(got["steps/s"]), number(got["FLOPs per step (counted)"]) * 1e9
    profile = load_course().profile("cpu-quick")
    config = profile.model.for_arch("bert")
    # the counted FLOPs are at least the encoder's matmuls: 6 x (its non-embedding weights) x tokens
    encoder_weights = config.n_layers * (4 * config.d_model**2 + 2 * config.d_model * config.d_ff)
    assert flops > 6 * encoder_weights * profile.pretrain.batch_size * config.max_seq_len
    assert number(got["achieved"]) == pytest.approx(flops * steps_per_s / 1e12, abs=0.006)
    tokens = number(got["tokens/s (block positions)"])
    assert tokens == pytest.approx(steps_per_s * profile.pretrain.batch_size * config.max_seq_len, rel=0.01)
    loss, accuracy = got["held-out MLM loss / accuracy after 10 steps"].split(" / ")
    assert 0 < float(loss) < math.log(profile.vocab_size)  # it learned something: below a uniform guess
    estimate = got[f"estimated full profile ({profile.pretrain.max_steps:,} steps)"]
    assert number(estimate) == pytest.approx(profile.pretrain.max_steps / steps_per_s / 60, abs=0.06)
    assert "GiB" in got["peak memory"]
    # the corpus it used (cpu-quick's: the course corpus) and the passes its steps make
    folder, used = re.fullmatch(r"local folder (.+): (wikitext2 \+ sst2, [\d,]+ training sentences)",
                                got["corpus"]).groups()
    assert Path(folder).resolve() == Path(data_dir).resolve()  # the same folder, however a symlink names it
    assert used == f"wikitext2 + sst2, {len(corpus.train):,} training sentences"
    passes, blocks, sentences = re.fullmatch(r"([\d.]+) over the ([\d,]+) blocks packed for them \(([\d,]+) "
                                             r"sentences\)", got["passes of the 10 steps"]).groups()
    assert float(passes) == pytest.approx(10 * profile.pretrain.batch_size / number(blocks), abs=0.006)
    assert number(sentences) < len(corpus.train)  # 10 steps pack the corpus's first sentences only
    full = got[f"passes of the full profile ({profile.pretrain.max_steps:,} steps)"]
    assert full.endswith("blocks (estimated)")
    estimated_blocks = number(full.split("~")[1])
    characters = sum(map(len, corpus.train[: int(number(sentences))]))
    assert estimated_blocks == pytest.approx(number(blocks) * sum(map(len, corpus.train)) / characters, rel=0.001)
    assert number(full) == pytest.approx(profile.pretrain.max_steps * profile.pretrain.batch_size / estimated_blocks,
                                         abs=0.06)

    # the other parts, in the summary files as printed
    summary = json.loads((tmp_path / "gpu_smoke.json").read_text())
    assert summary["device"].startswith("CPU (dry run") and summary["arguments"]["steps"] == 10
    parts = summary["parts"]
    assert set(parts) == {"pretraining", "environment", "precisions", "cpu_comparison", "lesson_paths"}
    assert not any("error" in part for part in parts.values())
    markdown = (tmp_path / "gpu_smoke.md").read_text()
    precisions = {r["precision"]: r for r in parts["precisions"]["results"]}
    assert "not supported" in precisions["fp16"]["refused"]  # fp16 on the CPU: refused, as pretrain refuses it
    for name in ("bf16", "fp32"):
        assert precisions[name]["ms_per_step"] > 0 and precisions[name]["finite"]
        assert precisions[name]["final_loss_scale"] is None  # no scaler outside fp16
    table = rows_of(markdown.split("## fp16 / bf16 / fp32")[1].split("\n\n", 1)[1].split("\n\n")[0])
    assert table["fp16"][0] == "refused here" and table["fp32"][0] == f"{precisions['fp32']['ms_per_step']:.1f}"
    short = parts["cpu_comparison"]["results"]
    assert [(r["device"], r["precision"]) for r in short] == [("cpu", "fp32"), ("cpu", "auto")]  # no device twin
    assert short[0]["gap_to_cpu"] == 0 and all(r["steps"] == 3 for r in short)
    assert short[1]["gap_to_cpu"] == short[1]["held_out_loss"] - short[0]["held_out_loss"]
    paths = {r["path"]: r for r in parts["lesson_paths"]["results"]}
    assert set(paths) == {"pretrain gpt", "finetune bert full", "finetune bert lora", "finetune bert probe",
                          "finetune gpt full"}
    for name, run in paths.items():
        if name.startswith("finetune"):
            assert run["steps"] == 2 and 0 <= run["accuracy"] <= 1 and run["precision"] in ("bf16", "fp32")
    assert "## Lessons 3 and 4 on the device" in markdown and "finetune gpt full (lesson 4)" in markdown


@pytest.mark.slow
def test_a_failing_part_is_reported_the_others_run_and_the_status_is_1(smoke, capsys, data_dir, tmp_path,
                                                                        monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a kernel that is not there")

    monkeypatch.setattr(smoke, "precision_part", broken)
    skipped = [flag for part in smoke.OPTIONAL if part != "precisions" for flag in ("--skip", part)]
    status = smoke.main(["--allow-cpu", "--profile", "cpu-quick", "--steps", "10", "--data-dir", str(data_dir),
                         "--source", "local", *skipped, "--out", str(tmp_path)])
    assert status == 1
    captured = capsys.readouterr()
    assert "FAILED parts: precisions" in captured.err and "a kernel that is not there" in captured.err
    assert number(figures("| figure | value |" + captured.out.split("| figure | value |", 1)[1])["steps/s"]) > 0
    parts = json.loads((tmp_path / "gpu_smoke.json").read_text())["parts"]
    assert set(parts) == {"pretraining", "environment", "precisions"}
    assert parts["precisions"]["error"] == "RuntimeError: a kernel that is not there"
    assert "error" not in parts["pretraining"]
    assert "FAILED: RuntimeError: a kernel that is not there" in (tmp_path / "gpu_smoke.md").read_text()


@pytest.mark.slow
def test_allow_cpu_alone_runs_every_part_in_under_five_minutes(smoke, capsys, data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("BERTCOURSE_DATA", str(data_dir))  # lesson 6's variant reads the data as the commands do
    assert smoke.main(["--allow-cpu", "--source", "local", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "gpu_smoke.json").read_text())
    assert summary["total_seconds"] < 5 * 60 and summary["arguments"]["profile"] == "cpu-quick"  # a dry run's sizes
    parts = summary["parts"]
    assert set(parts) == set(smoke.TITLES) and not any("error" in part for part in parts.values())
    assert all("GiB" in part["phase_peak_memory"] for part in parts.values())  # every phase's peak memory
    assert parts["environment"]["attention_kernels"]["bert"]  # a kernel ran the BERT's masked attention
    for arch in ("bert", "gpt"):
        step = parts["anatomy"]["steps"][arch]
        assert step["ops_per_step"] > 100 and step["syncs_per_step"] >= 0 and step["gpu_busy_share"] is None
    assert set(parts["anatomy"]["head_chunks"]) == {"one chunk", "16 MB chunks"}
    assert parts["finetune_steps"]["steps"]["lora"]["ops_per_step"] > parts["finetune_steps"]["steps"]["full"][
        "ops_per_step"]
    assert parts["resume"]["resumed_loss"] == pytest.approx(parts["resume"]["straight_loss"], abs=1e-6)
    assert len(parts["other_lessons"]["results"]) == 5
    assert not (tmp_path / smoke.RATES_NAME).exists()  # no GPU measured: the plans keep their assumptions
    assert "no gpu_rates.json" in capsys.readouterr().out


def test_the_rates_the_plans_read_come_from_the_pretraining_and_fine_tuning_parts(smoke):
    parts = {"pretraining": {"flops_per_step": 3e11, "seconds_per_step": 0.03},
             "finetune_steps": {"steps": {"full": {"us_per_op": 16.0}, "lora": {"us_per_op": 20.0},
                                          "probe": {"us_per_op": None}}}}
    rates = smoke.measured_rates(parts, "Tesla T4")
    assert rates["gpu"] == "Tesla T4" and rates["flops_per_s"] == pytest.approx(1e13)
    assert rates["op_seconds"] == pytest.approx(18e-6)
    assert smoke.measured_rates({"pretraining": {"error": "x"}}, "Tesla T4") is None

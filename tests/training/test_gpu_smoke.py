"""benchmarks/gpu_smoke.py: refuses without a GPU, and its --allow-cpu dry run works end to end.

No GPU is needed: torch.cuda.is_available is made to answer False, so the same paths run on a machine
with one. The dry run trains 10 real steps of cpu-quick through `bertcourse.training.pretrain.pretrain` and the
test checks that the printed table is consistent with itself and with the profile: the steps, the FLOP
count of the profile's model, the achieved rate derived from both, and a held-out loss below a uniform
guess's.
"""

from __future__ import annotations

import importlib
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
    rows = [line.strip("|").split("|") for line in table.splitlines() if line.startswith("| ")]
    return {name.strip(): value.strip() for name, value in rows[1:]}


def number(text: str) -> float:
    return float(re.match(r"[\d,.]+", text).group().replace(",", ""))


@pytest.mark.slow
def test_the_cpu_dry_run_trains_and_prints_a_consistent_table(smoke, capsys, data_dir, corpus):
    status = smoke.main(["--allow-cpu", "--profile", "cpu-quick", "--steps", "10", "--data-dir", str(data_dir),
                         "--source", "local"])
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
    assert got["corpus"] == f"local folder {data_dir}: wikitext2 + sst2, {len(corpus.train):,} training sentences"
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

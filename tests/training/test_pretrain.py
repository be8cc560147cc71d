"""Pretraining: packing, dynamic masking, resuming exactly, and clear errors for bad checkpoints.

Runs use the cpu-quick profile on a slice of the real corpus and a handful of steps, so each takes
seconds; the exactness of resuming is checked bit for bit (torch.equal), not within a tolerance.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bertcourse.data import Corpus
from bertcourse.masking import pad_batch
from bertcourse.model import GPT, IGNORE_INDEX, BertForMLM, ModelConfig, build_model
from bertcourse.training.checkpoint import CHECKPOINT_NAME, CheckpointError, load_checkpoint, load_pretrained
from bertcourse.training.heldout import unigram_baseline
from bertcourse.training.objectives import (
    MaskedLM,
    NextToken,
    ObjectiveError,
    WholeWordMLM,
    eval_batches,
    next_token_labels,
    objective_for,
)
from bertcourse.training.optim import lr_factor
from bertcourse.training.packing import NOT_A_WORD, batch_indices, pack_sentences, tokenize, tokenize_sentences
from bertcourse.training.pretrain import PretrainOptions, pretrain


@pytest.fixture(scope="module")
def small_corpus(corpus) -> Corpus:
    """2,000 real training sentences and 100 held-out ones: enough for a dozen steps."""
    return Corpus(corpus.train[:2000], corpus.heldout[:100], corpus.source)


def run(tmp: Path, corpus, tokenizer, **kwargs):
    # dropout on (the profile has it off): resuming must then also restore the random state exactly
    options = dict(profile="cpu-quick", out_dir=tmp, max_steps=10, eval_every=5, checkpoint_every=4, progress=False,
                   model_overrides={"dropout": 0.1})
    return pretrain(PretrainOptions(**{**options, **kwargs}), corpus=corpus, tokenizer=tokenizer)


def test_pack_sentences_keeps_every_token_in_order_within_the_length_limit():
    sentences = [[10, 11, 12], [13] * 7, [14, 15], list(range(20, 40))]
    packed = pack_sentences(sentences, max_seq_len=12, cls_id=2, sep_id=3)
    assert all(len(b) <= 12 and b[0] == 2 for b in packed.blocks)
    assert all(len(b) == len(s) for b, s in zip(packed.blocks, packed.segments))
    flat = [t for b in packed.blocks for t in b if t not in (2, 3)]
    assert flat == [10, 11, 12] + [13] * 7 + [14, 15] + list(range(20, 30))  # the long one cut to 10
    assert packed.blocks[0] == [2, 10, 11, 12, 3]  # 13 * 7 + [SEP] did not fit any more
    assert packed.blocks[1] == [2] + [13] * 7 + [3, 14, 15, 3]
    assert packed.segments[1] == [0] * 9 + [1] * 3  # a sentence starting past half the block is segment B


def test_batches_are_a_fresh_shuffle_each_epoch_and_a_pure_function_of_the_step():
    first_epoch = [i for step in range(1, 6) for i in batch_indices(step, 20, 4, seed=0)]
    second_epoch = [i for step in range(6, 11) for i in batch_indices(step, 20, 4, seed=0)]
    assert sorted(first_epoch) == sorted(second_epoch) == list(range(20))
    assert first_epoch != second_epoch
    assert batch_indices(7, 20, 4, seed=0) == batch_indices(7, 20, 4, seed=0)
    assert batch_indices(7, 20, 4, seed=1) != batch_indices(7, 20, 4, seed=0)


def test_masking_is_dynamic_and_gpt_batches_predict_every_real_token(small_corpus, quick_tokenizer):
    data = pack_sentences(tokenize_sentences(quick_tokenizer, small_corpus.train[:300]), 64, 2, 3)
    generator = torch.Generator().manual_seed(0)
    bert = objective_for("bert", quick_tokenizer)
    a, b = bert.batch(data, range(8), generator), bert.batch(data, range(8), generator)
    assert set(a) == {"input_ids", "attention_mask", "labels", "token_type_ids"}
    assert not torch.equal(a["labels"], b["labels"])  # the same rows seen again get a new mask
    selected = (a["labels"] != IGNORE_INDEX).sum() / ((a["attention_mask"] == 1).sum())
    assert 0.08 < selected < 0.22
    g = objective_for("gpt", quick_tokenizer).batch(data, range(8), generator)
    predicted = torch.zeros_like(g["attention_mask"], dtype=torch.bool)
    predicted[:, 1:] = g["attention_mask"][:, 1:] == 1  # every real token but a row's first is some position's target
    assert torch.equal(F.pad(g["labels"] != IGNORE_INDEX, (1, 0))[:, :-1], predicted)


def test_the_objective_owns_the_targets_gpt_shifted_by_one_bert_only_at_selected_positions(quick_tokenizer):
    blocks = [[2, 10, 11, 12, 3, 13, 3], [2, 14, 15, 3]]
    data = pack_sentences([[10, 11, 12], [13], [14, 15]], 7, 2, 3)
    assert data.blocks == blocks
    pad = quick_tokenizer.pad_token_id
    gpt = objective_for("gpt", quick_tokenizer).batch(data, [0, 1], torch.Generator())
    assert gpt["labels"].tolist() == [[10, 11, 12, 3, 13, 3, IGNORE_INDEX], [14, 15, 3] + [IGNORE_INDEX] * 4]
    assert gpt["input_ids"].tolist() == [blocks[0], blocks[1] + [pad] * 3]
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
    assert torch.equal(next_token_labels(ids, (ids != 0).long()),
                       torch.tensor([[6, 7, 8, IGNORE_INDEX], [10, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]]))

    real = pack_sentences(tokenize_sentences(quick_tokenizer, ["the cat sat on the mat and looked around"] * 40), 64,
                          quick_tokenizer.cls_token_id, quick_tokenizer.sep_token_id)
    bert = objective_for("bert", quick_tokenizer).batch(real, range(len(real)), torch.Generator().manual_seed(0))
    original, _ = pad_batch(real.blocks, pad)
    selected = bert["labels"] != IGNORE_INDEX
    assert selected.any()
    assert torch.equal(bert["labels"][selected], original[selected])  # the original token wherever selected
    assert torch.equal(bert["input_ids"][~selected], original[~selected])  # -100 (and untouched) elsewhere


def test_the_gpt_trains_on_the_objectives_labels_without_shifting_them_again():
    """The model's loss at position t is against labels[t]: the shift is the objective's alone."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=50, d_model=16, n_heads=2, d_ff=32, max_seq_len=8, dropout=0.0)
                        .for_arch("gpt"))
    ids = torch.randint(5, 50, (3, 8))
    mask = torch.ones_like(ids)
    loss = model(ids, mask, labels=next_token_labels(ids, mask)).loss
    logits = model(ids, mask).logits  # [B, S, V]
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, 50), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(loss, expected)


def test_whole_word_batches_select_every_piece_of_a_word_or_none(small_corpus, quick_tokenizer):
    tokens = tokenize(quick_tokenizer, small_corpus.train[:300], word_ids=True)
    data = pack_sentences(tokens.ids, 64, quick_tokenizer.cls_token_id, quick_tokenizer.sep_token_id, tokens.word_ids)
    assert [len(w) for w in data.words] == [len(b) for b in data.blocks]
    assert all(w[0] == NOT_A_WORD for w in data.words)
    objective = objective_for("bert", quick_tokenizer, whole_word=True)
    assert isinstance(objective, WholeWordMLM) and isinstance(objective, MaskedLM)
    batch = objective.batch(data, range(16), torch.Generator().manual_seed(0))
    selected = batch["labels"] != IGNORE_INDEX
    split_words = mixed = 0
    for row in range(16):
        words = torch.tensor(data.words[row])
        starts = torch.ones(len(words), dtype=torch.bool)  # a word is a run of one word id between specials
        starts[1:] = (words[1:] != words[:-1]) | (words[:-1] == NOT_A_WORD)
        word_index = starts.cumsum(0)
        for w in word_index[words != NOT_A_WORD].unique():
            at = (word_index == w) & (words != NOT_A_WORD)
            if int(at.sum()) > 1:
                split_words += 1
                picked = selected[row, : len(words)][at]
                mixed += bool(picked.any() and not picked.all())
    assert split_words > 20 and mixed == 0
    with pytest.raises(ObjectiveError, match="whole-word masking needs blocks packed with word ids"):
        objective.batch(pack_sentences(tokens.ids, 64, 2, 3), range(4), torch.Generator())
    with pytest.raises(ObjectiveError, match="--whole-word.*--arch bert"):
        objective_for("gpt", quick_tokenizer, whole_word=True)
    assert isinstance(objective_for("gpt", quick_tokenizer), NextToken)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, small_corpus, quick_tokenizer):
    """`run`'s 10 steps, never interrupted: what both kill-and-resume tests must end on."""
    return run(tmp_path_factory.mktemp("straight"), small_corpus, quick_tokenizer)


def test_a_killed_run_resumes_to_the_weights_of_an_uninterrupted_run(tmp_path, small_corpus, quick_tokenizer,
                                                                    uninterrupted, capsys):
    straight = uninterrupted
    with pytest.raises(KeyboardInterrupt):  # killed at step 7: the last checkpoint is from step 4
        run(tmp_path / "killed", small_corpus, quick_tokenizer, stop_after=7)
    assert load_checkpoint(tmp_path / "killed")["step"] == 4
    capsys.readouterr()
    resumed = run(tmp_path / "killed", small_corpus, quick_tokenizer, resume=True)
    # the same weights alone would not tell a resume from a fresh start (every seed is fixed): it went on from 4
    assert "resuming from step 4 of 10" in capsys.readouterr().out
    again = run(tmp_path / "killed", small_corpus, quick_tokenizer, resume=True)  # a finished run: reused as it is
    assert "already trained: its checkpoint is at step 10 of 10" in capsys.readouterr().out
    assert again.history == resumed.history
    assert straight.model.config.dropout > 0  # dropout on: the restored random state matters
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert straight.history == resumed.history
    assert straight.final_eval == resumed.final_eval
    assert straight.history["loss"][-1] < straight.history["loss"][0]
    assert len(straight.history["loss"]) == len(straight.history["lr"]) == 10  # losses read back at log time
    # 10 steps, shorter than twice cpu-quick's 6 warm-up steps: warmed up over half, then decayed to the floor
    peak = straight.history["lr"].index(max(straight.history["lr"]))
    assert peak == 3 and max(straight.history["lr"]) == pytest.approx(2e-3)  # the lr of step 5 (0-based 4): peak
    assert straight.history["lr"][-1] == pytest.approx(0.1 * 2e-3)
    assert (straight.out_dir / "loss_curve.png").stat().st_size > 1000


def test_gpt_pretrains_and_reloads(tmp_path, small_corpus, quick_tokenizer):
    result = run(tmp_path, small_corpus, quick_tokenizer, arch="gpt", max_steps=6)
    assert isinstance(result.model, GPT)
    model, tokenizer = load_pretrained(tmp_path)
    assert isinstance(model, GPT) and len(tokenizer) == len(quick_tokenizer)
    for a, b in zip(result.model.state_dict().values(), model.state_dict().values()):
        assert torch.equal(a, b)
    assert model.head.decoder.weight is model.embeddings.token_embedding.weight  # still tied after loading


def test_whole_word_runs_train_resume_exactly_and_refuse_a_token_level_resume(tmp_path, small_corpus, quick_tokenizer,
                                                                              capsys):
    options = dict(whole_word=True, max_steps=6, eval_every=3)
    straight = run(tmp_path / "straight", small_corpus, quick_tokenizer, **options)
    assert isinstance(straight.objective, WholeWordMLM) and straight.train_data.words is not None
    with pytest.raises(KeyboardInterrupt):  # killed at step 5: the last checkpoint is from step 4
        run(tmp_path / "killed", small_corpus, quick_tokenizer, stop_after=5, **options)
    assert load_checkpoint(tmp_path / "killed")["settings"]["whole_word"] is True
    capsys.readouterr()
    resumed = run(tmp_path / "killed", small_corpus, quick_tokenizer, resume=True, **options)
    assert "resuming from step 4 of 6" in capsys.readouterr().out
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert straight.history == resumed.history and straight.final_eval == resumed.final_eval
    with pytest.raises(CheckpointError, match="whole_word: checkpoint True, this run False"):
        run(tmp_path / "killed", small_corpus, quick_tokenizer, max_steps=6, eval_every=3, resume=True)
    with pytest.raises(ObjectiveError, match="--whole-word"):
        run(tmp_path / "gpt", small_corpus, quick_tokenizer, arch="gpt", whole_word=True)
    assert not (tmp_path / "gpt").exists()


def test_a_checkpoint_written_before_whole_word_existed_resumes_as_token_level(tmp_path):
    from bertcourse.training.checkpoint import check_compatible

    older = {"arch": "bert", "seed": 0}  # settings without "whole_word"
    check_compatible(tmp_path, older, {"arch": "bert", "seed": 0, "whole_word": False})
    with pytest.raises(CheckpointError, match="whole_word: checkpoint False, this run True"):
        check_compatible(tmp_path, older, {"arch": "bert", "seed": 0, "whole_word": True})


def test_resuming_with_other_settings_names_the_file_and_the_mismatch(tmp_path, small_corpus, quick_tokenizer):
    run(tmp_path, small_corpus, quick_tokenizer, max_steps=4)
    path = str(tmp_path / CHECKPOINT_NAME)
    with pytest.raises(CheckpointError, match="arch: checkpoint 'bert', this run 'gpt'") as info:
        run(tmp_path, small_corpus, quick_tokenizer, arch="gpt", max_steps=4, resume=True)
    assert path in str(info.value)
    with pytest.raises(CheckpointError, match="model d_model: checkpoint 64, this run 32"):
        run(
            tmp_path,
            small_corpus,
            quick_tokenizer,
            max_steps=4,
            resume=True,
            model_overrides={"d_model": 32, "d_ff": 64},
        )
    with pytest.raises(CheckpointError, match="exists: pass --resume"):
        run(tmp_path, small_corpus, quick_tokenizer, max_steps=4)


def test_a_corrupt_or_foreign_checkpoint_gives_a_clear_error(tmp_path, small_corpus, quick_tokenizer):
    run(tmp_path, small_corpus, quick_tokenizer, max_steps=4)
    path = tmp_path / CHECKPOINT_NAME
    path.write_bytes(path.read_bytes()[:5000])  # truncated, as by a full disk
    with pytest.raises(CheckpointError, match="not a readable checkpoint") as info:
        run(tmp_path, small_corpus, quick_tokenizer, max_steps=4, resume=True)
    assert str(path) in str(info.value)
    torch.save({"weights": torch.zeros(3)}, path)
    with pytest.raises(CheckpointError, match="not a bertcourse pretraining checkpoint"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="no checkpoint to resume from"):
        load_checkpoint(tmp_path / "elsewhere")


def test_run_folder_follows_the_profile_settings_and_the_corpus(tmp_path):
    import dataclasses

    from bertcourse.course import load_course
    from bertcourse.run_folders import settings_folder

    course = load_course()
    corpus = Corpus(["one sentence", "another one"], ["held out"], "test")
    folder = settings_folder("lesson03-bert", "cpu", corpus, course=course)
    assert folder.parent == course.root / "runs" and folder.name.startswith("lesson03-bert-cpu-")
    assert settings_folder("lesson03-bert", "cpu", corpus, course=course) == folder  # a rerun finds its run
    other = Corpus(["other data"], ["held out"], "test")
    assert settings_folder("lesson03-bert", "cpu", other, course=course) != folder
    cpu = course.profile("cpu")
    longer = dataclasses.replace(cpu, pretrain=dataclasses.replace(cpu.pretrain, max_steps=cpu.pretrain.max_steps + 1))
    changed = dataclasses.replace(course, profiles={**course.profiles, "cpu": longer})
    assert settings_folder("lesson03-bert", "cpu", corpus, course=changed) != folder  # a course update: a new run


def test_lr_warms_up_then_decays():
    factors = [lr_factor(step, 10, 100) for step in range(100)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(factors[10:], factors[11:]))
    assert factors[-1] == pytest.approx(0.1, abs=0.01)


def test_unigram_baseline_predicts_the_most_frequent_regular_token(quick_tokenizer):
    train = pack_sentences([[10, 10, 10, 11], [10, 12]], 16, 2, 3)  # [SEP] (3) is frequent but never a target
    batch = {"labels": torch.tensor([[IGNORE_INDEX, 10, 11, IGNORE_INDEX, 10]])}
    result = unigram_baseline(train, [batch], 20, "bert", special_ids=[0, 1, 2, 3, 4])
    assert result["accuracy"] == pytest.approx(2 / 3)
    assert result["targets"] == 3
    assert 0 < result["loss"] < torch.log(torch.tensor(20.0))


def test_eval_batches_use_the_same_masks_every_time(small_corpus, quick_tokenizer):
    data = pack_sentences(tokenize_sentences(quick_tokenizer, small_corpus.heldout), 64, 2, 3)
    a, b = eval_batches(data, "bert", quick_tokenizer), eval_batches(data, "bert", quick_tokenizer)
    assert all(torch.equal(x["labels"], y["labels"]) for x, y in zip(a, b))


@pytest.mark.slow
def test_pretrain_command_end_to_end(tmp_path, data_dir, capsys):
    """The CLI on the real corpus: a short BERT run (through `python -m bertcourse.cli`, the command as a user
    starts it), then a resume to more steps is refused; a short whole-word run, resumed to its end (these in the
    test's own process, through the same `main`)."""
    from cli_support import cli_in_this_process

    out = tmp_path / "run"

    def command(steps: int, *extra: str, out: Path = out, own_process: bool = False) -> subprocess.CompletedProcess:
        args = ["pretrain", "--profile", "cpu-quick", "--max-steps", str(steps), "--data-dir", str(data_dir),
                "--source", "local", "--out", str(out), "--no-progress", *extra]
        if own_process:
            return subprocess.run([sys.executable, "-m", "bertcourse.cli", *args], capture_output=True, text=True,
                                  timeout=300)
        return cli_in_this_process(args, capsys)

    done = command(8, "--dropout", "0.1", own_process=True)
    assert done.returncode == 0, done.stderr
    assert "BertForMLM" in done.stdout and "gpt counterpart" in done.stdout
    assert "held-out masked-token loss" in done.stdout
    assert {"checkpoint.pt", "metrics.json", "loss_curve.png"} <= {p.name for p in out.iterdir()}
    model, _ = load_pretrained(out)
    assert isinstance(model, BertForMLM) and model.config.dropout == 0.1  # the profile has 0.0
    again = command(9, "--resume", "--dropout", "0.1")
    assert again.returncode == 2
    assert "max_steps: checkpoint 8, this run 9" in again.stderr and str(out) in again.stderr

    whole = command(4, "--whole-word", out=tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr
    assert "whole-word masking" in whole.stdout and "held-out masked-token loss" in whole.stdout
    assert json.loads((tmp_path / "whole" / "metrics.json").read_text())["whole_word"] is True
    resumed = command(4, "--whole-word", "--resume", out=tmp_path / "whole")
    assert resumed.returncode == 0, resumed.stderr
    refused = command(4, "--resume", out=tmp_path / "whole")
    assert refused.returncode == 2 and "whole_word: checkpoint True, this run False" in refused.stderr


def test_pretrain_command_refuses_whole_word_masking_for_the_gpt_before_loading_anything(tmp_path, capsys):
    from bertcourse import cli

    assert cli.main(["pretrain", "--profile", "cpu-quick", "--arch", "gpt", "--whole-word",
                     "--out", str(tmp_path / "run")]) == 2
    error = capsys.readouterr().err
    assert "--whole-word" in error and "--arch bert" in error
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flag, value", [("--dropout", "1.0"), ("--dropout", "-0.1"), ("--max-steps", "0")])
def test_pretrain_command_rejects_bad_numbers_before_loading_anything(flag, value, tmp_path, capsys):
    from bertcourse import cli

    assert cli.main(["pretrain", "--profile", "cpu-quick", "--out", str(tmp_path / "run"), flag, value]) == 2
    assert flag in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


KILLABLE_RUN = """
import sys, time
import bertcourse.training.pretrain as train
from bertcourse.data import Corpus, load_corpus
from bertcourse.course import load_course
from bertcourse.tokenizer import load_tokenizer

data_dir, out_dir, pause = sys.argv[1], sys.argv[2], float(sys.argv[3])
corpus = load_corpus(data_dir=data_dir)
spec = load_course(check_files=False).profile("cpu-quick")
tokenizer = load_tokenizer(corpus, spec.vocab_size, spec.model.max_seq_len, progress=False)
small = Corpus(corpus.train[:2000], corpus.heldout[:100], corpus.source)
from bertcourse.training.objectives import MaskedLM
make_batch = MaskedLM.batch
# A pause per step (no random draws) leaves time to kill the run part-way; it changes no result.
MaskedLM.batch = lambda *args, **kwargs: (time.sleep(pause), make_batch(*args, **kwargs))[1]
# the settings of the test module's `run`: the module's uninterrupted run is this one's reference
train.pretrain(train.PretrainOptions(profile="cpu-quick", out_dir=out_dir, max_steps=10, eval_every=5,
                                     checkpoint_every=4, progress=False,
                                     model_overrides={"dropout": 0.1}),
               corpus=small, tokenizer=tokenizer)
"""


@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_to_the_weights_of_an_uninterrupted_run(tmp_path, data_dir, small_corpus,
                                                                                  quick_tokenizer, uninterrupted,
                                                                                  capsys):
    """The real thing: a separate process killed with SIGKILL between checkpoints, then resumed in this process,
    which never held the killed run's state: it must end on the weights of the module's uninterrupted run (the
    same settings)."""
    import signal
    import time

    def start(out: Path, pause: float) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", KILLABLE_RUN, str(data_dir), str(out), str(pause)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    killed = start(tmp_path / "killed", 0.6)  # 0.6 s a step: 3.6 s from the first checkpoint to the end
    deadline, checkpoint, seen = time.monotonic() + 300, tmp_path / "killed" / CHECKPOINT_NAME, None

    def past_a_checkpoint() -> bool:  # a checkpoint is read only when a new one was written (reading costs CPU)
        nonlocal seen
        stamp = checkpoint.stat().st_mtime_ns if checkpoint.exists() else None
        if stamp is None or stamp == seen:
            return False
        seen = stamp
        return load_checkpoint(tmp_path / "killed")["step"] >= 4

    while not past_a_checkpoint():
        assert killed.poll() is None, f"the run ended before it could be killed: {killed.stderr.read()}"
        assert time.monotonic() < deadline, "no checkpoint within 5 minutes"
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.wait(60)
    at_kill = load_checkpoint(tmp_path / "killed")["step"]
    assert 4 <= at_kill < 10
    capsys.readouterr()
    run(tmp_path / "killed", small_corpus, quick_tokenizer, resume=True)
    assert f"resuming from step {at_kill} of 10" in capsys.readouterr().out
    reference, after_kill = load_checkpoint(uninterrupted.out_dir), load_checkpoint(tmp_path / "killed")
    assert reference["step"] == after_kill["step"] == 10
    for name, weight in reference["model"].items():
        assert torch.equal(weight, after_kill["model"][name]), name
    assert reference["history"] == after_kill["history"]

"""A look inside a masked LM (`bertcourse.model_inspection`), on tiny models built here: a course BERT with
random weights, the same weights in a transformers `BertForMaskedLM` (eager attention) saved with
save_pretrained, and stand-in models whose predictions are known, so every number can be checked."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertcourse import model_inspection as I
from bertcourse.config import ModelConfig
from bertcourse.model import build_model
from bertcourse.model_support import bert_state_dict_to_hf, hf_bert_config, randomize_
from bertcourse.tokenizer import build_tokenizer

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["the", "a", "river", "bank", "money", "in", "was", "is", "good", "bad", "film", "fish", "deposit", "i",
         "went", "to", "sat", "on", "of", "and", "it", "mov", "##ie", "##s", "."]
SENTENCES = ["the film was good .", "i went to the bank to deposit money .", "i sat on the bank of the river .",
             "the movies is bad .", "a fish in the river is good .", "it was a bad film and the money is good ."]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(SPECIALS + WORDS + [chr(c) for c in range(ord("a"), ord("z") + 1)], model_max_length=32)


def _config(tokenizer, arch: str = "bert") -> ModelConfig:
    return ModelConfig(vocab_size=len(tokenizer), n_layers=2, d_model=32, n_heads=4, d_ff=64, max_seq_len=32,
                       arch=arch)


@pytest.fixture(scope="module")
def course_lm(tokenizer):
    model = build_model(_config(tokenizer))
    randomize_(model, torch.Generator().manual_seed(0))
    return I.MaskedLM(model.eval(), tokenizer, "course")


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory, course_lm, tokenizer):
    """The course BERT's weights in a transformers BertForMaskedLM, saved as a checkpoint folder."""
    from transformers import BertForMaskedLM

    model = course_lm.model
    hf = BertForMaskedLM(hf_bert_config(model.config))
    hf.load_state_dict(bert_state_dict_to_hf(model.state_dict(), model.config), strict=False)
    folder = tmp_path_factory.mktemp("tiny-bert-mlm")
    hf.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# ----------------------------------------------------------------------------- attention weights of the course model


def test_recording_attention_changes_nothing_and_is_off_afterwards(course_lm, tokenizer):
    model = course_lm.model
    batch = course_lm.encode(SENTENCES)
    with torch.no_grad():
        plain = model.encode(batch["input_ids"], batch["attention_mask"])
        with I.recording_attention(model) as kept:
            recorded = model.encode(batch["input_ids"], batch["attention_mask"])
    torch.testing.assert_close(recorded, plain, atol=1e-5, rtol=1e-5)
    length = batch["input_ids"].shape[1]
    assert len(kept) == 2 and kept[0].shape == (len(SENTENCES), 4, length, length)
    weights = torch.stack(kept)  # [L, B, H, S, S]
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))  # each query's weights sum to 1
    rows, keys = (batch["attention_mask"] == 0).nonzero(as_tuple=True)  # padded keys get no weight
    assert len(rows) and weights[:, rows, :, :, keys].max() < 1e-6
    assert all(not layer.attention._forward_pre_hooks for layer in model.blocks)  # the hooks are gone after


def test_the_gpt_records_causal_weights(tokenizer):
    gpt = build_model(_config(tokenizer, "gpt")).eval()
    lm = I.MaskedLM(gpt, tokenizer)
    tokens, weights = I.attention_maps(lm, SENTENCES[1])
    assert weights.shape == (2, 4, len(tokens), len(tokens))
    assert np.triu(weights, 1).max() < 1e-6 and weights[..., 0, 0] == pytest.approx(1.0)


def test_course_attention_equals_transformers_eager_attention(course_lm, hf_folder):
    hf = I.load_transformers_masked_lm(hf_folder)
    assert hf.kind == "transformers" and course_lm.kind == "course"
    tokens, ours = I.attention_maps(course_lm, SENTENCES[2])
    their_tokens, theirs = I.attention_maps(hf, SENTENCES[2])
    assert tokens == their_tokens and tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    assert ours.std() > 0.01  # weights that differ from head to head, not a uniform placeholder


# ----------------------------------------------------------------------------- fill-mask


def test_fill_mask_gives_the_same_top_5_for_the_same_weights_in_both_libraries(course_lm, hf_folder):
    hf = I.load_transformers_masked_lm(hf_folder)
    sentences = ["the film was [MASK] .", "i went to the [MASK] to deposit [MASK] ."]
    ours, theirs = I.fill_mask(course_lm, sentences), I.fill_mask(hf, sentences)
    assert [len(s["predictions"]) for s in ours] == [1, 2]
    for a, b in zip(ours, theirs):
        for mine, other in zip(a["predictions"], b["predictions"]):
            assert [t for t, _ in mine] == [t for t, _ in other]
            assert [p for _, p in mine] == pytest.approx([p for _, p in other], abs=1e-5)
            probabilities = [p for _, p in mine]
            assert len(mine) == 5 and probabilities == sorted(probabilities, reverse=True) and sum(probabilities) <= 1


def test_fill_mask_reads_the_model_at_the_mask(course_lm, tokenizer):
    """A bias that makes "river" certain everywhere: the top prediction is "river" with probability ~1."""
    model = build_model(_config(tokenizer))
    with torch.no_grad():
        model.head.bias[tokenizer.convert_tokens_to_ids("river")] = 50.0
    (result,) = I.fill_mask(I.MaskedLM(model.eval(), tokenizer), ["a fish in the [MASK] ."])
    (top,) = result["predictions"]
    assert top[0][0] == "river" and top[0][1] > 0.99
    with pytest.raises(I.InspectionError, match="holds no \\[MASK\\]"):
        I.fill_mask(course_lm, ["no mask here ."])


# ----------------------------------------------------------------------------- the 80/10/10 cases


class _Copier(I.MaskedLM):
    """Predicts, at every position, the token it is shown."""

    max_length = 32

    def run(self, batch, attention=False):
        ids = batch["input_ids"]
        return {"logits": torch.nn.functional.one_hot(ids, len(self.tokenizer)).float()}


class _Oracle(I.MaskedLM):
    """Knows the original sentences (`sentences`, one batch of them): recovers every token."""

    max_length = 32
    sentences: list[str] = []

    def run(self, batch, attention=False):
        encoded = self.encode(self.sentences)["input_ids"]
        return {"logits": torch.nn.functional.one_hot(encoded, len(self.tokenizer)).float()}


def test_each_case_is_scored_by_what_the_position_holds(tokenizer):
    sentences = SENTENCES * 60
    copier = I.recovery_by_case(_Copier(None, tokenizer), sentences, seed=1, batch_size=len(sentences))
    assert copier["keep"]["accuracy"] == 1.0  # shown the token itself, a copier is right
    assert copier["random"]["accuracy"] == 0.0 and copier["random"]["copies_shown_token"] == 1.0
    assert copier["mask"]["accuracy"] == 0.0  # it "predicts" [MASK]
    total = sum(copier[c]["positions"] for c in I.CASES)
    tokens = sum(len(tokenizer(s)["input_ids"]) - 2 for s in sentences)
    # 15% selected, and at least one per sentence (these are short: 0.85^5 = 44% of 5-token ones draw none)
    assert 0.14 * tokens < total < 0.25 * tokens
    for case, share in (("mask", 0.8), ("keep", 0.1), ("random", 0.1)):
        assert abs(copier[case]["positions"] / total - share) < 4 * (share * (1 - share) / total) ** 0.5, case
    oracle = _Oracle(None, tokenizer)
    oracle.sentences = sentences
    perfect = I.recovery_by_case(oracle, sentences, seed=1, batch_size=len(sentences))
    assert all(perfect[c]["accuracy"] == 1.0 for c in I.CASES)
    assert [perfect[c]["positions"] for c in I.CASES] == [copier[c]["positions"] for c in I.CASES]  # same seed
    low, high = copier["mask"]["interval"]
    assert low == 0.0 < high < 0.05


def test_recovery_by_case_runs_on_a_real_model(course_lm):
    result = I.recovery_by_case(course_lm, SENTENCES * 5, repeats=2)
    for case in I.CASES:
        assert result[case]["positions"] > 0 and 0 <= result[case]["accuracy"] <= 1


# ----------------------------------------------------------------------------- attention summary and figure


def test_attention_summary_measures_cls_sep_previous_and_self():
    tokens = ["[CLS]", "a", "b", "c", "[SEP]"]
    n = len(tokens)
    weights = np.zeros((1, 3, n, n))
    weights[0, 0, :, 0] = 1  # head 0: everything on [CLS]
    weights[0, 1, 0, 0] = 1
    weights[0, 1, np.arange(1, n), np.arange(n - 1)] = 1  # head 1: the previous token
    weights[0, 2] = np.eye(n)  # head 2: itself
    cls_head, previous_head, self_head = I.attention_summary(tokens, weights)
    assert cls_head["to_cls"] == 1 and cls_head["to_sep"] == 0 and cls_head["to_previous"] == pytest.approx(0.25)
    assert previous_head["to_previous"] == 1 and previous_head["to_next"] == 0
    assert self_head["to_self"] == 1 and self_head["to_sep"] == pytest.approx(1 / n)


def test_plot_attention_draws_a_panel_per_layer_and_head(course_lm, tmp_path):
    tokens, weights = I.attention_maps(course_lm, SENTENCES[0])
    fig = I.plot_attention(tokens, weights, path=tmp_path / "attention.png")
    assert len(fig.axes) == 2 * 4 and (tmp_path / "attention.png").stat().st_size > 1000


# ----------------------------------------------------------------------------- word senses


def test_word_vectors_average_the_pieces_of_the_word(course_lm, tokenizer):
    sentences = ["the movies is bad .", "i went to the movies ."]
    vectors = I.word_vectors(course_lm, sentences, "movies")
    batch = course_lm.encode(sentences)
    pieces = tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist())
    assert pieces[2:5] == ["mov", "##ie", "##s"]
    hidden = course_lm.run(batch)["hidden"]
    np.testing.assert_allclose(vectors[0], hidden[0, 2:5].mean(0).numpy(), rtol=1e-5)
    np.testing.assert_allclose(vectors[1], hidden[1, 5:8].mean(0).numpy(), rtol=1e-5)
    table = I.cosine_table(I.word_vectors(course_lm, SENTENCES[1:3] + ["the bank ."], "bank"))
    assert table.shape == (3, 3) and np.allclose(np.diag(table), 1) and np.allclose(table, table.T)
    assert (table < 1 - 1e-4)[~np.eye(3, dtype=bool)].all()  # context changes the vector
    with pytest.raises(I.InspectionError, match="does not hold the word 'bank'"):
        I.word_vectors(course_lm, ["the river ."], "bank")


# ----------------------------------------------------------------------------- loading


def test_loading_refuses_what_is_not_a_checkpoint_with_one_clear_message(tmp_path):
    """The one loader's (`hf_checkpoints`) one-line refusals, as InspectionError (lessons 3 and 4 catch it)."""
    with pytest.raises(I.InspectionError, match="missing: no such folder"):
        I.load_transformers_masked_lm(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(I.InspectionError, match="empty: not a transformers checkpoint"):
        I.load_transformers_masked_lm(tmp_path / "empty")
    with pytest.raises(I.InspectionError, match=r"offline mode is on \(HF_HUB_OFFLINE\)"):  # set by conftest
        I.load_transformers_masked_lm("hf:google/bert_uncased_L-2_H-128_A-2-not-cached")

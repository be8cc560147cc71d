"""Hidden checks of ex07-self-test: `loss_counts`, five numeric answers and sixteen multiple-choice answers
on the whole course (the pretraining tasks, the MLM loss, BERT's strengths and limits, the models that
addressed them, and generating with an encoder).

- `loss_counts` is compared with counts taken here on batches masked by the course's `mask_tokens`
  (padded rows, [CLS]/[SEP], the 80/10/10 recipe), so its three checks are exact; each names in its message
  the misconception a wrong count matches (only [MASK] inputs, only changed inputs, every position).
- A numeric answer is read in any form a student may write it (`_common.numeric_answer`: int, float,
  Fraction, a string such as "7/4") and accepted within the tolerance the notebook states with it. A wrong
  value that matches a known misconception (within the same tolerance) gets a message explaining it.
- A multiple-choice answer is read by `_common.concept_answer`; a wrong letter gets a message that says why
  that option is wrong (never which option is right), the check's feedback names the question's theme.

The notebook states each tolerance; tests/checks/test_checks_ex07.py proves every check (a wrong answer per
question fails its check and only it, every accepted form passes, the release and stubs score 0).
"""

from __future__ import annotations

import pytest
import torch
from _common import CLS, IGNORE, MASK, PAD, SEP, SPECIAL, VOCAB, concept_answer, numeric_answer

from bertcourse.masking import mask_tokens

# ----------------------------------------------------------------------------- part 1: loss_counts


def masked_batch(seed: int, rows: int = 48, seq: int = 60):
    """(original, inputs, labels): rows of regular ids between [CLS] and [SEP], right-padded to random
    lengths, masked with the course's recipe."""
    g = torch.Generator().manual_seed(seed)
    original = torch.randint(1000, VOCAB, (rows, seq), generator=g)
    lengths = torch.randint(8, seq + 1, (rows,), generator=g)
    positions = torch.arange(seq).unsqueeze(0)
    original[positions >= lengths.unsqueeze(1)] = PAD
    original[:, 0] = CLS
    original[torch.arange(rows), lengths - 1] = SEP
    inputs, labels = mask_tokens(original, mask_token_id=MASK, vocab_size=VOCAB, special_ids=SPECIAL, generator=g)
    return original, inputs, labels


def reference_counts(original, inputs, labels) -> tuple[int, int, int, int]:
    """The four counts the contract asks for, taken here (the judge's own, trusted)."""
    in_loss = labels != IGNORE
    mask = in_loss & (inputs == MASK)
    own = in_loss & (inputs == original)
    return int(in_loss.sum()), int(mask.sum()), int((in_loss & ~mask & ~own).sum()), int(own.sum())


BATCHES = [masked_batch(seed) for seed in (11, 12)]


def student_counts(student, batch) -> tuple[int, ...]:
    """The student's four counts as ints (0-d tensors and whole floats accepted)."""
    original, inputs, labels = batch
    result = student.call("loss_counts", original, inputs, labels, MASK)
    assert isinstance(result, (tuple, list)) and len(result) == 4, (
        "loss_counts must return four counts: (in_loss, shows_mask, shows_random, shows_own)")
    counts = []
    for value in result:
        if isinstance(value, torch.Tensor):
            assert value.numel() == 1, "each count must be one number, not a tensor of several"
            value = value.item()
        assert isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer(), (
            "each count must be a whole number")
        counts.append(int(value))
    return tuple(counts)


def other_counts(original, inputs, labels) -> dict[str, int]:
    """What a wrong in_loss count often equals, to name the misconception in the message."""
    return {
        "the number of positions that show [MASK]": int((inputs == MASK).sum()),
        "the number of positions whose input differs from the original": int((inputs != original).sum()),
        "the number of positions in the batch": original.numel(),
        "the number of non-special positions": int((~torch.isin(original, torch.tensor(SPECIAL))).sum()),
    }


@pytest.mark.check(cell="loss_counts_checks", points=1.0,
                   feedback="the loss takes every position whose label is not -100, whatever its input shows")
def test_in_loss_counts_every_selected_position(student):
    for batch in BATCHES:
        got, expected = student_counts(student, batch)[0], reference_counts(*batch)[0]
        if got != expected:
            named = [what for what, count in other_counts(*batch).items() if count == got]
            raise AssertionError("in_loss is " + (named[0] if named else "not the number of labelled positions"))


@pytest.mark.check(cell="loss_counts_checks", points=1.0,
                   feedback="shows_mask and shows_random count the loss positions by what their input shows; "
                   "[MASK] is not a random token")
def test_mask_and_random_counted_apart_among_loss_positions(student):
    for batch in BATCHES:
        got, expected = student_counts(student, batch), reference_counts(*batch)
        original, inputs, labels = batch
        assert got[1] == expected[1], "shows_mask is not the number of loss positions that show [MASK]"
        if got[2] != expected[2]:
            changed = int(((labels != IGNORE) & (inputs != original)).sum())
            assert got[2] != changed, "shows_random counts the [MASK] positions too"
            raise AssertionError("shows_random is not the number of loss positions that show another token")


@pytest.mark.check(cell="loss_counts_checks", points=1.0,
                   feedback="a target that shows its own token is still in the loss; positions outside the "
                   "loss count nowhere")
def test_own_token_counted_among_loss_positions_only(student):
    for batch in BATCHES:
        got, expected = student_counts(student, batch)[3], reference_counts(*batch)[3]
        original, inputs, labels = batch
        if got != expected:
            assert got != int((inputs == original).sum()), "shows_own counts positions outside the loss too"
            assert got != 0, "shows_own is 0: the kept targets are in the loss"
            raise AssertionError("shows_own is not the number of loss positions that show their own token")


# ----------------------------------------------------------------------------- part 2: numbers


def assert_number(student, name: str, exact: float, tolerance: float, known: dict[float, str]) -> None:
    """`name` within `tolerance` (relative) of `exact`; a value matching a known misconception is named."""
    value = numeric_answer(student, name)
    if abs(value - exact) <= tolerance * abs(exact):
        return
    shown = f"{int(value):,}" if value.is_integer() else f"{value:.6g}"
    for wrong, why in known.items():
        if abs(value - wrong) <= tolerance * abs(wrong):
            raise AssertionError(f"{name} = {shown}: {why}")
    raise AssertionError(f"{name} = {shown} is not within {tolerance:.1%} of the expected value")


@pytest.mark.check(cell="numbers_checks", points=1.0,
                   feedback="N1: every selected position enters the loss, whatever it shows")
def test_n1_positions_in_the_loss(student):
    assert_number(student, "answer_n1", 30, 0.02, {
        24: "that counts only the targets that show [MASK]; the random and kept ones are in the loss too",
        27: "that counts the targets whose input changed; the kept ones are in the loss too",
        200: "the positions that were not selected have label -100 and stay out of the loss",
        170: "those are the positions left out of the loss",
        15: "15 is the percentage; the question asks for a number of positions",
        0.15: "that is a rate; the question asks for a number of positions",
    })


@pytest.mark.check(cell="numbers_checks", points=1.0,
                   feedback="N2: the 80% share applies to the selected positions, not to the whole sequence")
def test_n2_targets_showing_mask(student):
    assert_number(student, "answer_n2", 24, 0.02, {
        30: "not every selected position shows [MASK]: 10% show a random token and 10% their own",
        27: "that adds the targets that show a random token",
        160: "the 80% share is taken of the selected positions, not of all 200",
        0.12: "that is a rate; the question asks for a number of positions",
    })


@pytest.mark.check(cell="numbers_checks", points=1.0,
                   feedback="N3: the factorised embedding is a V x E table plus an E x H projection")
def test_n3_albert_embedding_saving(student):
    v, h, e = 30_000, 768, 128
    assert_number(student, "answer_n3", v * h - (v * e + e * h), 0.001, {
        v * (h - e): "the E x H projection has parameters too",
        v * e + e * h: "that is the size of the factorised embedding; the question asks how much it saves",
        v * e: "that is the size of the V x E table; the question asks how much the factorisation saves",
        v * h: "that is the size of the unfactorised table; subtract what replaces it",
    })


@pytest.mark.check(cell="numbers_checks", points=1.0,
                   feedback="N4: ELECTRA's discriminator has a loss term at every position, MLM at the selected "
                   "ones")
def test_n4_electra_positions_ratio(student):
    assert_number(student, "answer_n4", 200 / 30, 0.02, {
        1: "the discriminator labels every position, replaced or not, not only the masked ones",
        200 / 24: "MLM's loss covers every selected position (30), not only those that show [MASK]",
        170 / 30: "the discriminator also labels the masked positions, not only the untouched ones",
        30 / 200: "that is the ratio the other way round",
        200: "the question asks for a ratio of two counts",
    })


@pytest.mark.check(cell="numbers_checks", points=1.0,
                   feedback="N5: attention scores every pair of positions")
def test_n5_attention_scores_ratio(student):
    assert_number(student, "answer_n5", 16, 0.02, {
        4: "attention scores every pair of positions, so their number grows with the square of the length",
        1 / 16: "that is the ratio the other way round",
        512 - 128: "the question asks for a ratio",
    })


# ----------------------------------------------------------------------------- parts 3 and 4: choices


def assert_choice(student, name: str, right: str, why_not: dict[str, str]) -> None:
    """`name` is `right`; a wrong letter fails with why that option is wrong (not which one is right)."""
    answer = concept_answer(student, name)
    assert answer in ("a", "b", "c", "d"), f'`{name}` must be one of "a", "b", "c", "d"'
    assert answer == right, f"({answer}) {why_not[answer]}"


@pytest.mark.check(cell="bert_checks", points=1.0,
                   feedback="Q1: ask what each task's loss is computed on, and what kind of context MLM gives a token")
def test_q1_two_pretraining_tasks(student):
    assert_choice(student, "answer_q1", "b", {
        "a": "MLM is not a left-to-right objective: it predicts hidden tokens from both sides at once (which is why "
             "BERT does not generate text), and NSP asks whether B follows A, not where documents end",
        "c": "[CLS] is never selected for masking, so MLM puts no loss on it (the [CLS] summary came from NSP's "
             "classifier, later from fine-tuning); random replacements belong to MLM's recipe, not NSP's",
        "d": "both tasks train one shared encoder, and a fine-tuned classifier uses everything MLM taught it; RoBERTa,"
             " pretrained with MLM alone, does better on sentence tasks than BERT",
    })


@pytest.mark.check(cell="bert_checks", points=1.0,
                   feedback="Q2: ask whether the model can tell, from its input alone, which visible tokens are "
                            "targets")
def test_q2_which_positions_enter_the_loss(student):
    assert_choice(student, "answer_q2", "c", {
        "a": "with a loss at [MASK] positions only, the model could learn to trust every other input as it stands, and"
             " the random and kept 10% would teach nothing: they work because they are predicted too",
        "b": "the model cannot tell a kept token from any other visible one, so predicting it is not trivial: it must "
             "check every token against its context; dropping kept targets undoes what that 10% is for",
        "d": "positions that were not selected carry the label -100 and add nothing to the loss; copying a visible "
             "token would be an easy task that teaches little",
    })


@pytest.mark.check(cell="bert_checks", points=1.0,
                   feedback="Q3: -100 is a label: not an input id, and not a logit")
def test_q3_how_minus_100_keeps_positions_out(student):
    assert_choice(student, "answer_q3", "a", {
        "b": "-100 is in the labels, never in the inputs: the embedding layer sees the masked input ids, and a "
             "negative id would not even index an embedding table",
        "c": "nothing is rescaled: with the loss taken everywhere, the unselected positions would still send gradients"
             " into the model; ignore_index removes them exactly",
        "d": "a label is a class index, not a logit, and -100 names no class: cross_entropy recognises the value and "
             "drops those positions exactly, with zero gradient",
    })


@pytest.mark.check(cell="bert_checks", points=1.0,
                   feedback="Q4: compare what differs between a token of A and a token of B in the input vector")
def test_q4_how_a_pair_tells_its_sentences_apart(student):
    assert_choice(student, "answer_q4", "d", {
        "a": "positions run on from A into B (0 to 511 over the whole input): restarting them would give the first "
             "tokens of A and of B the same position vector",
        "b": "every position attends to every other in every layer, across the [SEP] too: that is how a pair task "
             "compares the two sentences",
        "c": "both sentences share one WordPiece vocabulary: a word has the same token id in A and in B",
    })


@pytest.mark.check(cell="bert_checks", points=1.0,
                   feedback="Q5: think of the inputs the model sees after pretraining, when it is fine-tuned")
def test_q5_why_not_always_mask(student):
    assert_choice(student, "answer_q5", "b", {
        "a": "every selected position gets a vocabulary projection and a loss term whatever it shows; the recipe "
             "changes what the input shows, not how much is computed",
        "c": "the random share is not about typos and the kept share is no warm-up: both exist so that the model "
             "cannot know which visible tokens are targets",
        "d": "the context of a [MASK] still says a lot about its token, and 100% [MASK] trains fine (transformers' "
             "whole-word option does it); it only widens the gap to fine-tuning inputs",
    })


@pytest.mark.check(cell="bert_checks", points=1.0,
                   feedback="Q6: ask what the input holds at the other blank when the model predicts one of them")
def test_q6_independent_masked_predictions(student):
    assert_choice(student, "answer_q6", "d", {
        "a": "MLM makes all its predictions in one pass from the masked input, and no prediction is fed back in: "
             "conditioning on earlier guesses is a decoder's factorisation, which BERT does not have",
        "b": "the output layer scores single vocabulary entries at each position; there is no vocabulary of pairs",
        "c": "attention lets the second position see that the first shows [MASK], not what the model predicts there; "
             "the loss is one term per position (XLNet's permutation objective targets this)",
    })


@pytest.mark.check(cell="bert_checks", points=1.0,
                   feedback="Q7: check each claim against BERT's input format and its tokenizer")
def test_q7_a_real_limitation_of_bert(student):
    assert_choice(student, "answer_q7", "a", {
        "b": "segment embeddings (A and B) and [SEP] exist for pairs: inference, paraphrase and QA were all fine-tuned"
             " on pairs",
        "c": "WordPiece splits an unseen word into known pieces, down to single characters if need be, so almost "
             "nothing becomes [UNK]",
        "d": "BERT's vectors are contextual: every layer mixes in the sentence around a word, so the two \"bank\"s get "
             "different vectors",
    })


@pytest.mark.check(cell="after_checks", points=1.0,
                   feedback="Q8: RoBERTa kept BERT's architecture and its masked-LM objective")
def test_q8_what_roberta_changed(student):
    assert_choice(student, "answer_q8", "c", {
        "a": "RoBERTa is still a masked-LM encoder: its gains came from the training recipe, not from a new objective",
        "b": "RoBERTa removed NSP: inputs of contiguous sentences without NSP matched or beat BERT; negatives from the"
             " same document are closer to ALBERT's sentence-order prediction",
        "d": "that is ALBERT's parameter reduction; RoBERTa kept BERT's architecture (with a byte-level BPE "
             "vocabulary)",
    })


@pytest.mark.check(cell="after_checks", points=1.0,
                   feedback="Q9: ask what a random sentence from another document changes besides coherence")
def test_q9_why_sop_replaced_nsp(student):
    assert_choice(student, "answer_q9", "a", {
        "b": "SOP still feeds two segments, A and B, like NSP; only the negatives differ (the same two segments, "
             "swapped)",
        "c": "it is the other way round: NSP is easy, as a random B usually changes the topic; ALBERT found that "
             "NSP-trained models fail SOP, while SOP-trained ones do fairly well on NSP",
        "d": "SOP is a binary decision about two consecutive segments (in order or swapped), and ALBERT has no decoder",
    })


@pytest.mark.check(cell="after_checks", points=1.0,
                   feedback="Q10: sharing weights between layers is not sharing their work")
def test_q10_what_albert_sharing_buys(student):
    assert_choice(student, "answer_q10", "c", {
        "a": "sharing weights is not sharing outputs: each layer applies the same weights to a different input, so all"
             " of them are computed (ALBERT-xxlarge is slower than BERT-large)",
        "b": "the vocabulary is unchanged; the V x H table becomes a V x E table and an E x H projection, and every "
             "token keeps its own row",
        "d": "the weights stay shared in fine-tuning: the fine-tuned model is as small as the pretrained one",
    })


@pytest.mark.check(cell="after_checks", points=1.0,
                   feedback="Q11: DistilBERT is named after knowledge distillation: ask who teaches the small model")
def test_q11_how_distilbert_was_made(student):
    assert_choice(student, "answer_q11", "b", {
        "a": "no weights were zeroed: DistilBERT is a smaller dense network, half the layers of BERT-base, trained to "
             "imitate it",
        "c": "DistilBERT keeps ordinary float weights; it has half of BERT-base's layers, which is where its savings "
             "come from",
        "d": "the point is the teacher: the student learns from BERT-base's soft predictions (a distillation loss), "
             "besides MLM and a cosine loss on hidden states",
    })


@pytest.mark.check(cell="after_checks", points=1.0,
                   feedback="Q12: SpanBERT is an encoder without NSP; ask what its extra objective predicts, and from "
                            "what")
def test_q12_what_spanbert_predicts(student):
    assert_choice(student, "answer_q12", "d", {
        "a": "SpanBERT is an encoder without a decoder: its spans are short (about 3.8 words on average) and predicted"
             " in place",
        "b": "SpanBERT dropped NSP and trains on single contiguous segments; what changed is what is masked and how it"
             " is predicted",
        "c": "the tokens of a span are predicted, and twice: by the MLM head at each position and from the span's "
             "boundary; nothing predicts lengths",
    })


@pytest.mark.check(cell="after_checks", points=1.0,
                   feedback="Q13: ask which network is kept after pretraining, and how many positions carry a label")
def test_q13_what_electra_trains(student):
    assert_choice(student, "answer_q13", "a", {
        "b": "the generator is trained with ordinary maximum likelihood (MLM), not adversarially, and the "
             "discriminator is the model that is kept and fine-tuned",
        "c": "the discriminator makes a yes/no decision per token, not a vocabulary prediction, and the generator "
             "works best when small (a quarter to half of the discriminator)",
        "d": "the labels are per token, one for every token of the input: that is where ELECTRA's efficiency comes "
             "from",
    })


@pytest.mark.check(cell="after_checks", points=1.0,
                   feedback="Q14: BERT mixes two kinds of information into one vector at the input; DeBERTa keeps them"
                            " apart")
def test_q14_what_deberta_disentangles(student):
    assert_choice(student, "answer_q14", "c", {
        "a": "positions matter more explicitly in DeBERTa, not less: relative positions enter every attention score",
        "b": "adding position to content at the input is BERT's way; DeBERTa keeps the two apart and lets them "
             "interact through separate attention terms",
        "d": "every head attends in both directions: disentangled refers to content and position, not to left and "
             "right",
    })


@pytest.mark.check(cell="after_checks", points=1.0,
                   feedback="Q15: what a position may attend to decides whether a Transformer can generate")
def test_q15_how_unilm_generates(student):
    assert_choice(student, "answer_q15", "b", {
        "a": "UniLM has no separate decoder: the same parameters serve every task, and only the self-attention mask "
             "changes",
        "c": "one pass over many blanks predicts each of them independently (see Q6); UniLM generates token by token, "
             "the target under a causal mask",
        "d": "reversing the target hides nothing: under full attention every target position would still see the "
             "tokens it must predict",
    })


@pytest.mark.check(cell="after_checks", points=1.0,
                   feedback="Q16: a one-pass fill predicts the blanks independently; ask what repairs that")
def test_q16_generating_with_an_encoder(student):
    assert_choice(student, "answer_q16", "d", {
        "a": "the ten predictions are made independently of each other, so they often clash (repeated or incoherent "
             "words): one pass is a poor writer",
        "b": "NSP classifies a pair (does B follow A?); it predicts no word, and [CLS] has no vocabulary head",
        "c": "T5 and BART are encoder-decoders: a bidirectional encoder reads the input and a causal decoder writes",
    })

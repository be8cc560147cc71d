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
        7.5: "that is the count for part 1's sequences of 50 tokens; N1's sequence holds 200",
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
        6: "that is the count for part 1's sequences of 50 tokens; N2's sequence holds 200",
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


@pytest.mark.check(cell="bert_checks", points=0.5,
                   feedback="Q1: ask what each task's loss is computed on, and what kind of context MLM gives a token")
def test_q1_two_pretraining_tasks(student):
    assert_choice(student, "answer_q1", "d", {
        "a": "MLM is not a left-to-right objective: it predicts hidden tokens from both sides at once (which is why "
             "BERT does not generate text), and NSP asks whether B follows A, not where documents end",
        "b": "[CLS] is never selected for masking, so MLM puts no loss on it (the [CLS] summary came from NSP's "
             "classifier, later from fine-tuning); random replacements belong to MLM's recipe, not NSP's",
        "c": "both tasks train one shared encoder, and a fine-tuned classifier uses everything MLM taught it; RoBERTa,"
             " pretrained with MLM alone, does better on sentence tasks than BERT",
    })


@pytest.mark.check(cell="bert_checks", points=0.5,
                   feedback="Q2: ask what a padded position's prediction is, and what its targets do to a mean over "
                            "targets")
def test_q2_padding_selected_as_targets(student):
    assert_choice(student, "answer_q2", "b", {
        "a": "the attention mask only stops other positions from reading a padded key; the model still predicts at a "
             "padded position, and a label there puts that prediction in the loss",
        "c": "[PAD] is an ordinary id of the vocabulary, with its own row in the output layer: predicting it is "
             "possible, and easy",
        "d": "what it learns is to say [PAD] after the end of a sentence, which the attention mask already tells it: "
             "these targets teach nothing about language and only water down the loss",
    })


@pytest.mark.check(cell="bert_checks", points=0.5,
                   feedback="Q3: ask what an ignored target does to the sum, and to the count the mean divides by")
def test_q3_how_minus_100_keeps_positions_out(student):
    assert_choice(student, "answer_q3", "c", {
        "a": "an ignored target leaves the count too: otherwise a batch's loss would shrink with every unselected "
             "position, and a target's weight would depend on how much of its row was padding or unselected",
        "b": "-100 is cross_entropy's default ignore_index: such targets are recognised and skipped with zero gradient,"
             " never read as class indices",
        "d": "nothing is rescaled by a share: the mean divides by the number of positions actually labelled",
    })


@pytest.mark.check(cell="bert_checks", points=0.5,
                   feedback="Q4: ask what, besides a segment row, differs between a token of A and a token of B in "
                            "RoBERTa's input")
def test_q4_a_pair_without_segment_rows(student):
    assert_choice(student, "answer_q4", "a", {
        "b": "RoBERTa is fine-tuned on pair tasks (MNLI, QQP) and does them better than BERT; it dropped NSP for "
             "other reasons, and its separators still mark the boundary",
        "c": "positions run on from A into B: restarting them would give the first tokens of A and of B the same "
             "position vector",
        "d": "both sentences share one vocabulary: a word has the same token id in A and in B",
    })


@pytest.mark.check(cell="bert_checks", points=0.5,
                   feedback="Q5: ask what the encoder was never asked to do with a visible token, and which use can "
                            "still change the encoder")
def test_q5_all_mask_and_frozen_features(student):
    assert_choice(student, "answer_q5", "b", {
        "a": "the visible tokens are the context of every prediction, so the encoder learns a lot; fine-tuned, the "
             "100% variant scored about as well as 80/10/10, so the uses did not fail alike",
        "c": "a tagger reads each token's final vector, never the [MASK] row: at test time no input shows [MASK]",
        "d": "nothing is masked at test time: masking is a device of pretraining only",
    })


@pytest.mark.check(cell="bert_checks", points=0.5,
                   feedback="Q6: ask what the input holds at the other blank when the model predicts one of them")
def test_q6_independent_masked_predictions(student):
    assert_choice(student, "answer_q6", "d", {
        "a": "MLM makes all its predictions in one pass from the masked input, and no prediction is fed back in: "
             "conditioning on earlier guesses is a decoder's factorisation, which BERT does not have",
        "b": "the output layer scores single vocabulary entries at each position; there is no vocabulary of pairs",
        "c": "attention lets the second position see that the first shows [MASK], not what the model predicts there; "
             "the loss is one term per position (XLNet's permutation objective targets this)",
    })


@pytest.mark.check(cell="bert_checks", points=0.5,
                   feedback="Q7: check each plan against BERT's position table and against what its input holds")
def test_q7_a_text_longer_than_512_pieces(student):
    assert_choice(student, "answer_q7", "c", {
        "a": "attention itself takes any length, but BERT's learned position table has 512 rows: position 512 has no "
             "vector (and the cost grows with the square of the length)",
        "b": "[CLS] summarises only what the input holds: cutting at 512 drops most of the contract, and the clause "
             "that decides may be anywhere",
        "d": "a text of 2,600 pieces stays far above 512 whatever the cleaning, and bert-base-uncased lower-cases "
             "already",
    })


@pytest.mark.check(cell="after_checks", points=0.5,
                   feedback="Q8: RoBERTa kept BERT's architecture and objective: ask what else changed, and what that "
                            "means for a comparison")
def test_q8_what_roberta_means_for_comparisons(student):
    assert_choice(student, "answer_q8", "a", {
        "b": "gains of several points over many tasks are well beyond the noise: the question is what caused them, "
             "not whether they exist",
        "c": "RoBERTa's gains came with BERT's own objective and architecture: masked-LM had not reached its limit, "
             "BERT was undertrained",
        "d": "BERT's published numbers come from an undertrained recipe: a comparison with them credits X with "
             "whatever its own recipe adds",
    })


@pytest.mark.check(cell="after_checks", points=0.5,
                   feedback="Q9: ask what a random sentence from another document changes besides coherence")
def test_q9_why_sop_replaced_nsp(student):
    assert_choice(student, "answer_q9", "a", {
        "b": "SOP still feeds two segments, A and B, like NSP; only the negatives differ (the same two segments, "
             "swapped)",
        "c": "it is the other way round: NSP is easy, as a random B usually changes the topic; ALBERT found that "
             "NSP-trained models fail SOP, while SOP-trained ones do fairly well on NSP",
        "d": "SOP is a binary decision about two consecutive segments (in order or swapped), and ALBERT has no decoder",
    })


@pytest.mark.check(cell="after_checks", points=0.5,
                   feedback="Q10: sharing weights between layers is not sharing their work")
def test_q10_what_albert_sharing_buys(student):
    assert_choice(student, "answer_q10", "c", {
        "a": "sharing weights is not sharing outputs: each layer applies the same weights to a different input, so all"
             " of them are computed (ALBERT-xxlarge is slower than BERT-large)",
        "b": "the vocabulary is unchanged; the V x H table becomes a V x E table and an E x H projection, and every "
             "token keeps its own row",
        "d": "the weights stay shared in fine-tuning: the fine-tuned model is as small as the pretrained one",
    })


@pytest.mark.check(cell="after_checks", points=0.5,
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


@pytest.mark.check(cell="after_checks", points=0.5,
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


@pytest.mark.check(cell="after_checks", points=0.5,
                   feedback="Q13: ask which network was trained at every position, and what the other one was for")
def test_q13_which_electra_network_is_kept(student):
    assert_choice(student, "answer_q13", "b", {
        "a": "the generator is small (a quarter to half of the discriminator) and only a helper: it is set aside "
             "after pretraining",
        "c": "the generator is trained by maximum likelihood, not adversarially, and is not used after pretraining: "
             "fine-tuning starts from the discriminator alone",
        "d": "detecting replacements at every position is what trains the discriminator's token vectors, and those "
             "are what fine-tuning starts from",
    })


@pytest.mark.check(cell="after_checks", points=0.5,
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


@pytest.mark.check(cell="after_checks", points=0.5,
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


@pytest.mark.check(cell="after_checks", points=0.5,
                   feedback="Q16: a one-pass fill predicts the blanks independently; ask what repairs that")
def test_q16_generating_with_an_encoder(student):
    assert_choice(student, "answer_q16", "d", {
        "a": "the ten predictions are made independently of each other, so they often clash (repeated or incoherent "
             "words): one pass is a poor writer",
        "b": "NSP classifies a pair (does B follow A?); it predicts no word, and [CLS] has no vocabulary head",
        "c": "T5 and BART are encoder-decoders: a bidirectional encoder reads the input and a causal decoder writes",
    })

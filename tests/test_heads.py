"""bertcourse.heads: sentence-pair inputs, token labels on first pieces, QA spans and their characters."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from bertcourse.training.checkpoint import tokenizer_from_json
from bertcourse.classifier import SequenceClassifier
from bertcourse.config import ModelConfig
from bertcourse.heads import (
    IGNORE_INDEX,
    QuestionAnswering,
    SpanOutput,
    TokenClassifier,
    align_word_labels,
    answer_token_span,
    best_span,
    context_mask,
    encode_pairs,
    encode_question_context,
    encode_tagged_words,
    extract_answers,
    span_to_chars,
    word_predictions,
)
from bertcourse.model import build_model
from bertcourse.tokenizer import train_tokenizer

SENTENCES = [
    "The film was not good at all.",
    "An unbelievably charming comedy, never dull.",
    "The Denver Broncos won Super Bowl 50 at Levi's Stadium in Santa Clara, California.",
    "A question: who won the game, and where was it played?",
]
CONTEXT = "The Denver Broncos won Super Bowl 50 at Levi's Stadium in Santa Clara, California."


@pytest.fixture(scope="module")
def tokenizer():
    # a small vocabulary on purpose: many words are cut into several pieces
    return train_tokenizer(SENTENCES * 4, vocab_size=120, model_max_length=64, progress=False)


def tiny_bert(vocab_size: int):
    torch.manual_seed(0)
    return build_model(ModelConfig(vocab_size=vocab_size, n_layers=1, d_model=16, n_heads=2, d_ff=32,
                                   max_seq_len=64, dropout=0.0)).eval()


# ----------------------------------------------------------------------------- sentence pairs


def test_pairs_are_one_input_with_segment_ids_0_then_1(tokenizer):
    batch = encode_pairs(tokenizer, ["a film", "the film was not good at all"], ["not good", "dull"], 64)
    for row in range(2):
        tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][row])
        real = int(batch["attention_mask"][row].sum())
        seps = [i for i, t in enumerate(tokens[:real]) if t == "[SEP]"]
        assert tokens[0] == "[CLS]" and len(seps) == 2 and seps[1] == real - 1
        segments = batch["token_type_ids"][row].tolist()
        assert segments[: seps[0] + 1] == [0] * (seps[0] + 1)  # [CLS] A [SEP]
        assert segments[seps[0] + 1 : real] == [1] * (real - seps[0] - 1)  # B [SEP]
        assert batch["attention_mask"][row, real:].sum() == 0


def test_segment_ids_come_back_with_a_tokenizer_rebuilt_from_a_checkpoint(tokenizer):
    """`tokenizer_from_json` (how fine-tuning reads a checkpoint's tokenizer) returns no segment ids by
    default; the heads' encoders ask for them."""
    rebuilt = tokenizer_from_json(tokenizer.backend_tokenizer.to_str())
    pairs = encode_pairs(rebuilt, ["a film"], ["not good"], 16)
    expected = encode_pairs(tokenizer, ["a film"], ["not good"], 16)["token_type_ids"]
    assert pairs["token_type_ids"].tolist() == expected.tolist() and set(expected[0].tolist()) == {0, 1}
    questions = encode_question_context(rebuilt, ["who won?"], [CONTEXT], 64)
    assert set(questions["token_type_ids"][0].tolist()) == {0, 1}


def test_pair_truncation_keeps_both_sentences(tokenizer):
    batch = encode_pairs(tokenizer, [SENTENCES[2]], [SENTENCES[1]], 12)
    assert batch["input_ids"].shape == (1, 12)
    assert set(batch["token_type_ids"][0].tolist()) == {0, 1}
    with pytest.raises(ValueError, match="2 first sentences but 1"):
        encode_pairs(tokenizer, ["a", "b"], ["c"], 12)


def test_the_sentence_classifier_reads_the_segment_ids_of_a_pair(tokenizer):
    model = SequenceClassifier(tiny_bert(len(tokenizer)), n_labels=3, dropout=0.0).eval()
    batch = encode_pairs(tokenizer, ["a film", "the film"], ["not good", "was dull"], 64)
    with torch.no_grad():
        logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
        one_segment = model(batch["input_ids"], batch["attention_mask"],
                            torch.zeros_like(batch["token_type_ids"])).logits
    assert logits.shape == (2, 3)
    assert not torch.allclose(logits, one_segment)  # segment B is a different input


# ----------------------------------------------------------------------------- token classification


def test_labels_go_on_the_first_piece_of_each_word_only():
    word_ids = [None, 0, 0, 1, 2, 2, 2, None, None]
    assert align_word_labels(word_ids, [5, 6, 7]) == [IGNORE_INDEX, 5, IGNORE_INDEX, 6, 7, IGNORE_INDEX,
                                                      IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]
    with pytest.raises(ValueError, match="word id 2 but only 2 word labels"):
        align_word_labels(word_ids, [5, 6])


def test_tagged_words_label_every_kept_word_once_on_its_first_piece(tokenizer):
    words = [s.split() for s in SENTENCES[:3]]
    tags = [[(3 * i + j) % 5 for j in range(len(w))] for i, w in enumerate(words)]
    batch = encode_tagged_words(tokenizer, words, tags, max_length=64)
    for row in range(len(words)):
        word_ids = batch.word_ids(row)
        labels = batch["labels"][row].tolist()
        assert any(b == a for a, b in itertools.pairwise(word_ids) if a is not None)  # some word has 2+ pieces
        firsts = [i for i, w in enumerate(word_ids) if w is not None and (i == 0 or word_ids[i - 1] != w)]
        assert [i for i, label in enumerate(labels) if label != IGNORE_INDEX] == firsts
        assert [labels[i] for i in firsts] == tags[row]


def test_truncated_words_lose_their_labels_and_kept_ones_keep_theirs(tokenizer):
    words = [SENTENCES[2].split()]
    tags = [list(range(len(words[0])))]
    batch = encode_tagged_words(tokenizer, words, tags, max_length=8)
    kept = sorted({w for w in batch.word_ids(0) if w is not None})
    assert len(kept) < len(words[0])
    assert [x for x in batch["labels"][0].tolist() if x != IGNORE_INDEX] == kept
    with pytest.raises(ValueError, match="sentence 0: 14 words but 13 tags"):
        encode_tagged_words(tokenizer, words, [tags[0][:-1]])


def test_token_classifier_shapes_and_loss_over_labelled_tokens_only(tokenizer):
    words = [s.split() for s in SENTENCES[:2]]
    batch = encode_tagged_words(tokenizer, words, [[1] * len(w) for w in words])
    model = TokenClassifier(tiny_bert(len(tokenizer)), n_labels=4, dropout=0.0).eval()
    with torch.no_grad():
        out = model(batch["input_ids"], batch["attention_mask"], labels=batch["labels"])
    assert out.logits.shape == (*batch["input_ids"].shape, 4)
    scored = batch["labels"] != IGNORE_INDEX
    expected = F.cross_entropy(out.logits[scored], batch["labels"][scored])
    torch.testing.assert_close(out.loss, expected)
    predicted = word_predictions(out.logits[0], batch.word_ids(0))
    assert len(predicted) == len(words[0])
    assert predicted == out.logits[0, scored[0]].argmax(-1).tolist()


# ----------------------------------------------------------------------------- extractive QA


def brute_force_span(start, end, allowed, max_tokens):
    candidates = [(start[i] + end[j], i, j) for i in range(len(start)) for j in range(len(end))
                  if allowed[i] and allowed[j] and i <= j < i + max_tokens]
    return max(candidates)


@pytest.mark.parametrize("seed", range(20))
def test_best_span_is_the_best_allowed_span_of_limited_length(seed):
    generator = torch.Generator().manual_seed(seed)
    start, end = torch.randn(3, 17, generator=generator), torch.randn(3, 17, generator=generator)
    allowed = torch.zeros(3, 17, dtype=torch.bool)
    allowed[0, 5:16] = True
    allowed[1, 2:4] = True
    allowed[2, 9:10] = True
    max_tokens = 1 + seed % 5
    starts, ends, scores = best_span(start, end, allowed, max_tokens)
    for row in range(3):
        score, i, j = brute_force_span(start[row].tolist(), end[row].tolist(), allowed[row].tolist(), max_tokens)
        assert (starts[row].item(), ends[row].item()) == (i, j)
        assert scores[row].item() == pytest.approx(score)
        assert allowed[row, i] and allowed[row, j] and i <= j < i + max_tokens


def test_best_span_refuses_the_question_end_before_start_and_long_spans():
    allowed = torch.tensor([False, False, False, True, True, True, True, True, False])  # [CLS] q q [SEP] ... [SEP]
    allowed[3] = False  # position 3 is the first [SEP]
    start = torch.tensor([9.0, 8, 8, 9, 1, 0, 0, 0, 9])  # the largest scores sit on special and question tokens
    end = torch.tensor([9.0, 8, 8, 9, 0, 0, 0, 2, 9])
    i, j, _ = best_span(start, end, allowed, max_answer_tokens=30)
    assert (i.item(), j.item()) == (4, 7)
    end_before = torch.tensor([0.0, 0, 0, 0, 5, 0, 0, 0, 0])  # the best end comes before the best start
    start_after = torch.tensor([0.0, 0, 0, 0, 0, 0, 5, 0, 0])
    i, j, _ = best_span(start_after, end_before, allowed, max_answer_tokens=30)
    assert i <= j
    i, j, _ = best_span(start, end, allowed, max_answer_tokens=2)  # 4..7 is 4 tokens: too long
    assert j - i < 2
    with pytest.raises(ValueError, match="rows \\[0\\] have no allowed position"):
        best_span(start[None], end[None], torch.zeros(1, 9, dtype=torch.bool))
    with pytest.raises(ValueError, match="at least 1"):
        best_span(start, end, allowed, max_answer_tokens=0)


def test_question_and_special_tokens_are_outside_the_context_mask(tokenizer):
    batch = encode_question_context(tokenizer, ["Who won?"], [CONTEXT], 64)
    mask = context_mask(batch)[0]
    tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][0])
    seps = [i for i, t in enumerate(tokens) if t == "[SEP]"]
    assert not mask[: seps[0] + 1].any() and mask[seps[0] + 1 : seps[1]].all() and not mask[seps[1] :].any()


@pytest.mark.parametrize("answer", ["Denver Broncos", "Levi's Stadium", "'s Stadium", "Santa Clara, California",
                                    "50", "The"])
def test_answer_characters_to_tokens_and_back_give_the_original_text(tokenizer, answer):
    batch = encode_question_context(tokenizer, ["Where was Super Bowl 50 played?"], [CONTEXT], 64)
    offsets = batch["offset_mapping"][0].tolist()
    first = CONTEXT.index(answer)
    span = answer_token_span(offsets, context_mask(batch)[0].tolist(), first, first + len(answer))
    assert span is not None
    assert span_to_chars(offsets, *span) == (first, first + len(answer))  # case and apostrophes kept
    assert CONTEXT[slice(*span_to_chars(batch["offset_mapping"][0], *span))] == answer


def test_an_answer_cut_off_by_max_length_has_no_token_span(tokenizer):
    batch = encode_question_context(tokenizer, ["Who won?"], [CONTEXT], 16)
    first = CONTEXT.index("California")
    assert answer_token_span(batch["offset_mapping"][0].tolist(), context_mask(batch)[0].tolist(),
                             first, first + len("California")) is None
    with pytest.raises(ValueError, match="char_start < char_end"):
        answer_token_span([(0, 1)], [True], 3, 3)


def test_question_answering_head_and_answer_extraction(tokenizer):
    questions, contexts = ["Who won?", "Where was it played?"], [CONTEXT, "It was played at Levi's Stadium."]
    batch = encode_question_context(tokenizer, questions, contexts, 64)
    model = QuestionAnswering(tiny_bert(len(tokenizer))).eval()
    with torch.no_grad():
        out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                    torch.tensor([8, 9]), torch.tensor([9, 10]))
    assert out.start_logits.shape == out.end_logits.shape == batch["input_ids"].shape
    assert torch.isfinite(out.loss)
    padding = batch["attention_mask"] == 0
    assert padding.any() and (out.start_logits[padding] == torch.finfo(torch.float32).min).all()
    answers = extract_answers(out, batch, contexts, max_answer_tokens=4)
    assert all(answer and answer in context for answer, context in zip(answers, contexts))

    # logits that point at known words give exactly those words back, in the context's own spelling
    spans = []
    for row, answer in enumerate(["Denver Broncos", "Levi's Stadium"]):
        first = contexts[row].index(answer)
        spans.append(answer_token_span(batch["offset_mapping"][row].tolist(), context_mask(batch)[row].tolist(),
                                       first, first + len(answer)))
    start, end = torch.zeros_like(out.start_logits), torch.zeros_like(out.end_logits)
    for row, (i, j) in enumerate(spans):
        start[row, i], end[row, j] = 5.0, 5.0
    start[:, 1], end[:, 1] = 50.0, 50.0  # a question token scores highest: it must not win
    assert extract_answers(SpanOutput(None, start, end), batch, contexts) == ["Denver Broncos", "Levi's Stadium"]
    with pytest.raises(ValueError, match="both start_positions and end_positions"):
        model(batch["input_ids"], batch["attention_mask"], start_positions=torch.tensor([1, 1]))

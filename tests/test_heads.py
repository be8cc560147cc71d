"""bertcourse.heads: sentence-pair inputs, token labels on first pieces, QA spans and their characters."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from bertcourse.classifier import SequenceClassifier
from bertcourse.config import ModelConfig
from bertcourse.heads import (
    IGNORE_INDEX,
    TAG_NAMES,
    QuestionAnswering,
    SpanOutput,
    TokenClassifier,
    align_word_labels,
    answer_token_span,
    batched,
    best_span,
    bio_continuation,
    context_mask,
    encode_pairs,
    encode_question_context,
    encode_question_windows,
    encode_tagged_words,
    extract_answers,
    number_date_tags,
    span_to_chars,
    window_targets,
    word_predictions,
    year_number_questions,
)
from bertcourse.metrics import entity_scores
from bertcourse.model import build_model
from bertcourse.tokenizer import train_tokenizer
from bertcourse.training.checkpoint import tokenizer_from_json
from bertcourse.training.task_heads import train_head

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


# ----------------------------------------------------------------------------- all pieces, B- -> I-, the toy tags


def test_all_pieces_labels_continuation_pieces_with_the_inside_tag():
    word_ids = [None, 0, 0, 1, 1, 1, 2, None]
    b_date, i_date, o = TAG_NAMES.index("B-DATE"), TAG_NAMES.index("I-DATE"), TAG_NAMES.index("O")
    word_labels = [b_date, i_date, o]
    assert align_word_labels(word_ids, word_labels) == [-100, b_date, -100, i_date, -100, -100, o, -100]
    continuation = bio_continuation(TAG_NAMES)
    assert continuation == [0, 2, 2, 4, 4]
    assert align_word_labels(word_ids, word_labels, all_pieces=True, continuation=continuation) == [
        -100, b_date, i_date, i_date, i_date, i_date, o, -100]  # the second piece of a B- word continues it
    assert align_word_labels(word_ids, word_labels, all_pieces=True) == [
        -100, b_date, b_date, i_date, i_date, i_date, o, -100]  # copied as is: two entities by the BIO reading
    with pytest.raises(ValueError, match="no 'I-X'"):
        bio_continuation(["O", "B-X"])


def test_tagged_words_with_all_pieces_label_every_piece_of_a_kept_word(tokenizer):
    words = [SENTENCES[2].split()]
    tags = [[TAG_NAMES.index(t) for t in ["B-NUM"] * len(words[0])]]
    batch = encode_tagged_words(tokenizer, words, tags, all_pieces=True, continuation=bio_continuation(TAG_NAMES))
    labels, word_ids = batch["labels"][0].tolist(), batch.word_ids(0)
    for position, word in enumerate(word_ids):
        if word is None:
            assert labels[position] == IGNORE_INDEX
        else:
            first = position == 0 or word_ids[position - 1] != word
            assert TAG_NAMES[labels[position]] == ("B-NUM" if first else "I-NUM")


@pytest.mark.parametrize(("sentence", "tags"), [
    ("On 11 March 1942 the fleet sailed", "O B-DATE I-DATE I-DATE O O O"),
    ("in March 1942 , 500,000 copies", "O B-DATE I-DATE O B-NUM O"),
    ("on 3 May they may sail", "O B-DATE I-DATE O O O"),
    ("In March [UNK] , he left", "O O O O O O"),  # a month with no number next to it is not a date
    ("May they come", "O O O"),
    ("numbers 1 2 3.5 and 46", "O B-NUM I-NUM I-NUM O B-NUM"),
    ("in 2001 and 25 April", "O B-NUM O B-DATE I-DATE"),
])
def test_the_toy_tags_follow_their_rule(sentence, tags):
    assert number_date_tags(sentence.split()) == tags.split()


# ----------------------------------------------------------------------------- long contexts in windows

LONG = " ".join(SENTENCES[:3] * 2)


def test_windows_cover_the_context_share_the_overlap_and_keep_the_whole_question(tokenizer):
    question = "Who won the game?"
    batch = encode_question_windows(tokenizer, [question, "Where?"], [LONG, "At Levi's Stadium."], 32, overlap=8)
    owner = batch["overflow_to_sample_mapping"].tolist()
    assert owner.count(0) >= 3 and owner.count(1) == 1 and owner == sorted(owner)
    mask = context_mask(batch)
    covered, previous = set(), None
    question_ids = tokenizer(question, add_special_tokens=False)["input_ids"]
    for row in [r for r, example in enumerate(owner) if example == 0]:
        ids = batch["input_ids"][row].tolist()
        assert ids[1:1 + len(question_ids)] == question_ids  # every window asks the whole question
        spans = [tuple(o) for o, inside in zip(batch["offset_mapping"][row].tolist(), mask[row].tolist()) if inside]
        if previous is not None:
            assert spans[:8] == previous[-8:]  # consecutive windows share `overlap` context tokens
        covered.update(spans)
        previous = spans
    everything = encode_question_context(tokenizer, [question], [LONG], 512)
    assert covered == {tuple(o) for o, inside in zip(everything["offset_mapping"][0].tolist(),
                                                     context_mask(everything)[0].tolist()) if inside}


def test_window_targets_point_at_the_answer_where_a_window_holds_it_else_at_cls(tokenizer):
    answer = "Santa Clara"
    first = LONG.rindex(answer)  # the second copy: late in the context
    batch = encode_question_windows(tokenizer, ["Where?"], [LONG], 32, overlap=8)
    starts, ends = window_targets(batch, [(first, first + len(answer))])
    holding = [r for r in range(len(starts)) if starts[r] > 0]
    assert holding and len(holding) < len(starts)
    for row in range(len(starts)):
        if row in holding:
            assert LONG[slice(*span_to_chars(batch["offset_mapping"][row], starts[row], ends[row]))] == answer
        else:
            assert starts[row] == ends[row] == 0


def test_the_answer_is_the_best_span_of_any_window_in_the_contexts_characters(tokenizer):
    answer = "Levi's Stadium"
    first = LONG.rindex(answer)
    batch = encode_question_windows(tokenizer, ["Where?", "And?"], [LONG, CONTEXT], 32, overlap=8)
    starts, ends = window_targets(batch, [(first, first + len(answer)), (0, 3)])
    start, end = torch.zeros(batch["input_ids"].shape), torch.zeros(batch["input_ids"].shape)
    owner = batch["overflow_to_sample_mapping"].tolist()
    target_row = max(r for r in range(len(owner)) if owner[r] == 0 and starts[r] > 0)
    for row in range(len(owner)):
        context_positions = context_mask(batch)[row].nonzero().flatten()
        start[row, context_positions[0]], end[row, context_positions[0]] = 3.0, 3.0  # a decoy in every window
    start[target_row, starts[target_row]], end[target_row, ends[target_row]] = 4.0, 4.0  # the best, in a late window
    answers = extract_answers(SpanOutput(None, start, end), batch, [LONG, CONTEXT], max_answer_tokens=8)
    assert answers[0] == answer and answers[1] == "The"


def test_the_toy_questions_are_answered_by_a_span_of_their_context():
    sentences = ["The ship sailed in 1942 with 300 men .", "It sank .", "Nobody knows why .",
                 "In 1950 and 1951 it was found .", "Then 12 divers came .", "It is a museum ."]
    questions = year_number_questions(sentences, sentences_per_context=3)
    assert [(q.question, q.answer) for q in questions] == [("which year ?", "1942"), ("which number ?", "300"),
                                                           ("which number ?", "12")]  # two years: no year question
    for q in questions:
        assert q.context[q.start:q.start + len(q.answer)] == q.answer


# ----------------------------------------------------------------------------- the heads train


def test_a_tagger_trained_for_seconds_finds_the_entities_it_was_taught(tokenizer):
    torch.manual_seed(0)
    words = [s.split() for s in ["In 1942 the film won .", "On 11 March 1942 it sank .", "The Broncos won 24 games .",
                                 "A question was asked in 2016 ."]]
    tags = [number_date_tags(w) for w in words]
    ids = [[TAG_NAMES.index(t) for t in row] for row in tags]
    batch = encode_tagged_words(tokenizer, words, ids, 64)
    model = TokenClassifier(tiny_bert(len(tokenizer)), n_labels=len(TAG_NAMES), dropout=0.0)
    before = entity_scores(tags, [[TAG_NAMES[i] for i in word_predictions(
        model(batch["input_ids"], batch["attention_mask"]).logits[r].detach(), batch.word_ids(r))]
        for r in range(len(words))]).f1
    losses = train_head(model, [{k: batch[k] for k in ("input_ids", "attention_mask", "labels")}], steps=60,
                        learning_rate=1e-2, progress=False)
    with torch.no_grad():
        logits = model(batch["input_ids"], batch["attention_mask"]).logits
    predicted = [[TAG_NAMES[i] for i in word_predictions(logits[r], batch.word_ids(r))] for r in range(len(words))]
    assert losses[-1] < losses[0] / 5 and not model.training
    assert entity_scores(tags, predicted).f1 == 1.0 > before


def test_a_qa_head_trained_for_seconds_answers_from_the_right_window(tokenizer):
    torch.manual_seed(0)
    contexts = [LONG, CONTEXT]
    answers = [(LONG.rindex("Santa Clara"), "Santa Clara"), (CONTEXT.index("Denver Broncos"), "Denver Broncos")]
    batch = encode_question_windows(tokenizer, ["Where?", "Who?"], contexts, 32, overlap=8)
    starts, ends = window_targets(batch, [(a, a + len(text)) for a, text in answers])
    model = QuestionAnswering(tiny_bert(len(tokenizer)))
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    losses = train_head(model, [dict(inputs, start_positions=starts, end_positions=ends)], steps=80,
                        learning_rate=1e-2, progress=False)
    with torch.no_grad():
        out = model(**inputs)
    assert losses[-1] < losses[0] / 5
    assert extract_answers(out, batch, contexts, max_answer_tokens=6) == ["Santa Clara", "Denver Broncos"]


def test_train_head_refuses_nothing_to_do_and_batched_keeps_every_row():
    with pytest.raises(ValueError, match="at least one step"):
        train_head(torch.nn.Linear(1, 1), [], steps=3, learning_rate=0.1)
    assert batched(range(5), 2) == [[0, 1], [2, 3], [4]]

"""The course WordPiece tokenizer: BERT conventions, word_ids(), pairs, determinism and the cache."""

import json
import os
import subprocess
import sys
from collections import Counter

from bertcourse.course import load_course
from bertcourse.tokenizer import SPECIAL_TOKENS, learn_vocabulary, load_tokenizer, train_tokenizer


def test_special_tokens_have_fixed_ids(quick_tokenizer):
    assert [quick_tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    assert len(quick_tokenizer) == 2000  # the cpu-quick profile's vocab_size


def test_round_trip_is_lowercased_and_lossless_for_known_words(quick_tokenizer):
    text = "The film was surprisingly good , and the acting was wonderful ."
    ids = quick_tokenizer(text)["input_ids"]
    assert ids[0] == quick_tokenizer.cls_token_id and ids[-1] == quick_tokenizer.sep_token_id
    decoded = quick_tokenizer.decode(ids, skip_special_tokens=True)
    assert decoded.replace(" ,", ",").replace(" .", ".") == text.lower().replace(" ,", ",").replace(" .", ".")


def test_word_ids_group_wordpiece_pieces(quick_tokenizer):
    encoding = quick_tokenizer("unbelievably charming")
    tokens, word_ids = encoding.tokens(), encoding.word_ids()
    assert word_ids[0] is None and word_ids[-1] is None
    pieces_of_first = [t for t, w in zip(tokens, word_ids) if w == 0]
    assert len(pieces_of_first) > 1, "a rare long word should be split into pieces"
    assert all(t.startswith("##") for t in pieces_of_first[1:])
    assert "".join(t.removeprefix("##") for t in pieces_of_first) == "unbelievably"


def test_pair_encoding_and_special_tokens_mask(quick_tokenizer):
    encoding = quick_tokenizer("a fine film", "not at all", return_special_tokens_mask=True)
    tokens = encoding.tokens()
    first_sep = tokens.index("[SEP]")
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and first_sep < len(tokens) - 1
    assert encoding["token_type_ids"] == [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 1)
    assert encoding["special_tokens_mask"] == [int(t in ("[CLS]", "[SEP]")) for t in tokens]
    batch = quick_tokenizer(["short", "a somewhat longer sentence"], padding=True)
    assert batch["input_ids"][0][-1] == quick_tokenizer.pad_token_id
    assert batch["attention_mask"][0][-1] == 0


def test_vocabulary_learning_breaks_ties_deterministically():
    counts = Counter({"ab": 5, "cd": 5, "ef": 5, "abcd": 1})
    first = learn_vocabulary(counts, 17, progress=False)
    assert first == learn_vocabulary(Counter(dict(reversed(list(counts.items())))), 17, progress=False)
    # ab (6) first; cd and ef tie at 5 and go alphabetically; then ##cd and abcd at 1 ('#' < 'a').
    assert first[len(SPECIAL_TOKENS) :] == ["##b", "##c", "##d", "##f", "a", "c", "e",
                                            "ab", "cd", "ef", "##cd", "abcd"]


VOCAB_SCRIPT = """
import json, sys
from bertcourse.tokenizer import train_tokenizer
sentences = json.loads(open(sys.argv[1], encoding="utf-8").read())
tok = train_tokenizer(sentences, 600, progress=False)
print(sorted(tok.get_vocab().items(), key=lambda kv: kv[1]))
"""


def test_same_corpus_gives_the_same_vocabulary_across_processes(corpus, tmp_path):
    """Python randomises string hashing per process; the vocabulary must not depend on it. Both processes
    learn from the same 2,000 real sentences, handed over in a file (loading the corpus in each is no part of it)."""
    sentences = tmp_path / "sentences.json"
    sentences.write_text(json.dumps(corpus.train[:2000]), encoding="utf-8")
    outputs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        result = subprocess.run([sys.executable, "-c", VOCAB_SCRIPT, str(sentences)], env=env,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1] and "'[UNK]', 1)" in outputs[0]


def test_tokenizer_is_cached_and_reloaded(corpus, quick_tokenizer, monkeypatch):
    import bertcourse.tokenizer as module

    def no_training(*args, **kwargs):
        raise AssertionError("the cached tokenizer should have been reused")

    monkeypatch.setattr(module, "train_tokenizer", no_training)
    spec = load_course(check_files=False).profile("cpu-quick")
    again = load_tokenizer(corpus, spec.vocab_size, spec.model.max_seq_len)
    assert again.get_vocab() == quick_tokenizer.get_vocab()


def test_training_on_a_small_corpus_works_end_to_end():
    tok = train_tokenizer(["the cat sat on the mat", "the dog sat on the log"] * 10, 60, progress=False)
    assert tok.tokenize("the cat sat") == ["the", "cat", "sat"]
    assert tok.convert_ids_to_tokens(tok("zebra")["input_ids"])[1] == "[UNK]"  # 'z' was never seen


def whole_text_counts(sentences):
    """Word counts as the tokenizer counted them before issue 13: the text normalised and pre-tokenised
    200 sentences at a time. `count_words` counts distinct space-separated pieces first; same result."""
    from tokenizers import normalizers, pre_tokenizers

    normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=True)
    pre_tokenizer, counts = pre_tokenizers.BertPreTokenizer(), Counter()
    for start in range(0, len(sentences), 200):
        text = "\n".join(sentences[start : start + 200])
        for token in SPECIAL_TOKENS:
            text = text.replace(token, " ")
        counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
    return counts


def real_sentences_with_every_character(sentences: list[str]) -> list[str]:
    """Every sentence holding a character outside ASCII or one no earlier sentence held, and every 20th of the
    rest: each character of the corpus, in the sentences it came in, at a tenth of the corpus's cost."""
    seen: set[str] = set()
    kept = []
    for i, sentence in enumerate(sentences):
        new = set(sentence) - seen
        if new or not sentence.isascii() or i % 20 == 0:
            seen |= new
            kept.append(sentence)
    return kept


def test_word_counts_are_those_of_the_whole_text_on_real_sentences_with_every_character_and_odd_characters(corpus):
    from bertcourse.tokenizer import count_words

    odd = ["tab\there and\nnewline", "Ünïcödé Straße ÉCOLE e\u0301 \u0301a", "x\x0by\x0cz\x1cw\x85v \x00q\ufffdr",
           "[UNK]'s [UNK][UNK] foo[UNK]bar", "  double  space ", "中文字符 mixed中文", "ΟΔΟΣ", "a\u00a0b\u2028c\u3000d",
           "don't-stop...now!"]
    real = real_sentences_with_every_character(corpus.train + corpus.heldout)
    assert set("".join(real)) == set("".join(corpus.train + corpus.heldout)) and len(real) > 3000
    sentences = real + odd
    assert count_words(sentences) == whole_text_counts(sentences)
    # control characters are dropped, not split at (why pieces are cut at " " only, not at str.split()'s whitespace)
    assert count_words(odd)["中"] == 2 and count_words(odd)["xyzwv"] == 1

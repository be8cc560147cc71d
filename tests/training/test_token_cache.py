"""The token cache is one file per corpus and tokenizer (a Drive folder copies a few large files quickly,
thousands of small ones slowly): a prefix is cached in it, a longer prefix later tokenizes only the rest and
rewrites the one file, and what comes back is what tokenizing from scratch gives."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bertcourse.training.packing import tokenize, tokenize_prefix


@pytest.fixture
def counting(quick_tokenizer):
    """The quick tokenizer behind a core that counts the sentences it encodes (the cache's name is unchanged)."""
    core = quick_tokenizer.backend_tokenizer
    core.no_padding()
    core.no_truncation()
    encoded: list[int] = []

    def encode_batch(sentences, **kwargs):
        encoded.append(len(sentences))
        return core.encode_batch(sentences, **kwargs)

    backend = SimpleNamespace(to_str=core.to_str, encode_batch=encode_batch, padding=None, truncation=None)
    wrapped = type("Counting", (), {"backend_tokenizer": backend, "__len__": lambda self: len(quick_tokenizer)})()
    return wrapped, encoded


def test_one_file_per_corpus_grown_as_longer_prefixes_are_asked_for(corpus, quick_tokenizer, counting, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setenv("BERTCOURSE_CACHE", str(tmp_path))
    tokenizer, encoded = counting
    sentences = corpus.train[:1000]
    first = tokenize_prefix(tokenizer, sentences, budget=5000, chunk=100, word_ids=True)
    assert len(first) in range(200, 1000, 100) and sum(encoded) == len(first)  # only the prefix (chunks) tokenized
    files = list((tmp_path / "pretokenized").iterdir())
    assert len(files) == 1

    encoded.clear()
    whole = tokenize(tokenizer, sentences, word_ids=True)
    assert sum(encoded) == 1000 - len(first)  # the cached prefix read, the rest tokenized
    assert list((tmp_path / "pretokenized").iterdir()) == files  # still one file, now the whole corpus
    assert whole.ids[: len(first)] == first.ids and whole.word_ids[: len(first)] == first.word_ids

    encoded.clear()
    again = tokenize_prefix(tokenizer, sentences, budget=5000, chunk=100, word_ids=True)
    assert encoded == [] and again.ids == first.ids and again.word_ids == first.word_ids

    monkeypatch.setenv("BERTCOURSE_CACHE", str(tmp_path / "fresh"))  # from scratch: the same ids
    assert tokenize(quick_tokenizer, sentences, word_ids=True).ids == whole.ids

"""Lessons 6-7 compare objectives on the same sentences on every profile: on a gpu-like profile (WikiText-2, a
stand-in WikiText-103 and SST-2, from a local folder) the MLM variant no longer reads a larger corpus than the
pair variants (NSP / SOP), whose rows come from WikiText-2's articles and SST-2's phrases."""

from __future__ import annotations

import dataclasses

import pytest

from bertcourse.after_bert.runner import AfterBertError, lesson_corpus
from bertcourse.after_bert.sentence_pairs import documents_from_lines
from bertcourse.course import load_course
from bertcourse.data import Corpus, load_corpus, wikitext_lines


def test_on_a_gpu_like_profile_every_variant_reads_the_same_sentences(data_dir, tmp_path):
    for name in ("wikitext2", "sst2"):
        (tmp_path / name).symlink_to(data_dir / name)
    (tmp_path / "wikitext103").mkdir()
    added = [f"Stand-in sentence number {i} of a larger corpus ." for i in range(300)]
    (tmp_path / "wikitext103" / "train.txt").write_text("\n".join(added) + "\n")  # one sentence a line
    course = load_course()
    gpu = load_corpus(course, data_dir=tmp_path, source="local", profile="gpu")
    assert set(added) <= set(gpu.train) and gpu.counts["wikitext103 kept"] == 300

    lesson = lesson_corpus(gpu)
    smaller = load_corpus(course, data_dir=tmp_path, source="local")  # the cpu profiles': WikiText-2 + SST-2
    assert lesson.train == smaller.train and lesson.heldout == gpu.heldout
    assert lesson.counts["wikitext103 left out for lessons 6-7"] == 300
    assert lesson_corpus(smaller) is smaller  # the cpu profiles: nothing changes

    # what the pair variants read (runner.CourseData.pairs): the articles' sentences (held-out ones removed)
    # and the corpus's SST-2 phrases
    documents = documents_from_lines(wikitext_lines(course, data_dir=tmp_path, source="local"),
                                     min_words=course.corpus.min_words)
    n_sst = lesson.counts["sst2 kept"]
    pair_sentences = {s for doc in documents for s in doc} - set(lesson.heldout) | set(lesson.train[-n_sst:])
    assert pair_sentences == set(lesson.train)


def test_sentences_equal_to_held_out_ones_are_counted_where_they_were_dropped():
    train = ["w1", "w2", "x1", "x2", "s1"]  # WikiText-2, then WikiText-103 (one of three dropped), then SST-2
    counts = {"wikitext2 kept": 3, "wikitext103 kept": 3, "sst2 kept": 1,
              "wikitext103 equal to a held-out sentence, dropped": 1}
    lesson = lesson_corpus(Corpus(train, ["h"], "test", counts))
    assert lesson.train == ["w1", "w2", "s1"]
    broken = dataclasses.replace(Corpus(train, ["h"], "test", counts), train=["s1"])
    with pytest.raises(AfterBertError, match="do not match its 1 sentences"):
        lesson_corpus(broken)

"""One tokenizer per profile: the pretrained BERT (lesson 3, `ensure_pretrained`) and lessons 6-7's data
(`after_bert.course_data`) read the same ids on every profile of course.yml, the gpu profile included, whose
corpus adds WikiText-103. Stand-in corpora (generated, no hub): a small WikiText-2 and SST-2, and a
"WikiText-103" of other words, so that the gpu profile's tokenizer differs from the others'."""

import random

import pytest

from bertcourse.course import load_course
from bertcourse.data import synthetic_sentences


def _stand_in_data(folder):
    sentences = synthetic_sentences(5000)
    (folder / "wikitext2").mkdir(parents=True)
    (folder / "wikitext2" / "valid.txt").write_text("\n".join(sentences[:1500]) + "\n")
    (folder / "wikitext2" / "test.txt").write_text("\n".join(sentences[1500:3000]) + "\n")
    (folder / "sst2").mkdir()
    (folder / "sst2" / "train.tsv").write_text(
        "sentence\tlabel\n" + "".join(f"{s}\t{i % 2}\n" for i, s in enumerate(sentences[3000:])))
    rng = random.Random(0)
    names = [f"{rng.choice('bcdfgklmnprstvz')}{rng.choice('aeiou')}{rng.choice('lmnrst')}{i}" for i in range(600)]
    (folder / "wikitext103").mkdir()
    (folder / "wikitext103" / "train.txt").write_text("\n".join(
        f"the {rng.choice(names)} of {rng.choice(names)} was built in {rng.randint(1800, 2000)} by {rng.choice(names)}"
        for _ in range(3000)) + "\n")


@pytest.mark.slow
def test_the_pretrained_teacher_and_lesson_6s_data_share_a_vocabulary_on_every_profile(tmp_path, monkeypatch):
    from bertcourse.after_bert import runner as after_bert
    from bertcourse.training.pretrain import PretrainOptions, pretrain

    _stand_in_data(tmp_path / "data")
    monkeypatch.setenv("BERTCOURSE_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("BERTCOURSE_CACHE", str(tmp_path / "cache"))
    profiles = list(load_course().profiles)
    assert {"cpu-quick", "cpu", "gpu"} <= set(profiles)
    vocabularies = {}
    for profile in profiles:
        after_bert.course_data.cache_clear()
        small = {"n_layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 64}  # the vocabulary is what is tested
        teacher = pretrain(PretrainOptions(profile=profile, out_dir=tmp_path / "runs" / profile, max_steps=1,
                                           eval_every=1, checkpoint_every=1, progress=False, model_overrides=small))
        data = after_bert.course_data(profile)
        assert data.tokenizer.get_vocab() == teacher.tokenizer.get_vocab(), (
            f"{profile}: lessons 6-7's data and the pretrained teacher have different vocabularies")
        assert data.config.vocab_size == teacher.model.config.vocab_size
        vocabularies[profile] = teacher.tokenizer.get_vocab()
    after_bert.course_data.cache_clear()
    assert vocabularies["gpu"] != vocabularies["cpu"], "the stand-in WikiText-103 must change the gpu tokenizer"

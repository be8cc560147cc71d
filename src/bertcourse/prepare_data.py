"""`bertcourse data`: prepare the data and the tokenizer, and print what a student should know of them.

`profile_tokenizer` is the one tokenizer of a profile, which every command of the profile trains with;
`data.py` loads the data and `tokenizer.py` trains a tokenizer on any corpus (neither reads course.yml).
"""

from __future__ import annotations

import argparse
import statistics

from transformers import AutoTokenizer, PreTrainedTokenizerFast

from bertcourse.course import Course, Profile, load_course, select_profile
from bertcourse.data import column, load_corpus, load_sst2
from bertcourse.tokenizer import CorpusLike, load_tokenizer

STATS_SAMPLE = 10_000  # token statistics on an evenly spaced sample: exact enough, and seconds not minutes


def profile_tokenizer(profile_spec: Profile, course: Course | None = None, corpus: CorpusLike | None = None,
                      progress: bool = True) -> PreTrainedTokenizerFast:
    """The one tokenizer of a course.yml profile: trained on that profile's corpus (`load_corpus`, or `corpus`
    when the caller has loaded it already) with its vocab_size and max_seq_len.

    Every model of a profile reads ids of this tokenizer: its pretraining (`training.pretrain`), the scratch
    models of fine-tuning, lessons 6-7's runs and the teacher they are compared with. Two tokenizers of one
    profile (the gpu profile's corpus adds WikiText-103) give the same piece different ids.
    """
    if corpus is None:
        corpus = load_corpus(course or load_course(), profile_spec=profile_spec)
    return load_tokenizer(corpus, profile_spec.vocab_size, profile_spec.model.max_seq_len, progress=progress)


def sample(sentences: list[str], size: int = STATS_SAMPLE) -> list[str]:
    """At most `size` sentences, evenly spaced (the same ones on every run, unlike a random sample)."""
    step = max(1, len(sentences) // size)
    return sentences[::step][:size]


def length_stats(lengths: list[int]) -> str:
    """Mean, median, 95th percentile and maximum of `lengths`, as one printable phrase."""
    ordered = sorted(lengths)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return (f"mean {statistics.fmean(ordered):.1f}, median {statistics.median(ordered):.0f}, "
            f"p95 {p95}, max {ordered[-1]}")


def data_command(args: argparse.Namespace) -> int:
    """`bertcourse data` (arguments: cli.py): download or find the data, build the tokenizer, print its stats."""
    course = load_course()
    profile_spec = select_profile(args.profile, course)  # the one look-up of the profile; passed down from here
    print(f"profile {profile_spec.name}: vocabulary {profile_spec.vocab_size}, sequences up to "
          f"{profile_spec.model.max_seq_len}")
    splits = {split: load_sst2(split, args.data_dir, args.source, course) for split in ("train", "validation")}
    corpus = load_corpus(course, args.data_dir, args.source, profile_spec=profile_spec)
    if args.tokenizer:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    else:
        tokenizer = profile_tokenizer(profile_spec, course, corpus)  # the one every command of the profile uses

    print(f"\nSST-2 ({course.datasets['sst2'].description})")
    for split, dataset in splits.items():
        labels = column(dataset, "label")
        positive = sum(labels)
        print(f"  {split:<10} {len(labels):>7,} rows   positive {positive:,} ({positive / len(labels):.1%})"
              f"   negative {len(labels) - positive:,}")
        sentences = sample(column(dataset, "sentence"))
        ids = tokenizer(sentences, verbose=False)["input_ids"]
        print(f"  {'':<10} tokens per sentence: {length_stats([len(x) for x in ids])}"
              + (f" (sample of {len(sentences):,})" if len(sentences) < len(labels) else ""))

    print(f"\npretraining corpus (from {corpus.source})")
    print(f"  train {len(corpus.train):,} sentences, held-out {len(corpus.heldout):,}")
    for name, count in corpus.counts.items():
        print(f"    {name}: {count:,}")
    sentences = sample(corpus.train)
    ids = tokenizer(sentences, verbose=False)["input_ids"]
    lengths = [len(x) for x in ids]
    unk = sum(x.count(tokenizer.unk_token_id) for x in ids)
    longer = sum(n > profile_spec.model.max_seq_len for n in lengths) / len(lengths)
    print(f"  tokens per sentence (sample of {len(sentences):,}): {length_stats(lengths)}; "
          f"about {sum(lengths) / len(lengths) * len(corpus.train):,.0f} tokens in all")
    print(f"  [UNK] rate {unk / sum(lengths):.2%}; {longer:.1%} of sentences longer than "
          f"{profile_spec.model.max_seq_len} tokens (truncated in training)")
    specials = sorted(zip(tokenizer.all_special_ids, tokenizer.all_special_tokens))
    print(f"\ntokenizer: {args.tokenizer or 'course WordPiece'}, {len(tokenizer):,} entries, specials "
          + ", ".join(f"{token}={i}" for i, token in specials))
    example = corpus.heldout[0]
    print(f"  example: {example!r}\n  pieces:  {tokenizer.tokenize(example)}")
    return 0

"""Memory of the pretraining corpus once tokenized and packed, in bytes per token (issue 13: WikiText-103).

    BERTCOURSE_DATA=... nice -n 10 .venv/bin/python benchmarks/packing_memory.py             # ~3.8M tokens
    BERTCOURSE_DATA=... nice -n 10 .venv/bin/python benchmarks/packing_memory.py --repeat 2

It runs what `bertcourse pretrain` runs before its first step (`bertcourse.training.pretrain._pack`'s two calls:
`tokenize_prefix` with a budget above the corpus, then `pack_sentences` with word ids, as whole-word masking
packs them) on the course corpus's training sentences repeated `--repeat` times, and measures with
`tracemalloc`, which sees Python objects and numpy's buffers alike:

- tokenize: the peak while tokenizing (a fresh token cache, so the tokenizer really runs) and what the
  `Tokenized` result keeps; then the same with the cache warm (what a second run costs);
- pack: the peak while packing and what the `PackedData` result keeps once the tokens are dropped.

Each figure is divided by the tokens packed ([CLS] and [SEP] included). The tokenizer is the gpu profile's
(vocabulary 8,000) trained on the course corpus. tracemalloc slows allocation-heavy code several-fold, so
the times printed are not the code's speed.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bertcourse.course import load_course  # noqa: E402
from bertcourse.data import load_corpus  # noqa: E402
from bertcourse.training.packing import pack_sentences, tokenize_prefix  # noqa: E402
from bertcourse.tokenizer import load_tokenizer  # noqa: E402


def measured(work):
    """(result, bytes kept, peak bytes above the start, seconds) of `work()` under tracemalloc."""
    gc.collect()
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    began = time.perf_counter()
    result = work()
    seconds = time.perf_counter() - began
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    return result, current - before, peak - before, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="copies of the course corpus (default 3)")
    parser.add_argument("--profile", default="gpu", help="whose tokenizer: vocabulary and sequence length")
    args = parser.parse_args(argv)
    course = load_course()
    spec = course.profile(args.profile)
    corpus = load_corpus(course)  # the course corpus (top-level sources): real data via BERTCOURSE_DATA
    tokenizer = load_tokenizer(corpus, spec.vocab_size, spec.model.max_seq_len, progress=False)
    sentences = corpus.train * args.repeat
    cls, sep, width = tokenizer.cls_token_id, tokenizer.sep_token_id, spec.model.max_seq_len
    budget = 10 * sum(len(s) for s in sentences)  # above any token count: the whole corpus, as in a long run

    tracemalloc.start()
    with tempfile.TemporaryDirectory() as cache:
        os.environ["BERTCOURSE_CACHE"] = cache  # a cold token cache: the tokenizer runs
        tokens, tok_kept, tok_peak, tok_s = measured(lambda: tokenize_prefix(tokenizer, sentences, budget,
                                                                             word_ids=True))
        del tokens
        tokens, warm_kept, warm_peak, warm_s = measured(lambda: tokenize_prefix(tokenizer, sentences, budget,
                                                                                word_ids=True))
        packed, _, pack_peak, pack_s = measured(lambda: pack_sentences(tokens.ids, width, cls, sep, tokens.word_ids))
        del tokens
        gc.collect()
        packed_kept = tracemalloc.get_traced_memory()[0]
        del packed  # what freeing it gives back is what it kept
        gc.collect()
        packed_kept -= tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()

    # the tokens packed, specials included, counted outside tracemalloc
    tokens = tokenize_prefix(tokenizer, sentences, budget, word_ids=True)
    n_tokens = pack_sentences(tokens.ids, width, cls, sep).n_tokens
    print(f"{len(sentences):,} sentences ({args.repeat} x the course corpus), {n_tokens:,} tokens packed into "
          f"blocks of {width}; tokenizer of the {args.profile} profile, vocabulary {len(tokenizer):,}\n")
    rows = [
        ("tokenize, cold cache: peak", tok_peak, tok_s),
        ("tokenize: the Tokenized result (ids + word ids)", tok_kept, None),
        ("tokenize, warm cache: peak", warm_peak, warm_s),
        ("pack_sentences (with word ids): peak above the tokens", pack_peak, pack_s),
        ("the PackedData result (blocks, segments, words)", packed_kept, None),
    ]
    print("| measured (tracemalloc) | MB | bytes per token | seconds (traced) |")
    print("|---|---|---|---|")
    for name, size, seconds in rows:
        print(f"| {name} | {size / 1e6:,.0f} | {size / n_tokens:.1f} | {'' if seconds is None else f'{seconds:.1f}'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Masking speed: `bertcourse.masking` against `transformers.DataCollatorForLanguageModeling`, in one run.

    .venv/bin/python benchmarks/masking.py                 # 1024 x 128, vocabulary 8000
    .venv/bin/python benchmarks/masking.py --rows 256 --repeats 50

Three comparisons on the same batch, timed interleaved (A, B, A, B, ...) and reported as medians, so
that a busy machine slows both sides alike:
1. ready tensors: a (rows, 128) id tensor -> masked inputs and labels, with the special-tokens mask
   given, and without it (transformers then asks the tokenizer row by row; we look specials up in a
   table). Target: no slower than transformers.
2. end to end: tokenized examples (dicts of id lists, 32-128 long) -> a padded, masked batch with its
   attention mask. Target: >= 2x faster than transformers. (transformers is also timed on plain id
   lists, which skips `tokenizer.pad` and returns no attention mask.)
3. a per-token Python loop (the textbook version), once, for scale.
Both sides draw from a seeded torch.Generator. The tokenizer is a course-style WordPiece tokenizer over a
synthetic vocabulary, so the benchmark needs no data.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from transformers import DataCollatorForLanguageModeling  # noqa: E402

from bertcourse.masking import collate_for_mlm, is_special, mask_tokens  # noqa: E402
from bertcourse.tokenizer import SPECIAL_TOKENS, build_tokenizer  # noqa: E402

PROBS = dict(select_prob=0.15, mask_prob=0.8, random_prob=0.1)


def make_examples(rows: int, width: int, vocab_size: int, seed: int = 0) -> list[dict[str, list[int]]]:
    rng = random.Random(seed)
    first, cls, sep = len(SPECIAL_TOKENS), SPECIAL_TOKENS.index("[CLS]"), SPECIAL_TOKENS.index("[SEP]")
    lengths = [rng.randint(width // 4, width) for _ in range(rows - 1)] + [width]
    return [{"input_ids": [cls] + [rng.randrange(first, vocab_size) for _ in range(n - 2)] + [sep]}
            for n in lengths]


def python_loop(ids: list[list[int]], special: set[int], mask_id: int, vocab_size: int, rng: random.Random):
    """The per-token textbook loop (random ids drawn from the regular ids, as the course requires)."""
    regular = [i for i in range(vocab_size) if i not in special]
    inputs, labels = [], []
    for row in ids:
        row_inputs, row_labels = list(row), [-100] * len(row)
        for i, token in enumerate(row):
            if token in special or rng.random() >= 0.15:
                continue
            row_labels[i] = token
            r = rng.random()
            if r < 0.8:
                row_inputs[i] = mask_id
            elif r < 0.9:
                row_inputs[i] = rng.choice(regular)
        inputs.append(row_inputs)
        labels.append(row_labels)
    return inputs, labels


def timed(fn, prepare=None) -> float:
    argument = prepare() if prepare else None
    start = time.perf_counter()
    fn(argument) if prepare else fn()
    return time.perf_counter() - start


def compare(pairs: dict[str, tuple], repeats: int) -> dict[str, float]:
    """Median seconds per call of each named (fn, prepare) entry, timed round-robin."""
    samples: dict[str, list[float]] = {name: [] for name in pairs}
    for fn, prepare in pairs.values():  # warm-up
        timed(fn, prepare)
    for _ in range(repeats):
        for name, (fn, prepare) in pairs.items():
            samples[name].append(timed(fn, prepare))
    return {name: statistics.median(values) for name, values in samples.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: collation runs in DataLoader workers)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    vocab = SPECIAL_TOKENS + [f"w{i}" for i in range(args.vocab_size - len(SPECIAL_TOKENS))]
    tokenizer = build_tokenizer(vocab)
    specials = tokenizer.all_special_ids
    examples = make_examples(args.rows, args.width, args.vocab_size)
    hf = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, mask_replace_prob=0.8,
                                         random_replace_prob=0.1, seed=0)
    hf.create_rng("pt")
    generator = torch.Generator().manual_seed(0)
    ids = collate_for_mlm(examples, tokenizer, generator=generator)  # just for its padding
    ids = torch.where(ids["labels"] != -100, ids["labels"], ids["input_ids"])  # unmasked padded ids
    special_mask = is_special(ids, specials)
    keywords = dict(mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer), special_ids=specials,
                    generator=generator, **PROBS)

    print(f"batch {args.rows} x {ids.shape[1]}, vocabulary {len(tokenizer)}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; medians of {args.repeats} interleaved runs\n")
    ready = compare({
        "transformers, special mask given": (lambda x: hf.torch_mask_tokens(x, special_tokens_mask=special_mask),
                                             ids.clone),
        "bertcourse, special mask given": (lambda: mask_tokens(ids, special_mask, **keywords), None),
        "transformers, no special mask": (lambda x: hf.torch_mask_tokens(x), ids.clone),
        "bertcourse, no special mask": (lambda: mask_tokens(ids, **keywords), None),
    }, args.repeats)
    id_lists = [e["input_ids"] for e in examples]
    end_to_end = compare({
        "transformers collator(examples)": (lambda: hf(examples), None),
        "transformers collator(id lists)": (lambda: hf(id_lists), None),
        "bertcourse collate_for_mlm(examples)": (lambda: collate_for_mlm(examples, tokenizer, generator=generator),
                                                 None),
    }, max(3, args.repeats // 3))
    rng = random.Random(0)
    rows = ids.tolist()
    loop = timed(lambda: python_loop(rows, set(specials), tokenizer.mask_token_id, len(tokenizer), rng))

    print(f"{'what':<44}{'ms':>10}")
    for name, seconds in [*ready.items(), *end_to_end.items(), ("per-token Python loop (ready ids, once)", loop)]:
        print(f"{name:<44}{seconds * 1000:>10.2f}")
    print()
    given = ready["transformers, special mask given"] / ready["bertcourse, special mask given"]
    derived = ready["transformers, no special mask"] / ready["bertcourse, no special mask"]
    ours = end_to_end["bertcourse collate_for_mlm(examples)"]
    e2e = end_to_end["transformers collator(examples)"] / ours
    e2e_lists = end_to_end["transformers collator(id lists)"] / ours
    print(f"ready tensors, special mask given: bertcourse is {given:.2f}x as fast as transformers (target >= 1)")
    print(f"ready tensors, no special mask:    bertcourse is {derived:.2f}x as fast as transformers")
    print(f"end to end from examples:          bertcourse is {e2e:.2f}x as fast as transformers (target >= 2)")
    print(f"  (transformers given plain id lists instead of dicts: {e2e_lists:.2f}x)")
    print(f"per-token Python loop:             {loop / ready['bertcourse, special mask given']:.0f}x slower "
          "than bertcourse on ready tensors")


if __name__ == "__main__":
    main()

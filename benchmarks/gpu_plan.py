"""The `gpu` profile's plan from what can be counted without a GPU (issue 13): corpus size, FLOPs, passes.

    BERTCOURSE_DATA=... nice -n 10 .venv/bin/python benchmarks/gpu_plan.py
    BERTCOURSE_DATA=... nice -n 10 .venv/bin/python benchmarks/gpu_plan.py --efficiency 0.1 --minutes 25 30

No WikiText-103 is needed, nor a GPU. What it counts, and what it ESTIMATES from the counts:

- on WikiText-2 (the local copy's validation + test, real data): its words as the WikiText release counts
  them (whitespace tokens with "@-@" one token, headings included), the WordPiece tokens of the course
  corpus's WikiText-2 sentences (the gpu profile's tokenizer, vocabulary 8,000, trained on the course
  corpus), and the blocks of 128 they pack into;
- the course corpus (WikiText-2 + SST-2) packed: its blocks;
- WikiText-103 train, ESTIMATED: its 103,227,021 words times WikiText-2's tokens and blocks per word, both
  word counts the release's (Merity et al. 2016, table 1: WikiText-2 validation + test 217,646 + 245,569).
  Likely an UNDERESTIMATE: the local WikiText-2 copy has few word types (every one seen 4+ times, the rest
  <unk>), so an 8,000-piece vocabulary holds almost every word whole; WikiText-103 spells out far more
  rare words (split into several pieces each). It prints what the passes would be at higher rates too;
- FLOPs of one training step of the profile's BERT and GPT (FlopCounterMode, forward + backward, fp32
  count, as benchmarks/gpu_smoke.py counts them) and the aten ops it dispatches (`training.budget`), and from
  them the time of the profile's steps as the plans take it (the longer of the FLOPs at an ASSUMED fraction of
  the GPU's tensor-core peak and the ops at an assumed cost each; the GPU named as it names itself, a T4 where
  none is here), and the passes over the corpus they make.

gpu_smoke.py measures what this assumes, on a real GPU.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_smoke import flops_per_step  # noqa: E402
from pretraining import CPU_ATTENTION_FLOPS  # noqa: E402

from bertcourse.course import load_course  # noqa: E402
from bertcourse.data import load_corpus, wikitext_lines  # noqa: E402
from bertcourse.model import build_model  # noqa: E402
from bertcourse.tokenizer import load_tokenizer  # noqa: E402
from bertcourse.training.budget import ASSUMED_OP_SECONDS, gpu_name, peak_flops, pretraining_step_ops  # noqa: E402
from bertcourse.training.objectives import next_token_labels  # noqa: E402
from bertcourse.training.packing import pack_sentences, tokenize  # noqa: E402

WIKITEXT103_TRAIN_WORDS = 103_227_021  # Merity et al. 2016, "Pointer Sentinel Mixture Models", table 1
WIKITEXT2_HELDOUT_WORDS = 217_646 + 245_569  # the same table: WikiText-2's validation and test splits


def gpt_flops_per_step(config, batch_size: int) -> int:
    """FLOPs of one GPT training step on full blocks (every position a next-token target), on the CPU."""
    model = build_model(config.for_arch("gpt")).train()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, config.vocab_size, (batch_size, config.max_seq_len), generator=generator)
    mask = torch.ones_like(ids)
    with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION_FLOPS) as counter:
        model(input_ids=ids, attention_mask=mask, labels=next_token_labels(ids, mask)).loss.backward()
    return counter.get_total_flops()


def release_words(lines: list[str]) -> int:
    """Words as the WikiText release counts them: whitespace tokens, "@-@" one token (the local copy spaces
    it out as "@ - @")."""
    return sum(len(re.sub(r"@ ([-.,]) @", r"@\1@", line).split()) for line in lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--efficiency", type=float, nargs="+", default=[0.2, 0.1, 0.3],
                        help="assumed fractions of the GPU's fp16 peak; the first is the plan's (default 0.2 0.1 0.3)")
    parser.add_argument("--minutes", type=float, nargs="+", default=[25, 30],
                        help="BERT training minutes to give the steps for (default 25 30)")
    args = parser.parse_args(argv)
    course = load_course()
    profile_spec = course.profile("gpu")
    spec, width = profile_spec.pretrain, profile_spec.model.max_seq_len
    corpus = load_corpus(course)  # the course corpus: WikiText-2 + SST-2, the real data
    if corpus.source == "synthetic":
        raise SystemExit("needs the real data: set BERTCOURSE_DATA (or go online)")
    tokenizer = load_tokenizer(corpus, profile_spec.vocab_size, width, progress=False)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id

    lines = wikitext_lines(course)
    words = release_words(lines)
    types = {word for line in lines for word in line.split()}
    unknown = sum(line.split().count("<unk>") for line in lines)
    n_sst = corpus.counts["sst2 kept"] - corpus.counts.get("sst2 equal to a held-out sentence, dropped", 0)
    wiki = corpus.train[: len(corpus.train) - n_sst] + corpus.heldout  # SST-2's phrases come last
    wiki_tokens = tokenize(tokenizer, wiki, progress=False).ids
    wiki_blocks = len(pack_sentences(wiki_tokens, width, cls, sep))
    course_blocks = len(pack_sentences(tokenize(tokenizer, corpus.train, progress=False).ids, width, cls, sep))
    scale = WIKITEXT103_TRAIN_WORDS / WIKITEXT2_HELDOUT_WORDS  # both counted by the release
    wt103_tokens, wt103_blocks = wiki_tokens.n_values * scale, wiki_blocks * scale
    gpu_blocks = course_blocks + wt103_blocks

    config = profile_spec.model.for_arch("bert", vocab_size=len(tokenizer))
    flops = {"BERT": flops_per_step(config, spec.batch_size, torch.device("cpu")),
             "GPT": gpt_flops_per_step(config, spec.batch_size)}
    ops = {"BERT": pretraining_step_ops(config), "GPT": pretraining_step_ops(config.for_arch("gpt"))}
    planned, gpu = args.efficiency[0], gpu_name()
    peak = peak_flops(gpu)

    def minutes(steps: int, arch: str, efficiency: float) -> float:
        """A step the longer of its FLOPs at `efficiency` of the peak and its ops at the assumed op cost."""
        return steps * max(flops[arch] / (efficiency * peak), ops[arch] * ASSUMED_OP_SECONDS) / 60

    per_word = wiki_tokens.n_values / WIKITEXT2_HELDOUT_WORDS
    print(f"WikiText-2 validation + test (local copy): {WIKITEXT2_HELDOUT_WORDS:,} words by the release's count "
          f"({words:,} counted here), {len(types):,} word types, {unknown / words:.1%} of the words <unk>; the course "
          f"keeps {len(wiki):,} sentences, {wiki_tokens.n_values:,} WordPiece tokens ({per_word:.3f} a word, "
          f"vocabulary {len(tokenizer):,}), {wiki_blocks:,} blocks of {width}")
    print(f"course corpus (WikiText-2 + SST-2): {len(corpus.train):,} sentences, {course_blocks:,} blocks")
    print(f"WikiText-103 train, ESTIMATED at WikiText-2's rates: {WIKITEXT103_TRAIN_WORDS:,} words -> "
          f"~{wt103_tokens / 1e6:,.0f}M tokens, ~{wt103_blocks:,.0f} blocks; the gpu corpus ~{gpu_blocks:,.0f} blocks")
    higher = {rate: course_blocks + wt103_blocks * rate / per_word for rate in (1.2, 1.3)}
    print("  if WikiText-103 gives more tokens a word (likely, see the docstring): "
          + ", ".join(f"{rate} -> ~{blocks:,.0f} blocks" for rate, blocks in higher.items()))
    print(f"FLOPs a step, batch {spec.batch_size} x {width} (counted): "
          + ", ".join(f"{arch} {f / 1e9:,.0f} GFLOP, {ops[arch]:,} ops" for arch, f in flops.items()))
    print(f"\nESTIMATES on {gpu} at an assumed {planned:.0%} of its {peak / 1e12:.0f} TFLOP/s "
          f"(range {min(args.efficiency):.0%}-{max(args.efficiency):.0%}), an op at least "
          f"{ASSUMED_OP_SECONDS * 1e6:.0f} us:\n")
    print("| steps | BERT minutes | GPT minutes | passes over the gpu corpus (at 1.2, 1.3 tokens a word) "
          "| over the course corpus alone |")
    print("|---|---|---|---|---|")
    targets = [int(round(m / minutes(1, "BERT", planned), -3)) for m in args.minutes]
    for steps in sorted({spec.max_steps, *targets}):
        spans = [[minutes(steps, arch, e) for e in args.efficiency] for arch in flops]
        cells = [f"{m[0]:.1f} ({min(m):.1f}-{max(m):.1f})" for m in spans]
        mark = " (course.yml)" if steps == spec.max_steps else ""
        passes = ", ".join(f"{steps * spec.batch_size / blocks:.1f}" for blocks in higher.values())
        print(f"| {steps:,}{mark} | {cells[0]} | {cells[1]} | {steps * spec.batch_size / gpu_blocks:.1f} ({passes}) | "
              f"{steps * spec.batch_size / course_blocks:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

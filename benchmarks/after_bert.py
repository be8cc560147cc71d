"""What came after BERT, on the course's own model (issue 14, lessons 6 and 7): every variant of
`bertcourse.after_bert.runner.VARIANTS` pretrained on the same budget and measured the same way.

    BERTCOURSE_DATA=/work/shared/data nice -n 10 .venv/bin/python benchmarks/after_bert.py --profile cpu

Each variant trains the profile's `lesson_sizes["lesson06-after-bert"].training_steps` steps (the cpu
profile: 1,000 steps of 32 x 128 tokens; ELECTRA fewer, matched in FLOPs per step to the MLM BERT), then
is scored on held-out MLM, its auxiliary task and an SST-2 linear probe (see `bertcourse.after_bert.runner`).
Runs are cached in runs/after-bert/, so an interrupted benchmark resumes where it stopped. The table goes
to stdout and, with the settings, to benchmarks/results/after_bert_PROFILE.json (what lessons 6 and 7 quote);
the figures are in benchmarks/README.md, "What came after BERT".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import time
from pathlib import Path

import torch

from bertcourse.after_bert.runner import LESSON_ID, VARIANTS, course_data, results_table, run_variant
from bertcourse.training.devices import autocast_dtype, pick_device, precision_name

ORDER = ["random", "mlm", "mlm+nsp", "mlm+sop", "albert-shared", "albert", "rope", "electra"]


def compact_json(data: dict) -> str:
    """Indented JSON with each list of numbers on one line (the per-item records run to thousands)."""
    text = json.dumps(data, indent=1)
    return re.sub(r"\[\s*(-?[\d.eE+-]+(?:,\s*-?[\d.eE+-]+)*)\s*\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--variants", nargs="+", default=ORDER, choices=list(VARIANTS))
    parser.add_argument("--steps", type=int, default=None, help="the MLM budget (default: the profile's)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--out", type=Path, default=None, help="default benchmarks/results/after_bert_PROFILE.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    shared = course_data(args.profile)
    if shared.corpus.source == "synthetic":  # numbers measured on the synthetic sample mean nothing
        raise SystemExit("the corpus is the synthetic sample: set BERTCOURSE_DATA to the course's data folder")
    results = []
    for variant in args.variants:
        begun = time.perf_counter()
        result = run_variant(variant, profile=args.profile, steps=args.steps, precision=args.precision)
        results.append(result)
        print(f"{variant}: {time.perf_counter() - begun:.0f} s (training {result.train_seconds:.0f} s, "
              f"{result.steps} steps)", flush=True)
    table = results_table(results)
    print(table)
    sizes = shared.course.profile(shared.profile).sizes(LESSON_ID)
    report = {
        "command": f"BERTCOURSE_DATA=... .venv/bin/python benchmarks/after_bert.py --profile {args.profile} "
                   f"--threads {args.threads}" + (f" --steps {args.steps}" if args.steps else ""),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "profile": shared.profile,
        "sizes": sizes,
        "threads": args.threads,
        "precision": precision_name(autocast_dtype(pick_device(None), args.precision)),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores (shared)",
        "wall_minutes": round((time.perf_counter() - started) / 60, 1),
        "table": table,
        "results": [r.summary() for r in results],
    }
    out = args.out or Path(__file__).parent / "results" / f"after_bert_{shared.profile}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(compact_json(report) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Does the `cpu-long` BERT (9,000 steps when measured; the profile has 18,000 since) beat the `cpu` one (3,000)?

Fine-tunes the cpu-long BERT in every regime from its pretrained weights (the profile's seeds, the
package's `bertcourse.training.finetune`), and sets each row against the `cpu` profile's runs that
`bertcourse compare --profile cpu` wrote: the cpu BERT's pretrained runs and the random-init (scratch)
runs. A scratch run does not depend on the pretraining budget, and the two profiles share the model
shape, the tokenizer and every fine-tuning number (checked below), so the cpu profile's scratch runs are
the cpu-long BERT's baseline too. Paired tests: `bertcourse.stats.paired_seed_bootstrap` (sentences
and seeds resampled) on the 872 validation sentences.

    BERTCOURSE_DATA=/work/shared/data .venv/bin/bertcourse pretrain --arch bert --profile cpu-long
    BERTCOURSE_DATA=/work/shared/data .venv/bin/bertcourse compare --profile cpu
    BERTCOURSE_DATA=/work/shared/data OMP_NUM_THREADS=1 .venv/bin/python benchmarks/cpu_long_transfer.py
"""

from __future__ import annotations

import numpy as np

from bertcourse import stats
from bertcourse.course import load_course
from bertcourse.training.finetune import FinetuneOptions, default_out_dir, finetune, read_finished


def correct_matrix(folders: list) -> np.ndarray:
    """[seeds, 872] 0/1: which validation sentences each run got right."""
    rows = []
    for folder in folders:
        lines = (folder / "predictions.tsv").read_text().splitlines()[1:]
        rows.append([int(line.split("\t")[1]) == int(line.split("\t")[2]) for line in lines])
    return np.asarray(rows, dtype=np.int32)


def main() -> None:
    course = load_course()
    spec_long, spec_cpu = course.profile("cpu-long"), course.profile("cpu")
    assert spec_long.finetuning() == spec_cpu.finetuning() and spec_long.model == spec_cpu.model
    seeds = range(spec_long.finetuning().seeds)
    counts = stats.sentence_resamples(872)
    print("| regime | cpu-long pretrained | cpu pretrained | scratch | long - scratch (95% CI, p) | "
          "long - cpu (95% CI, p) |")
    print("|---|---|---|---|---|---|")
    for regime in ("full", "probe", "lora"):
        long_runs = []
        for seed in seeds:
            result = finetune(FinetuneOptions(arch="bert", regime=regime, profile="cpu-long", seed=seed,
                                              progress=False))
            long_runs.append(result.out_dir)

        def cpu_runs(init: str, regime: str = regime) -> list:
            folders = [default_out_dir(FinetuneOptions(arch="bert", regime=regime, init=init, seed=s), "cpu")
                       for s in seeds]
            for folder in folders:
                if read_finished(folder) is None:
                    raise SystemExit(f"{folder}: missing; run `bertcourse compare --profile cpu` first")
            return folders

        long_c, cpu_c, scratch_c = (correct_matrix(f) for f in (long_runs, cpu_runs("pretrained"),
                                                                 cpu_runs("scratch")))

        def cell(c: np.ndarray) -> str:
            low, high = stats.seed_averaged_interval(c, counts)
            return f"{100 * c.mean():.1f} [{100 * low:.1f}, {100 * high:.1f}]"

        def test(a: np.ndarray, b: np.ndarray) -> str:
            t = stats.paired_seed_bootstrap(a, b, counts)
            low, high = t["interval"]
            return f"{100 * t['difference']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}], p={t['p']:.3f}"

        print(f"| {regime} | {cell(long_c)} | {cell(cpu_c)} | {cell(scratch_c)} | {test(long_c, scratch_c)} | "
              f"{test(long_c, cpu_c)} |", flush=True)


if __name__ == "__main__":
    main()

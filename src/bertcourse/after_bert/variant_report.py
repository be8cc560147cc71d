"""Lessons 6 and 7's read-out of the after-BERT variants: each run's score with its interval, and what a comparison
of two runs allows one to say, from a paired test on the items both were scored on (lesson 5's method: two
separate intervals that overlap are not evidence of no difference). In the package rather than the lesson so
that the lesson shows the comparison, not sixty lines of formatting (and so that the wording of a verdict is
tested)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bertcourse.stats import paired_sentence_bootstrap, wilson_interval

MEASURES = {"mlm": "held-out masked-LM loss", "cls": "SST-2 probe on [CLS]", "mean": "SST-2 probe on the token mean"}


ACCURACY_LABELS = {"mlm": "held-out masked-token accuracy", "cls": "SST-2 probe on [CLS]",
                   "mean": "SST-2 probe on the token mean"}


def score(run: Any, measure: str) -> tuple[float, float, float] | None:
    """(accuracy, low, high) of `run` (an after_bert.VariantResult) on `measure`: held-out masked-token
    accuracy with its Wilson interval, or a probe's with its bootstrap interval; None where the run has no
    such number (ELECTRA keeps no MLM head of its own). For plots; verdicts read `measure_of`."""
    if measure == "mlm":
        if not run.mlm:
            return None
        hits = round(run.mlm["accuracy"] * run.mlm["targets"])
        return (run.mlm["accuracy"], *wilson_interval(hits, run.mlm["targets"]))
    return (run.probe[measure]["accuracy"], *run.probe[measure]["accuracy_interval"])


def measure_of(run: Any, measure: str) -> tuple[float, float | None, float | None] | None:
    """(value, low, high) of `measure` for `run` on its own: the masked-LM LOSS (lower is better) with a normal 95%
    interval from the per-target sd (None, None when the run did not record it), or a probe's accuracy with
    its bootstrap interval; None where the run has no such number (ELECTRA has no MLM head of its own). A
    comparison of two runs does not read these intervals: see `paired_test`."""
    if measure == "mlm":
        if not run.mlm:
            return None
        sd, n = run.mlm.get("loss_sd"), run.mlm["targets"]
        if sd is None:
            return run.mlm["loss"], None, None
        half = 1.96 * sd / max(n, 1) ** 0.5
        return run.mlm["loss"], run.mlm["loss"] - half, run.mlm["loss"] + half
    return run.probe[measure]["accuracy"], *run.probe[measure]["accuracy_interval"]


def paired_test(a: Any, b: Any, measure: str) -> dict[str, Any] | None:
    """Run a minus run b on the same items, with lesson 5's method: the masked-LM loss over the same held-out
    targets, whole blocks of text resampled (a block's targets share a context); a probe's accuracy over the
    same 872 validation sentences, sentences resampled (`stats.paired_sentence_bootstrap`). None when either
    run did not keep its per-item record (runs measured before it was kept) or the items differ."""
    if measure == "mlm":
        x, y = (r.mlm or {} for r in (a, b))
        if not (x.get("target_losses") and y.get("target_losses")) or x["target_blocks"] != y["target_blocks"]:
            return None
        test = paired_sentence_bootstrap(np.asarray(x["target_losses"]), np.asarray(y["target_losses"]),
                                         np.asarray(x["target_blocks"]))
        return {**test, "units": f"{test['targets']:,} targets in {test['sentences']} blocks"}
    x, y = (r.probe.get(measure, {}).get("correct") for r in (a, b))
    if not x or not y or len(x) != len(y):
        return None
    test = paired_sentence_bootstrap(np.asarray(x), np.asarray(y), np.arange(len(x)))
    return {**test, "units": f"{len(x)} sentences"}


def paired_line(what: str, values_a: Any, values_b: Any, blocks: Any, ahead: tuple[str, str]) -> str:
    """One line for two models scored on the same targets (hits or losses, higher is better): the paired
    difference a - b with its 95% interval and p, whole blocks resampled (`paired_sentence_bootstrap`), and the
    verdict: `ahead[0]` when the interval is above 0, `ahead[1]` when below, else "cannot tell the two apart"."""
    test = paired_sentence_bootstrap(np.asarray(values_a, dtype=float), np.asarray(values_b, dtype=float),
                                     np.asarray(blocks))
    low, high = test["interval"]
    said = ahead[0] if low > 0 else ahead[1] if high < 0 else "cannot tell the two apart"
    return (f"{what}, paired over the same {test['targets']:,} targets in {test['sentences']} blocks: "
            f"{test['difference']:+.4f} [{low:+.4f}, {high:+.4f}], p = {test['p']:.3f}; this run: {said}")


def _collapsed_probe(run: Any, measure: str) -> bool:
    """A probe that gives every sentence one label: MCC 0 and macro-F1 at the one-class level (<= 0.35)."""
    probe = run.probe.get(measure) or {}
    return probe.get("mcc") == 0 and probe.get("macro_f1", 1.0) <= 0.35


def verdict(a: str, b: str, runs: Mapping[str, Any], measure: str) -> str | None:
    """One line: both runs' `measure`, their paired difference a - b with its 95% interval and p (`paired_test`),
    and what it allows one to say: a difference whose interval excludes 0 names the run ahead, else "cannot
    tell the two apart". The masked-LM measure is the loss, not its accuracy (a model can sit below the
    frequent-token accuracy while its loss is far better, and one that learned only the frequent token would
    "win" on accuracy). Notes name an accuracy that contradicts the loss, one at or below the frequent-token
    level, and a collapsed probe."""
    x, y = measure_of(runs[a], measure), measure_of(runs[b], measure)
    if x is None or y is None:
        return None
    lower_is_better = measure == "mlm"
    test = paired_test(runs[a], runs[b], measure)
    if test is None:
        said = "no per-item record kept for both runs: not judged (run them again to compare them)"
        paired = ""
    else:
        low, high = test["interval"]
        a_better = high < 0 if lower_is_better else low > 0
        b_better = low > 0 if lower_is_better else high < 0
        said = f"{a} is ahead" if a_better else f"{b} is ahead" if b_better else "cannot tell the two apart"
        paired = (f"; {a} - {b} {test['difference']:+.4f} [{low:+.4f}, {high:+.4f}], p = {test['p']:.3f}, "
                  f"paired over {test['units']}")
    line = f"  {MEASURES[measure]}: {a} {x[0]:.3f}, {b} {y[0]:.3f}{paired}: {said}"
    notes = []
    if measure == "mlm":
        ra, rb = runs[a].mlm, runs[b].mlm
        by_accuracy = a if ra["accuracy"] > rb["accuracy"] else b if rb["accuracy"] > ra["accuracy"] else None
        by_loss = a if ra["loss"] < rb["loss"] else b if rb["loss"] < ra["loss"] else None
        if by_accuracy and by_loss and by_accuracy != by_loss:
            notes.append(f"masked-token accuracy ranks them the other way ({a} {ra['accuracy']:.3f}, {b} "
                         f"{rb['accuracy']:.3f}); the loss scores the whole predicted distribution, accuracy only "
                         "its top token")
        for name, r in ((a, ra), (b, rb)):
            level = (r.get("unigram") or {}).get("accuracy")
            if level is not None and r["accuracy"] <= level:
                notes.append(f"{name}'s accuracy {r['accuracy']:.3f} is at or below always predicting the most "
                             f"frequent token ({level:.3f})")
    else:
        notes += [f"{name}'s probe predicts one class for every sentence (MCC 0): collapsed"
                  for name in (a, b) if _collapsed_probe(runs[name], measure)]
    return line + "".join(f"\n    note: {n}" for n in notes)


def verdicts(a: str, b: str, runs: Mapping[str, Any], measures: Sequence[str] = tuple(MEASURES)) -> str:
    """`verdict` for each measure, one block per measure ("(not measured)" when a run is missing)."""
    if a not in runs or b not in runs:
        return "  (not measured)"
    return "\n".join(line for line in (verdict(a, b, runs, m) for m in measures) if line)


def compare_report(baseline: str, names: Sequence[str], places: Mapping[str, Mapping[str, Any]],
                   measures: Sequence[str] = tuple(MEASURES)) -> str:
    """`verdicts` of every run in `names` against `baseline`, for each place the runs come from (this run,
    the cpu profile's committed measurements)."""
    return "\n".join(f"{where}, {name} against {baseline}:\n" + verdicts(name, baseline, runs, measures)
                     for where, runs in places.items() for name in names)


def pair_task_lines(places: Mapping[str, Mapping[str, Any]], names: Sequence[str] = ("mlm+nsp", "mlm+sop")) -> str:
    """How well each pair-task run learned its own task (NSP or SOP) on held-out pairs, with its interval, and in
    one line whether it learned it at all: an interval that holds 50% is a run at chance."""
    lines = []
    for where, runs in places.items():
        for name in names:
            if name in runs and runs[name].aux:
                aux = runs[name].aux
                low, high = aux["interval"]
                learned = ("above chance: it learned its task" if low > 0.5 else
                           "AT CHANCE: this run did not learn its task (its interval holds 50%)" if high >= 0.5 else
                           "below chance")
                lines.append(f"{where}: {name} on its own task ({aux['task'].upper()}), {aux['pairs']} held-out "
                             f"pairs: accuracy {aux['accuracy']:.3f} [{low:.3f}, {high:.3f}]: {learned}")
    return "\n".join(lines)

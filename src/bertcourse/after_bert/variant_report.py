"""Lesson 6's read-out of the after-BERT variants: each run's score with its interval, and what two runs'
intervals allow one to say, computed from the measure the lesson discusses (the masked-LM loss). In the package
rather than the lesson so that the lesson shows the comparison,
not sixty lines of formatting (and so that the wording of a verdict is tested)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bertcourse.stats import wilson_interval

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
    """(value, low, high) of `measure` for `run`: the masked-LM LOSS (lower is better) with a normal 95%
    interval from the per-target sd (None, None when the run did not record it), or a probe's accuracy with
    its bootstrap interval; None where the run has no such number (ELECTRA has no MLM head of its own)."""
    if measure == "mlm":
        if not run.mlm:
            return None
        sd, n = run.mlm.get("loss_sd"), run.mlm["targets"]
        if sd is None:
            return run.mlm["loss"], None, None
        half = 1.96 * sd / max(n, 1) ** 0.5
        return run.mlm["loss"], run.mlm["loss"] - half, run.mlm["loss"] + half
    return run.probe[measure]["accuracy"], *run.probe[measure]["accuracy_interval"]


def _collapsed_probe(run: Any, measure: str) -> bool:
    """A probe that gives every sentence one label: MCC 0 and macro-F1 at the one-class level (<= 0.35)."""
    probe = run.probe.get(measure) or {}
    return probe.get("mcc") == 0 and probe.get("macro_f1", 1.0) <= 0.35


def verdict(a: str, b: str, runs: Mapping[str, Any], measure: str) -> str | None:
    """One line: both runs' `measure` with intervals and what they allow one to say, computed from the measure
    the lesson discusses (the masked-LM loss, not its accuracy: a model can sit below the frequent-token
    accuracy while its loss is far better, and one that learned only the frequent token would "win" on
    accuracy). Intervals that do not overlap are a difference; overlapping ones are no evidence either way.
    Notes name an accuracy that contradicts the loss (below the frequent-token level) and a collapsed probe."""
    x, y = measure_of(runs[a], measure), measure_of(runs[b], measure)
    if x is None or y is None:
        return None
    lower_is_better = measure == "mlm"
    better = (lambda u, v: u < v) if lower_is_better else (lambda u, v: u > v)
    if None in (x[1], y[1]):  # a run recorded before the loss's spread was: the gap, without a test
        leader = a if better(x[0], y[0]) else b
        said = f"{leader} has the lower loss by {abs(x[0] - y[0]):.3f} nats (no interval recorded for this run)"
    elif (x[2] < y[1]) if lower_is_better else (x[1] > y[2]):
        said = f"{a} is ahead"
    elif (y[2] < x[1]) if lower_is_better else (y[1] > x[2]):
        said = f"{b} is ahead"
    else:
        said = "cannot tell the two apart"

    def shown(v: tuple) -> str:
        return f"{v[0]:.3f}" + (f" [{v[1]:.3f}, {v[2]:.3f}]" if v[1] is not None else "")

    line = f"  {MEASURES[measure]}: {a} {shown(x)}, {b} {shown(y)}: {said}"
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
    """How well each pair-task run learned its own task (NSP or SOP) on held-out pairs, with its interval."""
    lines = []
    for where, runs in places.items():
        for name in names:
            if name in runs and runs[name].aux:
                aux = runs[name].aux
                low, high = aux["interval"]
                lines.append(f"{where}: {name} on its own task ({aux['task'].upper()}), {aux['pairs']} held-out "
                             f"pairs: accuracy {aux['accuracy']:.3f} [{low:.3f}, {high:.3f}]")
    return "\n".join(lines)

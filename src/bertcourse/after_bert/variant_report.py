"""Lesson 6's read-out of the after-BERT variants: each run's score with its interval, and what two runs'
intervals allow one to say. In the package rather than the lesson so that the lesson shows the comparison,
not sixty lines of formatting (and so that the wording of a verdict is tested)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bertcourse.masking import wilson_interval

MEASURES = {"mlm": "held-out masked tokens", "cls": "SST-2 probe on [CLS]", "mean": "SST-2 probe on the token mean"}


def score(run: Any, measure: str) -> tuple[float, float, float] | None:
    """(accuracy, low, high) of `run` (an after_bert.VariantResult) on `measure`: held-out masked-token
    accuracy with its Wilson interval, or a probe's with its bootstrap interval; None where the run has no
    such number (ELECTRA keeps no MLM head of its own)."""
    if measure == "mlm":
        if not run.mlm:
            return None
        hits = round(run.mlm["accuracy"] * run.mlm["targets"])
        return (run.mlm["accuracy"], *wilson_interval(hits, run.mlm["targets"]))
    return (run.probe[measure]["accuracy"], *run.probe[measure]["accuracy_interval"])


def verdicts(a: str, b: str, runs: Mapping[str, Any], measures: Sequence[str] = tuple(MEASURES)) -> str:
    """One line per measure: both runs' scores and intervals, and what the intervals allow one to say.
    Intervals that do not overlap are a difference; overlapping ones are no evidence either way."""
    if a not in runs or b not in runs:
        return "  (not measured)"
    lines = []
    for measure in measures:
        x, y = score(runs[a], measure), score(runs[b], measure)
        if x is None or y is None:
            continue
        said = f"{a} is ahead" if x[1] > y[2] else f"{b} is ahead" if y[1] > x[2] else "cannot tell the two apart"
        lines.append(f"  {MEASURES[measure]}: {a} {x[0]:.3f} [{x[1]:.3f}, {x[2]:.3f}], {b} {y[0]:.3f} "
                     f"[{y[1]:.3f}, {y[2]:.3f}]: {said}")
    return "\n".join(lines)


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

"""The report of `bertcourse labels`: results.md, a plain table, and accuracy against labels (log x) as a figure.

Reads only the results dict `bertcourse.training.data_efficiency.label_curve` builds (results.json), so a finished
experiment can be re-reported without running anything; figures use matplotlib's `Figure`, never pyplot.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertcourse.training.compare_report import COST_HEADER, FLOPS_FORMULA, cost_line

FIGURE_NAME = "accuracy_vs_labels.png"
_STYLE = {"pretrained": ("tab:blue", "o", "-"), "scratch": ("tab:orange", "s", "--"),
          "tfidf": ("tab:grey", "^", ":")}


def _pooling_words(pooling: str | None) -> str:
    """What a recipe's head reads, in words (None: the architecture's; reports written before the pooling lever
    have no pooling, and the first lever reports kept a sentence there: both are the default)."""
    named = {"cls": "the final `[CLS]` state", "mean": "the mean of the final states over real tokens",
             "last": "the final state of the last real token"}
    return named.get(pooling or "", "the architecture's vector ([CLS] for BERT, the last token for GPT)")


def write_results(results: dict, out: str | Path) -> None:
    """results.json, results.md and the figure in `out`."""
    from bertcourse.folders import write_atomic

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "results.json", json.dumps(results, indent=1))
    write_atomic(out / "results.md", results_markdown(results))
    plot_label_curve(results, path=out / FIGURE_NAME)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _cell(row: dict | None) -> str:
    if row is None:
        return "-"
    acc = row["accuracy"]
    sd = "" if acc["sd"] is None else f" ± {_pct(acc['sd'])}"
    low, high = acc["interval"]
    return f"{_pct(acc['mean'])}{sd} ({_pct(low)}-{_pct(high)})"


def curve_table(results: dict) -> str:
    """A markdown table: one line per budget, one column per model x init and TF-IDF (accuracy in %,
    mean ± sd over seeds, 95% interval)."""
    rows = {(r["model"], r["kind"], r["budget"]): r for r in results["rows"]}
    columns = [(m["name"], init) for m in results["models"] for init in ("pretrained", "scratch")]
    lines = ["| labels (train + dev) | " + " | ".join(f"{name} {init}" for name, init in columns)
             + " | TF-IDF + LR |", "|---" * (len(columns) + 2) + "|"]
    for n in results["budgets"]:
        cells = [_cell(rows.get((name, init, n))) for name, init in columns]
        lines.append(f"| {n:,} | " + " | ".join(cells) + f" | {_cell(rows.get(('TF-IDF', 'tfidf', n)))} |")
    return "\n".join(lines)


def _seed_words(k: int, first: int) -> str:
    return f"seed {first}" if k == 1 else f"seeds {first} to {first + k - 1}"


def results_markdown(results: dict) -> str:
    """results.md: the table, the recipe, the paired tests, what each row trained on."""
    recipe, k = results["recipe"], results["seeds"]
    first = results.get("first_seed", 0)  # reports written before --first-seed: 0
    lines = [
        f"# SST-2 accuracy against the number of labels (profile `{results['profile']}`)", "",
        f"Each cell: validation accuracy (%) on the {results['validation_sentences']} SST-2 validation sentences, "
        f"mean ± sd over {k} seed{'s' if k > 1 else ''} ({_seed_words(k, first)}; 95% interval). A seed draws "
        "which labelled rows are used "
        "(nested across budgets) and initialises the run. Written by `bertcourse labels`; numbers in results.json.",
        *(["", f"Left out, the hub could not be reached (offline): {', '.join(results['skipped'])}. Its rows need a "
           "machine with a network (or its checkpoint in a folder: `--model NAME=FOLDER`).", ""]
          if results.get("skipped") else [""]),
        curve_table(results), "",
        "## The fine-tuning recipe", "",
        f"- Of the n labelled rows, every {recipe['dev_every']}th (in the seed's order, at most "
        f"{recipe['max_dev_rows']:,}) is a dev split; the network trains on the rest. The validation set is "
        "never seen before the single final score.",
        f"- Full fine-tuning, AdamW at learning rate {recipe['learning_rate']:g}, weight decay "
        f"{recipe['weight_decay']:g}, batch {recipe['batch_size']}, linear warm-up over "
        f"{100 * recipe['warmup_fraction']:.0f}% of the planned steps then linear decay, head dropout "
        f"{recipe['head_dropout']:g}, sentences cut at {recipe['max_seq_len']} tokens (the profile's finetune: block).",
        f"- The head reads {_pooling_words(recipe.get('pooling'))}"
        + (f"; the first {100 * recipe['frozen_fraction']:.0f}% of each run's planned steps train the head alone on "
           "the frozen encoder, then the whole model trains (LP-FT; patience counts from then)."
           if recipe.get("frozen_fraction") else "; every weight trains from the first step.")
        + (f" Layer-wise learning-rate decay {recipe['layer_decay']:g}: each block learns at {recipe['layer_decay']:g} "
           "times the rate of the block above it (the top block at that factor of the head's rate), the embeddings "
           "at that factor of the lowest block's." if recipe.get("layer_decay", 1.0) != 1.0 else ""),
        f"- At most {recipe['max_epochs']} passes over the training rows or {recipe['steps_cap']:,} steps, whichever "
        f"comes first; the dev split is checked {recipe['evaluations']} times along the way; the weights with the best "
        f"dev accuracy (ties: lower dev loss) are kept; training stops after {recipe['patience']} checks without "
        "a better one.",
        "- TF-IDF + logistic regression (unigrams, C = 4, lesson 5's recipe) fits on all n labelled rows (it has "
        "nothing to stop early); with a single class among them it predicts that class.", "",
        "| model | init | labels | train rows | dev rows | step chosen / planned (per seed) | seconds / run |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        if r["kind"] == "tfidf":
            continue
        chosen = ", ".join(f"{s}/{p}" for s, p in zip(r["selected_step"], r["planned_steps"]))
        seconds = sum(r["train_seconds"]) / len(r["train_seconds"])
        lines.append(f"| {r['model']} | {r['kind']} | {r['budget']:,} | {r['train_rows']:,} | {r['dev_rows']:,} | "
                     f"{chosen} | {seconds:.1f} |")
    lines += ["", "## Paired tests", "",
              "| comparison | labels | a - b (points) | 95% interval | p | p (Holm) |", "|---|---|---|---|---|---|"]
    for t in results["tests"]:
        low, high = t["interval"]
        lines.append(f"| {t['model']}: {t['kind']} | {t['budget']:,} | {100 * t['difference']:+.1f} | "
                     f"{100 * low:+.1f} to {100 * high:+.1f} | {t['p']:.4f} | {t['p_holm']:.4f} |")
    lines += ["", f"Interval: {results['statistics']['interval']}", "", f"Test: {results['statistics']['test']}", "",
              "Models: " + "; ".join(f"{m['name']} ({m['arch']}, pretrained weights from {m['pretrained']})"
                                     for m in results["models"]) + ".", ""]
    costs = {m["name"]: m["pretraining"] for m in results["models"] if m.get("pretraining")}  # not in older reports
    if costs:
        lines += ["## What pretraining cost", "", *COST_HEADER, *(cost_line(name, c) for name, c in costs.items()), "",
                  FLOPS_FORMULA, ""]
    lines += [f"Figure: {FIGURE_NAME} (accuracy against labels, log x, 95% intervals shaded, a dot per seed).", ""]
    timing = results.get("timing", {})
    if timing:
        lines.append(f"This run took {timing['total_seconds']:.0f} s (pretraining "
                     f"{timing['pretraining_seconds']:.0f} s, fine-tuning runs {timing['runs_seconds']:.0f} s).")
    return "\n".join(lines) + "\n"


def verdict_lines(results: dict, kinds: Sequence[str] | None = None) -> list[str]:
    """One line per paired test (of `kinds`, default all): the difference in points with its 95% interval,
    Holm's p, and the verdict: beyond the noise when Holm's p is below the report's alpha, else within it."""
    alpha = results.get("statistics", {}).get("alpha", 0.05)
    lines = []
    for t in results["tests"]:
        if kinds is not None and t["kind"] not in kinds:
            continue
        low, high = t["interval"]
        verdict = "beyond the noise" if t["p_holm"] < alpha else "within the noise"
        a, b = t["a"].rsplit(" ", 1)[0], t["b"].rsplit(" ", 1)[0]
        lines.append(f"{t['budget']:>6,} labels: {a} - {b} = {100 * t['difference']:+.1f} points "
                     f"({100 * low:+.1f} to {100 * high:+.1f}), Holm p {t['p_holm']:.3f}: {verdict}")
    return lines


def plot_label_curve(results: dict, fig: Any = None, path: str | Path | None = None, dpi: int = 100) -> Any:
    """One panel per model: pretrained, scratch and TF-IDF + LR accuracy against the labels (log x), the 95%
    interval shaded, one dot per seed. Draws on `fig` or a new `Figure`; saves to `path` if given."""
    from matplotlib.figure import Figure

    models = [m["name"] for m in results["models"]]
    fig = fig if fig is not None else Figure(figsize=(4.6 * len(models), 3.8))
    axes = fig.subplots(1, len(models), sharey=True, squeeze=False)[0]
    by = {}
    for r in results["rows"]:
        by.setdefault((r["model"], r["kind"]), []).append(r)
    for ax, name in zip(axes, models):
        for kind, label in (("pretrained", f"{name} pretrained"), ("scratch", f"{name} from scratch"),
                            ("tfidf", "TF-IDF + LR")):
            rows = sorted(by.get((name if kind != "tfidf" else "TF-IDF", kind), []), key=lambda r: r["budget"])
            if not rows:
                continue
            colour, marker, line = _STYLE[kind]
            x = [r["budget"] for r in rows]
            ax.plot(x, [r["accuracy"]["mean"] for r in rows], marker=marker, ls=line, color=colour, label=label)
            ax.fill_between(x, [r["accuracy"]["interval"][0] for r in rows],
                            [r["accuracy"]["interval"][1] for r in rows], color=colour, alpha=0.15, lw=0)
            for r in rows:
                ax.scatter([r["budget"]] * len(r["accuracy"]["per_seed"]), r["accuracy"]["per_seed"], s=8,
                           color=colour, alpha=0.6)
        ax.axhline(0.5, color="black", lw=0.6, alpha=0.4)
        ax.set_xscale("log")
        ax.set_xlabel("labelled SST-2 train rows (train + dev)")
        ax.set_title(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    axes[0].set_ylabel(f"validation accuracy ({results['validation_sentences']} sentences)")
    # two lines: one model's panel is too narrow for the title on one (it was cut at both edges)
    fig.suptitle(f"{results.get('title') or 'Profile ' + results['profile']}: mean over "
                 f"{_seed_words(results['seeds'], results.get('first_seed', 0))}\n"
                 "95% bootstrap interval over sentences", fontsize=9)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=dpi)
    return fig


__all__ = ["FIGURE_NAME", "curve_table", "plot_label_curve", "results_markdown", "verdict_lines", "write_results"]

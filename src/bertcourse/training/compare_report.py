"""The report of `bertcourse compare`: results.md (the table a paper would print), a table for notebooks,
and the three figures (accuracy with intervals, learning curves, confusion matrices).

Reads only the results dict that `bertcourse.training.compare.compare` builds (results.json), so a finished
experiment can be re-reported without running anything. Figures use matplotlib's object API (`Figure`),
never pyplot's global state.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

# The experiment's grid (compare.run_plan walks it; the table and figures are laid out by it).
from bertcourse.config import ARCHITECTURES as ARCHS
from bertcourse.config import INITS, REGIMES

FLOPS_FORMULA = ("FLOPs ~ 6 x T x (N_body + f x N_head): T tokens seen (real tokens, [CLS]/[SEP] included); "
                 "N_body the parameters every position passes through (blocks and LayerNorms, not the embedding "
                 "tables, which are lookups); N_head the output head (dense + LayerNorm + the tied vocab x d_model "
                 "decoder + bias); f the share of positions the head runs on: the masking rate (0.15) for the "
                 "BERT, 1 for the GPT. 6 = 2 (multiply-add) x 3 (forward + backward). Attention's score products "
                 "(~6 x T x 2 x layers x seq_len x d_model) are left out, as in Kaplan et al. 2020.")



def write_results(results: dict, out: str | Path) -> None:
    """results.json, results.md and the three figures in `out`."""
    from bertcourse.folders import write_atomic

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "results.json", json.dumps(results, indent=1))
    write_atomic(out / "results.md", results_markdown(results))
    plot_accuracy(results, path=out / "accuracy.png")
    plot_learning_curves(results, path=out / "learning_curves.png")
    plot_confusion_matrices(results, path=out / "confusion_matrices.png")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _si(x: float | None) -> str:
    if x is None:
        return "not recorded"
    for unit, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.2f} {unit}"
    return f"{x:.0f}"


def seconds_text(x: float | None) -> str:
    """A duration for people: 42.0 s, or 3.5 min from two minutes on."""
    if x is None:
        return "not recorded"
    return f"{x:.1f} s" if x < 120 else f"{x / 60:.1f} min"


COST_HEADER = ("| model | parameters | steps | tokens seen | wall time | est. FLOPs | held-out loss "
               "| held-out accuracy |", "|---|---|---|---|---|---|---|---|")


def cost_line(label: str, c: dict) -> str:
    """A row under COST_HEADER: a course run's counted cost (`compare.pretraining_cost`), or a public checkpoint's
    estimate from its paper's recipe (`compare.public_cost`, marked `estimate`), never measured here."""
    if c.get("estimate"):
        tokens = "not known" if c["tokens_seen"] is None else f"~{c['tokens_seen']:,.0f} (estimate)"
        flops = "not known" if c["flops"] is None else f"~{_si(c['flops'])} (estimate)"
        return f"| {label} | {c['parameters']:,} | - | {tokens} | - | {flops} | - | - |"
    tokens = f"{c['tokens_seen']:,}" + ("" if c["tokens_recorded"] else " (estimated upper bound)")
    return (f"| {label} | {c['parameters']:,} | {c['steps']:,} | {tokens} | {seconds_text(c['train_seconds'])} | "
            f"{_si(c['flops'])} | {c['heldout_loss']:.3f} | {_pct(c['heldout_accuracy'])}% |")


def _table_line(row: dict) -> str:
    acc, f1, mcc = row["accuracy"], row["macro_f1"], row["mcc"]
    sd = "" if acc["sd"] is None else f" ± {_pct(acc['sd'])}"
    low, high = acc["interval"]
    f1_sd = "" if f1["sd"] is None else f" ± {f1['sd']:.3f}"
    mcc_sd = "" if mcc["sd"] is None else f" ± {mcc['sd']:.3f}"
    if row["arch"] == "baseline":
        model = f"{row['name']} | - | -"
    elif row.get("public"):  # a public checkpoint's row
        model = f"{row['public']} ({row['arch'].upper()}, public) | {row['regime']} | {row['init']}"
    else:
        model = f"{row['arch'].upper()} | {row['regime']} | {row['init']}"
    seconds = seconds_text(row["finetune_seconds"]["mean"])
    return (f"| {model} | {_pct(acc['mean'])}{sd} | {_pct(low)}-{_pct(high)} | {f1['mean']:.3f}{f1_sd} | "
            f"{mcc['mean']:.3f}{mcc_sd} | {row['trainable_parameters']:,} | {seconds} |")


def _public_notes(results: dict) -> list[str]:
    """The paragraphs under the cost table for public checkpoints: what is counted, what is estimated."""
    public = results.get("public") or {}
    lines = []
    for name, c in public.get("checkpoints", {}).items():
        lines += ["", f"{name} ({c['checkpoint']}): the course did not train it. Parameters counted from the loaded "
                  f"model (body {c['body_parameters']:,}, head {c['head_parameters']:,}, f = {c['head_share']:g}; the "
                  "head is the output matrix its base model lacks); tokens and FLOPs are ESTIMATES from the published "
                  f"recipe: {c['recipe']} (source: {c['source'] or 'none'}). Data: {c['data'] or 'not known'}. "
                  f"Differences: {c['differences'] or 'not recorded'}."]
    if public.get("notice"):
        lines += ["", public["notice"]]
    return lines


def results_markdown(results: dict) -> str:
    """results.md: the table a paper would print, the paired tests, the pretraining cost, the anchors."""
    k, n = results["seeds"], results["validation_sentences"]
    lines = [
        f"# SST-2: the tiny BERT against its parameter-matched GPT (profile `{results['profile']}`)",
        "",
        f"Every model is fine-tuned on the same {results['train_rows']:,} SST-2 train rows and scored on the "
        f"{n} validation sentences; {k} seed{'s' if k > 1 else ''} per row. Accuracy in %: mean ± sd over seeds; "
        "macro-F1 and MCC likewise. Written by `bertcourse compare`; the numbers are in results.json.",
        "",
        "| model | regime | init | accuracy (%) | 95% interval | macro-F1 | MCC | trainable params "
        "| fine-tune time / run |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_table_line(row) for row in results["rows"] + results["baselines"]]
    collapsed = [line for line in (collapse_note(row) for row in results["rows"]) if line]
    if collapsed:
        lines += ["", "Collapsed to one class (a row whose seeds predict one label for ~all sentences has learned "
                  "nothing the accuracy can show; any test it wins or loses says only that):", ""]
        lines += [f"- {line}" for line in collapsed]
    lines += ["", f"Interval: {results['statistics']['interval']}", "",
              "## Paired tests", "",
              "| comparison | a - b (points) | 95% interval | p | p (Holm) |", "|---|---|---|---|---|"]
    for t in results["tests"]:
        low, high = t["interval"]
        lines.append(f"| {t['a']} vs {t['b']} | {100 * t['difference']:+.1f} | {100 * low:+.1f} to {100 * high:+.1f} "
                     f"| {t['p']:.4f} | {t['p_holm']:.4f} |")
    lines += ["", f"Test: {results['statistics']['test']}", "", "## What pretraining cost", "", *COST_HEADER]
    lines += [cost_line(arch.upper(), c) for arch, c in results["pretraining"].items()]
    public = (results.get("public") or {}).get("checkpoints", {})
    lines += [cost_line(f"{name} ({c['arch'].upper()}, public)", c) for name, c in public.items()]
    lines += ["", FLOPS_FORMULA + " Body/head parameters: " + "; ".join(
        f"{arch.upper()} {c['body_parameters']:,} / {c['head_parameters']:,} (f = {c['head_share']:g})"
        for arch, c in results["pretraining"].items()) + ".",
        *_public_notes(results),
        "", "## Anchors", "", "| reference | accuracy (%) | split | source |", "|---|---|---|---|"]
    lines += [f"| {a['name']} | {_pct(a['accuracy'])} | {a['split']} | {a['source']} |" for a in results["anchors"]]
    lines += ["", "GLUE's SST-2 test labels are hidden: the published numbers are test-set scores and the table's are "
              "validation scores, so they place the course's models on a scale rather than rank them.", "",
              "Figures: accuracy.png (every row with its interval, one dot per seed), learning_curves.png (validation "
              "accuracy against the fine-tuning step), confusion_matrices.png (counts per seed, averaged).", ""]
    timing = results.get("timing", {})
    if timing:
        lines += [f"This compare took {seconds_text(timing.get('total_seconds'))} (pretraining "
                  f"{seconds_text(timing.get('pretraining_seconds'))}, fine-tuning "
                  f"{seconds_text(timing.get('finetuning_seconds'))}; reused runs cost nothing).", ""]
    return "\n".join(lines)


def results_table(results: dict) -> Any:
    """The table as a pandas DataFrame (what a notebook displays): one line per row and baseline."""
    import pandas as pd

    return pd.DataFrame([{
        "model": row["name"] if row["arch"] == "baseline" else row.get("public") or row["arch"],
        "regime": row["regime"],
        "init": row["init"], "accuracy": row["accuracy"]["mean"], "sd": row["accuracy"]["sd"],
        "interval low": row["accuracy"]["interval"][0], "interval high": row["accuracy"]["interval"][1],
        "macro-F1": row["macro_f1"]["mean"], "MCC": row["mcc"]["mean"],
        "trainable params": row["trainable_parameters"], "seconds / run": row["finetune_seconds"]["mean"],
    } for row in results["rows"] + results["baselines"]])


# ----------------------------------------------------------------------------- verdicts

COLLAPSE_SHARE = 0.99  # a seed that gives one label to at least this share of the sentences has collapsed


def predicted_positive(row: dict) -> list[float]:
    """Each seed's share of sentences predicted positive (`predicted_positive` in rows written since it was
    recorded; else the pooled share from the confusion matrix, one value for all seeds)."""
    if row.get("predicted_positive") is not None:
        return list(row["predicted_positive"])
    (_, fp), (_, tp) = row["confusion"]
    return [(fp + tp) / max(1, sum(map(sum, row["confusion"])))]


def collapsed_seeds(row: dict, share: float = COLLAPSE_SHARE) -> list[tuple[int, str, float]]:
    """(seed index, label, share) of every seed that predicts one label for >= `share` of the sentences."""
    out = []
    for k, positive in enumerate(predicted_positive(row)):
        if max(positive, 1 - positive) >= share:
            out.append((k, "positive" if positive >= 0.5 else "negative", max(positive, 1 - positive)))
    return out


def collapse_note(row: dict) -> str | None:
    """A sentence naming a collapsed row (all or some of its seeds predict one class), None if none did."""
    seeds = collapsed_seeds(row)
    if not seeds:
        return None
    total = len(predicted_positive(row))
    labels = sorted({label for _, label, _ in seeds})
    which = "every seed" if len(seeds) == total else f"{len(seeds)} of {total} seeds"
    verb = "predicts" if len(seeds) == 1 or len(seeds) == total else "predict"
    return (f"{row['name']}: {which} {verb} {' or '.join(labels)} for at least "
            f"{100 * min(s for _, _, s in seeds):.1f}% of the sentences (MCC {row['mcc']['mean']:.3f}): collapsed "
            "to one class")


def pretraining_verdicts(results: dict) -> list[str]:
    """What the pretrained-vs-scratch tests say, in words, with collapsed rows named: the verdict is the
    paired test of accuracy (the measure the lesson discusses) after Holm's correction, and a row that
    collapsed to one class is said to have collapsed, so that "scratch is ahead" is not read as "pretraining
    hurt" when the pretrained run learned nothing."""
    rows = {r["name"]: r for r in results["rows"]}
    lines, helped, hurt = [], [], []
    for test in results["tests"]:
        if test["kind"] != "pretrained vs scratch" or test["p_holm"] >= 0.05:
            continue
        (helped if test["difference"] > 0 else hurt).append(test)
    lines.append("pretraining helps, beyond the noise, in: " + (", ".join(t["a"] for t in helped) or "no row"))
    lines.append("the scratch model is ahead, beyond the noise, of: " + (", ".join(t["a"] for t in hurt) or "no row"))
    for test in helped + hurt:
        loser = rows[test["b"] if test in helped else test["a"]]
        note = collapse_note(loser)
        if note:
            lines.append(f"  why {test['a']} vs {test['b']}: {note}; the gap measures that collapse, not what "
                         "pretraining taught")
    named = {t["a"] for t in helped + hurt} | {t["b"] for t in helped + hurt}
    for row in results["rows"]:
        note = collapse_note(row)
        if note and row["name"] not in named:
            lines.append(f"  also collapsed: {note}")
    return lines


# ----------------------------------------------------------------------------- figures

_COLOURS = {("bert", "pretrained"): "C0", ("bert", "scratch"): "#9ecae1",
            ("gpt", "pretrained"): "C3", ("gpt", "scratch"): "#fcae91"}


def _figure(fig: Any, size: tuple[float, float]) -> Any:
    from matplotlib.figure import Figure

    return fig if fig is not None else Figure(figsize=size)


def plot_accuracy(results: dict, fig: Any = None, path: str | Path | None = None) -> Any:
    """Every model x regime x init: seed-averaged accuracy with its interval, a dot per seed; the baselines
    as lines. Draws on `fig` or a new `Figure`; saves to `path` if given."""
    fig = _figure(fig, (11, 4))
    axes = fig.subplots(1, len(REGIMES), sharey=True)
    rows = {(r["arch"], r["regime"], r["init"]): r for r in results["rows"] if not r.get("public")}
    public = sorted({r["public"] for r in results["rows"] if r.get("public")})
    jitter = np.random.default_rng(0)
    for ax, regime in zip(axes, REGIMES):
        for x, (arch, init) in enumerate(_COLOURS):
            row = rows[(arch, regime, init)]
            mean, (low, high) = row["accuracy"]["mean"], row["accuracy"]["interval"]
            ax.errorbar([x], [mean], yerr=[[mean - low], [high - mean]], fmt="o", ms=8, capsize=5,
                        color=_COLOURS[(arch, init)], label=f"{arch.upper()} {init}")
            seeds = row["accuracy"]["per_seed"]
            ax.scatter(x + 0.18 + jitter.uniform(-0.05, 0.05, len(seeds)), seeds, s=14, color="black", zorder=3)
        for baseline, style in zip(results["baselines"], (":", "--")):
            ax.axhline(baseline["accuracy"]["mean"], color="grey", ls=style, label=baseline["name"])
        for k, name in enumerate(public):  # the public checkpoints after the course's four
            row = next(r for r in results["rows"] if r.get("public") == name and r["regime"] == regime)
            x, mean, (low, high) = len(_COLOURS) + k, row["accuracy"]["mean"], row["accuracy"]["interval"]
            ax.errorbar([x], [mean], yerr=[[mean - low], [high - mean]], fmt="s", ms=8, capsize=5,
                        color=f"C{4 + k}", label=f"{name} (public)")
            seeds = row["accuracy"]["per_seed"]
            ax.scatter(x + 0.18 + jitter.uniform(-0.05, 0.05, len(seeds)), seeds, s=14, color="black", zorder=3)
        ax.set_xticks(range(len(_COLOURS) + len(public)),
                      [f"{a.upper()}\n{i}" for a, i in _COLOURS] + [f"{name}\npublic" for name in public])
        ax.set_title(f"{regime}")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel(f"SST-2 validation accuracy ({results['validation_sentences']} sentences)")
    axes[-1].legend(fontsize=7, loc="best")
    fig.suptitle(f"Mean over {results['seeds']} seeds (dots: single seeds), 95% bootstrap interval over sentences "
                 f"(profile {results['profile']})", fontsize=10)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def plot_learning_curves(results: dict, fig: Any = None, path: str | Path | None = None) -> Any:
    """Validation accuracy against the fine-tuning step, one panel per arch x regime, a line per seed."""
    fig = _figure(fig, (11, 6))
    axes = fig.subplots(len(ARCHS), len(REGIMES), sharey=True, squeeze=False)
    rows = {(r["arch"], r["regime"], r["init"]): r for r in results["rows"] if not r.get("public")}
    majority = results["baselines"][0]["accuracy"]["mean"]
    for i, arch in enumerate(ARCHS):
        for j, regime in enumerate(REGIMES):
            ax = axes[i][j]
            for init in INITS:
                for n, run in enumerate(rows[(arch, regime, init)]["runs"]):
                    ax.plot(run["curve"]["step"], run["curve"]["accuracy"], "o-", ms=3, lw=1,
                            color=_COLOURS[(arch, init)], label=init if n == 0 else None)
            ax.axhline(majority, color="grey", ls=":", label="majority class")
            ax.set_title(f"{arch.upper()} {regime}", fontsize=10)
            ax.set_xlabel("step (probe: steps on cached features)" if regime == "probe" else "step")
            ax.grid(alpha=0.3)
        axes[i][0].set_ylabel("validation accuracy")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def plot_confusion_matrices(results: dict, fig: Any = None, path: str | Path | None = None) -> Any:
    """One confusion matrix per row and baseline: counts per seed, averaged over the seeds."""
    fig = _figure(fig, (9, 14))
    panels = results["rows"] + results["baselines"]
    columns = len(REGIMES)
    axes = fig.subplots(math.ceil(len(panels) / columns), columns, squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, row in zip(axes.flat, panels):
        seeds = len(row["accuracy"]["per_seed"])
        matrix = np.asarray(row["confusion"], dtype=float) / seeds
        ax.imshow(matrix, cmap="Blues", vmin=0, vmax=results["validation_sentences"] / 2)
        for (t, p), value in np.ndenumerate(matrix):
            ax.text(p, t, f"{value:.0f}", ha="center", va="center",
                    color="white" if value > results["validation_sentences"] / 4 else "black")
        ax.set_xticks([0, 1], ["neg", "pos"])
        ax.set_yticks([0, 1], ["neg", "pos"])
        ax.set_title(row["name"], fontsize=9)
        ax.set_xlabel("predicted", fontsize=8)
        ax.set_ylabel("true", fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


# ----------------------------------------------------------------------------- the command




__all__ = ["ARCHS", "COLLAPSE_SHARE", "COST_HEADER", "FLOPS_FORMULA", "INITS", "REGIMES", "collapse_note",
           "collapsed_seeds", "cost_line",
           "plot_accuracy", "plot_confusion_matrices", "plot_learning_curves", "predicted_positive",
           "pretraining_verdicts", "results_markdown", "results_table", "seconds_text", "write_results"]

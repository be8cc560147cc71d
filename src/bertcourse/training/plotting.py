"""The figure of a pretraining run: training and held-out loss, held-out accuracy, against the step.

Library code must not touch the notebook's matplotlib backend or pyplot's list of figures, so this draws
on a figure it is given (a notebook passes `plt.figure(...)` and then calls `plt.show()`) or on a
`matplotlib.figure.Figure` of its own, never through pyplot.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure


def plot_history(history: dict, path: Path | None = None, title: str = "", baseline: dict | None = None,
                 fig: Figure | None = None) -> Figure:
    """Training loss (smoothed), held-out loss and held-out accuracy against the step.

    Draws on `fig` or, without one, on a new `Figure`; `baseline` ({"loss", "accuracy"}, e.g. the unigram
    baseline) adds dashed reference lines. Saves to `path` if given and returns the figure.
    """
    fig = fig if fig is not None else Figure(figsize=(10, 3.6))
    ax_loss, ax_acc = fig.subplots(1, 2)
    losses = np.asarray(history["loss"])
    window = max(1, len(losses) // 50)
    smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
    ax_loss.plot(history["step"][window - 1 :], smooth, label="training (smoothed)")
    ax_loss.plot(history["eval_step"], history["eval_loss"], "o-", label="held-out")
    ax_acc.plot(history["eval_step"], history["eval_accuracy"], "o-", color="C1", label="held-out")
    if baseline:
        ax_loss.axhline(baseline["loss"], color="grey", ls="--", label="unigram baseline")
        ax_acc.axhline(baseline["accuracy"], color="grey", ls="--", label="unigram baseline")
    ax_loss.set(xlabel="step", ylabel="cross-entropy (nats)", title=f"loss {title}")
    ax_acc.set(xlabel="step", ylabel="accuracy", title=f"target-token accuracy {title}")
    ax_loss.legend()
    ax_acc.legend()
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


__all__ = ["plot_history"]

"""What an encoder's frozen features are worth, against the number of labels: one linear probe per encoder.

`probe_curve` reads each encoder's sentence vectors (the mean of its last layer's token states: one recipe for
every encoder) once, then fits logistic regression on the first n labelled SST-2 rows of each seed's draw
(`data_efficiency.labelled_rows`: the same nested rows as `bertcourse labels`, train and dev together, as its
TF-IDF + LR uses them) and scores the 872 validation sentences. Next to each pretrained encoder: the same
architecture with random weights (the control: what the architecture alone gives a probe), and TF-IDF + LR on
the same rows. Nothing is fine-tuned, so a real pretrained BERT of 22M parameters fits in a lesson's minutes.

The results have `label_curve`'s shape (models, rows with kind pretrained / scratch / tfidf, paired tests with
Holm's correction: sentences and seeds resampled), so `data_efficiency_report.curve_table` and
`plot_label_curve` show them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

PROBE_C = 1.0  # the inverse regularisation of every probe: fixed, nothing tuned on the validation set
PROBE_MAX_LEN = 64  # tokens per sentence, as the profiles' fine-tuning reads them


@dataclass
class ProbeEncoder:
    """One encoder of the curve: its pretrained weights, the same architecture with random weights (None: no
    control row) and its own tokenizer."""

    name: str
    pretrained: torch.nn.Module
    random: torch.nn.Module | None
    tokenizer: Any


def sentence_vectors(encoder: torch.nn.Module, tokenizer: Any, sentences: Sequence[str], device: Any = "cpu"
                     ) -> np.ndarray:
    """[N, D] mean-pooled last-layer states of `sentences` ([CLS] ... [SEP] rows, cut at PROBE_MAX_LEN)."""
    from bertcourse.classifier import SequenceClassifier
    from bertcourse.training.finetune import pooled_features, sentence_rows

    rows = sentence_rows(tokenizer, list(sentences), PROBE_MAX_LEN)
    with torch.no_grad():
        return pooled_features(SequenceClassifier(encoder, pooling="mean"), rows, torch.device(device)).numpy()


def _probe_predictions(train_x: np.ndarray, train_y: np.ndarray, validation_x: np.ndarray) -> np.ndarray:
    """Standardised features, logistic regression at PROBE_C; a one-class sample predicts that class."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if len(set(train_y.tolist())) < 2:
        return np.full(len(validation_x), train_y[0])
    probe = make_pipeline(StandardScaler(), LogisticRegression(C=PROBE_C, max_iter=3000))
    return probe.fit(train_x, train_y).predict(validation_x)


def probe_curve(encoders: Sequence[ProbeEncoder], budgets: Sequence[int] = (100, 300, 1000), seeds: int = 5, *,
                data_dir: Any = None, source: str = "auto", device: Any = "cpu", progress: bool = True
                ) -> dict[str, Any]:
    """The curve's results (`label_curve`'s shape, profile "probe"); see the module's docstring."""
    from bertcourse.data import column, load_sst2
    from bertcourse.progress import progress_bar
    from bertcourse.stats import ALPHA, BOOTSTRAP_RESAMPLES, holm, paired_seed_bootstrap, sentence_resamples
    from bertcourse.training.compare import STATISTICS_INTERVAL, STATISTICS_TEST
    from bertcourse.training.data_efficiency import LabelRecipe, curve_row, labelled_rows, tfidf_predictions

    began = time.perf_counter()
    train, validation = load_sst2("train", data_dir, source), load_sst2("validation", data_dir, source)
    sentences, train_y = column(train, "sentence"), np.asarray(column(train, "label"))
    val_sentences, labels = column(validation, "sentence"), np.asarray(column(validation, "label"))
    budgets, recipe = sorted(budgets), LabelRecipe()
    chosen = {(n, s): sum(labelled_rows(len(sentences), n, s, recipe), []) for n in budgets for s in range(seeds)}
    needed = sorted({i for s in range(seeds) for i in chosen[(budgets[-1], s)]})  # nested: the largest holds all
    position = {row: k for k, row in enumerate(needed)}
    counts = sentence_resamples(len(labels))
    predicted: dict[tuple, np.ndarray] = {}
    with progress_bar(total=sum(2 if e.random is not None else 1 for e in encoders), desc="sentence vectors",
                      unit="encoder", disable=not progress) as bar:
        for encoder in encoders:
            for kind, weights in (("pretrained", encoder.pretrained), ("scratch", encoder.random)):
                if weights is None:
                    continue
                features = sentence_vectors(weights, encoder.tokenizer, [sentences[i] for i in needed], device)
                val_features = sentence_vectors(weights, encoder.tokenizer, val_sentences, device)
                for n in budgets:
                    predicted[(encoder.name, kind, n)] = np.stack([_probe_predictions(
                        features[[position[i] for i in chosen[(n, s)]]], train_y[chosen[(n, s)]], val_features)
                        for s in range(seeds)])
                bar.update(1)
    for n in budgets:
        predicted[("TF-IDF", "tfidf", n)] = np.stack([tfidf_predictions(
            [sentences[i] for i in chosen[(n, s)]], train_y[chosen[(n, s)]].tolist(), val_sentences)
            for s in range(seeds)])
    rows = [curve_row(f"{name} {kind} n={n}" if kind != "tfidf" else f"TF-IDF + LR n={n}", kind, n, labels, p, counts,
                 model=name, train_rows=n) for (name, kind, n), p in predicted.items()]
    correct = {key: p == labels[None] for key, p in predicted.items()}
    pairs = [((e.name, "pretrained", n), (e.name, "scratch", n), "pretrained vs scratch")
             for e in encoders if e.random is not None for n in budgets]
    pairs += [((e.name, "pretrained", n), ("TF-IDF", "tfidf", n), "pretrained vs TF-IDF") for e in encoders
              for n in budgets]
    tests = [{"kind": kind, "model": a[0], "budget": a[-1], "a": " ".join(map(str, a)), "b": " ".join(map(str, b)),
              **paired_seed_bootstrap(correct[a], correct[b], counts)} for a, b, kind in pairs]
    for test, adjusted in zip(tests, holm([t["p"] for t in tests])):
        test["p_holm"] = adjusted
    return {
        "profile": "probe", "title": "Linear probe on frozen features", "budgets": budgets, "seeds": seeds,
        "first_seed": 0, "skipped": {},
        "models": [{"name": e.name} for e in encoders], "validation_sentences": len(labels),
        "recipe": {"probe": f"mean-pooled last layer, standardised, logistic regression C={PROBE_C}",
                   "max_seq_len": PROBE_MAX_LEN},
        "rows": rows, "tests": tests,
        "statistics": {"interval": STATISTICS_INTERVAL, "test": STATISTICS_TEST,
                       "bootstrap_resamples": BOOTSTRAP_RESAMPLES, "alpha": ALPHA},
        "timing": {"total_seconds": round(time.perf_counter() - began, 1)},
    }


__all__ = ["PROBE_C", "ProbeEncoder", "probe_curve", "sentence_vectors"]

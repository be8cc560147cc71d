"""Scoring a saved classifier on any labelled file, or on sentences typed on the command line.

`bertcourse evaluate CHECKPOINT --data FILE` is how a fine-tuned model meets data it was not built
around: a user's own reviews, a slice of SST-2, another sentiment set. The file is read and checked by
the data layer exactly as SST-2 is (`bertcourse.data.read_labelled_file`: columns `sentence` and `label`,
errors naming the file and the row), the sentences are encoded as in training (`finetune.sentence_rows`),
and the scores are those of every fine-tuning run (`finetune.scores`: accuracy with a 95% bootstrap
interval over the file's sentences, macro-F1, MCC), so a number printed here and one in a run's
metrics.json mean the same thing. `--text` classifies sentences without labels: it prints the label and
its probability, nothing else can be scored.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertcourse.errors import BertcourseError
from bertcourse.folders import write_atomic

LABEL_NAMES = ("negative", "positive")  # SST-2: 1 = positive


@dataclass
class FileScores:
    """What `score_file` returns: the scores and one probability row [P(negative), P(positive)] per sentence."""

    path: Path
    sentences: list[str]
    labels: list[int]
    probabilities: np.ndarray  # [N, 2]
    scores: dict[str, Any]  # accuracy, accuracy_interval, macro_f1, mcc (finetune.scores)

    @property
    def predictions(self) -> list[int]:
        """The predicted label of each sentence (the more probable one)."""
        return self.probabilities.argmax(1).tolist()


def _device(device: str | None) -> Any:
    from bertcourse.training.devices import pick_device

    return pick_device(device)


def predict_sentences(checkpoint: str | Path, sentences: list[str], device: str | None = None) -> np.ndarray:
    """P(label) [N, 2] of a saved classifier (a finetune run folder or its model.pt) for raw sentences."""
    from bertcourse.training.finetune import load_classifier, predict_rows, sentence_rows

    if not sentences:
        raise BertcourseError("no sentences to classify")
    chosen = _device(device)
    model, tokenizer, state = load_classifier(checkpoint, chosen)
    return predict_rows(model, sentence_rows(tokenizer, list(sentences), state["max_seq_len"]), chosen)


def score_file(checkpoint: str | Path, data: str | Path, device: str | None = None) -> FileScores:
    """Score a saved classifier on a labelled file (.tsv with a header, .parquet or .jsonl)."""
    from bertcourse.data import column, read_labelled_file
    from bertcourse.training.finetune import scores

    dataset = read_labelled_file(data)
    sentences, labels = column(dataset, "sentence"), column(dataset, "label")
    probabilities = predict_sentences(checkpoint, sentences, device)
    return FileScores(Path(data), sentences, labels, probabilities,
                      scores(labels, probabilities.argmax(1).tolist()))


def predictions_tsv(sentences: list[str], labels: list[int] | None, probabilities: np.ndarray) -> str:
    """The format of a fine-tuning run's predictions.tsv (index, label, prediction, p_positive, sentence);
    tabs and line breaks inside a sentence become spaces so that every row stays one line of five fields."""
    lines = ["index\tlabel\tprediction\tp_positive\tsentence"]
    for i, (sentence, p) in enumerate(zip(sentences, probabilities)):
        label = "" if labels is None else str(int(labels[i]))
        clean = " ".join(str(sentence).split())
        lines.append(f"{i}\t{label}\t{int(p.argmax())}\t{p[1]:.6f}\t{clean}")
    return "\n".join(lines) + "\n"


def evaluate_command(args: Any) -> int:
    """`bertcourse evaluate`: scores on --data (and its predictions file), labels for --text."""
    if not args.data and not args.text:
        raise BertcourseError("give --data FILE (a labelled file to score) or --text SENTENCE (to classify)")
    if args.data:
        result = score_file(args.checkpoint, args.data, args.device)
        s = result.scores
        low, high = s["accuracy_interval"]
        majority = max(np.mean(result.labels), 1 - np.mean(result.labels))
        print(f"{result.path}: {len(result.labels):,} sentences; accuracy {s['accuracy']:.3f} (95% bootstrap "
              f"interval over the sentences {low:.3f}-{high:.3f}), macro-F1 {s['macro_f1']:.3f}, MCC {s['mcc']:.3f} "
              f"(the majority class alone: accuracy {majority:.3f})")
        out = Path(args.out or "predictions.tsv")
        write_atomic(out, predictions_tsv(result.sentences, result.labels, result.probabilities))
        print(f"wrote {out}")
    if args.text:
        probabilities = predict_sentences(args.checkpoint, args.text, args.device)
        for sentence, p in zip(args.text, probabilities):
            label = int(p.argmax())
            print(f"{LABEL_NAMES[label]}\t{p[label]:.3f}\t{sentence}")
    return 0


__all__ = ["FileScores", "LABEL_NAMES", "evaluate_command", "predict_sentences", "predictions_tsv", "score_file"]

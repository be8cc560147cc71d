"""`bertcourse evaluate`: a saved classifier scored on a labelled file, or on sentences given on the command line.

One small classifier is trained once for the module (cpu-quick, a probe on a fresh encoder, a few steps:
seconds). Scoring SST-2 validation through `evaluate` must give back exactly the run's own metrics and
predictions: the command encodes sentences as training did. A malformed file is a one-line error that
names the file and the row, with exit status 2 and no traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertcourse.cli import main
from bertcourse.data import DataError, read_labelled_file
from bertcourse.training.evaluate import predict_sentences, score_file

SENTENCES = ["a fine , moving film", "a dull , lifeless mess", "the cast is wonderful", "nothing works here"]
LABELS = [1, 0, 1, 0]


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, data_dir) -> Path:
    from bertcourse.training.finetune import FinetuneOptions, finetune

    folder = tmp_path_factory.mktemp("evaluate") / "run"
    finetune(FinetuneOptions(arch="bert", regime="probe", init="scratch", profile="cpu-quick", out_dir=folder,
                             pretrained=folder.parent / "no-checkpoint", data_dir=data_dir, max_steps=5,
                             progress=False))
    return folder


def _write(path: Path, sentences=SENTENCES, labels=LABELS) -> Path:
    if path.suffix == ".tsv":
        path.write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in zip(sentences, labels)))
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps({"sentence": s, "label": y}) + "\n" for s, y in zip(sentences, labels)))
    else:
        import pandas as pd

        pd.DataFrame({"sentence": sentences, "label": labels}).to_parquet(path)
    return path


def test_scoring_sst2_validation_gives_back_the_runs_own_metrics_and_predictions(classifier, data_dir):
    saved = json.loads((classifier / "metrics.json").read_text())
    result = score_file(classifier, data_dir / "sst2" / "validation.tsv")
    run_predictions = np.loadtxt(classifier / "predictions.tsv", delimiter="\t", skiprows=1, usecols=(2,),
                                 dtype=int, comments=None)
    assert result.predictions == run_predictions.tolist()
    for name in ("accuracy", "accuracy_interval", "macro_f1", "mcc"):
        assert result.scores[name] == pytest.approx(saved[name]), name


@pytest.mark.parametrize("suffix", [".tsv", ".jsonl", ".parquet"])
def test_evaluate_scores_a_labelled_file_and_writes_its_predictions(classifier, tmp_path, capsys, suffix):
    from bertcourse import metrics

    data = _write(tmp_path / f"mine{suffix}")
    out = tmp_path / "predictions.tsv"
    assert main(["evaluate", str(classifier), "--data", str(data), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    probabilities = predict_sentences(classifier, SENTENCES)
    predicted = probabilities.argmax(1).tolist()
    accuracy = metrics.accuracy(LABELS, predicted)
    assert f"4 sentences; accuracy {accuracy:.3f} (95% bootstrap interval" in printed
    assert f"MCC {metrics.matthews_corrcoef(LABELS, predicted):.3f}" in printed and f"wrote {out}" in printed
    lines = out.read_text().splitlines()
    assert lines[0] == "index\tlabel\tprediction\tp_positive\tsentence"
    rows = [line.split("\t") for line in lines[1:]]
    assert [r[4] for r in rows] == SENTENCES and [int(r[1]) for r in rows] == LABELS
    assert [int(r[2]) for r in rows] == predicted
    assert [float(r[3]) for r in rows] == pytest.approx(probabilities[:, 1].tolist(), abs=1e-6)


@pytest.mark.parametrize(("content", "where", "what"), [
    ("sentence\tlabel\na fine film\t1\nbad\tpos\n", ":3", "label 'pos' is not 0 or 1"),
    ("sentence\tlabel\na fine film\t1\n\t0\n", ":3", "empty sentence"),
    ("text\tlabel\na fine film\t1\n", "", "missing column sentence"),
    ("sentence\tlabel\na fine film\t1\ntoo\tmany\tfields\n", "", "cannot be read as TSV"),
    ("sentence\tlabel\n", "", "no rows"),
])
def test_a_malformed_file_is_one_line_naming_the_file_and_row(classifier, tmp_path, capsys, content, where, what):
    bad = tmp_path / "bad.tsv"
    bad.write_text(content)
    assert main(["evaluate", str(classifier), "--data", str(bad), "--out", str(tmp_path / "p.tsv")]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"bertcourse: error: {bad}{where}") and what in captured.err
    assert "Traceback" not in captured.err and len(captured.err.strip().splitlines()) == 1
    assert not (tmp_path / "p.tsv").exists()


def test_a_bad_jsonl_row_is_named_by_its_line(tmp_path):
    bad = _write(tmp_path / "bad.jsonl", ["fine", "awful", "meh"], [1, 0, 2])
    with pytest.raises(DataError, match=f"{bad}:3: label '2' is not 0 or 1"):
        read_labelled_file(bad)


def test_unknown_or_missing_files_are_refused(tmp_path):
    with pytest.raises(DataError, match="unknown file type '.csv'"):
        read_labelled_file(tmp_path / "reviews.csv")
    with pytest.raises(DataError, match=f"{tmp_path / 'absent.tsv'}: no such file"):
        read_labelled_file(tmp_path / "absent.tsv")


def test_evaluate_text_prints_label_and_probability_per_sentence(classifier, capsys):
    assert main(["evaluate", str(classifier), "--text", SENTENCES[0], "--text", SENTENCES[1]]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    probabilities = predict_sentences(classifier, SENTENCES[:2])
    assert len(lines) == 2
    for line, sentence, p in zip(lines, SENTENCES[:2], probabilities):
        label, probability, text = line.split("\t")
        assert text == sentence and label == ("negative", "positive")[int(p.argmax())]
        assert float(probability) == pytest.approx(p.max(), abs=1e-3) and float(probability) >= 0.5


def test_evaluate_without_data_or_text_and_with_a_non_classifier_fails_cleanly(classifier, tmp_path, capsys):
    assert main(["evaluate", str(classifier)]) == 2
    assert "give --data FILE" in capsys.readouterr().err
    (tmp_path / "model.pt").write_bytes(b"not a model")
    assert main(["evaluate", str(tmp_path), "--text", "fine"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "model.pt") in err and "Traceback" not in err

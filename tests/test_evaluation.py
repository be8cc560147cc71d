"""bertcourse.evaluation (lesson 5's baseline, slices, contamination audit, choice extraction) and lesson 5
itself: its printed conclusions follow its own measurements."""

import math
import re
import tomllib

import numpy as np
import pytest
from lesson_support import ROOT, executed_lesson, printed_text

from bertcourse import evaluation
from bertcourse.evaluation import EvaluationError

LESSON = "lessons/05_evaluation_design.ipynb"


# ----------------------------------------------------------------------------- the baseline

TOY_TRAIN = [
    ("a wonderful moving film", 1), ("truly wonderful acting", 1), ("a charming clever story", 1),
    ("clever and charming", 1), ("moving and wonderful", 1), ("a dull boring film", 0),
    ("truly boring acting", 0), ("a tedious dull story", 0), ("tedious and dull", 0), ("boring and tedious", 0),
    ("not good at all", 0), ("not good , not funny", 0), ("good fun", 1), ("funny and good", 1),
]


def _toy():
    return [s for s, _ in TOY_TRAIN], [y for _, y in TOY_TRAIN]


def test_baseline_learns_sentiment_words_and_bigrams_see_negation():
    sentences, labels = _toy()
    unigram = evaluation.fit_tfidf_baseline(sentences, labels)
    assert unigram.predict(["wonderful and charming", "dull and tedious"]).tolist() == [1, 0]
    bigram = evaluation.fit_tfidf_baseline(sentences, labels, ngram_range=(1, 2))
    assert "not good" in bigram[0].vocabulary_ and "not good" not in unigram[0].vocabulary_


def test_baseline_subsample_is_seeded_and_refuses_bad_settings():
    sentences, labels = _toy()
    vocab = {seed: set(evaluation.fit_tfidf_baseline(sentences, labels, subsample=8, seed=seed)[0].vocabulary_)
             for seed in (0, 0, 1, 2, 3)}
    again = set(evaluation.fit_tfidf_baseline(sentences, labels, subsample=8, seed=0)[0].vocabulary_)
    assert vocab[0] == again and len({frozenset(v) for v in vocab.values()}) > 1
    with pytest.raises(EvaluationError, match="lengths differ"):
        evaluation.fit_tfidf_baseline(sentences, labels[:-1])
    with pytest.raises(EvaluationError, match="subsample"):
        evaluation.fit_tfidf_baseline(sentences, labels, subsample=len(sentences) + 1)
    with pytest.raises(EvaluationError, match="ngram_range"):
        evaluation.fit_tfidf_baseline(sentences, labels, ngram_range=(2, 1))
    with pytest.raises(EvaluationError, match="single class"):
        evaluation.fit_tfidf_baseline(sentences[:5], labels[:5])


def test_helpers_leave_numpy_global_random_state_alone():
    sentences, labels = _toy()
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    evaluation.fit_tfidf_baseline(sentences, labels, subsample=10, seed=4)
    evaluation.outcome_examples(sentences, labels, [1] * len(labels), seed=3)
    evaluation.minority_subsample(labels, 0, 0.2, seed=5)
    assert (np.random.get_state()[1] == before).all()


def test_seed_spread_gives_one_score_per_seed_and_reproduces():
    sentences, labels = _toy()
    test = ["wonderful", "boring", "charming story", "tedious film", "not good", "good"]
    truth = [1, 0, 1, 0, 0, 1]
    first = evaluation.seed_spread(sentences, labels, test, truth, seeds=range(6), subsample=8, progress=False)
    second = evaluation.seed_spread(sentences, labels, test, truth, seeds=range(6), subsample=8, progress=False)
    assert first == second and len(first) == 6 and all(0 <= s <= 1 for s in first)


@pytest.mark.slow
def test_baseline_on_real_sst2_far_above_the_majority_class(data_dir):
    from bertcourse.data import column, load_sst2
    from bertcourse.metrics import accuracy

    train, validation = load_sst2("train", data_dir=data_dir), load_sst2("validation", data_dir=data_dir)
    model = evaluation.fit_tfidf_baseline(column(train, "sentence"), column(train, "label"))
    truth = column(validation, "label")
    score = accuracy(truth, model.predict(column(validation, "sentence")).tolist())
    assert 0.78 < score < 0.88, score  # published TF-IDF/BoW SST-2 baselines sit around 0.8


def test_scikit_learn_is_a_runtime_dependency():
    """The lesson and bertcourse.evaluation import it, and a student's (or Colab's) install has no dev extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(re.match(r"scikit-learn\s*>=", r) for r in project["dependencies"])
    assert not any(r.startswith("scikit-learn") for extra in project["optional-dependencies"].values() for r in extra)


# ----------------------------------------------------------------------------- slices and examples


@pytest.mark.parametrize("sentence, expected", [
    ("it does n't work .", True), ("it doesn't work", True), ("Not bad.", True), ("never again", True),
    ("a film without charm", True), ("a knotty , nonsense film", False), ("nothing", True),
    ("an annotated note on knots", False), ("it ca n't", True),
])
def test_has_negation(sentence, expected):
    assert evaluation.has_negation(sentence) is expected


def test_length_slice_buckets_and_errors():
    assert [evaluation.length_slice(" ".join("w" * n), (10, 20)) for n in (1, 10, 11, 20, 21)] == [
        "1-10 words", "1-10 words", "11-20 words", "11-20 words", "21+ words"]
    with pytest.raises(EvaluationError, match="edges"):
        evaluation.length_slice("a b", (20, 10))


def test_slice_scores_are_accuracies_per_group_in_first_seen_order():
    truth = [1, 0, 1, 1, 0, 0]
    predictions = {"a": [1, 0, 0, 1, 1, 0], "b": [1, 1, 1, 1, 0, 0]}
    groups = ["x", "y", "x", "y", "x", "y"]
    rows = evaluation.slice_scores(truth, predictions, groups)
    assert [(r.name, r.size) for r in rows] == [("x", 3), ("y", 3)]
    assert rows[0].accuracy == pytest.approx({"a": 1 / 3, "b": 1.0})
    assert rows[1].accuracy == pytest.approx({"a": 1.0, "b": 2 / 3})
    with pytest.raises(EvaluationError, match="predictions\\['b'\\]"):
        evaluation.slice_scores(truth, {"a": predictions["a"], "b": [1]}, groups)


def test_outcome_examples_are_of_the_outcome_they_are_filed_under():
    rng = np.random.default_rng(0)
    truth, pred = rng.integers(0, 2, 200).tolist(), rng.integers(0, 2, 200).tolist()
    found = evaluation.outcome_examples([str(i) for i in range(200)], truth, pred, per_outcome=5, seed=1)
    expected = {"true positive": (1, 1), "false positive": (0, 1), "false negative": (1, 0), "true negative": (0, 0)}
    assert set(found) == set(expected)
    for outcome, indices in found.items():
        assert len(indices) == 5 and all((truth[i], pred[i]) == expected[outcome] for i in indices)
    assert found == evaluation.outcome_examples([str(i) for i in range(200)], truth, pred, per_outcome=5, seed=1)
    assert evaluation.outcome_examples(["a", "b"], [1, 1], [1, 1])["false negative"] == []


def test_minority_subsample_reaches_the_share_and_keeps_every_other_example():
    labels = [1] * 900 + [0] * 300
    keep = evaluation.minority_subsample(labels, 0, 0.1, seed=0)
    kept = [labels[i] for i in keep]
    assert kept.count(1) == 900 and kept.count(0) == 100 and len(set(keep)) == len(keep)
    with pytest.raises(EvaluationError, match="only 300"):
        evaluation.minority_subsample(labels, 0, 0.5)


# ----------------------------------------------------------------------------- contamination


def test_word_ngrams_ignore_case_and_punctuation():
    assert evaluation.word_ngrams("The film , the FILM!", 2) == {("the", "film"), ("film", "the")}
    assert evaluation.word_ngrams("too short", 3) == set()


def test_audit_finds_planted_near_duplicates_and_not_unrelated_text():
    queries = [
        "the performances are strong but the script never finds a reason to exist",
        "a gorgeous and deeply felt portrait of a family coming apart at the seams",
        "bad .",
        "a film about nothing in particular that goes on for far too long",
    ]
    reference = [
        "completely unrelated sentence about the weather in paris during the spring",
        "A GORGEOUS and deeply felt portrait of a family coming apart ; at the seams , says the critic",
        "bad",
        "the performances are strong",
    ]
    audit = evaluation.ngram_overlap_audit(queries, reference, n=5, progress=False)
    assert audit.overlap[1] == 1.0 and audit.overlap[0] == 0.0 and audit.overlap[3] == 0.0
    assert math.isnan(audit.overlap[2]) and audit.audited == 3
    assert audit.flagged == [1] and audit.nearest == {1: (1, 1.0)}
    assert audit.exact == {2: 2}


def test_audit_nearest_is_the_single_sentence_holding_most_ngrams():
    query = "one two three four five six seven eight"
    reference = ["one two three four five", "four five six seven eight", "two three four five six seven"]
    audit = evaluation.ngram_overlap_audit([query], reference, n=3, flag_at=0.5, progress=False)
    assert audit.overlap[0] == 1.0
    assert audit.nearest == {0: (2, pytest.approx(4 / 6))}


def test_audit_refuses_bad_input():
    with pytest.raises(EvaluationError, match="queries and reference"):
        evaluation.ngram_overlap_audit([], ["x"], progress=False)
    with pytest.raises(EvaluationError, match="flag_at"):
        evaluation.ngram_overlap_audit(["x"], ["x"], flag_at=0, progress=False)
    with pytest.raises(EvaluationError, match="n must"):
        evaluation.word_ngrams("a b", 0)


# ----------------------------------------------------------------------------- multiple choice


@pytest.mark.parametrize("text, lenient, strict", [
    ("B", "B", "B"), (" C \n", "C", "C"), ("The answer is (B).", "B", None), ("Answer: A", "A", None),
    ("answer is D", "D", None), ("A) positive", "A", None), ("B. negative", "B", None), ("(C)", "C", None),
    ("I would say negative.", None, None), ("the answer is a remake", None, None), ("(A) or (B)", None, None),
    ("A positive review", None, None), ("b", None, None), ("E", None, None),
])
def test_extract_choice(text, lenient, strict):
    assert evaluation.extract_choice(text, "ABCD") == lenient
    assert evaluation.extract_choice(text, "ABCD", strict=True) == strict


def test_extract_choice_refuses_bad_letters():
    for letters in ("", "ab", "AA", "A1"):
        with pytest.raises(EvaluationError, match="letters"):
            evaluation.extract_choice("A", letters)


# ----------------------------------------------------------------------------- the lesson


@pytest.mark.slow
def test_lesson_5_conclusions_follow_its_own_measurements(data_dir, lesson_runs):
    text = printed_text(executed_lesson(LESSON, data_dir, lesson_runs))
    p_boot, p_mc = map(float, re.search(r"paired bootstrap p = ([\d.]+), McNemar p = ([\d.]+)", text).groups())
    verdict = re.search(r"verdict \(p < 0.05 on both tests\?\): (.+)", text).group(1)
    assert verdict.startswith("a difference this large" if max(p_boot, p_mc) < 0.05 else "this difference is within")
    p_slice, = map(float, re.search(r"largest slice gap: .* paired p = ([\d.]+)", text).groups())
    n_slices = int(re.search(r"with (\d+) slices compared", text).group(1))
    assert ("it does" in text.split("Bonferroni")[1].splitlines()[0]) == (p_slice < 0.05 / n_slices)
    assert "the audit finds them: True" in text  # the contamination audit can find what it looks for
    seeds_range, width = map(float, re.search(r"range ([\d.]+); one run's bootstrap interval is ([\d.]+) wide",
                                              text).groups())
    if abs(seeds_range - width) > 0.001:  # the verdict reads the unrounded values
        assert ("this run: the seeds' range is narrower" in text) == (seeds_range < width)
    for point in ("split and preprocessing", "checkpoint and revision", "template and truncation", "search space",
                  "seeds and intervals", "failure cases", "contamination"):
        assert f"[x] {point}:" in text
    loglik = float(re.search(r"option log-likelihood\s+accuracy ([\d.]+)", text).group(1))
    both = float(re.search(r"both orders averaged: accuracy ([\d.]+)", text).group(1))
    assert both == loglik  # two orders cancel the toy's position bias exactly


def test_lesson_5_prose_has_no_measured_numbers():
    """Numbers that depend on the run are printed by code; the markdown only explains."""
    import nbformat

    notebook = nbformat.read(ROOT / LESSON, as_version=4)
    prose = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    assert not re.search(r"\b0\.\d{2,}|\b872\b", prose)  # e.g. an accuracy, or the validation size


def _write_run(folder, labels, predictions, sentences):
    folder.mkdir(parents=True)
    lines = ["index\tlabel\tprediction\tp_positive\tsentence"]
    order = list(range(len(labels)))[::-1]  # written out of order: the loader sorts by index
    lines += [f"{i}\t{labels[i]}\t{predictions[i]}\t0.5\t{sentences[i]}" for i in order]
    (folder / "predictions.tsv").write_text("\n".join(lines) + "\n")


def test_lesson_5_reads_every_seed_of_lesson_4s_runs(tmp_path):
    import json

    from bertcourse.evaluation import load_finetuned_predictions

    labels, sentences = [1, 0, 1], ['a " quoted, review', "not good", "fine"]
    results = tmp_path / "results" / "sst2-cpu"
    results.mkdir(parents=True)
    _write_run(tmp_path / "runs" / "a0", labels, [1, 1, 1], sentences)
    _write_run(tmp_path / "runs" / "a1", labels, [0, 0, 1], sentences)
    rows = [{"name": "majority class"},  # a baseline: no run folders
            {"name": "bert full pretrained", "runs": [{"seed": 0, "folder": "runs/a0"},
                                                      {"seed": 1, "folder": str(tmp_path / "runs" / "a1")}]}]
    (results / "results.json").write_text(json.dumps({"rows": rows}))
    loaded = load_finetuned_predictions(results)
    assert loaded.labels == labels and loaded.sentences == sentences
    assert loaded.rows == {"bert full pretrained": [[1, 1, 1], [0, 0, 1]]}

    (tmp_path / "runs" / "a1" / "predictions.tsv").unlink()
    with pytest.raises(FileNotFoundError, match="a1/predictions.tsv is not there .*seed 1"):
        load_finetuned_predictions(results)
    with pytest.raises(FileNotFoundError, match="results.json is not there"):
        load_finetuned_predictions(tmp_path / "results" / "sst2-gpu")


def test_tiny_classifier_logs_what_it_saw_and_in_which_mode():
    """ex08's checks read a model's log back as data: one ("built",) per model, then a ("forward", dropout on,
    first input column) per forward pass, in order, whatever the caller does with the model."""
    import torch

    log: list = []
    model = evaluation.tiny_classifier(3, 2, dropout=0.5, training=False, log=log)
    x = torch.tensor([[1.5, 0.0, 0.0], [-2.0, 1.0, 1.0]])
    with torch.no_grad():
        model(x)
        model.train()
        model(x[:1])
    assert log == [("built",), ("forward", False, [1.5, -2.0]), ("forward", True, [1.5])]
    assert evaluation.tiny_classifier(3, 2)(x).shape == (2, 2)  # no log, no hook


def test_a_label_curves_predictions_are_read_per_row_at_the_largest_budget(tmp_path):
    import json

    from bertcourse.evaluation import load_curve_predictions

    folders = {}
    for name, predicted in (("a0", [1, 0, 1]), ("a1", [0, 0, 1]), ("b0", [1, 1, 1])):
        folders[name] = tmp_path / name
        folders[name].mkdir()
        lines = "".join(f"{i}\t{p}\n" for i, p in reversed(list(enumerate(predicted))))  # any order on disk
        (folders[name] / "predictions.tsv").write_text("index\tprediction\n" + lines)
    rows = [{"name": "bert pretrained n=100", "budget": 100, "folders": [str(folders["b0"])]},
            {"name": "bert pretrained n=300", "budget": 300, "folders": [str(folders["a0"]), str(folders["a1"])]},
            {"name": "TF-IDF + LR n=300", "budget": 300}]
    (tmp_path / "results.json").write_text(json.dumps({"budgets": [100, 300], "rows": rows}))
    assert load_curve_predictions(tmp_path) == {"bert pretrained n=300": [[1, 0, 1], [0, 0, 1]]}
    assert load_curve_predictions(tmp_path, 100) == {"bert pretrained n=100": [[1, 1, 1]]}
    with pytest.raises(FileNotFoundError, match="no fine-tuning runs at 50 labels"):
        load_curve_predictions(tmp_path, 50)
    with pytest.raises(FileNotFoundError, match="results.json is not there"):
        load_curve_predictions(tmp_path / "elsewhere")

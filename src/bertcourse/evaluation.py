"""What lesson 5 needs to evaluate a classifier honestly, apart from the metrics themselves.

- a TF-IDF + logistic-regression SST-2 baseline (scikit-learn): a strong, seconds-long reference that every
  neural model of the course has to beat, and a source of real predictions to analyse;
- slicing helpers (sentence length, negation) and one accuracy per slice and model, to see *where* two
  models with similar totals differ;
- examples of each outcome (true/false positives/negatives), for reading errors rather than counting them;
- an n-gram overlap audit between an evaluation set and a training or pretraining corpus (contamination,
  near-duplicates);
- a regex that reads a multiple-choice letter out of free text, the way many benchmark harnesses do.

The scores themselves come from `bertcourse.metrics`, written once. Nothing here touches global state:
random draws use their own generators, and nothing imports pyplot.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertcourse.errors import BertcourseError
from bertcourse.metrics import accuracy


class EvaluationError(BertcourseError, ValueError):
    """Inputs the evaluation helpers cannot use (lengths differ, empty sets, bad settings)."""


def _same_length(**named: Sequence) -> int:
    lengths = {name: len(values) for name, values in named.items()}
    if len(set(lengths.values())) > 1:
        raise EvaluationError("lengths differ: " + ", ".join(f"{k} has {v}" for k, v in lengths.items()))
    n = next(iter(lengths.values()))
    if n == 0:
        raise EvaluationError(f"{', '.join(lengths)}: empty input")
    return n


# ----------------------------------------------------------------------------- the TF-IDF baseline


def fit_tfidf_baseline(
    sentences: Sequence[str],
    labels: Sequence[int],
    *,
    ngram_range: tuple[int, int] = (1, 1),
    subsample: int | None = None,
    seed: int = 0,
    C: float = 4.0,
) -> Any:
    """A fitted scikit-learn pipeline: TF-IDF word n-grams, then logistic regression.

    Why this baseline: it trains in seconds on SST-2's 67k phrases and scores far above the majority
    class, so a neural model's number means something only next to it. `subsample` trains on that many
    sentences drawn without replacement with `seed` (a second source of run-to-run variance, next to the
    solver's own seed): the lesson uses it to show a spread of scores from "the same" recipe.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    n = _same_length(sentences=sentences, labels=labels)
    low, high = ngram_range
    if not 1 <= low <= high:
        raise EvaluationError(f"ngram_range must be (low, high) with 1 <= low <= high, got {ngram_range!r}")
    if subsample is not None:
        if not 1 <= subsample <= n:
            raise EvaluationError(f"subsample must lie in 1..{n} (the training set's size), got {subsample}")
        keep = np.random.default_rng(seed).choice(n, size=subsample, replace=False)
        sentences, labels = [sentences[i] for i in keep], [labels[i] for i in keep]
    if len(set(labels)) < 2:
        raise EvaluationError("the training labels hold a single class: a classifier needs two")
    model = make_pipeline(
        TfidfVectorizer(ngram_range=ngram_range, sublinear_tf=True),
        LogisticRegression(C=C, solver="liblinear", random_state=seed),
    )
    return model.fit(list(sentences), list(labels))


def seed_spread(
    train_sentences: Sequence[str],
    train_labels: Sequence[int],
    test_sentences: Sequence[str],
    test_labels: Sequence[int],
    *,
    seeds: Iterable[int],
    subsample: int,
    ngram_range: tuple[int, int] = (1, 1),
    progress: bool = True,
) -> list[float]:
    """Test accuracy of one baseline fit per seed, each on its own random `subsample` of the training set.

    The spread of these numbers is variance from the *training* run (which examples, which seed), which a
    bootstrap over the test set does not see: an honest comparison reports both.
    """
    from bertcourse.progress import progress_bar

    _same_length(test_sentences=test_sentences, test_labels=test_labels)
    seeds = list(seeds)
    scores = []
    for seed in progress_bar(seeds, desc="baseline fits", disable=not progress):
        model = fit_tfidf_baseline(train_sentences, train_labels, ngram_range=ngram_range, subsample=subsample,
                                   seed=seed)
        scores.append(accuracy(list(test_labels), model.predict(list(test_sentences)).tolist()))
    return scores


# ----------------------------------------------------------------------------- slices


# Words that flip or weaken what follows. SST-2 is tokenized, so "doesn't" arrives as "does n't".
NEGATIONS = frozenset({"not", "n't", "no", "never", "nothing", "nobody", "none", "neither", "nor", "nowhere",
                       "without", "cannot", "hardly", "barely"})
_WORDS = re.compile(r"\w+(?:'\w+)?|n't", re.UNICODE)
_EDGE_PUNCTUATION = ".,;:!?\"()[]-`"


def words(sentence: str) -> list[str]:
    """Lower-cased word tokens; keeps SST-2's "n't" as a token of its own."""
    return _WORDS.findall(sentence.lower())


def has_negation(sentence: str) -> bool:
    """True when the sentence holds a negation word (`NEGATIONS`), e.g. "not", "n't", "never"."""
    tokens = sentence.lower().replace("n't", " n't").split()
    return any(token.strip(_EDGE_PUNCTUATION) in NEGATIONS for token in tokens)


def length_slice(sentence: str, edges: Sequence[int] = (10, 20, 30)) -> str:
    """The length bucket of a sentence in whitespace words, e.g. '11-20 words' for edges (10, 20, 30)."""
    if not edges or list(edges) != sorted(set(edges)) or edges[0] < 1:
        raise EvaluationError(f"edges must be increasing positive word counts, got {edges!r}")
    n = len(sentence.split())
    low = 1
    for edge in edges:
        if n <= edge:
            return f"{low}-{edge} words"
        low = edge + 1
    return f"{low}+ words"


@dataclass(frozen=True)
class SliceScore:
    """One slice of an evaluation set: its size and each model's accuracy on it."""

    name: str
    size: int
    accuracy: dict[str, float]


def slice_scores(
    y_true: Sequence[Any], predictions: Mapping[str, Sequence[Any]], groups: Sequence[str]
) -> list[SliceScore]:
    """Accuracy of every model on every slice (`groups[i]` names the slice of example i), in first-seen order.

    Why slices: two models with the same total can fail on different examples; a total averages over
    slices of very different sizes and hides that.
    """
    if not predictions:
        raise EvaluationError("predictions: give at least one model's predictions")
    for name, pred in predictions.items():
        _same_length(y_true=y_true, **{f"predictions[{name!r}]": pred}, groups=groups)
    members: dict[str, list[int]] = defaultdict(list)
    for i, group in enumerate(groups):
        members[group].append(i)
    return [SliceScore(group, len(idx), {name: accuracy([y_true[i] for i in idx], [pred[i] for i in idx])
                                         for name, pred in predictions.items()})
            for group, idx in members.items()]


OUTCOMES = ("true positive", "false positive", "false negative", "true negative")


def outcome_examples(
    sentences: Sequence[str], y_true: Sequence[Any], y_pred: Sequence[Any], *, positive: Any = 1,
    per_outcome: int = 3, seed: int = 0,
) -> dict[str, list[int]]:
    """Up to `per_outcome` example indices for each outcome in `OUTCOMES`, drawn at random with `seed`.

    Random, not the first ones: files are often sorted (by source, length, label), and the first errors
    would then all look alike.
    """
    _same_length(sentences=sentences, y_true=y_true, y_pred=y_pred)
    found: dict[str, list[int]] = {outcome: [] for outcome in OUTCOMES}
    for i, (t, p) in enumerate(zip(y_true, y_pred)):
        outcome = ("true " if t == p else "false ") + ("positive" if p == positive else "negative")
        found[outcome].append(i)
    rng = np.random.default_rng(seed)
    return {outcome: sorted(rng.choice(idx, size=min(per_outcome, len(idx)), replace=False).tolist())
            for outcome, idx in found.items()}


def minority_subsample(labels: Sequence[Any], minority: Any, share: float, *, seed: int = 0) -> list[int]:
    """Indices of a subset in which `minority` makes up `share` of the examples (all others kept).

    Used to turn a balanced evaluation set into imbalanced ones with real sentences, to watch how each
    metric reacts to the same classifier as the minority class shrinks.
    """
    if not 0 < share < 1:
        raise EvaluationError(f"share must lie strictly between 0 and 1, got {share!r}")
    minority_idx = [i for i, label in enumerate(labels) if label == minority]
    other_idx = [i for i, label in enumerate(labels) if label != minority]
    if not minority_idx or not other_idx:
        raise EvaluationError(f"labels need both the minority class {minority!r} and another class")
    wanted = round(share * len(other_idx) / (1 - share))
    if wanted > len(minority_idx):
        raise EvaluationError(f"share {share} needs {wanted} examples of {minority!r}, only {len(minority_idx)} exist")
    keep = np.random.default_rng(seed).choice(minority_idx, size=max(wanted, 1), replace=False).tolist()
    return sorted(keep + other_idx)


# ----------------------------------------------------------------------------- contamination


def word_ngrams(sentence: str, n: int) -> set[tuple[str, ...]]:
    """The set of word n-grams of a sentence, lower-cased with punctuation dropped (as contamination
    audits do: "film ," and "film." should not count as different text)."""
    if n < 1:
        raise EvaluationError(f"n must be a positive number of words, got {n}")
    tokens = [t for t in words(sentence) if any(ch.isalnum() for ch in t)]
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


def _normalised(sentence: str) -> str:
    return " ".join(t for t in words(sentence) if any(ch.isalnum() for ch in t))


@dataclass
class OverlapAudit:
    """What an n-gram audit of `queries` against a reference corpus found.

    overlap[i]: the share of query i's n-grams that occur anywhere in the reference (NaN when the query is
    shorter than n words); exact: query index -> index of a reference sentence with the same normalised
    text (lower-cased, punctuation dropped), for the queries that have one;
    nearest: for each query whose overlap reaches `flag_at`, (reference index, share of the query's
    n-grams that this one reference sentence holds), the best such sentence.
    """

    n: int
    flag_at: float
    overlap: np.ndarray
    exact: dict[int, int]
    nearest: dict[int, tuple[int, float]] = field(default_factory=dict)

    @property
    def audited(self) -> int:
        """Queries long enough to have an n-gram."""
        return int(np.sum(~np.isnan(self.overlap)))

    @property
    def flagged(self) -> list[int]:
        """Queries whose n-gram overlap with the reference reaches `flag_at`."""
        return [int(i) for i in np.flatnonzero(np.nan_to_num(self.overlap, nan=-1.0) >= self.flag_at)]


def ngram_overlap_audit(
    queries: Sequence[str], reference: Sequence[str], *, n: int = 8, flag_at: float = 0.5, progress: bool = True
) -> OverlapAudit:
    """Audit `queries` (an evaluation set) for n-grams shared with `reference` (training or pretraining text).

    A long shared n-gram is strong evidence that text was copied (GPT-3's audit used 13 words; 8 suits
    short SST-2 sentences). A high overlap is not proof of a leaked label, and a zero overlap is not proof
    of no leak (paraphrases, other tokenisations): the audit gives candidates to read, with the nearest
    reference sentence for each.
    """
    from bertcourse.progress import progress_bar

    if not queries or not reference:
        raise EvaluationError("queries and reference must both hold sentences")
    if not 0 < flag_at <= 1:
        raise EvaluationError(f"flag_at must lie in (0, 1], got {flag_at!r}")
    query_grams = [word_ngrams(q, n) for q in queries]
    wanted = set().union(*query_grams)  # only n-grams some query holds need remembering
    seen: set[tuple[str, ...]] = set()
    whole = {_normalised(q) for q in queries}
    first_copy: dict[str, int] = {}
    for r, sentence in enumerate(progress_bar(reference, desc=f"{n}-gram audit", disable=not progress)):
        seen.update(wanted.intersection(word_ngrams(sentence, n)))
        text = _normalised(sentence)
        if text in whole:
            first_copy.setdefault(text, r)
    overlap = np.array([len(g & seen) / len(g) if g else math.nan for g in query_grams])
    exact = {i: first_copy[text] for i, q in enumerate(queries) if (text := _normalised(q)) in first_copy}
    audit = OverlapAudit(n, flag_at, overlap, exact)
    flagged = audit.flagged
    if flagged:  # a second pass, only for the flagged queries: which single reference sentence is closest
        owners: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for i in flagged:
            for gram in query_grams[i]:
                owners[gram].append(i)
        best: dict[int, tuple[int, float]] = {}
        for r, sentence in enumerate(reference):
            shared = Counter(i for gram in word_ngrams(sentence, n) if gram in owners for i in owners[gram])
            for i, count in shared.items():
                score = count / len(query_grams[i])
                if score > best.get(i, (-1, -1.0))[1]:
                    best[i] = (r, score)
        audit.nearest = best
    return audit


# ----------------------------------------------------------------------------- multiple choice

# Keywords in any case, letters in capitals only: with a lower-case "a" allowed, "the answer is a remake"
# would read as option A.
_LENIENT = (r"(?i:answer|option|choice)\s*(?:is|:)?\s*\(?({letters})\b\)?"
            r"|\(({letters})\)|^\s*({letters})(?:\s*[).:]|\s*$)")


def extract_choice(text: str, letters: str = "ABCD", *, strict: bool = False) -> str | None:
    """The option letter a model's free-text answer names, or None when no rule finds exactly one.

    strict: the whole answer must be the letter (what a harness expecting "B" sees). Otherwise the
    lenient rules look for "answer is B", "Answer: (B)", "(B)", or a line starting with "B)", "B." or "B:"
    or holding only "B" (capital letters; the words in any case), and an answer naming two different
    letters is None rather than a guess. Harnesses differ in such rules, which is one reason the same
    model gets different scores on "the same" benchmark.
    """
    if not letters or not letters.isalpha() or not letters.isupper() or len(set(letters)) != len(letters):
        raise EvaluationError(f"letters must be distinct capital letters, got {letters!r}")
    alternatives = "|".join(letters)
    if strict:
        match = re.fullmatch(rf"\s*({alternatives})\s*", text)
        return match.group(1) if match else None
    found = {group for match in re.finditer(_LENIENT.format(letters=alternatives), text, flags=re.MULTILINE)
             for group in match.groups() if group}
    return found.pop() if len(found) == 1 else None


# ----------------------------------------------------------------------------- lesson 4's fine-tuned models


@dataclass
class FinetunedPredictions:
    """What `bertcourse compare` left for lesson 5: the validation labels and, per table row ("bert full
    pretrained", ...), every seed's prediction for every validation sentence, in validation order."""

    labels: list[int]
    sentences: list[str]
    rows: dict[str, list[list[int]]]


def load_finetuned_predictions(results_dir: str | Path) -> FinetunedPredictions:
    """Read `results_dir`/results.json (`bertcourse compare` writes it under results/sst2-PROFILE/) and the
    `predictions.tsv` of each run it lists. A relative run folder is read from the course root (two folders
    above `results_dir`). Raises FileNotFoundError naming what is missing, so a lesson can fall back."""
    import csv
    import json

    results_dir = Path(results_dir)
    path = results_dir / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is not there: `bertcourse compare --profile PROFILE` writes it")
    results = json.loads(path.read_text())
    labels: list[int] | None = None
    sentences: list[str] = []
    rows: dict[str, list[list[int]]] = {}
    for row in results.get("rows", []):
        if not row.get("runs"):
            continue  # the baselines have no run folders
        seeds = []
        for run in row["runs"]:
            folder = Path(run["folder"])
            folder = folder if folder.is_absolute() else results_dir.parents[1] / folder
            table = folder / "predictions.tsv"
            if not table.is_file():
                raise FileNotFoundError(f"{table} is not there (row {row['name']!r}, seed {run['seed']})")
            with table.open(newline="") as handle:
                records = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
            records.sort(key=lambda r: int(r["index"]))
            truth = [int(r["label"]) for r in records]
            if labels is None:
                labels, sentences = truth, [r["sentence"] for r in records]
            elif truth != labels:
                raise EvaluationError(f"{table}: its labels are not the other runs' (a different validation set?)")
            seeds.append([int(r["prediction"]) for r in records])
        rows[row["name"]] = seeds
    if labels is None:
        raise FileNotFoundError(f"{path} lists no fine-tuning runs")
    return FinetunedPredictions(labels, sentences, rows)


def load_curve_predictions(results_dir: str | Path, budget: int | None = None) -> dict[str, list[list[int]]]:
    """Every seed's validation predictions of each network row of a label curve (`bertcourse labels`, lesson 4's
    `label_curve`) at `budget` labels (default: the largest): {"bert pretrained n=1000": [[0, 1, ...], ...], ...}
    in validation order. Raises FileNotFoundError naming what is missing, so a lesson can fall back."""
    import csv
    import json

    path = Path(results_dir) / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is not there: lesson 4 (or `bertcourse labels`) writes it")
    results = json.loads(path.read_text())
    budget = budget if budget is not None else max(results["budgets"])
    rows: dict[str, list[list[int]]] = {}
    for row in results["rows"]:
        if row["budget"] != budget or not row.get("folders"):
            continue  # other budgets, and TF-IDF (no run folders)
        seeds = []
        for folder in row["folders"]:
            table = Path(folder) / "predictions.tsv"
            if not table.is_file():
                raise FileNotFoundError(f"{table} is not there (row {row['name']!r})")
            with table.open(newline="") as handle:
                records = sorted(csv.DictReader(handle, delimiter="\t"), key=lambda r: int(r["index"]))
            seeds.append([int(r["prediction"]) for r in records])
        rows[row["name"]] = seeds
    if not rows:
        raise FileNotFoundError(f"{path} holds no fine-tuning runs at {budget} labels")
    return rows


# ----------------------------------------------------------------------------- a model small enough for many seeds


def tiny_classifier(n_features: int, n_classes: int, *, hidden: int = 16, dropout: float = 0.0,
                    training: bool = True, init_seed: int | None = None, log: list | None = None) -> Any:
    """A two-layer perceptron (Linear, ReLU, Dropout, Linear) mapping `(batch, n_features)` to logits.

    Why: exercise 8 fine-tunes one model per seed, and its checks do so dozens of times; this one trains in
    milliseconds. Its initial weights come from torch's global generator, like any freshly built model, so
    `torch.manual_seed` right before building it decides them. `training=False` hands it over in eval mode,
    as `from_pretrained` does with a checkpoint. `init_seed` draws the initial weights from a private generator
    instead (the same model whatever the global state: a check can then vary one thing at a time). `log`, a
    list, receives `("built",)` when the model is built and `("forward", dropout on, first input column)` at
    each forward pass: what the model saw, in which order and mode (the checks read it back as data).
    """
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(n_features, hidden), torch.nn.ReLU(), torch.nn.Dropout(dropout),
                                torch.nn.Linear(hidden, n_classes))
    if log is not None:
        log.append(("built",))
        model.register_forward_pre_hook(
            lambda module, args: log.append(("forward", bool(module[2].training),
                                             [float(v) for v in args[0][:, 0].tolist()])))
    if init_seed is not None:
        generator = torch.Generator().manual_seed(init_seed)
        with torch.no_grad():
            for layer in (model[0], model[3]):  # nn.Linear's own bounds, +-1/sqrt(fan_in), drawn privately
                for parameter in (layer.weight, layer.bias):
                    uniform = torch.rand(parameter.shape, generator=generator) * 2 - 1
                    parameter.copy_(uniform / layer.in_features ** 0.5)
    return model.train(training)

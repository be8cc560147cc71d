"""The data layer on the real data, on local TSV/Parquet/JSON Lines copies, and on broken files."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from bertcourse.data import DataError, column, load_corpus, load_sst2, resolve_source


def test_sst2_real_row_and_label_counts(data_dir):
    train = load_sst2("train", data_dir=data_dir)
    validation = load_sst2("validation", data_dir=data_dir)
    assert len(train) == 67349
    assert len(validation) == 872
    assert sum(column(validation, "label")) == 444
    assert set(column(train, "label")) == {0, 1}
    assert train.column_names == ["sentence", "label"]


def test_sst2_keeps_sentences_that_look_like_missing_values(data_dir):
    sentences = column(load_sst2("train", data_dir=data_dir), "sentence")
    assert all(isinstance(s, str) and s.strip() for s in sentences)


def test_corpus_has_enough_real_sentences_and_a_disjoint_heldout_set(corpus):
    assert len(corpus.train) >= 10_000
    assert len(corpus.heldout) == 500
    assert not set(corpus.heldout) & set(corpus.train)
    assert corpus.source.startswith("local folder")
    assert corpus.counts["wikitext2 kept"] > 15_000
    # WikiText's escapes and headings are cleaned, and its <unk> becomes the tokenizer's [UNK].
    assert not any("<unk>" in s or "@-@" in s or s.startswith("= ") for s in corpus.train[:20_000])


def test_corpus_is_the_same_on_every_load(data_dir, corpus):
    again = load_corpus(data_dir=data_dir)
    assert again.heldout == corpus.heldout and again.fingerprint() == corpus.fingerprint()


def _write_copy(folder, data_dir, fmt):
    rows = pd.read_csv(data_dir / "sst2" / "validation.tsv", sep="\t", quoting=3, keep_default_na=False)
    (folder / "sst2").mkdir(parents=True)
    if fmt == "parquet":
        rows.to_parquet(folder / "sst2" / "validation.parquet")
    else:
        with open(folder / "sst2" / "validation.jsonl", "w") as f:
            for record in rows.to_dict("records"):
                f.write(json.dumps(record) + "\n")
    return rows


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_local_parquet_and_jsonl_load_the_same_rows(tmp_path, data_dir, fmt):
    rows = _write_copy(tmp_path, data_dir, fmt)
    loaded = load_sst2("validation", data_dir=tmp_path)
    assert column(loaded, "sentence") == list(rows["sentence"])
    assert column(loaded, "label") == list(rows["label"])


def _tsv(tmp_path, body: str):
    (tmp_path / "sst2").mkdir()
    path = tmp_path / "sst2" / "train.tsv"
    path.write_text(body)
    return path


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("sentence\tlabel\ngood film\t1\nbad film\t2\n", "train.tsv:3: label '2' is not 0 or 1"),
        ("sentence\tlabel\ngood film\tpositive\n", "train.tsv:2: label 'positive' is not 0 or 1"),
        ("sentence\tlabel\ngood film\t1\n\t0\n", "train.tsv:3: empty sentence"),
        ("text\tlabel\ngood film\t1\n", "missing column sentence"),
        ("sentence\tlabel\ngood\t1\nbad\t0\textra\n", "train.tsv: cannot be read as TSV"),
    ],
)
def test_malformed_tsv_errors_name_the_file_and_line(tmp_path, body, expected):
    path = _tsv(tmp_path, body)
    before = path.read_bytes()
    with pytest.raises(DataError) as info:
        load_sst2("train", data_dir=tmp_path)
    assert expected in str(info.value)
    assert path.read_bytes() == before  # a broken file is reported, never rewritten


def test_missing_local_folder_and_file_are_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("BERTCOURSE_DATA", raising=False)
    with pytest.raises(DataError, match="does not exist"):
        load_sst2("train", data_dir=tmp_path / "nowhere")
    (tmp_path / "sst2").mkdir()
    with pytest.raises(DataError, match="looked for train.tsv, train.parquet, train.jsonl"):
        load_sst2("train", data_dir=tmp_path)
    with pytest.raises(DataError, match="--source local needs a folder"):
        resolve_source(None, "local")


def test_synthetic_fallback_only_without_a_named_source_and_with_a_notice(monkeypatch, capsys):
    monkeypatch.delenv("BERTCOURSE_DATA", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_source(None, "auto").kind == "synthetic"
    validation = load_sst2("validation")
    assert len(validation) == 200 and set(column(validation, "label")) == {0, 1}
    assert "SYNTHETIC" in capsys.readouterr().err
    corpus = load_corpus()
    assert corpus.source == "synthetic" and len(corpus.train) >= 10_000
    assert "SYNTHETIC" in capsys.readouterr().err
    # A named source is never replaced by the synthetic sample.
    monkeypatch.setenv("BERTCOURSE_DATA", "/nonexistent/folder")
    with pytest.raises(DataError):
        load_sst2("validation")


def test_hub_rows_go_through_the_same_validation(monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(path, name=None, split=None, **kwargs):
        calls.append((path, name, split))
        return datasets.Dataset.from_dict({"sentence": ["fine", "awful"], "label": [1, 0], "idx": [0, 1]})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    loaded = load_sst2("validation", source="hub")
    assert calls == [("nyu-mll/glue", "sst2", "validation")]
    assert loaded.column_names == ["sentence", "label"]


def test_data_command_reports_statistics_and_fails_cleanly_on_bad_input(data_dir, tmp_path, corpus):
    run = [sys.executable, "-m", "bertcourse.cli", "data", "--profile", "cpu-quick"]
    ok = subprocess.run(run + ["--data-dir", str(data_dir)], capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr
    assert "67,349 rows" in ok.stdout and "positive 444" in ok.stdout
    assert "tokens per sentence" in ok.stdout
    _tsv(tmp_path, "sentence\tlabel\nfine\t7\n")
    bad = subprocess.run(run + ["--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2
    assert "train.tsv:2: label '7' is not 0 or 1" in bad.stderr
    assert "Traceback" not in bad.stderr


# ----------------------------------------------------------------------------- the hub path
#
# Online, the corpus must be the local copy's text: the tokenized `wikitext-2-v1` (rare words as <unk>),
# its validation and test splits only, cut into the local copy's lines. The hub is never reached here:
# `datasets.load_dataset` is replaced and the requests it receives are checked.

# The local copy's lines, and the same text as the hub has it (a heading or a paragraph a row).
_LOCAL_WIKITEXT = {
    "test.txt": [
        "= Robert <unk> = Robert <unk> is an English film , television and theatre actor .",
        "He had a guest @ - @ starring role on the television series The Bill in 2000 .",
        'He said of the play , " I liked it very much . "',
        '" Kiss You " was well received by contemporary music critics in the United States .',
        "= = Career = = = = = 2000 – 2005 = = = In 2000 <unk> had a role in the series The Bill .",
        "The lobsters grow to a length of 0 @ .",
        "@ 7 – 2 @ .",
        "@ 2 metres in their first years of life ( and some even more ) .",
    ],
    "valid.txt": [
        "= Homarus gammarus = Homarus gammarus , known as the European lobster , is a species of lobster .",
        "It is closely related to the American lobster , H. americanus .",
        "= = = Film roles = = = = = = Television roles = = =",
    ],
}
_HUB_WIKITEXT = {
    "test": [
        "", " = Robert <unk> = \n", "",
        " Robert <unk> is an English film , television and theatre actor . He had a guest @-@ starring role on the"
        ' television series The Bill in 2000 . He said of the play , " I liked it very much . " " Kiss You " was'
        " well received by contemporary music critics in the United States . \n",
        "", " = = Career = = \n", "", " = = = 2000 – 2005 = = = \n", "",
        " In 2000 <unk> had a role in the series The Bill . The lobsters grow to a length of 0 @.@ 7 – 2 @.@ 2"
        " metres in their first years of life ( and some even more ) . \n", "",
    ],
    "validation": [
        "", " = Homarus gammarus = \n", "",
        " Homarus gammarus , known as the European lobster , is a species of lobster . It is closely related to the"
        " American lobster , H. americanus . \n",
        "", " = = = Film roles = = = \n", "", " = = = Television roles = = = \n",
    ],
}
_SST2_ROWS = [("a gorgeous , witty , seductive movie .", 1), ("the plot is nothing but boilerplate clichés", 0),
              ("it 's a charming and often affecting journey .", 1)]


def _local_folder(folder):
    (folder / "wikitext2").mkdir(parents=True)
    for name, lines in _LOCAL_WIKITEXT.items():
        (folder / "wikitext2" / name).write_text("\n".join(lines) + "\n")
    (folder / "sst2").mkdir()
    (folder / "sst2" / "train.tsv").write_text(
        "sentence\tlabel\n" + "".join(f"{sentence}\t{label}\n" for sentence, label in _SST2_ROWS))


def test_hub_path_asks_for_the_local_copys_text_and_builds_the_same_corpus(tmp_path, monkeypatch):
    import dataclasses

    import datasets

    from bertcourse.course import load_course

    real_load_dataset, requests = datasets.load_dataset, []

    def fake_load_dataset(path, name=None, **kwargs):
        if path in ("csv", "parquet", "json"):  # the local folder's files
            return real_load_dataset(path, name, **kwargs)
        requests.append((path, name, kwargs))
        if path == "Salesforce/wikitext":
            return datasets.Dataset.from_dict({"text": _HUB_WIKITEXT[kwargs["split"]]})
        assert (path, name, kwargs) == ("nyu-mll/glue", "sst2", {"split": "train"})
        return datasets.Dataset.from_dict({"sentence": [s for s, _ in _SST2_ROWS], "label": [y for _, y in _SST2_ROWS],
                                           "idx": list(range(len(_SST2_ROWS)))})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    course = load_course()
    course = dataclasses.replace(course, corpus=dataclasses.replace(course.corpus, heldout_sentences=3))
    _local_folder(tmp_path)
    local = load_corpus(course, data_dir=tmp_path, source="local")
    assert requests == []
    online = load_corpus(course, source="hub")
    assert requests == [
        ("Salesforce/wikitext", "wikitext-2-v1", {"split": "test"}),  # the local copy's files, in its order
        ("Salesforce/wikitext", "wikitext-2-v1", {"split": "validation"}),
        ("nyu-mll/glue", "sst2", {"split": "train"}),
    ]
    assert (online.train, online.heldout, online.counts) == (local.train, local.heldout, local.counts)
    assert online.source == "hub" and any("[UNK]" in s for s in online.train)


def test_course_yml_names_the_tokenized_wikitext():
    from bertcourse.course import load_course

    hub = load_course().datasets["wikitext2"].hub
    assert (hub.path, hub.name) == ("Salesforce/wikitext", "wikitext-2-v1")  # not -raw-: <unk> as locally


def _as_hub_rows(lines):
    """The local copy's lines joined back into hub rows: headings on rows of their own, sentences of a
    paragraph on one row, escapes written "@-@" as the hub writes them."""
    import re

    from bertcourse.data import _HEADING, _sentences

    rows, paragraph = [], []

    def flush():
        if paragraph:
            rows.extend(["", " " + " ".join(paragraph) + " \n"])
            paragraph.clear()

    for line in lines:
        headings = []
        while (heading := _HEADING.match(line)) is not None:
            headings.append(line[: heading.end()].strip())
            line = line[heading.end():]
        if headings:
            flush()
            rows.extend(part for text in headings for part in ("", f" {text} \n"))
        if paragraph and len(_sentences(paragraph[-1] + " next")) != 2:  # the line before ends no sentence
            flush()
        if line:
            paragraph.append(line)
    flush()
    return [re.sub(r"@ ([-.,]) @", r"@\1@", row) for row in rows]


@pytest.mark.parametrize("name", ["test.txt", "valid.txt"])
def test_hub_rows_of_the_real_local_copy_give_back_its_lines(data_dir, name):
    from bertcourse.data import hub_rows_as_lines

    lines = (data_dir / "wikitext2" / name).read_text(encoding="utf-8").splitlines()
    rows = _as_hub_rows(lines)
    assert len(rows) < len(lines) / 2  # sentences really were joined into paragraphs
    assert hub_rows_as_lines(rows) == lines

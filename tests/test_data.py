"""The data layer on the real data, on local TSV/Parquet/JSON Lines copies, and on broken files."""

import json
from types import SimpleNamespace

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


def test_data_command_reports_statistics_and_fails_cleanly_on_bad_input(data_dir, tmp_path, corpus, capsys):
    from cli_support import cli_in_this_process

    run = ["data", "--profile", "cpu-quick"]
    ok = cli_in_this_process(run + ["--data-dir", str(data_dir)], capsys)
    assert ok.returncode == 0, ok.stderr
    assert "67,349 rows" in ok.stdout and "positive 444" in ok.stdout
    assert "tokens per sentence" in ok.stdout
    _tsv(tmp_path, "sentence\tlabel\nfine\t7\n")
    bad = cli_in_this_process(run + ["--data-dir", str(tmp_path)], capsys)
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


# ----------------------------------------------------------------------------- WikiText-103 (the gpu profile)
#
# The gpu profile adds WikiText-103's train split (course.yml profiles.gpu.corpus). Its three ways in are
# checked on a few rows: the hub (load_dataset replaced), a local wikitext103/ folder in either layout, and
# neither (the smaller corpus, with a notice). The held-out sentences are WikiText-2's on every profile.

_HUB_WIKITEXT103_TRAIN = [
    "", " = Valkyria Chronicles III = \n", "",
    " Senjō no Valkyria 3 : <unk> Chronicles is a tactical role @-@ playing video game developed by Sega . The game"
    " began development in 2010 , carrying over a large portion of the work done on Valkyria Chronicles II . \n",
    "", " = = Gameplay = = \n", "",
    " As with previous games , the player takes control of a squad of 1 @,@ 200 soldiers . Too short . \n", "",
]


def _wikitext103_rows(heldout: list[str]) -> list[str]:
    """The rows above plus a paragraph that repeats a held-out WikiText-2 sentence (it must not be trained on)."""
    planted = next(s for s in heldout if "@" not in s and sum(s.count(end) for end in ".!?") == 1)
    return _HUB_WIKITEXT103_TRAIN + [f" {planted} \n", ""]


def _gpu_course(heldout_sentences: int = 3):
    import dataclasses

    from bertcourse.course import load_course

    course = load_course()
    return dataclasses.replace(course, corpus=dataclasses.replace(course.corpus, heldout_sentences=heldout_sentences))


@pytest.fixture
def fake_hub(monkeypatch):
    """`datasets.load_dataset` answering for WikiText-2, WikiText-103 train and SST-2 train from the rows above;
    `requests` records what was asked of the hub, `wikitext103` is what it answers for WikiText-103."""
    import datasets

    real_load_dataset = datasets.load_dataset
    hub = SimpleNamespace(requests=[], wikitext103=None)

    def fake_load_dataset(path, name=None, **kwargs):
        if path in ("csv", "parquet", "json"):  # the local folder's files
            return real_load_dataset(path, name, **kwargs)
        hub.requests.append((path, name, kwargs))
        if (path, name) == ("Salesforce/wikitext", "wikitext-103-v1"):
            if isinstance(hub.wikitext103, Exception):
                raise hub.wikitext103
            return datasets.Dataset.from_dict({"text": hub.wikitext103})
        if path == "Salesforce/wikitext":
            return datasets.Dataset.from_dict({"text": _HUB_WIKITEXT[kwargs["split"]]})
        return datasets.Dataset.from_dict({"sentence": [s for s, _ in _SST2_ROWS], "label": [y for _, y in _SST2_ROWS],
                                           "idx": list(range(len(_SST2_ROWS)))})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    return hub


def test_wikitext103_from_the_hub_and_from_a_local_folder_in_either_layout_give_one_corpus(tmp_path, fake_hub):
    from bertcourse.data import hub_rows_as_lines

    course = _gpu_course()
    _local_folder(tmp_path)
    smaller = load_corpus(course, data_dir=tmp_path, source="local")  # the top-level corpus: WikiText-2 + SST-2
    fake_hub.wikitext103 = rows = _wikitext103_rows(smaller.heldout)
    online = load_corpus(course, source="hub", profile="gpu")
    assert ("Salesforce/wikitext", "wikitext-103-v1", {"split": "train"}) in fake_hub.requests
    assert [r for r in fake_hub.requests if r[1] == "wikitext-103-v1"] == [  # its train split only
        ("Salesforce/wikitext", "wikitext-103-v1", {"split": "train"})]
    assert online.heldout == smaller.heldout and not set(online.heldout) & set(online.train)
    added = online.train[len(smaller.train) - 3 :][:-3]  # after WikiText-2's sentences, before SST-2's three
    assert added == [
        "Senjō no Valkyria 3 : [UNK] Chronicles is a tactical role-playing video game developed by Sega .",
        "The game began development in 2010 , carrying over a large portion of the work done on Valkyria Chronicles"
        " II .",
        "As with previous games , the player takes control of a squad of 1,200 soldiers .",
    ]
    assert online.train == smaller.train[: len(smaller.train) - 3] + added + smaller.train[-3:]  # SST-2 stays last
    assert online.counts["wikitext103 kept"] == 4 and online.counts["wikitext103 shorter than 4 words"] == 1
    assert online.counts["wikitext103 equal to a held-out sentence, dropped"] == 1
    assert online.missing == [] and online.source == "hub"

    folder = tmp_path / "wikitext103"
    folder.mkdir()
    (folder / "wiki.train.tokens").write_text("\n".join(row.rstrip("\n") for row in rows) + "\n")
    from_release = load_corpus(course, data_dir=tmp_path, source="local", profile="gpu")
    (folder / "wiki.train.tokens").unlink()
    (folder / "train.txt").write_text("\n".join(hub_rows_as_lines(rows)) + "\n")  # one sentence a line
    from_lines = load_corpus(course, data_dir=tmp_path, source="local", profile="gpu")
    for local in (from_release, from_lines):
        assert (local.train, local.heldout, local.counts) == (online.train, online.heldout, online.counts)
        assert local.source == f"local folder {tmp_path}"


def test_without_wikitext103_the_gpu_profile_falls_back_with_a_notice(tmp_path, fake_hub, capsys, monkeypatch):
    from bertcourse.training.pretrain import repeats_notice

    course = _gpu_course()
    _local_folder(tmp_path)
    smaller = load_corpus(course, data_dir=tmp_path)
    capsys.readouterr()
    fallback = load_corpus(course, data_dir=tmp_path, profile="gpu")  # the hub is off (HF_HUB_OFFLINE, conftest)
    assert (fallback.train, fallback.heldout, fallback.missing) == (smaller.train, smaller.heldout, ["wikitext103"])
    notice = capsys.readouterr().err
    steps = course.profile("gpu").pretrain.max_steps
    for part in ("NOTICE: WikiText-103 was not found", f"no folder {tmp_path / 'wikitext103'}",
                 "the hub was not tried: HF_HUB_OFFLINE", "falls back to the smaller corpus (wikitext2 + sst2)",
                 f"A run of the gpu profile ({steps:,} steps of 128 blocks) will mostly repeat that corpus",
                 "wikitext103/wiki.train.tokens", "wikitext103/train.txt"):
        assert part in notice
    assert fake_hub.requests == []
    assert "SYNTHETIC" not in notice
    assert repeats_notice(fallback, 11_024, 55_000, 128) == (
        "NOTICE: without wikitext103 (not found, see above), these 55,000 steps of 128 blocks are 639 passes over "
        "the 11,024 blocks packed from the smaller corpus: the run mostly repeats it")
    assert repeats_notice(smaller, 11_024, 55_000, 128) == ""  # nothing missing
    assert repeats_notice(fallback, 11_024, 100, 128) == ""  # a short try, ~1 pass: nothing repeated to speak of

    import bertcourse.data  # online but the hub fails: the same fallback, saying why
    monkeypatch.setattr(bertcourse.data, "_hub_reachable", lambda timeout=3.0: (True, ""))
    fake_hub.wikitext103 = ConnectionError("reset by peer")
    assert load_corpus(course, data_dir=tmp_path, profile="gpu").missing == ["wikitext103"]
    hub = "hub Salesforce/wikitext/wikitext-103-v1[train]"
    assert f"{hub} failed: ConnectionError: reset by peer" in capsys.readouterr().err
    fake_hub.wikitext103 = _wikitext103_rows(smaller.heldout)  # online and the hub has it: the folder's gap filled
    mixed = load_corpus(course, data_dir=tmp_path, profile="gpu")
    assert mixed.missing == [] and mixed.counts["wikitext103 kept"] == 4
    assert mixed.source == f"local folder {tmp_path} (wikitext103 from the {hub})"


def test_a_named_source_without_wikitext103_or_a_broken_copy_is_an_error_naming_the_file(tmp_path, fake_hub):
    course = _gpu_course()
    _local_folder(tmp_path)
    folder = tmp_path / "wikitext103"
    with pytest.raises(DataError, match=f"no WikiText-103 in {folder} \\(--source local\\)"):
        load_corpus(course, data_dir=tmp_path, source="local", profile="gpu")
    folder.mkdir()
    (folder / "wiki.valid.tokens").write_text(" = Homarus gammarus = \n")
    with pytest.raises(DataError, match="holds no WikiText-103 train split: looked for wiki.train.tokens or "
                                        "train.txt \\(found: wiki.valid.tokens\\)"):
        load_corpus(course, data_dir=tmp_path, profile="gpu")  # not only with --source local
    (folder / "train.txt").write_bytes(b"The game began development in 2010 .\nIt was \xff released in Japan .\n")
    with pytest.raises(DataError, match=f"{folder / 'train.txt'}:2: not UTF-8 text"):
        load_corpus(course, data_dir=tmp_path, profile="gpu")
    (folder / "train.txt").write_text("Too short .\n= = Gameplay = =\n\n")
    with pytest.raises(DataError, match=f"{folder / 'train.txt'}: no WikiText-103 sentence of 4 words or more"):
        load_corpus(course, data_dir=tmp_path, profile="gpu")
    fake_hub.wikitext103 = ConnectionError("reset by peer")
    with pytest.raises(DataError, match="could not load WikiText-103 from the hub Salesforce/wikitext/"
                                        "wikitext-103-v1\\[train\\]: reset by peer"):
        load_corpus(course, source="hub", profile="gpu")


def test_heldout_sentences_are_the_same_on_every_profile_and_never_trained_on(data_dir, tmp_path, corpus, capsys):
    """On the real data, with a small WikiText-103 copy beside it that repeats a held-out sentence."""
    from bertcourse.course import load_course

    for name in ("sst2", "wikitext2"):
        (tmp_path / name).symlink_to(data_dir / name)
    (tmp_path / "wikitext103").mkdir()
    planted = corpus.heldout[123]
    (tmp_path / "wikitext103" / "train.txt").write_text(
        "\n".join(["The game began development in 2010 , carrying over work done on Valkyria Chronicles II .",
                   planted, "= = Gameplay = = As with previous games , the player takes control of a squad ."]) + "\n")
    course = load_course()
    assert course.corpus_for("gpu").sources != course.corpus.sources  # the gpu profile's corpus is larger
    loaded = {profile: load_corpus(course, data_dir=tmp_path, profile=profile) for profile in course.profiles}
    for each in loaded.values():
        assert each.heldout == corpus.heldout and len(each.heldout) == 500
        assert not set(each.heldout) & set(each.train)
    gpu = loaded["gpu"]
    assert len(gpu.train) == len(corpus.train) + 2 and gpu.counts["wikitext103 kept"] == 3
    assert gpu.counts["wikitext103 equal to a held-out sentence, dropped"] == 1
    assert "As with previous games , the player takes control of a squad ." in gpu.train
    assert "NOTICE" not in capsys.readouterr().err

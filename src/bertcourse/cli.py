"""The `bertcourse` command: one subcommand per job, all reading course.yml.

Each subcommand declares its arguments here and imports its implementation only when it runs, so
that `bertcourse --help` answers at once instead of waiting for torch to import.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from bertcourse.errors import BertcourseError

# What the `instructor` extra adds (pyproject.toml); a student's install (Colab's) does without them.
INSTRUCTOR_PACKAGES = frozenset({"nbgrader", "jupyterlab", "notebook", "alembic", "sqlalchemy"})


def _lazy_command(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    """A handler that imports `module` only when the subcommand runs (torch and nbgrader load slowly)."""

    def handler(args: argparse.Namespace) -> int:
        try:
            return getattr(importlib.import_module(module), function)(args)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.split(".")[0] in INSTRUCTOR_PACKAGES:
                raise BertcourseError(f"`bertcourse {args.command}` needs {exc.name.split('.')[0]}, part of the "
                                      "course's instructor tools: pip install 'bertcourse[instructor]' "
                                      "(or `pip install -e '.[instructor]'` in the course checkout)") from exc
            raise

    return handler


def _add_common_data_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        help="folder with the data sets (layout: sst2/train.tsv, wikitext2/valid.txt, ...); "
        "default: $BERTCOURSE_DATA",
    )
    parser.add_argument(
        "--source",
        choices=["auto", "local", "hub", "synthetic"],
        default="auto",
        help="where to load data from; auto = local folder if given, else the hub, else a small "
        "synthetic sample with a notice (default: auto)",
    )
    parser.add_argument("--profile", help="hardware profile from course.yml (default: $BERTCOURSE_PROFILE, "
                        "else gpu when CUDA is available, else cpu-quick)")


def _add_data(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "data",
        help="prepare the data sets and the tokenizer, and print their statistics",
        description="Load SST-2 and the pretraining corpus, train (or reuse) the course WordPiece "
        "tokenizer for the profile, and print sizes, label balance and token length statistics.",
    )
    _add_common_data_arguments(parser)
    parser.add_argument("--tokenizer", help="a hub tokenizer name (e.g. bert-base-uncased) instead of training one")
    parser.set_defaults(handler=_lazy_command("bertcourse.prepare_data", "data_command"))


def _add_release(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "release",
        help="regenerate the student notebooks in exercises/ from solutions/ (instructors)",
        description="Run nbgrader's generate_assignment for the exercises in course.yml (or the named "
        "ones): solutions/<id>/ -> exercises/<id>/, without outputs and deterministic, and record each "
        "exercise and its grade cells in the gradebook. Commit exercises/ afterwards.",
    )
    parser.add_argument("exercises", nargs="*", metavar="EXERCISE", help="exercise ids (default: all)")
    parser.add_argument("--db-url", help="gradebook database URL (default: from autograder/nbgrader_config.py)")
    parser.set_defaults(handler=_lazy_command("bertcourse.authoring.release", "release_command"))


def _add_autograde(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "autograde",
        help="grade a class's submissions into the gradebook, a CSV and feedback pages (instructors)",
        description="Grade every SUBMISSIONS_DIR/<student>/<exercise>/<notebook>.ipynb (nbgrader's "
        "submitted/ layout; any other layout is refused, exit 2) with the hidden checks. Writes the class's "
        "nbgrader gradebook (OUT/gradebook.db unless one is named), OUT/grades.csv, the class report "
        "OUT/class-report.html and .csv (what the class got wrong), OUT/feedback/<student>/<exercise>/feedback.html "
        "and one result file per submission in OUT/autograded/ (OUT: the folder holding SUBMISSIONS_DIR). "
        "Finished submissions are not graded again when the batch is re-run or resumed; submissions are "
        "never modified.",
    )
    parser.add_argument("submissions", metavar="SUBMISSIONS_DIR", help="folder of <student>/<exercise>/ folders")
    parser.add_argument("--jobs", "-j", type=int, default=1, help="submissions graded in parallel (default: 1)")
    db = parser.add_mutually_exclusive_group()
    db.add_argument("--db-url", help="gradebook database, any SQLAlchemy URL, e.g. postgresql://host/db "
                    "(default: $BERTCOURSE_DB_URL, else OUT/gradebook.db, one per class); never put a password "
                    "here, where every user of the machine can read it: use $BERTCOURSE_DB_URL or --db-url-file")
    db.add_argument("--db-url-file", metavar="PATH",
                    help="read the gradebook URL from this file (one line; keep it readable by you only)")
    parser.add_argument("--exercise", action="append", dest="exercise_ids", metavar="ID",
                        help="grade only this exercise (repeatable; default: every exercise folder found)")
    parser.add_argument("--output-dir", help="where autograded/, feedback/ and grades.csv go "
                        "(default: the folder holding SUBMISSIONS_DIR)")
    parser.add_argument("--force", action="store_true", help="grade again submissions graded before")
    parser.add_argument("--lease", type=float, metavar="SECONDS",
                        help="PostgreSQL gradebook, several graders: a grader that stops renewing its claim "
                        "(it died) loses it after this long, and another grader takes the submission (default: 60)")
    parser.add_argument("--private-feedback", action="store_true",
                        help="write feedback pages readable by you only (0600; default: 0644, ready to share)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=_lazy_command("bertcourse.grading.batch.autograde", "autograde_command"))


def _add_validate(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="validate the course: solutions score full marks, the release scores zero, lessons run (CI)",
        description="Validate the course before handing it out: every solution notebook scores full marks, "
        "every released notebook scores zero on its graded parts, the committed release is up to date, the "
        "hidden checks' points add up to the autograded cells' points and to course.yml, and every lesson "
        "notebook executes (with BERTCOURSE_PROFILE=cpu-quick unless set). Prints a table; exits 1 on any "
        "failure.",
    )
    parser.add_argument("--only", action="append", metavar="ID", help="only this exercise or lesson (repeatable)")
    parser.add_argument("--skip-lessons", action="store_true", help="do not execute the lesson notebooks")
    parser.add_argument("--lesson-timeout", type=float, default=600, help="seconds per lesson cell (default: 600)")
    parser.set_defaults(handler=_lazy_command("bertcourse.authoring.validation", "validate_command"))


def _add_execute_lessons(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "execute-lessons",
        help="run the lesson notebooks on a profile and write their outputs, with provenance (instructors)",
        description="Execute the lessons (default: all, in course.yml's order, later ones reusing what earlier "
        "ones trained) with nbclient on the profile, and write each back with its outputs, the run's provenance "
        "in the notebook metadata and a hash of every code cell's source (docs/developing.md). A lesson "
        "that fails is not written. --clear strips them back to no outputs instead.",
    )
    parser.add_argument("lessons", nargs="*", metavar="LESSON", help="lesson ids or notebook paths (default: all)")
    parser.add_argument("--profile", default="cpu", help="profile from course.yml (default: cpu)")
    parser.add_argument("--data-dir", help="the local data folder (default: $BERTCOURSE_DATA, else the hub)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per cell (default: 1800)")
    parser.add_argument("--clear", action="store_true", help="remove the outputs and their records instead")
    parser.set_defaults(handler=_lazy_command("bertcourse.authoring.lesson_outputs", "execute_lessons_command"))


def _add_grade(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "grade",
        help="grade your own exercise notebook with the hidden checks (self-study)",
        description="Run your notebook in a sandboxed process and the exercise's hidden checks against "
        "it, then print each check (pass/fail, points, a hint for failures), per-part subtotals and the "
        "total as `score: X/Y`. Needs the course checkout (the hidden checks live in autograder/). Exits "
        "0 when grading ran, whatever the score; 2 for a file that is not a notebook or an unknown exercise.",
    )
    parser.add_argument("notebook", help="the .ipynb file to grade (e.g. your copy from exercises/), or a folder "
                        "holding one notebook")
    parser.add_argument("--exercise", metavar="ID",
                        help="exercise id from course.yml (default: inferred from the notebook's cells/path)")
    parser.add_argument("--json", action="store_true",
                        help="print the result as JSON (checks, parts, cells, notes, score) instead of the report")
    parser.set_defaults(handler=_lazy_command("bertcourse.grading.report", "grade_command"))


def _add_training_arguments(parser: argparse.ArgumentParser) -> None:
    """--device, --precision and --no-progress: the same three for every command that trains."""
    parser.add_argument("--device", help="cpu, cuda, mps (default: the best available)")
    parser.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default="auto",
                        help="what the training steps autocast to; auto = bf16 on a GPU with bf16 in hardware "
                        "(sm_80+: A100, L4, H100), fp16 with loss scaling on older GPUs (a T4), bf16 on a CPU with "
                        "native bf16 (AVX512-BF16/AMX), else fp32; "
                        "fp16 on the CPU is refused; a resumed pretraining keeps its precision (default: auto)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def _add_pretrain(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "pretrain",
        help="pretrain the tiny BERT (masked LM) or its parameter-matched GPT on the course corpus",
        description="Pretrain on the real corpus with dynamic masking, AdamW, warm-up and cosine decay. "
        "Writes OUT/checkpoint.pt (periodically, atomically), OUT/metrics.json and OUT/loss_curve.png; "
        "--resume continues a killed run from its last checkpoint and ends where an uninterrupted run "
        "would. Uses CUDA, else Apple MPS, else the CPU; autocasts as --precision says.",
    )
    _add_common_data_arguments(parser)
    parser.add_argument("--arch", choices=["bert", "gpt"], default="bert", help="model to train (default: bert)")
    parser.add_argument("--out", help="output folder (default: RUNS/pretrain-ARCH-PROFILE, "
                        "RUNS/pretrain-bert-whole-word-PROFILE with --whole-word; RUNS is $BERTCOURSE_RUNS, "
                        "else runs/ in the course folder)")
    parser.add_argument("--whole-word", action="store_true",
                        help="BERT only: mask whole words (all pieces of a word together), not single tokens")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    parser.add_argument("--init-from", metavar="FOLDER",
                        help="start from a shipped model's weights (e.g. the package's checkpoints/bert-cpu-long) "
                             "instead of random ones: continued pretraining, on a profile of its shape")
    parser.add_argument("--max-steps", type=int, help="override the profile's number of steps")
    parser.add_argument("--dropout", type=float, help="override the profile's dropout probability, 0 <= P < 1")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (CUDA: faster)")
    _add_training_arguments(parser)
    parser.set_defaults(handler=_lazy_command("bertcourse.training.pretrain", "pretrain_command"))


def _add_ship(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ship",
        help="write a finished pretraining as the package's shipped checkpoint (safetensors + model card)",
        description="Measure a finished `bertcourse pretrain` run on the held-out sentences (every target, and "
        "BERT's [MASK] positions beside the unigram baseline) and write src/bertcourse/checkpoints/ARCH-PROFILE/: "
        "model.safetensors, tokenizer.json, metrics.json, card.json (command, commit, corpus, steps, wall time, "
        "held-out figures, each file's sha256, checked at every load) and README.md.",
    )
    _add_common_data_arguments(parser)
    parser.add_argument("--arch", choices=["bert", "gpt"], default="bert", help="model to ship (default: bert)")
    parser.add_argument("--run", help="the pretraining folder (default: RUNS/pretrain-ARCH-PROFILE)")
    parser.add_argument("--out", help="the shipped folder (default: the package's checkpoints/ARCH-PROFILE)")
    parser.add_argument("--command", help="the pretraining command to record (default: worked out from the run)")
    parser.add_argument("--commit", help="the commit of the code that pretrained it (default: the checkout's now)")
    parser.set_defaults(handler=_lazy_command("bertcourse.training.ship", "ship_command"))


def _add_finetune(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "finetune",
        help="fine-tune the pretrained BERT or GPT (or a fresh one) on SST-2: one run",
        description="Train a sentence classifier (pooling + dropout + linear) on SST-2 in one regime: full "
        "fine-tuning, a probe (frozen encoder, head only) or LoRA. Writes OUT/model.pt, OUT/metrics.json "
        "(accuracy with its 95% interval, macro-F1, MCC, learning curve) and OUT/predictions.tsv; a folder "
        "that already holds this very run is reused. Sizes come from the profile's finetune: block.",
    )
    _add_common_data_arguments(parser)
    parser.add_argument("--arch", choices=["bert", "gpt"],
                        help="model to fine-tune (default: bert; with a transformers checkpoint, what it is)")
    parser.add_argument("--regime", choices=["full", "probe", "lora"], default="full",
                        help="what trains: everything, the head only, or LoRA adapters + head (default: full)")
    parser.add_argument("--init", choices=["pretrained", "scratch"], default="pretrained",
                        help="start from the pretraining checkpoint or from random weights (default: pretrained)")
    parser.add_argument("--pooling", choices=["cls", "last", "mean"],
                        help="sentence vector: [CLS], last real token, mean (default: cls for bert, last for gpt)")
    parser.add_argument("--pretrained", help="pretraining checkpoint (default: RUNS/pretrain-ARCH-PROFILE), or a "
                        "transformers checkpoint with its own tokenizer: hf:ORG/NAME (e.g. "
                        "hf:google/bert_uncased_L-2_H-128_A-2) or a folder written by save_pretrained")
    parser.add_argument("--out", help="output folder (default: RUNS/finetune-ARCH-REGIME-INIT-PROFILE-seedN)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument("--max-steps", type=int, help="stop after this many steps (a quick try)")
    _add_training_arguments(parser)
    parser.set_defaults(handler=_lazy_command("bertcourse.training.finetune", "finetune_command"))


def _add_compare(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="the headline experiment: BERT vs its parameter-matched GPT on SST-2, reported like a paper",
        description="Pretrain what RUNS does not hold yet (resuming a killed pretraining), then fine-tune "
        "BERT and GPT x {full, probe, lora} x {pretrained, scratch} x seeds, fit the majority and TF-IDF + LR "
        "baselines on the same rows, and write OUT/results.json, results.md (mean ± sd over seeds, 95% "
        "bootstrap intervals, macro-F1, MCC, paired tests, pretraining cost), accuracy.png, "
        "learning_curves.png and confusion_matrices.png. Finished runs are reused: a killed compare resumes.",
    )
    _add_common_data_arguments(parser)
    parser.add_argument("--seeds", type=int, help="seeds per row (default: the profile's finetune.seeds)")
    parser.add_argument("--out", help="report folder (default: results/sst2-PROFILE)")
    parser.add_argument("--runs-dir", help="folder of the pretraining and fine-tuning runs (default: "
                        "$BERTCOURSE_RUNS, else runs/ in the course folder)")
    parser.add_argument("--public", nargs="*", metavar="NAME",
                        help="add public checkpoints as rows, fine-tuned the same way with their own tokenizers: "
                        "names of course.yml's public_checkpoints (bert-tiny, bert-mini, pythia-14m; --public alone: "
                        "all), hf:ORG/NAME or save_pretrained folders. Needs the hub or its cache; where neither has "
                        "them they are left out with one notice (default: none)")
    _add_training_arguments(parser)
    parser.set_defaults(handler=_lazy_command("bertcourse.training.compare", "compare_command"))


def _add_labels(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "labels",
        help="accuracy against the number of labels: pretrained vs scratch vs TF-IDF on 50 ... 67,349 SST-2 rows",
        description="For each label budget and seed, fine-tune every model from its pretrained weights and from "
        "scratch on that many SST-2 train rows (a nested, seeded subset; a dev split carved from those rows "
        "early-stops the run; the validation set only scores it), fit TF-IDF + LR on the same rows, and write "
        "OUT/results.json, results.md (table, recipe, paired tests) and accuracy_vs_labels.png. Pretrains the "
        "course's models first when RUNS lacks them; finished runs are reused: a killed run resumes.",
    )
    _add_common_data_arguments(parser)
    parser.add_argument("--budgets", action="append", metavar="N,N,...",
                        help="labelled rows per point, comma-separated, 'all' for every train row "
                        "(default: 50,100,300,1000,3000,10000,all)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per point (default: 3)")
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed (default: 0); a later one draws "
                        "fresh rows and initialisations, e.g. to check a chosen recipe on seeds that did not choose it")
    parser.add_argument("--model", action="append", metavar="MODEL",
                        help="bert, gpt, a public checkpoint of course.yml (bert-tiny, bert-mini, pythia-14m: from "
                        "the hub, left out with a notice offline), or NAME=PRETRAINED (what finetune --pretrained "
                        "accepts; its arch is read from it); repeatable (default: bert and gpt)")
    parser.add_argument("--max-steps", type=int, help="cap on a run's steps (default: the profile's compare run's "
                        "steps, at least 200)")
    parser.add_argument("--max-epochs", type=int, help="cap on passes over the training rows (default: 40)")
    parser.add_argument("--patience", type=int, help="dev checks without improvement before stopping (default: 6)")
    parser.add_argument("--learning-rate", type=float, help="peak fine-tuning learning rate (default: the profile's "
                        "for full fine-tuning)")
    parser.add_argument("--pooling", help="what the head reads: cls, last or mean (default: the architecture's: "
                        "BERT's [CLS], GPT's last token)")
    parser.add_argument("--frozen-fraction", type=float, help="share of a run's planned steps that train the head "
                        "alone, the encoder frozen (LP-FT; default: 0)")
    parser.add_argument("--layer-decay", type=float, help="layer-wise learning-rate decay: each block down learns at "
                        "this factor of the rate of the one above, the embeddings below the lowest (default: 1, none). "
                        "A recipe with any of these four set writes its runs and report in folders named after it "
                        "(-lr0.0001, -poolmean, -frozen0.5, -layerdecay0.8), beside the default's")
    parser.add_argument("--out", help="report folder (default: results/labels-PROFILE)")
    parser.add_argument("--runs-dir", help="folder of the pretraining runs and of labels-PROFILE/ (default: "
                        "$BERTCOURSE_RUNS, else runs/ in the course folder)")
    _add_training_arguments(parser)
    parser.set_defaults(handler=_lazy_command("bertcourse.training.data_efficiency", "labels_command"))


def _add_evaluate(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        help="score a fine-tuned classifier on a labelled file, or classify sentences given here",
        description="Score CHECKPOINT (a finetune run folder or its model.pt) on --data, a .tsv (with a "
        "header), .parquet or .jsonl file with `sentence` and `label` (0/1) columns: prints accuracy with "
        "its 95% bootstrap interval, macro-F1 and MCC, and writes one prediction per sentence. --text "
        "classifies sentences without labels (prints label and probability).",
    )
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help="a finetune run folder or its model.pt")
    parser.add_argument("--data", metavar="FILE", help="labelled sentences to score")
    parser.add_argument("--out", metavar="FILE", help="predictions for --data (default: predictions.tsv)")
    parser.add_argument("--text", action="append", metavar="SENTENCE",
                        help="a sentence to classify (repeatable)")
    parser.add_argument("--device", help="cpu, cuda, mps (default: the best available)")
    parser.set_defaults(handler=_lazy_command("bertcourse.training.evaluate", "evaluate_command"))


# One entry per subcommand, in the order `bertcourse --help` lists them.
SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    _add_data,
    _add_release,
    _add_autograde,
    _add_validate,
    _add_execute_lessons,
    _add_grade,
    _add_pretrain,
    _add_ship,
    _add_finetune,
    _add_compare,
    _add_labels,
    _add_evaluate,
]


def build_parser() -> argparse.ArgumentParser:
    """The `bertcourse` parser with every subcommand of SUBCOMMANDS (tests build it to read the help)."""
    parser = argparse.ArgumentParser(
        prog="bertcourse",
        description="A hands-on course on BERT and masked language modelling: data, tokenizer, "
        "pretraining, exercises and their autograder. Every subcommand reads course.yml.",
    )
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", dest="command")
    for add in SUBCOMMANDS:
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; a course error becomes one line on stderr and exit code 2, not a traceback."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except BertcourseError as exc:
        print(f"bertcourse: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bertcourse: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""The `bertcourse` command: one subcommand per job, all reading course.yml.

Each subcommand declares its arguments here and imports its implementation only when it runs, so
that `bertcourse --help` answers at once instead of waiting for torch to import.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from bertcourse.errors import BertcourseError


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
    parser.add_argument("--profile", default="cpu", help="hardware profile from course.yml (default: cpu)")


def _cmd_data(args: argparse.Namespace) -> int:
    from bertcourse.datastats import data_command

    return data_command(args)


def _add_data(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "data",
        help="prepare the data sets and the tokenizer, and print their statistics",
        description="Load SST-2 and the pretraining corpus, train (or reuse) the course WordPiece "
        "tokenizer for the profile, and print sizes, label balance and token length statistics.",
    )
    _add_common_data_arguments(parser)
    parser.add_argument("--tokenizer", help="a hub tokenizer name (e.g. bert-base-uncased) instead of training one")
    parser.set_defaults(handler=_cmd_data)


# Each entry adds one subcommand. Later parts of the course add theirs here.
SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    _add_data,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertcourse",
        description="A hands-on course on BERT and masked language modelling: data, tokenizer, "
        "pretraining, exercises and their autograder. Every subcommand reads course.yml.",
    )
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
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

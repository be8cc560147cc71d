"""`bertcourse ship`: a finished pretraining written as the package's shipped checkpoint, measured first.

The lessons load the course's own long-pretrained models instead of pretraining for an hour
(`checkpoint.load_shipped`); this is how those folders are made, with the course's own commands:

    bertcourse pretrain --arch bert --profile cpu-long
    bertcourse ship --arch bert --profile cpu-long      # -> src/bertcourse/checkpoints/bert-cpu-long/

The held-out figures on the card are measured here on the weights shipped (every target, and BERT's `[MASK]`
positions beside a unigram model at the same positions); each file's sha256 goes on the card and is checked at
every load.
"""

from __future__ import annotations

import datetime
import json
import shutil
from pathlib import Path
from typing import Any

from bertcourse.folders import file_sha256
from bertcourse.training.checkpoint import (
    CARD_FORMAT,
    CARD_NAME,
    HASHED,
    LOSS_LOG_EVERY,
    METRICS_NAME,
    TOKENIZER_NAME,
    WEIGHTS_NAME,
    ShippedCheckpointError,
    shipped_folder,
)


def _thinned(history: dict[str, list]) -> dict[str, list]:
    """The loss log at every LOSS_LOG_EVERY-th step (and the last); the held-out evaluations whole."""
    steps = history.get("step", [])
    keep = [i for i, step in enumerate(steps) if step % LOSS_LOG_EVERY == 0 or i == len(steps) - 1]
    thinned = {k: [history[k][i] for i in keep] for k in ("step", "loss", "lr") if k in history}
    return {**thinned, **{k: v for k, v in history.items() if k.startswith("eval_")}}


def ship(run: str | Path, out: str | Path, *, command: str, heldout: dict[str, Any], commit: str,
         corpus: dict[str, Any]) -> dict[str, Any]:
    """Write the shipped form of the finished pretraining in `run` to `out` and return its card.

    `heldout`: the held-out figures measured on the weights shipped (`ship_command` measures them), `corpus`:
    what the run read. The folder is written beside `out` and then moved, so a failure leaves no half folder."""
    import torch
    from safetensors.torch import save_file

    from bertcourse.training.checkpoint import load_checkpoint

    run, out = Path(run), Path(out)
    saved = load_checkpoint(run)
    summary = json.loads((run / METRICS_NAME).read_text())
    steps = (summary.get("history", {}).get("step") or [saved["step"]])[-1]
    staging = out.with_name(f".{out.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    save_file({k: v.detach().to(torch.float32).clone().contiguous() for k, v in saved["model"].items()},  # tied: copies
              staging / WEIGHTS_NAME, metadata={"format": "pt"})
    (staging / TOKENIZER_NAME).write_text(saved["tokenizer"], encoding="utf-8")
    kept = {**summary, "history": _thinned(summary.get("history", {}))}
    (staging / METRICS_NAME).write_text(json.dumps(kept, indent=1))
    settings = {k: saved["settings"][k] for k in ("model_config", "batch_size") if k in saved["settings"]}
    card = {
        "format": CARD_FORMAT, "arch": summary["arch"], "profile": summary["profile"], "steps": steps,
        "settings": {**settings, **{k: v for k, v in saved["settings"].items() if k not in settings
                                    and isinstance(v, int | float | str | bool)}},
        "parameters": summary.get("parameters"), "precision": summary.get("precision"),
        "tokens_seen": summary.get("tokens_seen"), "train_seconds": summary.get("train_seconds"),
        "command": command, "commit": commit, "corpus": corpus, "heldout": heldout,
        "written": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "sha256": {name: file_sha256(staging / name) for name in HASHED},
    }
    (staging / CARD_NAME).write_text(json.dumps(card, indent=1) + "\n")
    (staging / "README.md").write_text(card_text(card))
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return card


def card_text(card: dict[str, Any]) -> str:
    """The model card for people (README.md beside the weights), from card.json's values."""
    held = card["heldout"]
    minutes = f"{card['train_seconds'] / 60:.0f} minutes" if card.get("train_seconds") else "not recorded"
    lines = [
        f"# The course's {card['arch'].upper()}, `{card['profile']}` profile ({card['steps']:,} steps)",
        "",
        f"Pretrained with the course's own command, `{card['command']}`, from the code at commit `{card['commit']}`.",
        "",
        f"- Model: {card['settings']['model_config'].get('n_layers')} layers x "
        f"{card['settings']['model_config'].get('d_model')}, {card['parameters']:,} parameters, "
        f"vocabulary {card['settings']['model_config'].get('vocab_size'):,} (its own WordPiece tokenizer).",
        f"- Corpus: {card['corpus'].get('description', '')} ({card['corpus'].get('sentences', 0):,} sentences, "
        f"{card['corpus'].get('tokens', 0):,} word pieces), {card.get('tokens_seen') or 0:,} tokens seen in training.",
        f"- Training: {card['steps']:,} steps of {card['settings'].get('batch_size')} blocks, {card.get('precision')}, "
        f"wall time {minutes}.",
        f"- Held-out ({held.get('sentences', 0):,} sentences never trained on): {held['target_name']} loss "
        f"{held['loss']:.3f}, accuracy {held['accuracy']:.3f} over every target.",
    ]
    if "mask_accuracy" in held:
        lines.append(f"- At the `[MASK]` positions alone: accuracy {held['mask_accuracy']:.3f}, loss "
                     f"{held['mask_loss']:.3f}; a unigram model (no context) at the same positions: accuracy "
                     f"{held['unigram_mask_accuracy']:.3f}, loss {held['unigram_mask_loss']:.3f}.")
    lines += ["", "Files and their sha256 (checked each time the course loads them):", ""]
    lines += [f"- `{name}`: `{digest}`" for name, digest in card["sha256"].items()]
    lines += ["", "Load it with `bertcourse.training.checkpoint.load_shipped(\"{}\", \"{}\")`; pass the folder as "
              "`--pretrained` to `bertcourse finetune` or `bertcourse labels --model NAME=FOLDER`.".format(
                  card["arch"], card["profile"]), ""]
    return "\n".join(lines)


def ship_command(args: Any) -> int:
    """`bertcourse ship`: measure a finished pretraining on the held-out sentences and write its shipped form."""
    from bertcourse.course import load_course, select_profile
    from bertcourse.data import load_corpus
    from bertcourse.folders import package_commit
    from bertcourse.run_folders import pretraining_folder
    from bertcourse.training.checkpoint import load_pretrained
    from bertcourse.training.heldout import heldout_figures
    from bertcourse.training.objectives import objective_class

    course = load_course()
    profile_spec = select_profile(args.profile, course)
    run = Path(args.run) if args.run else pretraining_folder(args.arch, profile_spec.name)
    if not (run / METRICS_NAME).is_file():
        raise ShippedCheckpointError(f"{run}: no finished pretraining (no {METRICS_NAME}); run `bertcourse pretrain "
                                     f"--arch {args.arch} --profile {profile_spec.name}` first")
    model, tokenizer = load_pretrained(run)
    summary = json.loads((run / METRICS_NAME).read_text())
    if summary.get("arch") != args.arch:
        raise ShippedCheckpointError(f"{run}: holds a {summary.get('arch')} model, not a {args.arch}")
    corpus = load_corpus(course, data_dir=args.data_dir, source=args.source, profile_spec=profile_spec)
    print(f"measuring {run} on {len(corpus.heldout)} held-out sentences ...", flush=True)
    objective = objective_class(args.arch)(tokenizer, course.masking)
    heldout = heldout_figures(model, objective, corpus.train, corpus.heldout)
    steps = (summary.get("history", {}).get("step") or [0])[-1]
    command = args.command or (f"bertcourse pretrain --arch {args.arch} --profile {profile_spec.name}"
                               + (f" --max-steps {steps}" if steps != profile_spec.pretrain.max_steps else ""))
    described = {"description": "the course corpus: " + ", ".join(course.corpus_for(profile_spec.name).sources),
                 "sentences": len(corpus.train), "fingerprint": corpus.fingerprint(),
                 "tokens": sum(len(ids) for ids in tokenizer(corpus.train, add_special_tokens=False)["input_ids"])}
    out = Path(args.out) if args.out else shipped_folder(args.arch, profile_spec.name)
    commit = args.commit or package_commit(course.root)
    card = ship(run, out, command=command, heldout=heldout, commit=commit, corpus=described)
    line = f"{heldout['target_name']} accuracy {heldout['accuracy']:.3f}"
    if "mask_accuracy" in heldout:
        line += (f"; at [MASK] positions {heldout['mask_accuracy']:.3f} (unigram "
                 f"{heldout['unigram_mask_accuracy']:.3f})")
    print(f"wrote {out} ({card['steps']:,} steps; held-out {line})")
    return 0


__all__ = ["card_text", "ship", "ship_command"]

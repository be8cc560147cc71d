"""Does pretraining transfer to SST-2? The study harness of issue 9 ("measurement first").

The signal: a linear probe (standardised features, logistic regression with its inverse regularisation
C chosen by 3-fold cross-validation on the probe's training rows, never on validation) on FROZEN
features of a fixed random subset of SST-2 train, scored on all 872 validation sentences, for a
pretrained encoder and for the same architecture with random weights (several seeds: the noise).
Features: the final [CLS] state, the mean of the final states over real tokens, and the mean over real
tokens of every layer's output, embeddings included, concatenated ("all").

Pretraining is a small loop built from the package's pieces (`bertcourse.training.pretrain`'s packing, batches,
dynamic masking, held-out evaluation and optimizer; `bertcourse.model`'s BERT) with the levers the
package does not expose yet prototyped here: peak LR and schedule (cosine to 10% as the package, or
Cramming's linear decay to 0), masking rate, bf16 autocast on the CPU, pre-LN, width/depth, vocabulary,
sequence length, packing, and the corpus mix. A run probes itself at the steps given by --probe-at
(probe time is not counted in its training wall time) and keeps those checkpoints for `finetune`.

Everything runs on one torch thread (the machine is shared; run it under `nice -n 19`):

    BERTCOURSE_DATA=/work/shared/data nice -n 19 .venv/bin/python benchmarks/transfer.py speed
    ... transfer.py random --seeds 0 1 2                      # random-encoder probes (the floor)
    ... transfer.py tfidf                                      # TF-IDF + LR on the probe's rows (the reference)
    ... transfer.py pretrain base-9k --steps 9000 --bf16 --probe-at 500,1000,2000,3000,4500
    ... transfer.py pretrain base-cont --init runs/transfer/base-9k/step4500.pt --steps 4500 --schedule linear
    ... transfer.py finetune runs/transfer/base-cont/step9000.pt --seeds 0 1 --rows 20000   # pretrained vs scratch
    ... transfer.py table                                      # the results so far as table rows

The runs and numbers are in benchmarks/README.md, "Transfer to SST-2".

Results go to runs/transfer/results.jsonl (one JSON object per measurement) and runs/transfer/NAME/.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bertcourse.course import load_course  # noqa: E402
from bertcourse.data import column, load_corpus, load_sst2  # noqa: E402
from bertcourse.masking import collate_for_mlm, pad_batch  # noqa: E402
from bertcourse.model import ModelConfig, build_model, extended_attention_mask  # noqa: E402
from bertcourse.training.optim import adamw  # noqa: E402
from bertcourse.tokenizer import load_tokenizer, train_tokenizer  # noqa: E402
from bertcourse.training.packing import batch_indices, pack_sentences, tokenize_sentences
from bertcourse.training.objectives import eval_batches
from bertcourse.training.heldout import evaluate
from bertcourse.training.optim import lr_factor

ROOT = Path(os.environ.get("TRANSFER_OUT", "runs/transfer"))  # where results go
PROBE_TRAIN_ROWS = 10_000  # a fixed random subset of SST-2 train for the probe (seed 0)
PROBE_MAX_LEN = 64
POOLINGS = ("cls", "mean", "all")

_cache: dict = {}


# ----------------------------------------------------------------------------- data and tokenizers


def corpus():
    if "corpus" not in _cache:
        _cache["corpus"] = load_corpus()
    return _cache["corpus"]


def sst2(split: str) -> tuple[list[str], np.ndarray]:
    if split not in _cache:
        data = load_sst2(split)
        _cache[split] = (column(data, "sentence"), np.asarray(column(data, "label")))
    return _cache[split]


def tokenizer_for(vocab_size: int):
    """The cpu profile's tokenizer at its vocabulary size; others trained on the same corpus, cached here."""
    if vocab_size == load_course().profile("cpu").vocab_size:
        return load_tokenizer(corpus(), vocab_size, load_course().profile("cpu").model.max_seq_len, progress=False)
    folder = ROOT / "tokenizers" / f"vocab{vocab_size}"
    if not (folder / "tokenizer.json").is_file():
        train_tokenizer(corpus().train, vocab_size, progress=False).save_pretrained(str(folder))
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(folder))


def corpus_sentences(kind: str) -> list[str]:
    """The pretraining text: `mixed` is the course corpus (WikiText, then SST-2 train phrases); `sst2` and
    `wiki` its two parts alone; `sst2xK` the course corpus with the SST-2 part K times (in-domain share)."""
    c = corpus()
    n_sst = c.counts["sst2 kept"]
    wiki, sst = c.train[: len(c.train) - n_sst], c.train[len(c.train) - n_sst :]
    if kind == "mixed":
        return c.train
    if kind == "sst2":
        return sst
    if kind == "wiki":
        return wiki
    if kind.startswith("sst2x"):
        return wiki + sst * int(kind[5:])
    raise SystemExit(f"unknown --corpus {kind!r}")


def unpacked(sentence_ids: list[list[int]], max_seq_len: int, cls_id: int, sep_id: int):
    """One sentence per row (the alternative to packing), as a PackedData-like object."""
    blocks = [[cls_id, *ids[: max_seq_len - 2], sep_id] for ids in sentence_ids]
    return SimpleNamespace(blocks=blocks, segments=[[0] * len(b) for b in blocks], n_tokens=sum(map(len, blocks)))


def probe_rows(tokenizer) -> dict[str, tuple[list[list[int]], np.ndarray]]:
    """Token ids ([CLS] ... [SEP], at most PROBE_MAX_LEN) of the probe's train subset and of validation."""
    key = ("probe", tokenizer.backend_tokenizer.to_str().__hash__())
    if key not in _cache:
        sentences, labels = sst2("train")
        chosen = np.random.default_rng(0).permutation(len(sentences))[:PROBE_TRAIN_ROWS]
        val_sentences, val_labels = sst2("validation")
        out = {}
        for name, texts, y in (("train", [sentences[i] for i in chosen], labels[chosen]),
                               ("validation", val_sentences, val_labels)):
            ids = tokenize_sentences(tokenizer, texts)
            rows = [[tokenizer.cls_token_id, *x[: PROBE_MAX_LEN - 2], tokenizer.sep_token_id] for x in ids]
            out[name] = (rows, y)
        _cache[key] = out
    return _cache[key]


# ----------------------------------------------------------------------------- the probe


@torch.no_grad()
def features(model, rows: list[list[int]], batch_size: int = 256) -> dict[str, np.ndarray]:
    """[CLS], mean and every-layer-mean features of each row (rows sorted by length to save padding)."""
    model.eval()
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    out = {p: [None] * len(rows) for p in POOLINGS}
    for start in range(0, len(rows), batch_size):
        index = order[start : start + batch_size]
        ids, attention = pad_batch([rows[i] for i in index], 0)
        x = model.embeddings(ids, torch.zeros_like(ids))
        mask = extended_attention_mask(attention, x.dtype, causal=model.config.causal)
        weights = attention[..., None].float() / attention.sum(1)[:, None, None]
        layers = [(x * weights).sum(1)]
        for block in model.blocks:
            x = block(x, mask)
            layers.append((x * weights).sum(1))
        x = model.final_norm(x)
        pooled = {"cls": x[:, 0], "mean": (x * weights).sum(1), "all": torch.cat(layers, dim=1)}
        for p in POOLINGS:
            for j, i in enumerate(index):
                out[p][i] = pooled[p][j].numpy()
    return {p: np.stack(v) for p, v in out.items()}


def probe(model, tokenizer) -> dict[str, float]:
    """Validation accuracy of a logistic-regression probe on each pooling (C by 3-fold CV on train)."""
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    data = probe_rows(tokenizer)
    train_x, val_x = features(model, data["train"][0]), features(model, data["validation"][0])
    result = {}
    for p in POOLINGS:
        clf = make_pipeline(StandardScaler(), LogisticRegressionCV(Cs=[0.001, 0.01, 0.1, 1.0], cv=3, max_iter=3000))
        clf.fit(train_x[p], data["train"][1])
        result[p] = float((clf.predict(val_x[p]) == data["validation"][1]).mean())
    return result


# ----------------------------------------------------------------------------- models and runs


def make_config(args, vocab_size: int) -> ModelConfig:
    return load_course().profile("cpu").model.for_arch(
        "bert", vocab_size=vocab_size, n_layers=args.layers, d_model=args.width, n_heads=args.heads,
        d_ff=4 * args.width, max_seq_len=max(args.seq_len, PROBE_MAX_LEN), dropout=0.0, pre_ln=args.pre_ln,
    )


def record(entry: dict) -> None:
    ROOT.mkdir(parents=True, exist_ok=True)
    entry = {"time": time.strftime("%Y-%m-%d %H:%M:%S"), **entry}
    with open(ROOT / "results.jsonl", "a") as f:
        f.write(json.dumps(entry) + "\n")
    print(json.dumps(entry), flush=True)


def settings_of(args) -> dict:
    keys = ("steps", "batch", "lr", "warmup", "schedule", "seq_len", "layers", "width", "heads", "vocab",
            "corpus", "mask", "bf16", "pre_ln", "pack", "seed")
    return {k: getattr(args, k) for k in keys}


def cmd_random(args) -> None:
    tokenizer = tokenizer_for(args.vocab)
    for seed in args.seeds:
        torch.manual_seed(seed)
        model = build_model(make_config(args, len(tokenizer)))
        record({"kind": "random", "seed": seed, "settings": settings_of(args), "probe": probe(model, tokenizer)})


def schedule_factor(args, step: int) -> float:
    warmup = int(args.warmup) if args.warmup >= 1 else max(1, int(args.warmup * args.steps))
    if args.schedule == "cosine":  # the package's: cosine to 10% of the peak
        return lr_factor(step, warmup, args.steps)
    if step < warmup:  # Cramming: linear warm-up, then linear decay to 0 at the last step
        return (step + 1) / warmup
    return max(0.0, (args.steps - step) / max(args.steps - warmup, 1))


def cmd_pretrain(args) -> None:
    out = ROOT / args.name
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = tokenizer_for(args.vocab)
    config = make_config(args, len(tokenizer))
    ids = tokenize_sentences(tokenizer, corpus_sentences(args.corpus))
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    data = (pack_sentences(ids, args.seq_len, cls_id, sep_id) if args.pack
            else unpacked(ids, args.seq_len, cls_id, sep_id))
    heldout_ids = tokenize_sentences(tokenizer, corpus().heldout)
    heldout = eval_batches(pack_sentences(heldout_ids, args.seq_len, cls_id, sep_id), "bert", tokenizer)
    probe_at = {int(s) for s in args.probe_at.split(",") if s}
    print(f"{args.name}: {len(data.blocks):,} rows, {data.n_tokens:,} tokens; "
          f"{args.steps} steps of {args.batch} = {args.steps * args.batch / len(data.blocks):.1f} epochs", flush=True)

    # every probability given: collate_for_mlm would otherwise read course.yml at each step (a file that
    # others edit while a run lasts)
    probs = {"select_prob": args.mask, "mask_prob": 0.8, "random_prob": 0.1}
    torch.manual_seed(args.seed)
    model = build_model(config)
    first, train_s, tokens = 0, 0.0, 0
    if args.init:  # continue from another run's weights, with a fresh optimizer and schedule (see --init)
        saved = torch.load(args.init, map_location="cpu", weights_only=True)
        model.load_state_dict(saved["model"])
        if "step" not in saved:  # checkpoints written before they stored it: the run's record has it
            step = int(args.init.stem.removeprefix("step"))
            saved = next(e for e in map(json.loads, (ROOT / "results.jsonl").read_text().splitlines())
                         if e.get("run") == args.init.parent.name and e.get("step") == step) | saved
        first, train_s, tokens = saved["step"], saved["train_s"], saved["tokens"]
    optimizer = adamw(model, args.lr, 0.01, betas=(0.9, 0.98), eps=1e-6)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: schedule_factor(args, s))
    generator = torch.Generator().manual_seed(args.seed + 1 + first)
    for step in range(first + 1, first + args.steps + 1):
        started = time.perf_counter()
        rows = batch_indices(step, len(data.blocks), args.batch, args.seed)
        batch = collate_for_mlm([data.blocks[i] for i in rows], tokenizer, generator=generator, **probs)
        batch["token_type_ids"] = pad_batch([data.segments[i] for i in rows], 0)[0]
        model.train()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            loss = model(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        train_s += time.perf_counter() - started
        tokens += int(batch["attention_mask"].sum())
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f} {train_s / step * 1000:.0f} ms/step", flush=True)
        if step in probe_at or step == first + args.steps:
            torch.save({"config": config.to_dict(), "model": model.state_dict(), "vocab": args.vocab, "step": step,
                        "train_s": train_s, "tokens": tokens}, out / f"step{step}.pt")
            mlm = evaluate(model, heldout, torch.device("cpu"))
            record({"kind": "pretrain", "run": args.name, "step": step, "train_s": round(train_s, 1),
                    "tokens": tokens, "mlm_loss": round(mlm["loss"], 3), "mlm_acc": round(mlm["accuracy"], 4),
                    "settings": settings_of(args), "probe": probe(model, tokenizer)})


# ----------------------------------------------------------------------------- fine-tuning


class Classifier(torch.nn.Module):
    """The encoder's final [CLS] state -> dropout -> linear (what issue 9's full regime fine-tunes)."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder
        self.dropout = torch.nn.Dropout(0.1)
        self.head = torch.nn.Linear(encoder.config.d_model, 2)

    def forward(self, ids, attention):
        hidden = self.encoder.encode(ids, attention, torch.zeros_like(ids))
        return self.head(self.dropout(hidden[:, 0]))


def cmd_finetune(args) -> None:
    saved = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
    config = ModelConfig.from_dict(saved["config"])
    tokenizer = tokenizer_for(saved["vocab"])
    sentences, labels = sst2("train")
    chosen = np.random.default_rng(1).permutation(len(sentences))[: args.rows]
    rows = [[tokenizer.cls_token_id, *x[: PROBE_MAX_LEN - 2], tokenizer.sep_token_id]
            for x in tokenize_sentences(tokenizer, [sentences[i] for i in chosen])]
    y = torch.as_tensor(labels[chosen])
    val = probe_rows(tokenizer)["validation"]
    for seed in args.seeds:
        for init in ("pretrained", "scratch"):
            torch.manual_seed(seed)
            encoder = build_model(config)
            if init == "pretrained":
                encoder.load_state_dict(saved["model"])
            model = Classifier(encoder)
            optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, fused=True)
            total = args.epochs * math.ceil(len(rows) / args.batch)
            schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(total, max(1, total // 10)))
            generator = torch.Generator().manual_seed(seed)
            started, curve = time.perf_counter(), []
            for _ in range(args.epochs):
                model.train()
                order = torch.randperm(len(rows), generator=generator).tolist()
                for start in range(0, len(rows), args.batch):
                    index = order[start : start + args.batch]
                    ids, attention = pad_batch([rows[i] for i in index], 0)
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                        logits = model(ids, attention)
                    loss = F.cross_entropy(logits.float(), y[index])
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
                    schedule.step()
                curve.append(validation_accuracy(model, val))
            record({"kind": "finetune", "checkpoint": str(args.checkpoint), "init": init, "seed": seed,
                    "rows": args.rows, "epochs": args.epochs, "lr": args.lr, "bf16": args.bf16,
                    "wall_s": round(time.perf_counter() - started, 1), "val_acc_per_epoch": curve})


def linear_schedule(total: int, warmup: int):
    """Linear warm-up over `warmup` steps, then linear decay to 0 at `total`."""
    return lambda s: (s + 1) / warmup if s < warmup else max(0.0, (total - s) / max(total - warmup, 1))


@torch.no_grad()
def validation_accuracy(model, val) -> float:
    model.eval()
    rows, labels = val
    correct = 0
    for start in range(0, len(rows), 256):
        ids, attention = pad_batch(rows[start : start + 256], 0)
        correct += int((model(ids, attention).argmax(-1).numpy() == labels[start : start + 256]).sum())
    return correct / len(rows)


# ----------------------------------------------------------------------------- speed and the table


def cmd_speed(args) -> None:
    """ms per pretraining step, fp32 against bf16 autocast, alternating (the machine is shared)."""
    tokenizer = tokenizer_for(args.vocab)
    model = build_model(make_config(args, len(tokenizer)))
    optimizer = adamw(model, 1e-3, 0.01, betas=(0.9, 0.98), eps=1e-6)
    ids = tokenize_sentences(tokenizer, corpus().train[:5000])
    data = pack_sentences(ids, args.seq_len, tokenizer.cls_token_id, tokenizer.sep_token_id)
    generator = torch.Generator().manual_seed(0)
    times: dict[bool, list[float]] = {False: [], True: []}
    for round_ in range(args.rounds):
        for bf16 in (False, True):
            batch = collate_for_mlm(data.blocks[: args.batch], tokenizer, generator=generator)
            started = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = model(**batch).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if round_:
                times[bf16].append(time.perf_counter() - started)
    record({"kind": "speed", "settings": settings_of(args),
            "fp32_ms_median": round(1000 * float(np.median(times[False])), 1),
            "bf16_ms_median": round(1000 * float(np.median(times[True])), 1),
            "fp32_ms_best": round(1000 * min(times[False]), 1), "bf16_ms_best": round(1000 * min(times[True]), 1)})


def cmd_tfidf(args) -> None:
    """The reference: TF-IDF (1-2 grams) + logistic regression on the probe's own 10,000 training rows."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegressionCV

    sentences, labels = sst2("train")
    chosen = np.random.default_rng(0).permutation(len(sentences))[:PROBE_TRAIN_ROWS]
    val_sentences, val_labels = sst2("validation")
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
    train_x = vectorizer.fit_transform([sentences[i] for i in chosen])
    clf = LogisticRegressionCV(Cs=[0.1, 1.0, 10.0, 100.0], cv=3, max_iter=3000).fit(train_x, labels[chosen])
    accuracy = float((clf.predict(vectorizer.transform(val_sentences)) == val_labels).mean())
    record({"kind": "tfidf", "rows": PROBE_TRAIN_ROWS, "probe": {"tfidf": accuracy}})


def cmd_table(args) -> None:
    for line in (ROOT / "results.jsonl").read_text().splitlines():
        e = json.loads(line)
        p = e.get("probe", {})
        probe_text = " / ".join(f"{100 * p[k]:.1f}" for k in POOLINGS if k in p)
        if e["kind"] == "pretrain":
            print(f"| {e['run']} | {e['step']} | {e['train_s'] / 60:.1f} | {e['mlm_loss']} / {100 * e['mlm_acc']:.1f}% "
                  f"| {probe_text} |")
        elif e["kind"] == "random":
            print(f"| random init seed {e['seed']} ({e['settings']['width']}w x {e['settings']['layers']}) "
                  f"| 0 | 0 | - | {probe_text} |")
        else:
            print(f"| {e['kind']} | {json.dumps({k: v for k, v in e.items() if k not in ('kind', 'time')})} |")


def main() -> None:
    import warnings

    warnings.simplefilter("ignore", FutureWarning)  # scikit-learn's notices about future defaults
    torch.set_num_threads(1)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def model_args(p):
        p.add_argument("--layers", type=int, default=2)
        p.add_argument("--width", type=int, default=128)
        p.add_argument("--heads", type=int, default=2)
        p.add_argument("--vocab", type=int, default=8000)
        p.add_argument("--seq-len", type=int, default=128)
        p.add_argument("--pre-ln", action="store_true")
        for name, default in (("steps", 3000), ("batch", 32), ("lr", 1e-3), ("warmup", 100.0), ("mask", 0.15),
                              ("seed", 0)):
            p.add_argument(f"--{name}", type=type(default), default=default)
        p.add_argument("--schedule", choices=["cosine", "linear"], default="cosine")
        p.add_argument("--corpus", default="mixed")
        p.add_argument("--bf16", action="store_true")
        p.add_argument("--no-pack", dest="pack", action="store_false")

    p = sub.add_parser("pretrain")
    p.add_argument("name")
    p.add_argument("--probe-at", default="")
    p.add_argument("--init", type=Path, help="start from this checkpoint's weights and step; --steps more steps "
                   "with a fresh AdamW and schedule (a warm restart, not an exact resume)")
    model_args(p)
    p.set_defaults(func=cmd_pretrain)
    p = sub.add_parser("random")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    model_args(p)
    p.set_defaults(func=cmd_random)
    p = sub.add_parser("speed")
    p.add_argument("--rounds", type=int, default=11)
    model_args(p)
    p.set_defaults(func=cmd_speed)
    p = sub.add_parser("finetune")
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--no-bf16", dest="bf16", action="store_false")
    p.set_defaults(func=cmd_finetune)
    p = sub.add_parser("tfidf")
    p.set_defaults(func=cmd_tfidf)
    p = sub.add_parser("table")
    p.set_defaults(func=cmd_table)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()

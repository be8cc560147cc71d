"""Lesson 6's objectives on tiny models: MLM + NSP / SOP (bertcourse.after_bert.sentence_objectives) and ELECTRA's
replaced-token detection (bertcourse.after_bert.electra), and the runner's pieces (bertcourse.after_bert.runner)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bertcourse.after_bert.runner import VARIANTS, build_variant_model, kept_encoder, train, training_flops
from bertcourse.config import MaskingProbs, ModelConfig
from bertcourse.after_bert.electra import RTD_WEIGHT, Electra, generator_config
from bertcourse.model import build_model
from bertcourse.training.objectives import MaskedLM
from bertcourse.training.packing import PackedData
from bertcourse.after_bert.sentence_objectives import BertWithPairHead, PairMLM, pair_rows, span_documents, with_unlabelled
from bertcourse.tokenizer import train_tokenizer

WORDS = "the cat dog sat ran on a mat log red big small ate fed".split()


@pytest.fixture(scope="module")
def tokenizer():
    generator = torch.Generator().manual_seed(0)
    lines = [" ".join(WORDS[int(i)] for i in torch.randint(len(WORDS), (8,), generator=generator)) for _ in range(40)]
    return train_tokenizer(lines, 60, progress=False)


@pytest.fixture(scope="module")
def documents():
    generator = torch.Generator().manual_seed(1)
    return [[" ".join(WORDS[int(i)] for i in torch.randint(len(WORDS), (5,), generator=generator)) + " ."
             for _ in range(6)] for _ in range(4)]


def config_for(tokenizer) -> ModelConfig:
    return ModelConfig(vocab_size=len(tokenizer), n_layers=2, d_model=32, n_heads=2, d_ff=64, max_seq_len=64,
                       dropout=0.0)


def test_spans_keep_the_order_and_respect_the_budget(tokenizer, documents):
    spans = span_documents(documents, tokenizer, 14)
    for doc, doc_spans in zip(documents, spans):
        assert " ".join(doc_spans) == " ".join(doc)
        assert all(len(tokenizer.tokenize(span)) <= 14 for span in doc_spans)
        assert len(doc_spans) < len(doc)  # several sentences to a span


@pytest.mark.parametrize("task", ["nsp", "sop"])
def test_pair_rows_are_bert_pairs_with_labels(tokenizer, documents, task):
    rows = pair_rows(documents, tokenizer, 40, task, torch.Generator().manual_seed(0))
    assert len(rows) == len(rows.pair_labels) > 0 and set(rows.pair_labels) <= {0, 1}
    for ids, segments in zip(rows.blocks, rows.segments):
        assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id and len(ids) <= 40
        first_sep = ids.index(tokenizer.sep_token_id)
        assert segments == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)


def test_pair_batches_carry_labels_and_few_shapes(tokenizer, documents):
    rows = pair_rows(documents, tokenizer, 64, "sop", torch.Generator().manual_seed(0))
    data = with_unlabelled(rows, PackedData([[2, 7, 8, 3]], [[0, 0, 0, 0]]))
    objective = PairMLM(tokenizer, MaskingProbs())
    batch = objective.batch(data, list(range(len(data))), torch.Generator().manual_seed(0))
    assert batch["input_ids"].shape[1] % PairMLM.PAD_MULTIPLE == 0
    assert batch["token_type_ids"].shape == batch["input_ids"].shape
    assert batch["pair_labels"].tolist() == rows.pair_labels + [-100]


def test_pair_loss_is_mlm_plus_pair_cross_entropy_over_labelled_rows(tokenizer, documents):
    torch.manual_seed(0)
    model = BertWithPairHead(build_model(config_for(tokenizer)), "nsp")
    rows = pair_rows(documents, tokenizer, 64, "nsp", torch.Generator().manual_seed(0))
    assert len(rows) >= 3
    batch = PairMLM(tokenizer, MaskingProbs()).batch(rows, range(len(rows)), torch.Generator().manual_seed(0))
    batch["pair_labels"][0] = -100
    out = model(**batch)
    expected_pair = F.cross_entropy(out.pair_logits[1:], batch["pair_labels"][1:])
    assert torch.allclose(out.parts["nsp"], expected_pair)
    assert torch.allclose(out.loss, out.parts["mlm"] + expected_pair)
    assert kept_encoder(model) is model.bert


def electra_batch(vocab: int, seed: int = 0, rows: int = 4) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (rows, 16), generator=generator)
    selected = torch.rand(rows, 16, generator=generator) < 0.3
    selected[:, 0] = False
    attention = torch.ones_like(ids)
    attention[3, 12:] = 0
    selected &= attention.bool()
    labels = torch.where(selected, ids, torch.full_like(ids, -100))
    return {"input_ids": ids.masked_fill(selected, 4), "attention_mask": attention, "labels": labels}


def test_electra_generator_shares_the_embeddings_and_is_a_quarter_wide():
    config = ModelConfig(vocab_size=50, n_layers=2, d_model=32, n_heads=2, d_ff=64, max_seq_len=16, dropout=0.0)
    model = Electra(config)
    assert generator_config(config).d_model == 8
    assert model.generator.embeddings.inner is model.discriminator.embeddings
    assert model.generator.head.decoder.weight is model.discriminator.embeddings.token_embedding.weight
    assert model.generator.embeddings.project.weight.shape == (8, 32)


def test_electra_labels_loss_and_no_gradient_through_the_samples():
    config = ModelConfig(vocab_size=12, n_layers=1, d_model=16, n_heads=2, d_ff=32, max_seq_len=16, dropout=0.0)
    torch.manual_seed(0)
    model = Electra(config)
    batch = electra_batch(config.vocab_size, rows=16)  # ~70 masked positions, 7 of 12 tokens each
    out = model(**batch, sampler=torch.Generator().manual_seed(0))
    labels, selected = out.rtd_labels, batch["labels"] != -100
    assert (labels[batch["attention_mask"] == 0] == -100).all()
    assert (labels[~selected & (batch["attention_mask"] == 1)] == 0).all()  # untouched positions: original
    # with 7 possible tokens some samples hit the original token: those positions are "original" too
    assert 0 < int(labels[selected].sum()) < int(selected.sum())
    real = labels != -100
    bce = F.binary_cross_entropy_with_logits(out.rtd_logits[real], labels[real].float())
    assert torch.allclose(out.loss, out.parts["generator"] + RTD_WEIGHT * bce)
    out.parts["rtd"].backward()  # the discriminator's loss alone reaches the generator only through
    blocks = [p.grad for p in model.generator.blocks.parameters()]  # the shared embeddings, never its blocks
    assert all(g is None or not g.any() for g in blocks)
    assert model.discriminator.embeddings.token_embedding.weight.grad is not None


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_variant_trains_a_few_steps(tokenizer, documents, variant):
    config = config_for(tokenizer)
    model = build_variant_model(variant, config)
    pairs = variant in ("mlm+nsp", "mlm+sop")
    if pairs:
        data = pair_rows(documents, tokenizer, 64, variant[4:], torch.Generator().manual_seed(0))
        objective = PairMLM(tokenizer, MaskingProbs())
    else:
        blocks = [[tokenizer.cls_token_id, *tokenizer.encode(" ".join(doc), add_special_tokens=False)[:60],
                   tokenizer.sep_token_id] for doc in documents]
        data, objective = PackedData(blocks, [[0] * len(b) for b in blocks]), MaskedLM(tokenizer, MaskingProbs())
    spec = type("Spec", (), {"learning_rate": 3e-3, "weight_decay": 0.01, "warmup_steps": 1, "grad_clip": 1.0,
                             "batch_size": 4})()
    batch = objective.batch(data, range(4), torch.Generator().manual_seed(0))
    assert training_flops(model, batch) > 0
    history = train(model, objective, data, steps=3, spec=spec, seed=0, device=torch.device("cpu"), amp=None,
                    progress=False)
    assert len(history["loss"]) == 3 and all(loss > 0 for loss in history["loss"])
    assert kept_encoder(model).encode(batch["input_ids"], batch["attention_mask"]).shape[-1] == config.d_model


def test_electra_costs_more_flops_per_step_than_mlm(tokenizer):
    config = config_for(tokenizer)
    batch = electra_batch(len(tokenizer))
    mlm, electra = training_flops(build_model(config), batch), training_flops(Electra(config), batch)
    assert electra > mlm  # the generator comes on top of a discriminator as big as the BERT


def test_the_inverse_cdf_sampler_follows_the_softmax_and_never_draws_a_vanishing_token():
    from bertcourse.after_bert.replaced_tokens import sample_replacements as sample_tokens

    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0, -30.0]]).expand(100_000, 5)
    draws = sample_tokens(logits, torch.Generator().manual_seed(0))
    shares = torch.bincount(draws, minlength=5).double() / len(draws)
    # 100,000 draws: a share's standard error is below 0.0016; 0.008 is five of them
    assert torch.allclose(shares, torch.softmax(logits[0].double(), 0), atol=0.008)
    assert shares[4] == 0  # a token with probability ~1e-14 is never drawn
    sharp = sample_tokens(logits, torch.Generator().manual_seed(0), temperature=0.25)
    assert (sharp == 2).double().mean() > 0.95 > shares[2]
    with pytest.raises(ValueError, match="temperature"):
        sample_tokens(logits, torch.Generator(), temperature=0.0)

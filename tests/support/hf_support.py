"""Tiny transformers checkpoints built by the tests themselves (no hub): a randomly initialised
`BertForMaskedLM` with a WordPiece tokenizer, and GPT-NeoX / GPT-2 decoders with a byte-level BPE, each
written by `save_pretrained` as a downloaded checkpoint would be."""

from __future__ import annotations

from pathlib import Path

SENTENCES = [
    "the film was good and the acting was great", "a bad movie , long and boring", "i loved it",
    "it was never dull", "the story is thin but the cast is fun", "an awful , awful mess",
    "one of the best films of the year", "not worth the ticket", "a warm and funny picture",
    "the plot makes no sense at all",
]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def wordpiece_tokenizer(vocab_size: int = 120):
    """A BERT tokenizer (WordPiece, lower case, [CLS] A [SEP]) trained on `SENTENCES`."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertTokenizerFast

    core = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    core.normalizer = normalizers.BertNormalizer(lowercase=True)
    core.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    core.train_from_iterator(SENTENCES, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIALS))
    cls, sep = core.token_to_id("[CLS]"), core.token_to_id("[SEP]")
    core.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return BertTokenizerFast(tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                             sep_token="[SEP]", mask_token="[MASK]")


def bpe_tokenizer(vocab_size: int = 300):
    """A GPT-style byte-level BPE with <|endoftext|> (no [CLS]/[SEP]) trained on `SENTENCES`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(SENTENCES, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>")


def tiny_bert(folder: Path, *, vocab_size: int | None = None, seed: int = 0) -> Path:
    """A 1-layer, 32-wide BertForMaskedLM and its tokenizer in `folder` (vocab_size: the model's, to plant a
    mismatch; default the tokenizer's)."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    tokenizer = wordpiece_tokenizer()
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=vocab_size or len(tokenizer), hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)
    BertForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return Path(folder)


def tiny_decoder(folder: Path, kind: str = "gpt_neox", seed: int = 0) -> Path:
    """A 1-layer, 32-wide GPT-NeoX (Pythia's architecture) or GPT-2 causal LM and its BPE tokenizer."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, GPTNeoXConfig, GPTNeoXForCausalLM

    tokenizer = bpe_tokenizer()
    torch.manual_seed(seed)
    if kind == "gpt_neox":
        model = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                                                 num_attention_heads=2, intermediate_size=64,
                                                 max_position_embeddings=128))
    else:
        model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=2, n_positions=128,
                                           bos_token_id=0, eos_token_id=0))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return Path(folder)

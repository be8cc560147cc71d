"""The course's BERT-style uncased WordPiece tokenizer, trained on the pretraining corpus.

Why not `tokenizers.trainers.WordPieceTrainer`? It breaks ties between equally frequent merges in a
different order on every run, so two runs on the same corpus give different vocabularies (ids move),
and a vocabulary shared by lessons, grader and checkpoints must not move. So the *vocabulary* is
learnt here with the same algorithm (BPE-style merges of the most frequent adjacent pair, continuation
pieces prefixed with `##`) and a fixed tie-break; everything else — normalisation, pre-tokenisation,
WordPiece's greedy longest-match encoding, special tokens, pairs, offsets, `word_ids()` — is the
`tokenizers` library, wrapped as a `transformers.PreTrainedTokenizerFast`.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import shutil
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Protocol

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from bertcourse.folders import cache_dir
from bertcourse.progress import progress_bar

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0..4, in this order
CONTINUATION = "##"
ALGORITHM_VERSION = 2  # bump when the training procedure changes, so caches are not reused


class CorpusLike(Protocol):
    """What the tokenizer needs of a corpus (`bertcourse.data.Corpus` is one): its training sentences,
    and a fingerprint of them for the cache key."""

    train: list[str]

    def fingerprint(self) -> str:
        """A short hash of `train`, part of the tokenizer's cache key."""
        ...


def _normalizer() -> normalizers.Normalizer:
    return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=True)


def count_words(sentences: Iterable[str]) -> Counter[str]:
    """Normalised, pre-tokenised word counts: what WordPiece training sees.

    The space-separated pieces of the sentences are counted first (in C), and each distinct piece is then
    normalised and pre-tokenised once: WikiText-103's ~100M words are ~1M distinct pieces. The counts are
    those of normalising the whole text, since neither step looks across a space.
    """
    normalizer, pre_tokenizer = _normalizer(), pre_tokenizers.BertPreTokenizer()
    pieces: Counter[str] = Counter()
    for sentence in sentences:
        pieces.update(sentence.split(" "))
    counts: Counter[str] = Counter()
    for piece, n in pieces.items():
        for token in SPECIAL_TOKENS:  # the corpus writes unknown words as [UNK]: not a word to learn
            piece = piece.replace(token, " ")
        for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(piece)):
            counts[word] += n
    return counts


def learn_vocabulary(word_counts: Counter[str], vocab_size: int, limit_alphabet: int | None = None,
                     progress: bool = True) -> list[str]:
    """A WordPiece vocabulary of `vocab_size` entries, the same for the same counts on every run.

    Start from single characters (`c` at the start of a word, `##c` inside it), then repeatedly merge
    the most frequent adjacent pair of pieces; ties go to the alphabetically smallest pair.
    """
    limit_alphabet = limit_alphabet or max(vocab_size // 8, 100)
    char_counts: Counter[str] = Counter()
    for word, count in word_counts.items():
        for char in word:
            char_counts[char] += count
    alphabet = {c for c, _ in sorted(char_counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit_alphabet]}
    words: list[list[str]] = []
    counts: list[int] = []
    for word, count in sorted(word_counts.items()):
        if all(c in alphabet for c in word):  # words with a rare character become [UNK] anyway
            words.append([word[0]] + [CONTINUATION + c for c in word[1:]])
            counts.append(count)
    vocab = list(SPECIAL_TOKENS)
    vocab += sorted({piece for pieces in words for piece in pieces})
    if len(vocab) > vocab_size:
        raise ValueError(f"vocab_size {vocab_size} is smaller than the alphabet ({len(vocab)} entries)")

    pair_counts: defaultdict[tuple[str, str], int] = defaultdict(int)
    where: defaultdict[tuple[str, str], set[int]] = defaultdict(set)
    for index, pieces in enumerate(words):
        for pair in zip(pieces, pieces[1:]):
            pair_counts[pair] += counts[index]
            where[pair].add(index)
    heap = [(-count, pair) for pair, count in pair_counts.items()]
    heapq.heapify(heap)
    known = set(vocab)
    bar = progress_bar(total=vocab_size - len(vocab), desc="learning WordPiece vocabulary", disable=not progress)
    while len(vocab) < vocab_size and heap:
        negative, pair = heapq.heappop(heap)
        if pair_counts.get(pair, 0) != -negative or -negative <= 0:
            continue  # a stale heap entry: the count changed since it was pushed
        merged = pair[0] + pair[1][len(CONTINUATION):]
        changed: set[tuple[str, str]] = set()
        for index in sorted(where.pop(pair)):
            pieces, count = words[index], counts[index]
            for old in zip(pieces, pieces[1:]):
                pair_counts[old] -= count
                changed.add(old)
            out, i = [], 0
            while i < len(pieces):
                if i + 1 < len(pieces) and (pieces[i], pieces[i + 1]) == pair:
                    out.append(merged)
                    i += 2
                else:
                    out.append(pieces[i])
                    i += 1
            words[index] = out
            for new in zip(out, out[1:]):
                pair_counts[new] += count
                where[new].add(index)
                changed.add(new)
        pair_counts.pop(pair, None)
        for other in changed:
            if pair_counts.get(other, 0) > 0 and other != pair:
                heapq.heappush(heap, (-pair_counts[other], other))
        if merged not in known:
            known.add(merged)
            vocab.append(merged)
            bar.update()
    bar.close()
    return vocab


def build_tokenizer(vocab: list[str], model_max_length: int = 512) -> PreTrainedTokenizerFast:
    """Wrap a vocabulary as a BERT-style fast tokenizer: `[CLS] A [SEP] B [SEP]`, token types 0/1."""
    core = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]",
                                      max_input_chars_per_word=100))
    core.normalizer = _normalizer()
    core.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls_id, sep_id = vocab.index("[CLS]"), vocab.index("[SEP]")
    core.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    core.decoder = decoders.WordPiece(prefix=CONTINUATION)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
        model_max_length=model_max_length,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )


def train_tokenizer(sentences: list[str], vocab_size: int, model_max_length: int = 512,
                    progress: bool = True) -> PreTrainedTokenizerFast:
    """Train the course tokenizer on `sentences` (deterministic: same input, same vocabulary)."""
    return build_tokenizer(learn_vocabulary(count_words(sentences), vocab_size, progress=progress),
                           model_max_length)


def _cache_key(corpus: CorpusLike, vocab_size: int, model_max_length: int) -> str:
    settings = json.dumps([ALGORITHM_VERSION, vocab_size, model_max_length, corpus.fingerprint()])
    return hashlib.sha256(settings.encode()).hexdigest()[:16]


def load_tokenizer(corpus: CorpusLike, vocab_size: int, model_max_length: int = 512,
                   progress: bool = True) -> PreTrainedTokenizerFast:
    """The course tokenizer of `corpus`: trained once, then loaded from the cache ($BERTCOURSE_CACHE).

    A course.yml profile gives the numbers: `load_tokenizer(corpus, profile.vocab_size,
    profile.model.max_seq_len)`.
    """
    folder = cache_dir() / "tokenizers" / _cache_key(corpus, vocab_size, model_max_length)
    if (folder / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(str(folder))
    tokenizer = train_tokenizer(corpus.train, vocab_size, model_max_length, progress)
    staging = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
    tokenizer.save_pretrained(str(staging))
    try:
        staging.rename(folder)  # atomic: readers never see a half-written tokenizer
    except OSError:  # another process finished first; its vocabulary is the same one
        shutil.rmtree(staging, ignore_errors=True)
    return PreTrainedTokenizerFast.from_pretrained(str(folder))

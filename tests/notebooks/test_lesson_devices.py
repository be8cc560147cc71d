"""Lesson cells that read a model pretraining left on a GPU: their inputs go to the model's device.

No GPU here, so the model stands on another device than the tensors' default: its parameter lives on the
`meta` device and its forward refuses inputs from elsewhere, as torch refuses CPU inputs to a CUDA model.
"""

from pathlib import Path
from types import SimpleNamespace

import nbformat
import torch

ROOT = Path(__file__).resolve().parents[2]


def _cell(notebook: str, cell_id: str) -> str:
    cells = nbformat.read(ROOT / notebook, as_version=4).cells
    return next(c.source for c in cells if c.id == cell_id)


class _ModelElsewhere(torch.nn.Module):
    """A masked LM whose weights are on the meta device; it scores like a model of `vocab_size` tokens."""

    def __init__(self, vocab_size: int, max_seq_len: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(1, device="meta"))
        self.config = SimpleNamespace(max_seq_len=max_seq_len)
        self.vocab_size = vocab_size

    def forward(self, input_ids, attention_mask=None):
        for tensor in (input_ids, attention_mask):
            if tensor is not None and tensor.device != self.weight.device:
                raise RuntimeError(f"Expected all tensors to be on the same device, but found {tensor.device} "
                                   f"and {self.weight.device}")
        # what the model computes is not the point: scores on the CPU, as `.cpu()` would bring them back
        scores = torch.arange(self.vocab_size, dtype=torch.float).expand(*input_ids.shape, self.vocab_size)
        return SimpleNamespace(logits=scores)


def test_lesson_3_fills_masks_with_the_model_where_pretraining_left_it(capsys):
    from bertcourse.data import synthetic_sentences
    from bertcourse.tokenizer import train_tokenizer

    sentences = synthetic_sentences(400)
    tokenizer = train_tokenizer(sentences, 300, 64, progress=False)
    model = _ModelElsewhere(len(tokenizer), 64)
    namespace = {"torch": torch, "tokenizer": tokenizer, "corpus": SimpleNamespace(heldout=sentences[:4]),
                 "live": SimpleNamespace(model=model), "long_model": model, "long_tokenizer": tokenizer,
                 "LIVE_STEPS": 3, "long_history": {"step": [5]}}  # both of the cell's models elsewhere
    exec(_cell("lessons/03_tiny_bert_from_scratch.ipynb", "cell-18"), namespace)
    shown = capsys.readouterr().out
    assert shown.count("top 5:") == 8
    top = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer) - 1, len(tokenizer) - 6, -1)))
    assert str(top) in shown, "the guesses are the model's highest scores"

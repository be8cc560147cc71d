"""Training on several processes: what `torchrun` adds to the training loops, kept out of the loops.

`torchrun --nproc_per_node N -m bertcourse.cli pretrain ...` (or `... finetune ...`: `bertcourse.training.finetune`
uses the same class, see its module docstring) starts N copies of the same command, one per device,
and tells each its place in environment variables (RANK, LOCAL_RANK, WORLD_SIZE). `Processes` reads them
(nothing set: one process, and every method below does nothing), joins the process group (gloo on CPUs,
nccl on CUDA GPUs) and wraps the model in DistributedDataParallel, which averages the gradients across
processes during `backward()`, so every process takes the same optimizer step.

How the work is split, and what that changes:

- the global batch stays the profile's `batch_size`: every process computes the same global batch
  indices (`packing.batch_indices`) and takes its own `batch_size / world_size` consecutive rows of them
  (`shard`); a world size that does not divide the batch size is refused;
- each process masks its rows with its own generator, seeded from (seed, rank) (`rank_seed`; rank 0 of
  a distributed run and a single process use the same seed). The masks of a distributed run therefore
  differ from a single-process run's, and BERT's loss curves agree within a tolerance, not exactly. The
  GPT draws no masks: its distributed loss curve matches the single process up to float rounding;
- every process's loss is weighted by its share of the global batch's targets (`global_mean`), so the
  averaged gradient is the gradient of the mean over the whole global batch, as in a single process
  (a plain DDP average would weight a shard with few masked tokens as much as one with many);
- rank 0 alone evaluates, prints and writes the checkpoint; the checkpoint holds every process's random
  generators (`gather`), so a killed distributed run resumes exactly, but only on the same number of
  processes: `check_resume` refuses another world size, since per-process generators cannot be split or
  merged into those of another world size.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from bertcourse.training.checkpoint import CheckpointError
from bertcourse.training.devices import pick_device
from bertcourse.errors import BertcourseError
from bertcourse.masking import IGNORE_INDEX

SEED_STRIDE = 1_000_003  # rank r's generators start from seed + r * SEED_STRIDE: far from any other seed


def launched_by_torchrun() -> bool:
    """Whether this process is one of several that `torchrun` started (it sets RANK)."""
    return int(os.environ.get("RANK", -1)) != -1


def is_main_process() -> bool:
    """Rank 0, or the only process: the one that prints and writes."""
    return int(os.environ.get("RANK", 0)) == 0


def rank_seed(seed: int, rank: int) -> int:
    """The seed of rank `rank`'s own generator derived from the run's `seed` (rank 0: `seed` itself)."""
    return seed + SEED_STRIDE * rank


class Processes:
    """This process's place among the processes of one run; one process when not started by torchrun."""

    def __init__(self, requested_device: str | None = None):
        self.ddp = launched_by_torchrun()
        self.rank = int(os.environ["RANK"]) if self.ddp else 0
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0)) if self.ddp else 0
        self.world_size = int(os.environ.get("WORLD_SIZE", 1)) if self.ddp else 1
        device = pick_device(requested_device)
        if self.ddp and device.type == "cuda":
            device = torch.device("cuda", self.local_rank)  # one GPU per process on each machine
            torch.cuda.set_device(device)
        if self.ddp and device.type not in ("cpu", "cuda"):
            raise BertcourseError(f"distributed training runs on CPUs (gloo) or CUDA GPUs (nccl), not on "
                                  f"{device.type}: pass --device cpu, or run one process without torchrun")
        self.device = device
        self.started = False

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that evaluates, prints and writes the checkpoint."""
        return self.rank == 0

    def start(self, batch_size: int) -> None:
        """Join the process group (a no-op for one process), after checking that the batch can be split."""
        if self.ddp and batch_size % self.world_size:
            raise BertcourseError(f"the batch of {batch_size} rows cannot be split evenly across "
                                  f"{self.world_size} processes: run a number of processes that divides it")
        if self.ddp and not dist.is_initialized():
            backend = "nccl" if self.device.type == "cuda" else "gloo"
            dist.init_process_group(backend, timeout=timedelta(minutes=30),
                                    device_id=self.device if self.device.type == "cuda" else None)
            self.started = True

    def close(self) -> None:
        """Wait for every process (rank 0's final evaluation), then leave the process group if `start` joined
        it (a group the caller started, e.g. for several fine-tuning runs in a row, stays)."""
        if self.ddp and dist.is_initialized():
            dist.barrier()
        if self.started:
            dist.destroy_process_group()
            self.started = False

    def wrap(self, model: torch.nn.Module, find_unused: bool = False) -> torch.nn.Module:
        """The model wrapped to average its gradients across processes (itself for one process).

        `find_unused`: some trainable parameters take no part in the loss (a classifier on a pretraining
        model leaves its MLM head unused); DDP then looks for them after every forward instead of waiting.
        """
        if not self.ddp:
            return model
        ids = [self.device.index] if self.device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, find_unused_parameters=find_unused)

    def shard(self, indices: Sequence[int]) -> list[int]:
        """This process's consecutive share of the global batch's rows (equal shares when the world size
        divides the batch; a fine-tuning epoch's shorter last batch is split as evenly as it goes)."""
        n = len(indices)
        return list(indices[self.rank * n // self.world_size : (self.rank + 1) * n // self.world_size])

    def global_mean(self, loss: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, float, int]:
        """(the loss to backpropagate, the mean loss over the global batch's targets, its real tokens).

        `loss` is the mean over this shard's targets (labels != -100). DDP averages gradients over the
        processes, so scaling each shard's loss by world_size * its targets / all targets makes the
        averaged gradient that of the global mean, exactly what a single process computes.
        """
        targets = (batch["labels"] != IGNORE_INDEX).sum()
        tokens = batch["attention_mask"].sum()
        if not self.ddp:
            return loss, loss.item(), int(tokens)
        totals = torch.stack([loss.detach().float() * targets, targets.float(), tokens.float()])
        dist.all_reduce(totals)  # sums over the processes
        weight = self.world_size * targets / totals[1].clamp(min=1)
        return loss * weight, (totals[0] / totals[1].clamp(min=1)).item(), int(totals[2])

    def gather(self, value: Any) -> list[Any]:
        """Every process's `value`, in rank order, on every process ([value] for one process)."""
        if not self.ddp:
            return [value]
        values: list[Any] = [None] * self.world_size
        dist.all_gather_object(values, value)
        return values

    def check_resume(self, path: Path, saved: dict) -> None:
        """Refuse a checkpoint written by another number of processes, before the other settings."""
        theirs = saved["settings"].get("world_size", 1)
        if theirs != self.world_size:
            raise CheckpointError(
                f"{path} was written by a run on {theirs} process(es), this run has {self.world_size}: resume "
                f"it on {theirs} (torchrun --nproc_per_node {theirs}, or no torchrun for 1). Each process "
                "masks with its own random generator, saved in the checkpoint, and these cannot be split or "
                "merged for another number of processes")

    def own_rng(self, saved: dict) -> dict:
        """This process's random generator states from a checkpoint (`rng` holds rank 0's; `rng_by_rank`,
        written by a distributed run, every rank's)."""
        return saved.get("rng_by_rank", [saved["rng"]])[self.rank]

    def reseed_dropout(self, seed: int) -> None:
        """Give ranks other than 0 their own stream of torch's global generator (dropout), once the model
        is built the same on every rank; rank 0 keeps a single process's stream."""
        if self.rank:
            torch.manual_seed(rank_seed(seed, self.rank))


__all__ = ["SEED_STRIDE", "Processes", "is_main_process", "launched_by_torchrun", "rank_seed"]

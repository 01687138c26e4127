"""Training on several processes (``torchrun``): each worker encodes its share of a batch, and the
paraphrase embeddings of all workers are gathered *with their gradient*, so SDML's softmax sees
every pair of the global batch as a negative, exactly as one process with the whole batch would.

Every worker samples the same global batches (same seed) and takes a contiguous share of each
(``local_share``); ``global_rows`` all-gathers the encoded rows through
``torch.distributed.nn.functional.all_gather``, whose backward hands each worker the sum over
workers of the gradient of its own rows. Each worker computes the same global loss, so that sum is
``world_size`` times the true gradient of its rows; DistributedDataParallel then *averages* the
parameter gradients over workers, which cancels the factor: the step equals the one-process step.

The fit loop (``qpr.training.loop``, ``shared=True``) skips a batch too short to give every worker
a row (a collective needs every worker in every step) and hands each step this worker's share.

Backend: NCCL where CUDA is available, else gloo (CPU). Outside ``torchrun`` (no ``WORLD_SIZE``
in the environment, or 1) nothing here does anything: ``world()`` is ``(0, 1)``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
from torch import nn

from qpr.settings import settings


def init_from_env() -> None:
    """Join the process group ``torchrun`` describes (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` ...)
    when there is more than one worker; a no-op otherwise or when already joined."""
    if settings().world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")


def world() -> tuple[int, int]:
    """This worker's rank and the number of workers; ``(0, 1)`` when not distributed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def local_share(batch: np.ndarray) -> np.ndarray:
    """This worker's contiguous share of a global ``batch`` of row indices (sizes differ by at
    most one when the batch does not divide evenly)."""
    rank, size = world()
    return np.array_split(np.asarray(batch), size)[rank]


def global_rows(rows: torch.Tensor) -> torch.Tensor:
    """All workers' ``rows`` stacked in rank order, differentiable (module doc); ``rows`` itself
    when not distributed. Shares may differ in length by one: each is padded to the longest for
    the collective, and the padding is cut off again (its gradient is zero)."""
    rank, size = world()
    if size == 1:
        return rows
    lengths = [torch.zeros(1, dtype=torch.long, device=rows.device) for _ in range(size)]
    dist.all_gather(lengths, torch.tensor([len(rows)], device=rows.device))
    lengths = [int(n) for n in lengths]
    longest = max(lengths)
    padded = torch.cat([rows, rows.new_zeros(longest - len(rows), *rows.shape[1:])])
    parts = dist_fn.all_gather(padded)
    return torch.cat([part[:n] for part, n in zip(parts, lengths)])


def wrap(model: nn.Module) -> nn.Module:
    """``model`` inside DistributedDataParallel when distributed (it averages gradients over
    workers after backward), else ``model`` itself."""
    if world()[1] == 1:
        return model
    return nn.parallel.DistributedDataParallel(model)

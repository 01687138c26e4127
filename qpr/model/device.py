"""Which device trains and encodes: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.

The CLI's ``--device`` chooses it for the process (``use_device``); otherwise ``QPR_DEVICE``
(``qpr.settings``) does, which is how the app's background trainer gets it. Training runs on it
(``qpr.training.train``), with bfloat16 autocast on CUDA only (``autocast``); bulk encoding
(``encode_texts`` over ``BULK`` texts or more: a corpus, not a query) runs on it; a search's few
queries stay on the CPU, where the served model lives. Bundles always load on the CPU
(``map_location``) and trained encoders come back to it, so a bundle written on a GPU machine
serves anywhere.
"""

from __future__ import annotations

import contextlib

import torch

from qpr.errors import QPRError
from qpr.settings import settings

DEVICES = ("auto", "cpu", "cuda")
BULK = 4096  # texts from which ``encode_texts`` moves to the chosen device

_chosen: str | None = None


def resolve(name: str) -> torch.device:
    """The device ``name`` (``DEVICES``) means on this machine; QPRError for cuda without a GPU."""
    if name not in DEVICES:
        raise QPRError(f"unknown device {name!r}: use one of {', '.join(DEVICES)}")
    if name == "cuda" and not torch.cuda.is_available():
        raise QPRError("--device cuda, but torch sees no CUDA GPU here; use --device auto or cpu")
    return torch.device("cuda" if name == "cuda" or (name == "auto" and torch.cuda.is_available()) else "cpu")


def use_device(name: str) -> torch.device:
    """Train and encode on ``name`` in this process from now on (checked at once)."""
    global _chosen
    device = resolve(name)
    _chosen = name
    return device


def current_device() -> torch.device:
    """The device chosen by ``use_device``, else by ``QPR_DEVICE``."""
    return resolve(_chosen or settings().device)


def autocast(device: torch.device):
    """bfloat16 autocast on CUDA (mixed precision), nothing on the CPU (results stay float32 there)."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()

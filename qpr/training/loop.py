"""The one fit loop that every trainer runs: epochs of batches, early stopping on a named score,
Ctrl-C, progress and callbacks.

A trainer supplies what differs: the epoch's batches (``batches``), one training step (``step``:
one batch -> its loss, the update included; ``descend`` is the usual update) and the epoch's
report (``report``: the epoch's batches and losses -> the history row's fields, its validation
score among them). The loop owns the rest, so that each trainer's early stopping, interruption and
progress behave alike:

- each row is ``{"epoch": n, **report(...), "seconds": since the start}``;
- with a ``score`` (higher is better), an epoch whose score beats the best by more than 1e-4 is
  the new best and its weights are kept; ``patience`` epochs in a row without such a gain stop
  training; at the end the model holds the best epoch's weights (its starting weights when no
  epoch ever gained). Without a score every epoch runs and the last is kept;
- Ctrl-C (KeyboardInterrupt) ends training after the current batch and returns the best epoch so
  far, or re-raises when no epoch finished or ``return_on_interrupt`` is False (a caller that runs
  many trainings must not record a cut-short one as a result);
- with ``shared`` batches (row indices) under ``torchrun``, a batch too short to give every worker
  a row is skipped and the step gets this worker's share (``qpr.training.distributed``).
"""

from __future__ import annotations

import copy
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import nn
from tqdm.auto import tqdm

from qpr.errors import QPRError
from qpr.training import distributed

GAIN = 1e-4  # the least rise of the score that counts as a better epoch


@dataclass
class FitResult:
    """One history row per finished epoch, the best epoch and its score (NaN without a score),
    why training stopped ("max_epochs" | "early_stopping" | "interrupted") and how long it took."""

    history: list[dict] = field(default_factory=list)
    best_epoch: int = 0
    best_score: float = -1.0
    stopped: str = "max_epochs"
    seconds: float = 0.0


def descend(loss: torch.Tensor, *optimizers: torch.optim.Optimizer) -> float:
    """One gradient step of ``optimizers`` on ``loss``; returns the loss as a number."""
    for optimizer in optimizers:
        optimizer.zero_grad()
    loss.backward()
    for optimizer in optimizers:
        optimizer.step()
    return loss.item()


def mean_loss(batches: Sequence, losses: list[float]) -> dict:
    """The default report: the epoch's mean batch loss as ``loss``."""
    return {"loss": sum(losses) / max(len(losses), 1)}


class _Best:
    """Early stopping: the best score so far, its epoch and weights, and the epochs since."""

    def __init__(self, model: nn.Module, score: str | None, patience: int, result: FitResult) -> None:
        self.model, self.score, self.patience, self.result = model, score, patience, result
        # The starting weights are what is kept if no epoch ever gains.
        self.state = copy.deepcopy(model.state_dict()) if score else None
        self.stale = 0

    def stop_after(self, row: dict) -> bool:
        """Note ``row``; True when patience has run out."""
        if self.score is None:
            self.result.best_epoch, self.result.best_score = row["epoch"], float("nan")
            return False
        if self.score not in row:
            raise QPRError(f"early stopping is on {self.score!r}, but the epoch's report gave only {sorted(row)}: "
                           f"name one of those as the score, or make the report return {self.score!r}")
        if row[self.score] > self.result.best_score + GAIN:
            self.result.best_score, self.result.best_epoch, self.stale = row[self.score], row["epoch"], 0
            self.state = copy.deepcopy(self.model.state_dict())
            return False
        self.stale += 1
        if self.stale >= self.patience:
            self.result.stopped = "early_stopping"
            return True
        return False

    def restore(self) -> None:
        if self.state is not None:
            self.model.load_state_dict(self.state)


def fit(
    model: nn.Module,
    epochs: int,
    batches: Callable[[int], Sequence],
    step: Callable[[Any], float],
    report: Callable[[Sequence, list[float]], dict] = mean_loss,
    score: str | None = None,
    patience: int = 1,
    validate_start: bool = False,
    shared: bool = False,
    progress: bool = False,
    score_label: str | None = None,
    on_epoch: Callable[[dict], None] | None = None,
    on_batch: Callable[[int, int, int], None] | None = None,
    on_epoch_start: Callable[[int, int], None] | None = None,
    return_on_interrupt: bool = True,
) -> FitResult:
    """Train ``model`` (whose weights early stopping keeps) for up to ``epochs`` epochs (module doc).

    ``batches(epoch)`` draws epoch ``epoch``'s batches (1-based, after ``model.train()``);
    ``step(batch)`` trains on one and returns its loss; ``report(batches, losses)`` gives the row's
    fields once the epoch's steps are done, ``score`` (if given) among them. ``validate_start``
    reports an epoch 0 of no batches first, so the starting weights compete too. ``shared``:
    batches are row indices shared among ``torchrun`` workers (module doc). ``progress`` shows a
    bar per epoch and a line per row (its losses and score, the score as ``score_label``).
    ``on_epoch_start(epoch, batches in it)`` before its first step (a learning-rate schedule's
    horizon), ``on_batch(epoch, batches done, batches in the epoch)`` after each step,
    ``on_epoch(row)`` after each row. Returns the history; ``model`` ends in eval mode.
    """
    result = FitResult(best_score=-1.0 if score else float("nan"))
    best = _Best(model, score, patience, result)
    workers = distributed.world()[1] if shared else 1
    start = time.perf_counter()

    def finish_epoch(epoch: int, drawn: Sequence, losses: list[float]) -> bool:
        row = {"epoch": epoch, **report(drawn, losses), "seconds": time.perf_counter() - start}
        result.history.append(row)
        if progress:
            shown = [((score_label or key) if key == score else key, value) for key, value in row.items()
                     if key.startswith("loss") or key == score]
            # Standard error, as the bars: a command's standard output is its result (qpr general's JSON).
            tqdm.write(f"epoch {epoch}: " + "  ".join(f"{name} {value:.4f}" for name, value in shown), file=sys.stderr)
        if on_epoch:
            on_epoch(row)
        return best.stop_after(row)

    try:
        if validate_start:
            finish_epoch(0, [], [])  # it competes for the best, but at least one epoch always trains
        for epoch in range(1, epochs + 1):
            model.train()
            drawn = batches(epoch)
            if workers > 1:
                # A collective needs every worker in every step: a batch too short to share is skipped.
                drawn = [batch for batch in drawn if len(batch) >= workers]
            if on_epoch_start:
                on_epoch_start(epoch, len(drawn))
            losses: list[float] = []
            bar = tqdm(drawn, desc=f"epoch {epoch}/{epochs}", disable=not progress, leave=False)
            for done, batch in enumerate(bar, start=1):
                losses.append(step(distributed.local_share(batch) if shared else batch))
                if on_batch:
                    on_batch(epoch, done, len(drawn))
                shown = {"loss": f"{losses[-1]:.4f}"}
                if score:
                    shown[score] = f"{result.best_score:.4f}" if result.history else "-"
                bar.set_postfix(shown)
            if finish_epoch(epoch, drawn, losses):
                break
    except KeyboardInterrupt:
        if not result.history or not return_on_interrupt:
            raise
        result.stopped = "interrupted"
    best.restore()
    model.eval()
    result.seconds = time.perf_counter() - start
    return result

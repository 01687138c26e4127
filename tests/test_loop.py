"""The one fit loop (qpr.training.loop) on a one-weight model whose weight counts the steps taken,
so that which epoch's weights were kept can be read off it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from qpr.errors import QPRError
from qpr.training import distributed
from qpr.training.loop import descend, fit

BATCHES = 3  # per epoch: after epoch n the weight is 3 n


def counter() -> nn.Linear:
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    return model


def counting_step(model: nn.Linear):
    def step(batch) -> float:
        with torch.no_grad():
            model.weight += 1
        return float(batch)
    return step


def scripted(scores: list[float], name: str = "val"):
    """A report whose score is the next of ``scores``."""
    it = iter(scores)
    return lambda batches, losses: {"loss": sum(losses) / len(losses) if losses else 0.0, name: next(it)}


def run(model, scores, **kwargs):
    return fit(model, kwargs.pop("epochs", 6), lambda epoch: list(range(BATCHES)), counting_step(model), scripted(scores),
               score="val", **kwargs)


def weight(model) -> float:
    return model.weight.item()


def test_early_stopping_stops_at_patience_and_restores_the_best_epoch():
    model = counter()
    result = run(model, [0.1, 0.5, 0.4, 0.5 + 5e-5, 0.9, 0.9], patience=2)
    # Epochs 3 and 4 gain nothing (4 by less than 1e-4): stopped after 4, epoch 2's weights kept.
    assert result.stopped == "early_stopping" and [row["epoch"] for row in result.history] == [1, 2, 3, 4]
    assert result.best_epoch == 2 and result.best_score == 0.5 and weight(model) == 2 * BATCHES
    assert not model.training
    assert [list(row) for row in result.history] == [["epoch", "loss", "val", "seconds"]] * 4
    assert result.history[0]["loss"] == 1.0  # the mean of the step's losses 0, 1, 2


def test_without_early_stop_every_epoch_runs_and_the_best_is_kept():
    model = counter()
    result = run(model, [0.3, 0.8, 0.2], epochs=3, patience=5)
    assert result.stopped == "max_epochs" and len(result.history) == 3
    assert result.best_epoch == 2 and weight(model) == 2 * BATCHES


def test_no_gain_ever_keeps_the_starting_weights():
    model = counter()
    result = run(model, [float("nan")] * 2, patience=2)
    assert result.stopped == "early_stopping" and result.best_epoch == 0 and weight(model) == 0


def test_without_a_score_every_epoch_runs_and_the_last_is_kept():
    model = counter()
    result = fit(model, 3, lambda epoch: [1, 2], counting_step(model))
    assert result.stopped == "max_epochs" and result.best_epoch == 3 and math.isnan(result.best_score)
    assert weight(model) == 6 and [row["loss"] for row in result.history] == [1.5] * 3


@pytest.mark.parametrize("where", ["on_epoch", "step"])
def test_ctrl_c_keeps_the_best_epoch_and_returns_normally(where):
    model = counter()
    step = counting_step(model)

    def interrupting_step(batch):
        if model.weight.item() == 3 * BATCHES + 1:  # the second step of epoch 4
            raise KeyboardInterrupt
        return step(batch)

    def interrupt_in_epoch_3(row):
        if row["epoch"] == 3:
            raise KeyboardInterrupt

    scores = scripted([0.2, 0.7, 0.9, 0.1])
    if where == "step":
        result = fit(model, 6, lambda epoch: list(range(BATCHES)), interrupting_step, scores, score="val", patience=3)
        assert len(result.history) == 3 and result.best_epoch == 3
    else:
        # The third epoch's row is made, but Ctrl-C comes before it is scored: epoch 2 stays best.
        result = fit(model, 6, lambda epoch: list(range(BATCHES)), step, scores, score="val", patience=3,
                     on_epoch=interrupt_in_epoch_3)
        assert len(result.history) == 3 and result.best_epoch == 2
    assert result.stopped == "interrupted" and weight(model) == result.best_epoch * BATCHES and not model.training


def test_ctrl_c_propagates_before_any_epoch_or_when_asked():
    def interrupt(*args):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(counter(), [0.5], on_epoch=interrupt, return_on_interrupt=False)
    with pytest.raises(KeyboardInterrupt):
        fit(counter(), 2, lambda epoch: [1], interrupt)


def test_callbacks_see_every_epoch_start_batch_and_row():
    model, calls = counter(), []
    result = run(model, [0.1, 0.2], epochs=2, on_epoch=lambda row: calls.append(("epoch", row["epoch"], row["val"])),
                 on_batch=lambda *args: calls.append(("batch", *args)),
                 on_epoch_start=lambda *args: calls.append(("start", *args)))
    expected = []
    for epoch, score in ((1, 0.1), (2, 0.2)):
        expected += [("start", epoch, BATCHES)] + [("batch", epoch, i, BATCHES) for i in (1, 2, 3)]
        expected.append(("epoch", epoch, score))
    assert calls == expected and len(result.history) == 2


def test_validate_start_scores_the_starting_weights_as_epoch_0():
    model = counter()
    result = run(model, [0.6, 0.5, 0.55], epochs=2, patience=3, validate_start=True)
    assert [row["epoch"] for row in result.history] == [0, 1, 2] and result.history[0]["loss"] == 0.0
    assert result.best_epoch == 0 and weight(model) == 0


def test_a_score_the_report_does_not_give_is_a_clear_error():
    model = counter()
    with pytest.raises(QPRError, match=r"early stopping is on 'val_auc', but the epoch's report gave only \['epoch', "
                                       r"'loss', 'seconds', 'val'\]"):
        fit(model, 2, lambda epoch: [1], counting_step(model), scripted([0.5]), score="val_auc")


def test_shared_batches_skip_what_cannot_be_shared_and_hand_each_worker_its_share(monkeypatch):
    monkeypatch.setattr(distributed, "world", lambda: (1, 2))  # the second of two workers
    seen = []

    def step(share: np.ndarray) -> float:
        seen.append(share.tolist())
        return 0.0

    fit(counter(), 1, lambda epoch: [np.arange(5), np.array([5]), np.arange(6, 8)], step, shared=True)
    assert seen == [[3, 4], [7]]  # [5] alone would leave a worker without a row


def test_progress_prints_each_rows_losses_and_score(capsys):
    run(counter(), [0.25], epochs=1, progress=True, score_label="val ROC AUC")
    printed = capsys.readouterr()
    assert "epoch 1: loss 1.0000  val ROC AUC 0.2500" in printed.err and "epoch" not in printed.out  # stdout is a command's result


def test_descend_steps_every_optimizer_on_the_loss():
    a, b = nn.Parameter(torch.tensor(1.0)), nn.Parameter(torch.tensor(2.0))
    first, second = torch.optim.SGD([a], lr=0.5), torch.optim.SGD([b], lr=0.5)
    a.grad = torch.tensor(10.0)  # stale: cleared before the step
    assert descend(a * b, first, second) == 2.0
    assert (a.item(), b.item()) == (0.0, 1.5)

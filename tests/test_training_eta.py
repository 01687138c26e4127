"""The background training's time left (issue 54 item 6: "59 s left" 3 s before the end, an early
stop): measured from this run's batches and validations, to the epoch early stopping would end
on as well as to the last one, counted down from when it was written, and never a number of
seconds once it has run out or in a phase without one."""

from __future__ import annotations

from workflows.background_training import Pace, describe


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def running(**fields) -> dict:
    return {"state": "running", "epoch": 2, "max_epochs": 3, "step": 5, "steps": 10, "updated": 1000.0,
            "message": "training the encoder"} | fields


def test_the_time_left_counts_down_from_when_it_was_written_and_then_says_finishing():
    status = running(eta_s=59.0, eta_max_s=59.0)
    assert "about 59 s left" in describe(status, now=1000.0)
    assert "about 29 s left" in describe(status, now=1030.0)
    late = describe(status, now=1058.5)  # what the walk saw: 59 s promised, the end 3 s away
    assert "finishing" in late and "s left" not in late


def test_the_likely_end_is_said_beside_the_most_it_can_take():
    status = running(eta_s=12.0, eta_max_s=40.0)
    assert "about 12 s left if no later epoch does better (at most 40 s)" in describe(status, now=1000.0)
    assert "finishing if no later epoch does better (at most 27 s)" in describe(status, now=1013.0)


def test_a_phase_without_an_estimate_shows_no_seconds():
    status = running(step=10, eta_s=None, message="finishing: the index and the final evaluation on held-out questions")
    text = describe(status, now=5000.0)
    assert "s left" not in text and "finishing" in text


def test_the_pace_is_the_runs_own_batches_and_validations_not_its_start_up():
    clock = Clock()
    pace = Pace(clock)
    clock.now += 30  # reading the corpus before the first batch is not training time
    steps, max_epochs = 4, 2
    for step in range(1, steps + 1):  # one second a batch, the first one's start-up included
        clock.now += 1.0
        pace.batch(step, steps)
        if step == 1:
            assert pace.eta_s(1, step, steps, max_epochs) is None  # no pace from one batch
    clock.now += 5.0  # the epoch's validation
    pace.validated()
    clock.now += 1.0
    pace.batch(1, steps)  # epoch 2, batch 1
    # 3 batches of epoch 2 left at 1 s each, and its validation at the 5 s measured
    assert abs(pace.eta_s(2, 1, steps, max_epochs) - (3 * 1.0 + 5.0)) < 1e-9
    # ending after epoch 4 instead: two more epochs of 4 batches and their validations
    assert abs(pace.eta_s(2, 1, steps, 4) - (3 * 1.0 + 5.0 + 2 * (4 * 1.0 + 5.0))) < 1e-9

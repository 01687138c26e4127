"""kill -9 right after each step of a model swap: "Use the trained model" in the demo and in an
uploaded project, and the demo's first training (``harness.swap_crashes``, whose module doc says
how a point is run and checked). After a restart on the same cache and database, the model
served is the last recorded swap's, a second restart agrees, and the trained model is offered
again only where it is not served (``workflows.swap_recovery``)."""

from __future__ import annotations

import pytest

from harness.swap_crashes import POINTS, run_point


@pytest.mark.parametrize("scenario, point", POINTS)
def test_a_swap_killed_at_any_step_serves_what_it_recorded_after_a_restart(tiny_bundle, tmp_path, scenario, point):
    outcome = run_point(tmp_path / "app", scenario, point, tiny_bundle)
    assert outcome["consistent"], outcome
    # Killed before its bundle was saved, the swap is recorded back at the restart; after, it stands.
    taken_back = point == "recorded"
    assert outcome["serves"] == ("first" if taken_back else "trained"), outcome
    assert outcome["swaps_recorded"] == (2 if taken_back else 1), outcome

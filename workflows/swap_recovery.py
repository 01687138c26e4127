"""A swap cut short by a crash, repaired when the project's model is loaded (``reconcile``).

A swap (``workflows.retraining.confirm``, the demo's first training too) writes three things,
in this order: the **record** in the store, the **bundle** where the project's home saves it, and
the **pointer** a start serves from (the demo's ``served-bundle.json``, a project's
``project.json``; for the demo's first training, the saved bundle is its own pointer). The record
is the source of truth: written first, in one transaction, it says what the project means to
serve. At start the pointer has chosen the bundle served; ``reconcile`` compares it with the last
recorded swap:

- they agree: nothing to repair; a finished background training of that model is settled (a
  kill between the pointer and the settling would otherwise offer it again);
- the pointer still serves what the last swap replaced (the kill came after the record): if the
  swap's bundle is saved and loads, it is served and the pointer repaired; if not (the kill came
  before the save, or the bundle was removed since), the swap is recorded back, as a swap taken
  back in a running app is;
- the pointer serves anything else: served otherwise since the swap, not cut short (a new
  version uploaded, an operator's ``QPR_BUNDLE``), and left as it is.

docs/RELIABILITY.md ("A swap interrupted by a crash") lists the kill points and what each
leaves.
"""

from __future__ import annotations

import logging

from qpr.bundles.bundle import Bundle
from qpr.errors import QPRError, one_line
from workflows.project import Project
from workflows.retraining import settle

RECOVERY = "the app at start"  # who a swap recorded back at start is recorded as decided by

log = logging.getLogger(__name__)


def reconcile(project: Project) -> str | None:
    """Make what ``project`` serves and its last recorded swap agree (module doc), before it
    serves anything; returns what was repaired, in words, or None when nothing was."""
    swaps = project.store.swaps.frame()
    if swaps.empty:
        return None
    last = swaps.iloc[-1]
    version, replaced = last["bundle_version"], last["replaced_version"]
    served = project.model.current().bundle.version
    repaired = None
    if served == replaced and served != version:
        try:
            path = project.home.where(version)
            bundle = Bundle.load(path)
        except QPRError as err:
            project.store.swaps.record(RECOVERY, served, version, [])
            repaired = (f"{project.slug}: the swap to {version} was recorded but its bundle never saved ({one_line(err)}); "
                        f"recorded back to {served}, which is served")
        else:
            project.model.restart_with(bundle)
            served = version
            try:
                project.home.remember(path, last["annotator"])
                repaired = f"{project.slug}: the swap to {version} was recorded but not remembered; serving it, remembered now"
            except (OSError, QPRError) as err:  # served all the same: the record stays the truth, and the next start repairs again
                repaired = (f"{project.slug}: the swap to {version} was recorded but not remembered; serving it, but it could "
                            f"not be remembered now ({one_line(err)})")
    if served == version:
        settle(project.training, version, f"put in service by {last['annotator']}")
    if repaired:
        log.warning(repaired)
    return repaired

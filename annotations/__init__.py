"""Annotation domain: judgments of retrieved questions, corrected clusters, exports for retraining.

- ``db.open_store(url, project=...)``: open (create / migrate) the database, seen through one project;
  any SQLAlchemy URL, SQLite default.
- ``store.AnnotationStore``: one project's data, one repository per concern: ``store.corpora`` (snapshots),
  ``store.judgments`` (``record`` / ``undo_last`` / ``frame`` / ``progress``), ``store.labels``, ``store.swaps``,
  ``store.exports``, ``store.review``, ``store.roles``.
- ``queue``: what to judge next (``spot_check``, ``next_cluster``, ``least_coherent``).
- ``grouping``: the cluster-building queue of a project of bare questions (``next_group``, ``progress``).
- ``constraints.corrected_clusters``: the imported clusters changed by the judgments as pair
  constraints (and the model's pair probabilities, ``pair_scores``): questions moved, members voted
  out, whole clusters merged only on evidence for the whole clusters, conflicts reported;
  ``merge``: which judgments count and the item decisions.
- ``corrections``: corrected clusters served at once as label versions; history, rollback, revert.
- ``agreement.agreement``: percent agreement and Cohen's kappa per annotator pair.
- ``export.export``: corrected clusters as a cluster file + training pairs + manifest.
- ``simulation`` (``oracle``, ``strategies``): the simulated feedback loop's parts
  (docs/FEEDBACK_LOOP.md): a simulated annotator that knows the true clusters and
  candidate-selection strategies; the runner noisy train -> judge -> merge -> export -> retrain ->
  evaluate is ``workflows.simulated_loop`` (``qpr-annotations loop``).

The command line (``qpr-annotations`` or ``python -m workflows``: export, retrain, stats, loop) is
``workflows.cli``.

Depends on ``qpr``; never on the app or Gradio.
"""

from annotations.db import open_store
from annotations.errors import AnnotationError
from annotations.models import LABELS

__all__ = ["open_store", "AnnotationError", "LABELS"]

"""Annotation domain: judgments of retrieved questions, corrected clusters, exports for retraining.

- ``db.open_store(url, project=...)``: open (create / migrate) the database, seen through one project;
  any SQLAlchemy URL, SQLite default.
- ``store.AnnotationStore``: one project's corpus snapshots, ``record`` / ``undo_last`` / ``judgments`` / ``progress``.
- ``queue``: what to judge next (``spot_check``, ``next_cluster``, ``least_coherent``).
- ``grouping``: the cluster-building queue of a project of bare questions (``next_group``, ``progress``).
- ``merge.corrected_clusters``: clusters joined by confirmed paraphrases and split by members
  judged not to belong, conflicts reported.
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

"""A new version of a project's corpus, and what it means for the project's training: refused
while a training runs on the current version, and a finished training of the old version is
never offered afterwards (its model would serve questions the project no longer has)."""

from __future__ import annotations

from typing import Callable

from qpr.data.upload import Upload
from qpr.errors import QPRError
from qpr.serving.projects import Projects
from workflows.background_training import ACTIVE
from workflows.project import Project


def add_version(projects: Projects, project: Project, read: Callable[[], Upload], who: str,
                serve: Callable[[str], None]) -> tuple[dict, Upload]:
    """Make the upload ``read()`` returns (called only once the project may take one) ``project``'s
    new corpus version on ``who``'s behalf, have ``serve(slug)`` serve it, and settle a finished
    training of the old version as not used. Returns the version's record
    (``Projects.add_version``) and the upload."""
    if project.built_in:
        raise QPRError("The demo's corpus is fixed; create a project from your file instead.")
    training = project.training
    if training.status()["state"] in ACTIVE:
        raise QPRError("A training of this project is running on the current version; cancel it or wait for it first.")
    upload = read()
    record = projects.add_version(project.slug, upload, who)
    serve(project.slug)
    if training.status()["state"] == "done":
        training.decided(f"not used: version {record['number']} was uploaded by {who} meanwhile")
    return record, upload

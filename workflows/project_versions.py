"""A project's corpus versions, each from a person's file (``ProjectFile``), read and checked whole
before anything is written (``qpr.data.upload.read_upload``): the first makes a new project, owned
by who made it (``create_project``); a new version (``add_version``) is refused while a training
runs on the current one, and a finished training of the old version is never offered afterwards
(its model would serve questions the project no longer has)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from annotations.store import AnnotationStore
from qpr.data.upload import Upload, max_upload_bytes, megabytes, read_upload
from qpr.errors import QPRError
from qpr.serving.projects import Projects
from workflows.background_training import ACTIVE
from workflows.project import Project


@dataclass(frozen=True)
class ProjectFile:
    """A file a person chose for a project: its ``path`` (None: none chosen), what it holds
    (``kind``: ``qpr.data.upload.KINDS``), the file's columns they named per role (question,
    cluster, answer; blank: the role's own name) and whether repeated questions are dropped (the
    first of each kept) rather than refused (``drop_repeats``)."""

    path: str | None
    kind: str
    columns: dict[str, str | None]
    drop_repeats: bool = False

    def read(self) -> Upload:
        """The file read and checked whole (one QPRError lists every problem); writes nothing."""
        if not self.path:
            raise QPRError("Choose a file to upload first.")
        named = {role: column.strip() for role, column in self.columns.items() if column and column.strip()}
        return read_upload(self.path, self.kind, name=Path(self.path).name, drop_repeats=bool(self.drop_repeats),
                           columns=named)


def upload_limit() -> tuple[int, str]:
    """The largest file a person may upload (``QPR_MAX_UPLOAD_MB``): in bytes, and as the page says it ("50 MB")."""
    size = max_upload_bytes()
    return size, megabytes(size)


def create_project(projects: Projects, store: AnnotationStore, name: str, file: ProjectFile, who: str) -> tuple[str, Upload]:
    """A new project ``name`` whose first version is ``file``, checked whole before anything is
    written, and owned by ``who`` who made it (roles apply with logins). Returns its slug and the upload."""
    upload = file.read()
    slug = projects.create(name, upload, who)
    store.roles.grant(slug, who, "owner", who)
    return slug, upload


def add_version(project: Project, projects: Projects, read: Callable[[], Upload], who: str,
                serve: Callable[[str], None]) -> tuple[dict, Upload]:
    """Make the upload ``read()`` returns (called only once the project may take one) ``project``'s
    new corpus version among ``projects`` on ``who``'s behalf, have ``serve(slug)`` serve it, and
    settle a finished training of the old version as not used. Returns the version's record
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

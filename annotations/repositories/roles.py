"""Roles per project and the actions they allowed (``annotations.models.ProjectRole`` and
``ProjectAction``): who may do what in which project in login mode, and what each did."""

from __future__ import annotations

import pandas as pd
from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from annotations.errors import AnnotationError
from annotations.models import ROLES, Annotator, ProjectAction, ProjectRole
from annotations.names import annotator_key, annotator_name
from annotations.repositories.base import Repository, annotator_row

ROLE_COLUMNS = ["annotator", "role", "granted_by", "granted_at"]


class RoleRepository(Repository):
    """Who holds which role in each project, and the log of role-checked actions."""

    def grant(self, project: str, annotator: str, role: str, by: str) -> None:
        """Give ``annotator`` the ``role`` in ``project`` (replacing the one they had), as ``by``."""
        if role not in ROLES:
            raise AnnotationError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
        name, granter = annotator_name(annotator), annotator_name(by)

        def work(session: Session) -> None:
            person, granted_by = annotator_row(session, name).id, annotator_row(session, granter).id
            held = session.scalar(select(ProjectRole).where(ProjectRole.project == project,
                                                            ProjectRole.annotator_id == person))
            if held is None:
                session.add(ProjectRole(project=project, annotator_id=person, role=role, granted_by=granted_by))
            else:
                held.role, held.granted_by = role, granted_by

        self.writer.write(work)

    def role_of(self, project: str, annotator: str) -> str | None:
        """``annotator``'s role in ``project``, or None."""
        with Session(self.engine) as session:
            return session.scalar(select(ProjectRole.role).join(Annotator, ProjectRole.annotator_id == Annotator.id)
                                  .where(ProjectRole.project == project,
                                         Annotator.name_key == annotator_key(annotator_name(annotator))))

    def frame(self, project: str) -> pd.DataFrame:
        """Every role held in ``project`` (``ROLE_COLUMNS``), owners first, then by name."""
        granter = aliased(Annotator)
        with Session(self.engine) as session:
            rows = session.execute(
                select(Annotator.name, ProjectRole.role, granter.name, ProjectRole.granted_at)
                .join(Annotator, ProjectRole.annotator_id == Annotator.id)
                .join(granter, ProjectRole.granted_by == granter.id)
                .where(ProjectRole.project == project)
            ).all()
        frame = pd.DataFrame(rows, columns=ROLE_COLUMNS)
        order = frame["role"].map({role: rank for rank, role in enumerate(ROLES)})
        return frame.assign(_order=order).sort_values(["_order", "annotator"]).drop(columns="_order").reset_index(drop=True)

    def record_action(self, project: str, annotator: str, role: str, action: str) -> None:
        """Note that ``annotator`` did ``action`` in ``project`` under ``role``."""
        name = annotator_name(annotator)

        def work(session: Session) -> None:
            session.add(ProjectAction(project=project, annotator_id=annotator_row(session, name).id, role=role,
                                      action=action))

        self.writer.write(work)

    def actions(self, project: str) -> pd.DataFrame:
        """The role-checked actions in ``project``, oldest first: annotator, role, action, created_at."""
        with Session(self.engine) as session:
            rows = session.execute(
                select(Annotator.name, ProjectAction.role, ProjectAction.action, ProjectAction.created_at)
                .join(Annotator).where(ProjectAction.project == project).order_by(ProjectAction.id)
            ).all()
        return pd.DataFrame(rows, columns=["annotator", "role", "action", "created_at"])

"""Who may do what in a project: the rule ``ui.access.ProjectAccess`` applies to every path of the
page and the HTTP API, without the page (who is behind a request is the page's to say).

With typed names (name mode, not verified) the app is one team's: anyone named may read every
project and do anything, and no role is checked or recorded. With logins (``QPR_AUTH`` or Hugging
Face sign-in) each project has roles (``annotations.models.ProjectRole``): its **owner** uploads
versions, trains, uses or discards a model and grants roles; a **reviewer** reviews and applies
corrections; an **annotator** judges. Reading a project needs a role in it (any); the app's admins
(``QPR_ADMINS``) hold every right in every project. The built-in demo is anyone's to read and has
no roles: its rights are the admins' when there are some, else everyone's who signed in.
"""

from __future__ import annotations

from collections.abc import Iterable

from annotations.models import ROLES
from annotations.names import annotator_key, annotator_name
from annotations.store import AnnotationStore
from qpr.errors import QPRError
from qpr.settings import settings


def person(who: str | None, action: str, how: str) -> str:
    """The person ``who`` names, as written (``annotations.names.annotator_name``), or an error
    that names ``action`` and says ``how`` to identify (anonymous users may only search)."""
    if not who or not str(who).strip():
        raise QPRError(f"To {action}, {how}. Anyone can search without it.")
    return annotator_name(who)


def admin_keys(names: Iterable[str] | None = None) -> frozenset[str]:
    """The app's admins as annotator identities: ``names``, by default ``QPR_ADMINS``' (``qpr.settings``)."""
    return frozenset(annotator_key(annotator_name(name)) for name in (settings().admins if names is None else names))


def may_read(database: AnnotationStore, admins: frozenset[str], slug: str, who: str | None, logins: bool,
             built_in: bool) -> bool:
    """Whether ``who`` (None: nobody identified) may read project ``slug``: anyone without
    ``logins`` (one team) and in a ``built_in`` project (the demo); else the app's ``admins`` and
    whoever holds a role there."""
    if not logins or built_in:
        return True
    return who is not None and (annotator_key(who) in admins or database.roles.role_of(slug, who) is not None)


def role_for(database: AnnotationStore, admins: frozenset[str], project: str, project_name: str, who: str,
             roles: tuple[str, ...], action: str, built_in: bool = False) -> str:
    """``who``'s role in ``project`` if it is one of ``roles`` (login mode; "admin" for one of
    ``admins``), else an error that names ``action``, the roles it needs and who can grant one.
    A ``built_in`` project (the demo) has no roles: its rights are the admins', or everyone's
    when there are none."""
    if annotator_key(who) in admins:
        return "admin"
    if built_in:
        role = "annotator" if admins else "owner"
        if role in roles:
            return role
        raise QPRError(f"Only the app's admins (QPR_ADMINS) may {action} in the demo project; ask one of them.")
    role = database.roles.role_of(project, who)
    if role in roles:
        return role
    owners = database.roles.frame(project).query("role == 'owner'")["annotator"].tolist()
    needed = " or ".join(r for r in ROLES if r in roles)
    raise QPRError(f"To {action} in project {project_name!r} you need the role {needed} there; you have "
                   f"{'the role ' + role if role else 'no role'}. Ask its owner ({', '.join(owners) or 'an admin'}) "
                   "to grant it on the Team tab.")


def no_project(slug: str) -> str:
    """What a page or a program is told of project ``slug`` when there is none it may read: the
    same whether it does not exist or belongs to others, so it leaves no trace."""
    return (f"There is no project {slug!r} you may open: choose one in the Project list at the top of the page "
            "(or create it on the Projects tab; with logins, its owner grants roles on the Team tab).")

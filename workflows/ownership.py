"""Who owns a project that has no owner when the app runs with logins (issue 54, item 6).

A project made while the app ran with typed names (name mode: one team, no roles checked), or
before roles existed, or by a command rather than the Projects tab, can reach an app with logins
(``QPR_AUTH``, Hugging Face sign-in) with no owner: nobody but the app's admins could then upload
to it, train it or grant roles. The rule: when such a project is first loaded in login mode, the
person its ``project.json`` names as its creator (``created_by``) becomes its owner, as the
Projects tab makes whoever creates a project its owner. The grant is recorded as an action of
that person, so the Team tab's log says how the role came. A project where anyone holds a role
is the team's to manage and is left as it is, even without an owner (an owner who stepped down is
not replaced by the creator at the next start); so is one that names no creator (its rights stay
the admins').
"""

from __future__ import annotations

from annotations.store import AnnotationStore
from qpr.serving.projects import Projects

ADOPTED = "own the project as its creator (it had no owner when logins began)"


def owner_from_creator(projects: Projects, store: AnnotationStore, slug: str) -> str | None:
    """Grant ``owner`` of project ``slug`` to its creator if nobody holds a role there (module doc);
    returns who was granted it, or None when nothing changed. The built-in demo never has roles."""
    if projects.built_in(slug) or not store.roles.frame(slug).empty:
        return None
    creator = (projects.manifest(slug).get("created_by") or "").strip()
    if not creator:
        return None
    store.roles.grant(slug, creator, "owner", creator)
    store.roles.record_action(slug, creator, "owner", ADOPTED)
    return creator

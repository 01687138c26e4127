"""Who may do what: how a person is identified, and their role in the page's project.

In name mode (typed names, not verified) the app is one team's: anyone named may do anything,
and nothing about roles is checked or recorded. With logins (``QPR_AUTH`` or Hugging Face
sign-in) each project has roles (``annotations.models.ProjectRole``): its **owner** uploads
versions, trains, uses or discards a model and grants roles; a **reviewer** reviews and applies
corrections; an **annotator** judges. The app's admins (``QPR_ADMINS``) hold every right in every
project. The built-in demo has no owner: its rights are the admins' when there are some, else
everyone's who signed in, and anyone signed in may judge it.
"""

from __future__ import annotations

import gradio as gr

from annotations.models import ROLES
from annotations.names import annotator_key, annotator_name
from annotations.store import AnnotationStore
from qpr.errors import QPRError


def identify(identity: str, name: str | None, request: gr.Request | None, profile: gr.OAuthProfile | None,
             action: str) -> str:
    """The person acting (``identity``: "name", "auth" or "oauth"; ``name``: the typed name), or
    an error that names ``action`` and says how to identify (anonymous users may only search)."""
    if identity == "auth":
        who, how = getattr(request, "username", None), "sign in"
    elif identity == "oauth":
        who, how = getattr(profile, "username", None), "sign in with Hugging Face (button at the top)"
    else:
        who, how = name, "type your name in the 'Your name' box"
    if not who or not str(who).strip():
        raise QPRError(f"To {action}, {how}. Anyone can search without it.")
    return annotator_name(who)


def role_for(store: AnnotationStore, admins: frozenset[str], project: str, project_name: str, who: str,
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
    role = store.role(project, who)
    if role in roles:
        return role
    owners = store.roles(project).query("role == 'owner'")["annotator"].tolist()
    needed = " or ".join(r for r in ROLES if r in roles)
    raise QPRError(f"To {action} in project {project_name!r} you need the role {needed} there; you have "
                   f"{'the role ' + role if role else 'no role'}. Ask its owner ({', '.join(owners) or 'an admin'}) "
                   "to grant it on the Team tab.")

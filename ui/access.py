"""Who may do what, in one place (``ProjectAccess``, which ``ui.common.AppContext`` is): how a
person is identified, which projects they may read, and their role in the page's project.

Reading a project (searching it, opening it on a page, seeing its name, counts and files) needs,
with logins, a role in it (any), or to be one of the app's admins; the demo is anyone's. Every
path asks ``may_read``: opening a project on a page (every tab acts on the page's project only),
the header's project list, the HTTP API; a project one may not read is answered as one that
does not exist. Exports are written to a folder of unguessable name and handed to the page that
asked. Logins themselves are ``ui.logins``'.

The rule itself, roles and all, is ``workflows.project_roles``': in name mode (typed names, not
verified) the app is one team's, and nothing about roles is checked or recorded; with logins
(``QPR_AUTH`` or Hugging Face sign-in) each project has an owner, reviewers and annotators, the
app's admins (``QPR_ADMINS``) hold every right in every project, and the built-in demo has no
owner: its rights are the admins' when there are some, else everyone's who signed in, and anyone
signed in may judge it. This module says who is behind a page's request and asks the rule.
"""

from __future__ import annotations

import gradio as gr

from annotations.models import ROLES
from qpr.errors import QPRError
from qpr.serving.slugs import DEMO
from workflows import project_roles


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
    return project_roles.person(who, action, how)


class ProjectAccess:
    """The one access rule, as ``ui.common.AppContext`` applies it to every path: which projects
    one may read (``may_read``: the page's project list, opening a project on a page, the HTTP
    API), and which actions their role there allows (``allowed``), identified as ``identify``
    says. Uses the context's ``identity``, ``admins``, ``database``, ``projects``, ``project``
    (the page's) and ``project_name``."""

    def who(self, request: gr.Request | None, profile: gr.OAuthProfile | None, name: str | None = None) -> str | None:
        """Who is behind ``request`` (or typed ``name``), or None when nobody is identified."""
        try:
            return identify(self.identity, name, request, profile, "read")
        except QPRError:
            return None

    def may_read(self, slug: str, who: str | None) -> bool:
        """The access rule every path asks before it shows anything of project ``slug`` (the page,
        its project list, the HTTP API): with typed names, anyone (one team); with logins, the
        app's admins, anyone for the demo, and whoever holds a role in the project. Reading is
        searching, opening it on a page, seeing its name, counts and files; what a role allows
        beyond reading is ``allowed``'s."""
        return project_roles.may_read(self.database, self.admins, slug, who, logins=self.identity != "name",
                                      built_in=self.projects.built_in(slug))

    def readable(self, request: gr.Request | None, profile: gr.OAuthProfile | None) -> dict[str, str]:
        """Slug -> name of every project the one behind ``request`` may read, the demo first."""
        who = self.who(request, profile)
        every = {DEMO: self.projects.name(DEMO)} | self.projects.names()
        return {slug: name for slug, name in every.items() if self.may_read(slug, who)}

    def reader(self, action: str, name: str | None, request: gr.Request | None = None,
               profile: gr.OAuthProfile | None = None) -> str | None:
        """Who reads the page's project for ``action`` (export its clusters): with typed names
        anyone, named or not (one team); with logins, one holding any role there (``allowed``,
        recorded)."""
        if self.identity == "name":
            return name or None
        return self.allowed(action, ROLES, name, request, profile)

    def annotator(self, name: str | None, request: gr.Request | None = None, profile: gr.OAuthProfile | None = None,
                  action: str = "record judgments") -> str:
        """Who may ``action`` (judge, by default) in the page's project: anyone identified, with
        any role there in login mode (``ui.access``)."""
        return self.allowed(action, ROLES, name, request, profile, record=False)

    def privileged(self, action: str, name: str | None, request: gr.Request | None = None,
                   profile: gr.OAuthProfile | None = None, roles: tuple[str, ...] = ("owner",)) -> str:
        """Who may ``action`` in the page's project (upload, train, use a model): in login mode,
        one holding one of ``roles`` there, and the action is recorded with that role."""
        return self.allowed(action, roles, name, request, profile)

    def allowed(self, action: str, roles: tuple[str, ...], name: str | None, request: gr.Request | None = None,
                profile: gr.OAuthProfile | None = None, record: bool = True, project: str | None = None) -> str:
        """The person doing ``action``, identified, and in login mode holding one of ``roles`` in
        ``project`` (default: the page's; ``record``: the action is logged with the role); name
        mode checks and records no role (one team)."""
        who = identify(self.identity, name, request, profile, action)
        if self.identity != "name":
            project = project or self.project
            role = project_roles.role_for(self.database, self.admins, project, self.project_name(project), who, roles,
                                          action, self.projects.built_in(project))
            if record:
                self.database.roles.record_action(project, who, role, action)
        return who

    def role_of(self, who: str) -> str | None:
        """The role ``who`` judges under in the page's project, which each judgment records (login
        mode; ``ui.access``); None with typed names, which carry no role."""
        if self.identity == "name":
            return None
        project = self.project
        return project_roles.role_for(self.database, self.admins, project, self.project_name(project), who, ROLES,
                                      "record judgments", self.projects.built_in(project))

    def may_replace(self, request: gr.Request | None, profile: gr.OAuthProfile | None) -> bool:
        """Whether the one behind ``request`` may use or discard a trained model here (``replacer``),
        so that the page offers the buttons only to them; with typed names, anyone may."""
        if self.identity == "name":
            return True
        try:
            self.allowed("use or discard a trained model", ("owner",), None, request, profile, record=False)
        except QPRError:
            return False
        return True

    def replacer(self, name: str | None, request: gr.Request | None = None, profile: gr.OAuthProfile | None = None) -> str:
        """Who may replace or discard the model the page's project serves (``privileged``)."""
        return self.privileged("use or discard a trained model", name, request, profile)

"""The Team tab: who holds which role in the page's project, the owner granting roles, and the
actions the roles allowed (login mode; ``ui.access``). In name mode the tab says that the app is
one team's and that roles need logins."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from annotations.models import ROLES
from annotations.repositories.roles import ROLE_COLUMNS
from qpr.errors import QPRError
from ui.common import NAME_MODE, AppContext
from ui.display import plain, shows_errors, text_table, when
from workflows.project import Project

ACTION_COLUMNS = ["created_at", "annotator", "role", "action"]
SHOWN_ACTIONS = 200  # the newest actions the tab lists


class TeamTab:
    """Layout and handlers of the Team tab."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def render(self, name: gr.Textbox) -> None:
        """Lay out the tab (inside a gr.Blocks) and wire it; ``name`` is the page's 'Your name' box."""
        logins = self.ctx.identity != "name"
        with gr.Tab("Team") as tab:
            self.note = gr.Markdown(elem_id="team-note")
            with gr.Row(equal_height=True, visible=logins):
                person = gr.Textbox(label="Person (their login name)", elem_id="team-person", scale=2)
                role = gr.Radio(list(ROLES), value="annotator", label="Role in this project", elem_id="team-role")
                grant = gr.Button("Grant the role", variant="primary", elem_id="team-grant")
            self.roles = gr.Dataframe(pd.DataFrame(columns=ROLE_COLUMNS), label="Roles in this project", datatype="str",
                                      interactive=False, visible=logins, elem_id="team-roles")
            self.actions = gr.Dataframe(pd.DataFrame(columns=ACTION_COLUMNS), label="Actions that needed a role, newest first",
                                        datatype="str", interactive=False, visible=logins, elem_id="team-actions")
        shown = [self.note, self.roles, self.actions]
        tab.select(self.show, None, shown)
        grant.click(self.grant, [person, role, name], shown)

    def show(self) -> dict:
        """The page's project's roles and role-checked actions (name mode: what the mode means)."""
        return self._show(self.ctx.current())

    def _show(self, project: Project) -> dict:
        if self.ctx.identity == "name":
            return {self.note: f"**Name mode** (no QPR_AUTH): {NAME_MODE}."}
        actions = project.store.roles.actions(project.slug).iloc[::-1].head(SHOWN_ACTIONS)
        note = (f"Roles in **{plain(project.name)}**: an **owner** uploads versions, trains, uses or "
                "discards a model and grants roles; a **reviewer** reviews and applies corrections; an **annotator** judges. "
                "The app's admins (QPR_ADMINS) may do everything.")
        if project.built_in:
            note += " The demo project has no roles: its rights are the admins', or everyone's when there are none."
        roles = project.store.roles.frame(project.slug)
        return {self.note: note, self.roles: text_table(roles.assign(granted_at=roles["granted_at"].map(when))),
                self.actions: text_table(actions.assign(created_at=actions["created_at"].map(when)), ACTION_COLUMNS)}

    @shows_errors(action="grant the role")
    def grant(self, person: str, role: str, name: str | None, request: gr.Request = None,
              profile: gr.OAuthProfile | None = None) -> dict:
        """Give ``person`` the ``role`` in the page's project (its owner, or an admin, only)."""
        project = self.ctx.current()
        if project.built_in:
            raise QPRError("The demo project has no roles (its rights are the admins'): open one of your projects "
                           "in the list at the top, then grant roles in it.")
        who = self.ctx.privileged("grant roles", name, request, profile)
        if not (person or "").strip():
            raise QPRError("Type the login name of the person to give the role to.")
        project.store.roles.grant(project.slug, person, role, who)
        return self._show(project)

"""Annotation guidelines stored in the database: a read-only panel to place beside the queue
(``guidelines_panel``) and a tab where a reviewer edits them (``GuidelinesTab``).

The text is shown as text (escaped), never as markup: whoever edits it cannot inject HTML.
"""

from __future__ import annotations

import gradio as gr

from ui.common import AppContext, review_note, reviewer
from ui.display import plain, shows_errors, when

NONE_YET = "No annotation guidelines yet. A reviewer can write them in the Guidelines tab."


def guidelines_markdown(shown: dict | None) -> str:
    """The guidelines in force (a store's ``guidelines()``: None when there are none) as Markdown:
    text, then example pairs for "same" and "different"."""
    if shown is None:
        return NONE_YET
    parts = ["### Guidelines", *(plain(line) for line in shown["text"].splitlines())]
    for label, examples in (("same", shown["same_examples"]), ("different", shown["different_examples"])):
        lines = [line for line in examples.splitlines() if line.strip()]
        if lines:
            parts += [f"**Examples of “{label}”**", *(f"- {plain(line)}" for line in lines)]
    parts.append(f"*Edited by {plain(shown['editor'])}, {when(shown['created_at'])}*")
    return "\n\n".join(parts)


def guidelines_panel(ctx: AppContext, **kwargs) -> gr.Markdown:
    """A gr.Markdown showing the page's project's guidelines, re-read on every page load (call
    inside a layout; the page's project is read then, not when the layout is built)."""
    return gr.Markdown(lambda: guidelines_markdown(ctx.current().store.review.guidelines()), elem_id=kwargs.pop("elem_id", "guidelines-panel"), **kwargs)


class GuidelinesTab:
    """Layout and handlers of the Guidelines tab (edit, with a preview of what annotators see)."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def render(self, name: gr.Textbox) -> None:
        with gr.Tab("Guidelines") as tab:
            gr.Markdown(review_note(self.ctx))
            with gr.Row():
                with gr.Column():
                    self.text = gr.Textbox(label="Guidelines", lines=6)
                    self.same = gr.Textbox(label="Examples of “same” (one pair per line)", lines=3)
                    self.different = gr.Textbox(label="Examples of “different” (one pair per line)", lines=3)
                    save = gr.Button("Save guidelines", variant="primary")
                    self.status = gr.Markdown()
                self.preview = gr.Markdown(elem_id="guidelines-preview")
        tab.select(self.load, None, [self.text, self.same, self.different, self.preview])
        save.click(self.save, [self.text, self.same, self.different, name], [self.status, self.preview])

    def load(self) -> dict:
        """The guidelines in force in the edit boxes, and the preview."""
        shown = self.ctx.current().store.review.guidelines()
        edited = shown or {"text": "", "same_examples": "", "different_examples": ""}
        return {self.text: edited["text"], self.same: edited["same_examples"], self.different: edited["different_examples"],
                self.preview: guidelines_markdown(shown)}

    @shows_errors
    def save(self, text: str, same: str, different: str, name: str, request: gr.Request,
             profile: gr.OAuthProfile | None) -> dict:
        """Store a new version of the guidelines (the earlier one stays as history)."""
        who = reviewer(self.ctx, name, request, profile)
        review = self.ctx.current().store.review
        review.set_guidelines(who, text, same, different)
        return {self.status: f"Saved by {plain(who)}.", self.preview: guidelines_markdown(review.guidelines())}

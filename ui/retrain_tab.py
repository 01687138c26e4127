"""The Retrain & export tab: export the corrected clusters (to download, or pushed to a Hub
dataset); retrain on them, compare old and new on the same held-out clusters, and swap the new
model in only when the user confirms.

The handlers read their inputs, look the page's project up once, call the retraining workflow
with it (``workflows.retraining``: export, retrain, compare, confirm or discard, record,
remember) and render what it returns.
"""

from __future__ import annotations

import time
from pathlib import Path

import gradio as gr
import pandas as pd

from qpr.bundles.training import COMPARISON_COLUMNS
from ui.common import AppContext
from ui.display import plain, shows_errors, text_table
from workflows import hub_export, judgment_effect, retraining
from workflows.project import Project


def exports(ctx: AppContext, project: Project) -> Path:
    """Where the app writes ``project``'s exports: ``exports/<project>/`` under its cache (one
    folder per project: a project's exports are its own)."""
    return ctx.cache / "exports" / project.slug


class RetrainTab:
    """Layout and handlers of the Retrain & export tab."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def render(self, name: gr.Textbox) -> None:
        """Lay out the tab (inside a gr.Blocks) and wire it to the handlers; ``name`` is the page's
        'Your name' box (replacing the served model needs a name)."""
        with gr.Tab("Retrain & export"):
            gr.Markdown("Corrected clusters = the original clusters joined by confirmed false negatives, never "
                        "across a 'different' judgment.")
            with gr.Row():
                fmt = gr.Radio(["csv", "jsonl", "parquet"], value="csv", label="Export format")
                export_button = gr.Button("Export corrected clusters", variant="primary")
            self.export_note = gr.Markdown(elem_id="export-note")
            self.files = gr.File(label="Download", file_count="multiple", interactive=False, elem_id="export-files")
            with gr.Row():
                repo = gr.Textbox(label="Hub dataset repository", placeholder="owner/name (the app's HF_TOKEN must write it)")
                push_button = gr.Button("Push to the Hub")
            with gr.Row():
                epochs = gr.Slider(1, 20, value=5, step=1, label="Maximum epochs")
                retrain_button = gr.Button("Retrain on corrected clusters", variant="primary")
            self.note = gr.Markdown(elem_id="retrain-note")
            self.comparison = gr.Dataframe(label="Old and new model on the same held-out clusters", interactive=False,
                                           value=pd.DataFrame(columns=COMPARISON_COLUMNS))
            self.changed = gr.Dataframe(label="Held-out queries whose first result the retrain changed (fixed first)",
                                        interactive=False, value=pd.DataFrame(columns=judgment_effect.COLUMNS),
                                        elem_id="retrain-changed")
            with gr.Row():
                self.confirm_button = gr.Button("Use the retrained model", interactive=False, variant="primary")
                self.discard_button = gr.Button("Discard it", interactive=False)
        export_button.click(self.export_clusters, [fmt, name], [self.files, self.export_note])
        push_button.click(self.push, [repo, name], [self.export_note])
        retrain_button.click(self.retrain, [epochs, name], self.decision_outputs, concurrency_limit=1, concurrency_id="retrain")
        self.confirm_button.click(self.confirm, [name], self.decision_outputs)
        self.discard_button.click(self.discard, [name], self.decision_outputs)

    @shows_errors(action="export the corrected clusters")
    def export_clusters(self, fmt: str, name: str | None = None, request: gr.Request | None = None,
                        profile: gr.OAuthProfile | None = None) -> dict:
        """Corrected clusters (plus training pairs and the manifest) as files to download, for one
        who may read the project (``AppContext.reader``), in a folder of their own whose name
        nobody can guess (the files are served by their path to the page that asked)."""
        self.ctx.reader("export the corrected clusters", name, request, profile)
        project = self.ctx.current()
        export = retraining.export_to_download(project, fmt, exports(self.ctx, project))
        done = export.manifest
        note = (f"Exported {done['questions']} questions: {done['clusters_before']} clusters before, "
                f"{done['clusters_after']} after {len(done['merges'])} merge(s) and {len(done['splits'])} split(s), which "
                f"folded {done['clusters_absorbed']} cluster(s) into others (or emptied them) and formed "
                f"{done['clusters_formed']} new one(s); {done['questions_moved']} question(s) changed cluster; "
                f"{len(done['judgment_ids'])} judgment(s) included, {len(done['conflicts'])} conflict(s) left for review.")
        return {self.files: [str(path) for path in export.files], self.export_note: note}

    @shows_errors(action="push to the Hub")
    def push(self, repo: str, name: str, request: gr.Request | None = None, profile: gr.OAuthProfile | None = None) -> dict:
        """Export the corrected clusters and push them to a Hub dataset repository
        (``workflows.hub_export``): publishing the project's data is an owner's action."""
        self.ctx.privileged("push the corrected clusters to the Hub", name, request, profile)
        project = self.ctx.current()
        done, url = hub_export.push_corrected(project, repo.strip(), exports(self.ctx, project))
        return {self.export_note: f"Pushed export #{done.manifest['export_id']} ({len(done.manifest['judgment_ids'])} "
                                  f"judgment(s)) to the Hub dataset **{plain(repo.strip())}**: {plain(url)}"}

    @shows_errors
    def retrain(self, epochs: float, name: str, request: gr.Request | None = None, profile: gr.OAuthProfile | None = None,
                progress=gr.Progress()) -> dict:
        """Retrain on the corrected clusters in the background of searches; compare old and new
        on the same held-out clusters; hold the new model until the user confirms. Training is an
        owner's action, like using its result: an unnamed page is refused before anything runs."""
        self.ctx.privileged("retrain the model", name, request, profile)
        epochs = int(epochs)
        started = time.monotonic()

        def epoch_done(row: dict) -> None:
            # The whole run in one bar: epochs, then the comparison (counted as one more step).
            share = row["epoch"] / (epochs + 1)
            left = (time.monotonic() - started) * (1 - share) / share
            progress(share, desc=f"Epoch {row['epoch']} of at most {epochs} · {100 * share:.0f}% · about {left:.0f} s left "
                                 f"· validation ROC AUC {row['val_auc']:.3f}")

        def stage(name: str) -> None:
            if name == "exporting":
                progress(0, desc="Exporting the corrected clusters")
            else:
                progress(epochs / (epochs + 1), desc="Evaluating both models on the held-out clusters")

        project = self.ctx.current()
        proposal = retraining.retrain(project, exports(self.ctx, project), epochs, epoch_done, stage)
        progress(1.0, desc="Done")
        done, new = proposal.export.manifest, proposal.candidate.served.bundle
        note = (f"Retrained on {len(done['merges'])} merge(s) from {len(done['judgment_ids'])} judgment(s) (export "
                f"#{done['export_id']}): model **{plain(new.version)}** is ready. Nothing changes until you press "
                "'Use the retrained model'.")
        note += f"\n\n{judgment_effect.summary(proposal.changed)}"
        return self._waiting(note, proposal.offer) | {self.changed: text_table(proposal.changed)}

    def _waiting(self, note: str, offer: retraining.Offer, may: bool = True) -> dict:
        """The tab while a retrained model waits: the comparison, what it says, the two choices
        (discard first when the new model is worse beyond doubt), on when the viewer ``may`` take them."""
        return {self.comparison: text_table(offer.comparison.round(3)), self.note: f"{note}\n\n{offer.said}",
                self.confirm_button: gr.Button(interactive=may, variant="secondary" if offer.worse else "primary"),
                self.discard_button: gr.Button(interactive=may, variant="primary" if offer.worse else "secondary")}

    @property
    def decision_outputs(self) -> list:
        return [self.comparison, self.changed, self.note, self.confirm_button, self.discard_button]

    def restore(self, request: gr.Request = None, profile: gr.OAuthProfile | None = None) -> dict:
        """On page load: a retrained model still waiting for a decision (made before a reload,
        or in another tab) is shown with its comparison, and can be decided by whoever may."""
        return self.offered(self.ctx.current(), request, profile)

    def offered(self, project: Project, request: gr.Request | None, profile: gr.OAuthProfile | None) -> dict:
        """The tab with ``project``'s model waiting for a decision (``restore``), or with none."""
        offer = retraining.waiting(project)
        if offer is None:
            return self._decided("")
        note = f"A retrained model, **{plain(offer.version)}**, is waiting for your decision."
        return self._waiting(note, offer, self.ctx.may_replace(request, profile))

    @shows_errors(action="use the trained model")
    def confirm(self, name: str, request: gr.Request, profile: gr.OAuthProfile | None) -> dict:
        """Save the retrained bundle and serve it from now on (one atomic swap), recording who did,
        replacing which, from which judgments; the app serves it again after a restart unless
        ``QPR_BUNDLE`` names another."""
        who = self.ctx.replacer(name, request, profile)
        project = self.ctx.current()
        done = retraining.confirm(project, who)
        note = (f"Now serving **{plain(done.bundle.version)}** (put in service by {plain(project.store.judgments.display_name(who))}), "
                f"saved in **{plain(done.path)}**; the app serves it again after a restart (unless QPR_BUNDLE names another "
                "bundle).")
        return self._decided(note) | {self.comparison: text_table(done.comparison.round(3))}

    @shows_errors(action="discard the trained model")
    def discard(self, name: str, request: gr.Request, profile: gr.OAuthProfile | None) -> dict:
        """Drop the retrained model waiting for a decision; the served one stays."""
        who = self.ctx.replacer(name, request, profile)
        retraining.discard(self.ctx.current(), who)
        return self._decided("Discarded the retrained model; the served one is unchanged.")

    def _decided(self, note: str) -> dict:
        """The tab with no model waiting: no comparison, both choices off."""
        return {self.comparison: pd.DataFrame(columns=COMPARISON_COLUMNS),
                self.changed: pd.DataFrame(columns=judgment_effect.COLUMNS), self.note: note,
                self.confirm_button: gr.Button(interactive=False, variant="primary"),
                self.discard_button: gr.Button(interactive=False, variant="secondary")}

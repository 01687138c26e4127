"""The Retrain & export tab: export the corrected clusters; retrain on them, compare old and new
on the same held-out clusters, and swap the new model in only when the user confirms.

A retraining first exports the corrected clusters (so the database records which judgments it
used) and trains on that export read back, so the new bundle's manifest can name the export and
its judgment ids (``labels``). BM25 over the corrected corpus is built once and shared by the
fusion fit, the comparison and the new served retrievers.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

import gradio as gr
import pandas as pd

from annotations.export import export, manifest_path, pairs_path
from qpr.bundles.training import compare_bundles, retrain_bundle, verdict
from qpr.data.corpus import read_cluster_file
from qpr.errors import QPRError
from qpr.retrieval.lexical import BM25Retriever
from ui.common import AppContext
from ui.display import plain, shows_errors, text_table


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
            self.export_note = gr.Markdown()
            self.files = gr.File(label="Download", file_count="multiple", interactive=False, elem_id="export-files")
            with gr.Row():
                epochs = gr.Slider(1, 20, value=5, step=1, label="Maximum epochs")
                retrain_button = gr.Button("Retrain on corrected clusters", variant="primary")
            self.note = gr.Markdown(elem_id="retrain-note")
            self.comparison = gr.Dataframe(label="Old and new model on the same held-out clusters", interactive=False)
            with gr.Row():
                self.confirm_button = gr.Button("Use the retrained model", interactive=False, variant="primary")
                self.discard_button = gr.Button("Discard it", interactive=False)
        export_button.click(self.export_clusters, [fmt], [self.files, self.export_note])
        retrain_button.click(self.retrain, [epochs], self.decision_outputs, concurrency_limit=1, concurrency_id="retrain")
        self.confirm_button.click(self.confirm, [name], self.decision_outputs)
        self.discard_button.click(self.discard, [name], self.decision_outputs)

    def export_corrected(self, fmt: str) -> tuple[Path, dict]:
        """Export the served corpus' corrected clusters under the cache; the file and its manifest."""
        served = self.ctx.model.current()
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        out = self.ctx.cache / "exports" / f"corrected-{stamp}.{fmt}"
        export(self.ctx.store, served.bundle.corpus, fmt, out, bundle_version=served.bundle.version)
        return out, json.loads(manifest_path(out).read_text())

    @shows_errors
    def export_clusters(self, fmt: str) -> dict:
        """Corrected clusters (plus training pairs and the manifest) as files to download."""
        out, done = self.export_corrected(fmt)
        note = (f"Exported {done['questions']} questions: {done['clusters_before']} clusters before, "
                f"{done['clusters_after']} after {len(done['merges'])} merge(s) and {len(done['splits'])} split(s), which "
                f"folded {done['clusters_absorbed']} cluster(s) into others (or emptied them) and formed "
                f"{done['clusters_formed']} new one(s); {done['questions_moved']} question(s) changed cluster; "
                f"{len(done['judgment_ids'])} judgment(s) included, {len(done['conflicts'])} conflict(s) left for review.")
        return {self.files: [str(out), str(pairs_path(out)), str(manifest_path(out))], self.export_note: note}

    @shows_errors
    def retrain(self, epochs: float, progress=gr.Progress()) -> dict:
        """Retrain on the corrected clusters in the background of searches; compare old and new
        on the same held-out clusters; hold the new model until the user confirms."""
        served = self.ctx.model.current()
        if served.bundle.lexical:
            raise QPRError("This project has no encoder yet: train one on the Projects tab (it trains in the "
                           "background while BM25 serves).")
        progress(0, desc="Exporting the corrected clusters")
        out, done = self.export_corrected("parquet")
        corrected = read_cluster_file(out)
        labels = {"export_id": done["export_id"], "export_file": str(out), "judgment_ids": done["judgment_ids"]}
        epochs = int(epochs)
        started = time.monotonic()

        def epoch_done(row: dict) -> None:
            # The whole run in one bar: epochs, then the comparison (counted as one more step).
            share = row["epoch"] / (epochs + 1)
            left = (time.monotonic() - started) * (1 - share) / share
            progress(share, desc=f"Epoch {row['epoch']} of at most {epochs} · {100 * share:.0f}% · about {left:.0f} s left "
                                 f"· validation ROC AUC {row['val_auc']:.3f}")

        bm25 = BM25Retriever(corrected)
        new = retrain_bundle(served.bundle, corrected, max_epochs=epochs, labels=labels, bm25=bm25, progress=False,
                             on_epoch=epoch_done)
        progress(epochs / (epochs + 1), desc="Evaluating both models on the held-out clusters")
        comparison = compare_bundles(served.bundle, new, corrected, bm25)
        self.ctx.model.propose(new, comparison, bm25)
        progress(1.0, desc="Done")
        note = (f"Retrained on {len(done['merges'])} merge(s) from {len(done['judgment_ids'])} judgment(s) (export "
                f"#{done['export_id']}): model **{plain(new.version)}** is ready. Nothing changes until you press "
                "'Use the retrained model'.")
        return self._waiting(note, comparison)

    def _waiting(self, note: str, comparison) -> dict:
        """The tab while a retrained model waits: the comparison, what it says, the two choices
        (discard first when the new model is worse beyond doubt)."""
        said, worse = verdict(comparison)
        return {self.comparison: text_table(comparison.round(3)), self.note: f"{note}\n\n{said}",
                self.confirm_button: gr.Button(interactive=True, variant="secondary" if worse else "primary"),
                self.discard_button: gr.Button(interactive=True, variant="primary" if worse else "secondary")}

    @property
    def decision_outputs(self) -> list:
        return [self.comparison, self.note, self.confirm_button, self.discard_button]

    def restore(self) -> dict:
        """On page load: a retrained model still waiting for a decision (made before a reload,
        or in another tab) is shown with its comparison and can be decided."""
        candidate = self.ctx.model.candidate()
        if candidate is None:
            return self._decided("")
        note = f"A retrained model, **{plain(candidate.served.bundle.version)}**, is waiting for your decision."
        return self._waiting(note, candidate.comparison)

    @shows_errors
    def confirm(self, name: str, request: gr.Request, profile: gr.OAuthProfile | None) -> dict:
        """Save the retrained bundle and serve it from now on (one atomic swap), recording who did,
        replacing which, from which judgments; the app serves it again after a restart unless
        ``QPR_BUNDLE`` names another."""
        who = self.ctx.replacer(name, request, profile)
        candidate = self.ctx.model.candidate()
        if candidate is None:
            raise QPRError("No retrained model is waiting: press 'Retrain' first.")
        bundle = candidate.served.bundle
        path = self.ctx.save_bundle(bundle)
        self.ctx.store.register_corpus(bundle.version, bundle.corpus)
        # Raises, leaving the served model as it was, if another confirmation or retraining
        # replaced the candidate in the meantime.
        replaced = self.ctx.model.current().bundle.version
        self.ctx.model.confirm(bundle.version)
        self.ctx.store.record_swap(who, bundle.version, replaced, bundle.manifest.get("labels", {}).get("judgment_ids", []))
        self.ctx.remember(path, who)
        self._settle_training(bundle.version, f"put in service by {who}")
        note = (f"Now serving **{plain(bundle.version)}** (put in service by {plain(self.ctx.store.display_name(who))}), saved "
                f"in **{plain(path)}**; the app serves it again after a restart (unless QPR_BUNDLE names another bundle).")
        return self._decided(note) | {self.comparison: text_table(candidate.comparison.round(3))}

    @shows_errors
    def discard(self, name: str, request: gr.Request, profile: gr.OAuthProfile | None) -> dict:
        """Drop the retrained model waiting for a decision; the served one stays."""
        who = self.ctx.replacer(name, request, profile)
        candidate = self.ctx.model.candidate()
        self.ctx.model.discard()
        if candidate is not None:
            self._settle_training(candidate.served.bundle.version, f"discarded by {who}")
        return self._decided("Discarded the retrained model; the served one is unchanged.")

    def _settle_training(self, version: str, what: str) -> None:
        """Mark the project's background training decided when its model was the one decided on."""
        job = self.ctx.training()
        status = job.status()
        if status["state"] == "done" and status.get("version") == version:
            job.decided(what)

    def _decided(self, note: str) -> dict:
        """The tab with no model waiting: no comparison, both choices off."""
        return {self.comparison: pd.DataFrame(), self.note: note,
                self.confirm_button: gr.Button(interactive=False, variant="primary"),
                self.discard_button: gr.Button(interactive=False, variant="secondary")}

"""The browser app: search demo, spot-check annotation, cluster review, retraining and export.

``python app.py`` serves the demo bundle (trained on ``qpr/demo_corpus.tsv`` on first start and
cached under ``QPR_CACHE_DIR``, default ``runs``). Environment:

- ``QPR_BUNDLE``: serve this saved bundle instead of the demo (e.g. one trained on Quora-lite);
- ``QPR_DB_URL``: the annotation database (default ``sqlite:///data/annotations.db``);
- ``QPR_AUTH``: ``user:password`` pairs separated by commas; the whole app then asks for a login
  and judgments carry the login name. On Hugging Face Spaces without it, annotators sign in with
  their Hugging Face account; elsewhere they type a name. Anyone can search; only a known
  annotator can record judgments.

The handlers are the methods of ``QPRApp``: plain functions of their inputs that call ``qpr`` and
``annotations`` (tests call them directly); ``build_ui`` only lays out the tabs and wires them.
"""

from __future__ import annotations

import functools
import html
import json
import os
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

import gradio as gr
import pandas as pd
import torch
from gradio.utils import get_space

from annotations.db import open_store
from annotations.export import export, manifest_path, pairs_path
from annotations.merge import corrected_clusters
from annotations.queue import least_coherent, next_cluster, spot_check
from annotations.store import AnnotationStore, annotator_name, item_key
from qpr.bundle import Bundle
from qpr.demo import EXAMPLE_QUERIES, cache_dir, demo_bundle
from qpr.errors import QPRError
from qpr.retrain import ServedModel, compare, retrain
from qpr.supervise import cluster_coherence

SEARCH_WIDTHS = ["9%", "55%", "24%", "12%"]  # rank, question, cluster, distance
LABEL_BUTTONS = (("same", "Same meaning", "1 / S"), ("different", "Different", "2 / D"), ("unsure", "Unsure", "3 / U"))

# Keyboard shortcuts for the Annotate tab: a key clicks the matching button while it is on screen,
# unless the user is typing in a field.
SHORTCUTS = """
<script>
document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey || event.repeat) return;
  const target = event.target;
  if (target && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName))) return;
  const ids = {"1": "judge-same", "s": "judge-same", "2": "judge-different", "d": "judge-different",
               "3": "judge-unsure", "u": "judge-unsure", "z": "judge-undo"};
  const button = document.getElementById(ids[event.key.toLowerCase()]);
  if (button && button.offsetParent !== null && !button.disabled) {
    event.preventDefault();
    button.click();
  }
});
</script>
"""

RESULT_LABELS = {
    "hybrid": "Hybrid: SDML and BM25 candidates re-scored (distance: minus the fitted score)",
    "sdml": "SDML encoder alone (distance: squared Euclidean)",
    "bm25": "BM25 alone (distance: minus the BM25 score)",
}

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def plain(text: object) -> str:
    """``text`` escaped for a gr.Markdown so that data (cluster ids, questions) never becomes markup."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", html.escape(str(text), quote=False))


def parse_auth(spec: str | None) -> list[tuple[str, str]] | None:
    """``QPR_AUTH`` ("alice:secret1,bob:secret2") as Gradio login pairs; None when unset."""
    if spec is None or not spec.strip():
        return None
    pairs = []
    for entry in spec.split(","):
        user, colon, password = entry.strip().partition(":")
        if not colon or not user.strip() or not password:
            raise QPRError("QPR_AUTH must be user:password pairs separated by commas, e.g. alice:secret1,bob:secret2")
        pairs.append((user.strip(), password))
    return pairs


def shows_errors(handler):
    """Show the library's QPRError (input a user must fix) as an error message in the page."""

    @functools.wraps(handler)
    def wrapper(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except QPRError as err:
            # gr.Error renders its message as HTML, and messages can echo what the user typed.
            raise gr.Error(html.escape(str(err), quote=False)) from err

    return wrapper


def _text_table(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``frame[columns]`` with missing values blank, ready for a gr.Dataframe."""
    return frame[columns].astype(object).where(frame[columns].notna(), "").reset_index(drop=True)


def _when(value) -> str:
    return pd.Timestamp(value).tz_convert("UTC").strftime("%Y-%m-%d %H:%M UTC") if pd.notna(value) else ""


class QPRApp:
    """Everything the UI does, as plain methods over the served model and the annotation store.

    ``identity`` is how annotators are known: "name" (typed), "auth" (QPR_AUTH login) or
    "oauth" (Hugging Face sign-in on Spaces).
    """

    def __init__(self, model: ServedModel, store: AnnotationStore, identity: str = "name",
                 examples: tuple[str, ...] = (), cache: Path | None = None) -> None:
        self.model = model
        self.store = store
        self.identity = identity
        self.examples = examples
        self.cache = Path(cache or cache_dir())
        self.last_comparison: pd.DataFrame | None = None  # old vs new of the last confirmed retraining
        self.replaced: Bundle | None = None  # the bundle the last confirmed retraining replaced
        self._coherence: dict[str, pd.DataFrame] = {}  # least coherent clusters per bundle version
        store.register_corpus(model.current().bundle.version, model.current().bundle.corpus)

    # -- identity ---------------------------------------------------------------------------

    def annotator(self, name: str | None, request: gr.Request | None = None, profile: gr.OAuthProfile | None = None) -> str:
        """The annotator's name, or an error that says how to identify (anonymous users may only search)."""
        if self.identity == "auth":
            who, how = getattr(request, "username", None), "sign in"
        elif self.identity == "oauth":
            who, how = getattr(profile, "username", None), "sign in with Hugging Face (button at the top)"
        else:
            who, how = name, "type your name in the 'Your name' box"
        if not who or not str(who).strip():
            raise QPRError(f"To record judgments, {how}. Anyone can search without it.")
        return annotator_name(who)

    def whoami(self, request: gr.Request, profile: gr.OAuthProfile | None) -> str:
        try:
            return f"Annotating as **{plain(self.annotator(None, request, profile))}**"
        except QPRError:
            if self.identity == "name":
                return "Anyone can search; type your name to annotate."
            return "Not signed in: you can search, but sign in to annotate."

    # -- search -----------------------------------------------------------------------------

    @shows_errors
    def search(self, query: str, k: float, compare: bool):
        """Top-k questions for ``query`` from the served retriever (the hybrid when the bundle has
        one) and, when asked, from its two parts alone: the encoder and BM25."""
        served = self.model.current()
        columns = ["rank", "question", "cluster", "distance"]

        def table(retriever) -> pd.DataFrame:
            hits = pd.DataFrame([vars(h) for h in retriever.search(query, int(k))], columns=columns)
            return _text_table(hits.assign(distance=hits["distance"].round(3)), columns)

        parts = [served.dense, served.bm25] if served.default is not served.dense else [served.bm25]
        shown = {retriever.name: table(retriever) for retriever in parts} if compare else {}
        empty = pd.DataFrame(columns=columns)
        return table(served.default), *(gr.Dataframe(value=shown.get(name, empty), visible=name in shown)
                                         for name in ("sdml", "bm25"))

    # -- annotate ---------------------------------------------------------------------------

    @shows_errors
    def start_cluster(self, cluster: str, name: str, request: gr.Request, profile: gr.OAuthProfile | None):
        """A spot-check queue for ``cluster`` (or for a cluster the app picks when it is empty)."""
        who = self.annotator(name, request, profile)
        served = self.model.current()
        corpus = served.bundle.corpus
        cluster = (cluster or "").strip() or next_cluster(self.store, corpus, who, retriever=served.dense)
        queue = spot_check(self.store, served.dense, corpus, who, cluster=cluster)
        members = corpus[corpus["cluster"] == cluster]
        state = {"version": served.bundle.version, "cluster": cluster, "members": _text_table(members, ["qid", "question"]),
                 "queue": queue, "position": 0, "message": f"Spot-checking cluster {plain(cluster)}."}
        return self._annotate_view(state, who)

    @shows_errors
    def start_query(self, query: str, name: str, request: gr.Request, profile: gr.OAuthProfile | None):
        """A spot-check queue of what the encoder retrieves for a typed query."""
        who = self.annotator(name, request, profile)
        served = self.model.current()
        queue = spot_check(self.store, served.dense, served.bundle.corpus, who, query_text=query)
        state = {"version": served.bundle.version, "cluster": None, "members": pd.DataFrame(columns=["qid", "question"]),
                 "queue": queue, "position": 0, "message": "Checking what your query retrieves."}
        return self._annotate_view(state, who)

    @shows_errors
    def judge(self, label: str, state: dict | None, name: str, request: gr.Request, profile: gr.OAuthProfile | None):
        """Record ``label`` for the current (query, candidate) pair and move to the next one."""
        who = self.annotator(name, request, profile)
        if not state or state["position"] >= len(state["queue"]):
            raise QPRError("Nothing to judge: pick a cluster or check a query first.")
        row = state["queue"].iloc[state["position"]]
        judgment = self.store.record(
            who, int(row["candidate_qid"]), label, state["version"],
            query_qid=None if pd.isna(row["query_qid"]) else int(row["query_qid"]),
            query_text=None if pd.isna(row["query_text"]) else str(row["query_text"]),
            rank=int(row["rank"]), distance=float(row["distance"]),
        )
        state = state | {"position": state["position"] + 1, "message": f"Recorded judgment #{judgment}: {label}."}
        return self._annotate_view(state, who)

    @shows_errors
    def undo(self, state: dict | None, name: str, request: gr.Request, profile: gr.OAuthProfile | None):
        """Withdraw this annotator's last judgment; step back if it was the previous item here."""
        who = self.annotator(name, request, profile)
        withdrawn = self.store.undo_last(who)
        state = state or {"version": None, "cluster": None, "members": pd.DataFrame(columns=["qid", "question"]),
                          "queue": pd.DataFrame(), "position": 0}
        if withdrawn is None:
            return self._annotate_view(state | {"message": "Nothing to undo."}, who)
        position = state["position"]
        if position > 0 and _item_key(state["queue"].iloc[position - 1]) == withdrawn["item_key"]:
            position -= 1
        message = f"Withdrew judgment #{withdrawn['id']} ({withdrawn['label']})."
        return self._annotate_view(state | {"position": position, "message": message}, who)

    def _annotate_view(self, state: dict, who: str):
        """The Annotate tab's outputs for ``state``: state, status, members, the current pair,
        its details, the rest of the queue and the annotator's progress."""
        queue, position = state["queue"], state["position"]
        left = max(len(queue) - position, 0)
        progress = self.store.progress(who)
        progress_md = f"Judged today: **{progress['today']}** · left in this queue: **{left}** · labelled in total: **{progress['total']}**"
        if left:
            row = queue.iloc[position]
            query = row["query_text"] if pd.isna(row["query_qid"]) else self._question(int(row["query_qid"]))
            details = (f"Candidate {position + 1} of {len(queue)} · its cluster: **{plain(row['cluster']) if pd.notna(row['cluster']) else 'none'}** · "
                       f"rank {int(row['rank'])} · distance {row['distance']:.3f} · suspicion {row['suspicion']:.3f}")
            candidate = row["question"]
            rest = _text_table(queue.iloc[position:].assign(distance=queue["distance"].round(3), suspicion=queue["suspicion"].round(3)),
                               ["question", "cluster", "distance", "suspicion"])
        else:
            query = candidate = ""
            details = "Queue finished: pick the next cluster or check a query." if len(queue) else ""
            rest = pd.DataFrame(columns=["question", "cluster", "distance", "suspicion"])
        return state, state.get("message", ""), state["members"], query, candidate, details, rest, progress_md

    def _question(self, qid: int) -> str:
        corpus = self.model.current().bundle.corpus
        found = corpus.loc[corpus["qid"] == qid, "question"]
        return str(found.iloc[0]) if len(found) else f"(question {qid} is not in the served corpus)"

    # -- clusters ---------------------------------------------------------------------------

    def overview(self):
        """Least coherent clusters, and the merges and conflicts the current judgments imply."""
        bundle = self.model.current().bundle
        result = corrected_clusters(self.store, bundle.corpus)
        weakest = self._least_coherent(bundle)
        merges = result.merges.assign(judgment_ids=result.merges["judgment_ids"].map(_ids))
        conflicts = result.conflicts.assign(judgment_ids=result.conflicts["judgment_ids"].map(_ids))
        return weakest, _text_table(merges, list(merges.columns)), _text_table(conflicts, list(conflicts.columns))

    def _least_coherent(self, bundle: Bundle) -> pd.DataFrame:
        # A bundle's corpus never changes, so its coherence table is computed once per version
        # (1.6 s on the 157k-question Quora bundle), not on every visit of the tab.
        if bundle.version not in self._coherence:
            self._coherence[bundle.version] = least_coherent(bundle.corpus).assign(coherence=lambda f: f["coherence"].round(3))
        return self._coherence[bundle.version]

    @shows_errors
    def show_cluster(self, cluster: str):
        """Members, coherence and the judgments touching ``cluster``."""
        cluster = (cluster or "").strip()
        if not cluster:
            raise QPRError("Type a cluster id, or click one in the list of least coherent clusters.")
        corpus = self.model.current().bundle.corpus
        members = corpus[corpus["cluster"] == cluster]
        if members.empty:
            raise QPRError(f"There is no cluster {cluster!r} in the served corpus.")
        coherence = cluster_coherence(members["question"])
        summary = f"Cluster **{plain(cluster)}**: {len(members)} questions, split {plain(members['split'].iloc[0])}, coherence {coherence:.3f}"
        judged = self.store.judgments(cluster=cluster)
        judged = judged.assign(
            query=judged["query_question"].fillna(judged["query_text"]),
            created_at=judged["created_at"].map(_when),
        ).rename(columns={"candidate_question": "candidate"})
        columns = ["id", "annotator", "label", "query", "query_cluster", "candidate", "candidate_cluster", "created_at"]
        return summary, _text_table(members, ["qid", "question", "split"]), _text_table(judged, columns)

    def pick_cluster(self, event: gr.SelectData):
        """The cluster id of the clicked row of the least-coherent table, shown."""
        cluster = str(event.row_value[0])
        return (cluster, *self.show_cluster(cluster))

    # -- retrain & export -------------------------------------------------------------------

    @shows_errors
    def export_clusters(self, fmt: str):
        """Corrected clusters (plus training pairs and the manifest) as files to download."""
        served = self.model.current()
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        out = self.cache / "exports" / f"corrected-{stamp}.{fmt}"
        export(self.store, served.bundle.corpus, fmt, out, bundle_version=served.bundle.version)
        files = [str(out), str(pairs_path(out)), str(manifest_path(out))]
        done = json.loads(manifest_path(out).read_text())
        note = (f"Exported {done['questions']} questions: {done['clusters_before']} clusters before, "
                f"{done['clusters_after']} after {len(done['merges'])} merge(s); {len(done['judgment_ids'])} judgment(s) "
                f"included, {len(done['conflicts'])} conflict(s) left for review.")
        return files, note

    @shows_errors
    def retrain(self, epochs: float, progress=gr.Progress(track_tqdm=True)):
        """Retrain on the corrected clusters in the background of searches; compare old and new
        on the same held-out clusters; hold the new model until the user confirms."""
        progress(0, desc="Merging judgments into corrected clusters")
        served = self.model.current()
        result = corrected_clusters(self.store, served.bundle.corpus)
        epochs = int(epochs)

        def epoch_done(row: dict) -> None:
            progress(row["epoch"] / epochs, desc=f"Epoch {row['epoch']} of at most {epochs}: validation ROC AUC {row['val_auc']:.3f}")

        new = retrain(served.bundle, result.corpus, max_epochs=epochs, on_epoch=epoch_done)
        progress(1.0, desc="Evaluating both models on the held-out clusters")
        comparison = compare(served.bundle, new, result.corpus)
        self.model.propose(new, comparison)
        note = (f"Retrained on {len(result.merges)} merge(s) from {len(result.judgment_ids)} judgment(s): model "
                f"**{plain(new.version)}** is ready. Both models are scored on the same held-out queries with the corrected "
                "clusters. Nothing changes until you press 'Use the retrained model'.")
        return _text_table(comparison.round(3), list(comparison.columns)), note, *_decision_buttons(True)

    @shows_errors
    def confirm(self):
        """Save the retrained bundle and serve it from now on (one atomic swap)."""
        candidate = self.model.candidate()
        if candidate is None:
            raise QPRError("No retrained model is waiting: press 'Retrain' first.")
        bundle = candidate.served.bundle
        path = bundle.save(self.cache / "bundles" / bundle.version)
        self.store.register_corpus(bundle.version, bundle.corpus)
        previous = self.model.current().bundle
        # Raises, leaving the served model and this app's record of it as they were, if another
        # confirmation or retraining replaced the candidate in the meantime.
        self.model.confirm(bundle.version)
        self.replaced, self.last_comparison = previous, candidate.comparison
        note = (f"Now serving **{plain(bundle.version)}**, saved in **{plain(path)}**. "
                "Start the app with QPR_BUNDLE set to that folder to serve it after a restart.")
        return note, *_decision_buttons(False)

    def discard(self):
        self.model.discard()
        return "Discarded the retrained model; the served one is unchanged.", *_decision_buttons(False)

    # -- metrics ----------------------------------------------------------------------------

    def metrics(self):
        """Training curves of the served model (and of the one it replaced, or of a retrained one
        waiting), and H@1 / MRR before and after the waiting or else the last confirmed retraining
        (a discarded one is not shown)."""
        bundles = [("replaced", self.replaced), ("served", self.model.current().bundle)]
        candidate = self.model.candidate()
        if candidate is not None:
            bundles.append(("retrained", candidate.served.bundle))
        curves = pd.DataFrame(
            [{"model": f"{name} {bundle.version}", "epoch": row["epoch"], "val ROC AUC": row["val_auc"], "loss": row["loss"]}
             for name, bundle in bundles if bundle is not None
             for row in bundle.manifest.get("training", {}).get("history", [])],
            columns=["model", "epoch", "val ROC AUC", "loss"],
        )
        comparison, which = (candidate.comparison, "the retrained model waiting for your decision") if candidate \
            else (self.last_comparison, "the last confirmed retraining")
        if comparison is not None:
            scores = comparison.assign(model=comparison["model"].map({"current": "before", "retrained": "after"}))
            caption = f"Before and after {which}, on the same held-out queries (corrected clusters)."
        else:
            served = self.model.current().bundle
            # The served retriever's own scores: the hybrid's when the bundle has one.
            measured = served.manifest.get("hybrid_metrics") or served.manifest.get("metrics", {})
            scores = pd.DataFrame([{"model": "served", "split": split} | values for split, values in measured.items()])
            caption = "The served model on its held-out clusters (retrain to compare before and after)."
        bars = pd.DataFrame(
            [{"measure": f"{metric} {split} · {model}", "model": model, "value": row[metric]}
             for metric in ("H1", "MRR") for split in scores["split"].unique()
             for model, row in scores[scores["split"] == split].set_index("model").iterrows()],
            columns=["measure", "model", "value"],
        )
        return curves, curves, gr.BarPlot(value=bars, sort=list(bars["measure"])), caption


def _item_key(row: pd.Series) -> str:
    """The store's name of the (query, candidate) item of a spot-check queue row."""
    if pd.isna(row["query_qid"]):
        return item_key(int(row["candidate_qid"]), query_text=str(row["query_text"]))
    return item_key(int(row["candidate_qid"]), query_qid=int(row["query_qid"]))


def _ids(ids) -> str:
    return ", ".join(str(i) for i in ids)


def _decision_buttons(waiting: bool):
    return gr.Button(interactive=waiting), gr.Button(interactive=waiting)


def identity_mode(auth: list[tuple[str, str]] | None) -> str:
    """"auth" with QPR_AUTH logins, "oauth" on Hugging Face Spaces, else "name"."""
    if auth:
        return "auth"
    return "oauth" if get_space() else "name"


def build_ui(app: QPRApp) -> gr.Blocks:
    """The tabs, wired to ``app``'s handlers."""
    with gr.Blocks(title="Question paraphrase retrieval", fill_width=True) as demo:
        gr.Markdown("# Question paraphrase retrieval\nFind questions that mean the same, mark the ones filed "
                    "under the wrong cluster, retrain on the corrected clusters.")
        with gr.Row():
            name = gr.Textbox(label="Your name (needed to annotate)", visible=app.identity == "name", scale=2)
            if app.identity == "oauth":
                gr.LoginButton()
            who = gr.Markdown()
        identity = [name]

        with gr.Tab("Search"):
            with gr.Row():
                query = gr.Textbox(label="Question", placeholder="Type a question", scale=4)
                k = gr.Slider(1, 50, value=10, step=1, label="Results")
                compare = gr.Checkbox(label="Compare with SDML alone and BM25")
            search = gr.Button("Search", variant="primary")
            tables = [
                gr.Dataframe(label=label, elem_id=elem_id, datatype=["number", "str", "str", "number"], interactive=False,
                             wrap=True, visible=visible, column_widths=SEARCH_WIDTHS)
                for label, elem_id, visible in ((RESULT_LABELS[app.model.current().default.name], "search-results", True),
                                                (RESULT_LABELS["sdml"], "search-dense", False),
                                                (RESULT_LABELS["bm25"], "search-bm25", False))
            ]
            gr.Examples([[q, 10, True] for q in app.examples], inputs=[query, k, compare], outputs=tables,
                        fn=app.search, run_on_click=True, cache_examples=False, visible_columns=[0],
                        label="Examples (click to search and compare)")
            for trigger in (search.click, query.submit):
                trigger(app.search, [query, k, compare], tables)

        with gr.Tab("Annotate"):
            state = gr.State()
            gr.Markdown("The app picks a cluster (or give one, or a query). For each question retrieved from "
                        "**another** cluster, say whether it means the same as the query. Keys: **1/S** same, "
                        "**2/D** different, **3/U** unsure, **Z** undo.")
            with gr.Row(equal_height=True):
                next_btn = gr.Button("Next cluster (the app picks)", variant="primary")
                pick = gr.Textbox(label="…or a cluster id", scale=2)
                pick_btn = gr.Button("Check cluster")
                typed = gr.Textbox(label="…or a query", scale=2)
                typed_btn = gr.Button("Check query")
            status = gr.Markdown(elem_id="annotate-status")
            progress_md = gr.Markdown(elem_id="annotate-progress")
            with gr.Row():
                members = gr.Dataframe(label="The cluster's questions", datatype=["number", "str"], interactive=False, wrap=True)
                with gr.Column():
                    asked = gr.Textbox(label="Query", interactive=False, lines=2, elem_id="annotate-query")
                    candidate = gr.Textbox(label="Retrieved from another cluster: same meaning?", interactive=False, lines=2,
                                           elem_id="annotate-candidate")
                    details = gr.Markdown()
                    with gr.Row():
                        label_buttons = {label: gr.Button(f"{text} ({keys})", elem_id=f"judge-{label}",
                                                          variant="primary" if label == "same" else "secondary")
                                         for label, text, keys in LABEL_BUTTONS}
                        undo = gr.Button("Undo last (Z)", elem_id="judge-undo")
            queue = gr.Dataframe(label="Queue, most suspicious first", datatype=["str", "str", "number", "number"],
                                 interactive=False, wrap=True)
            view = [state, status, members, asked, candidate, details, queue, progress_md]
            next_btn.click(app.start_cluster, [gr.State(""), *identity], view)
            for trigger in (pick_btn.click, pick.submit):
                trigger(app.start_cluster, [pick, *identity], view)
            for trigger in (typed_btn.click, typed.submit):
                trigger(app.start_query, [typed, *identity], view)
            for label, button in label_buttons.items():
                button.click(app.judge, [gr.State(label), state, *identity], view)
            undo.click(app.undo, [state, *identity], view)

        with gr.Tab("Clusters") as clusters_tab:
            with gr.Row():
                cluster = gr.Textbox(label="Cluster id", scale=3)
                show = gr.Button("Show", variant="primary")
                refresh = gr.Button("Refresh merges and conflicts")
            summary = gr.Markdown()
            with gr.Row():
                weakest = gr.Dataframe(label="Least coherent clusters (click one)", datatype=["str", "number", "number"],
                                       interactive=False)
                cluster_members = gr.Dataframe(label="Members", datatype=["number", "str", "str"], interactive=False, wrap=True)
            touching = gr.Dataframe(label="Judgments touching this cluster", datatype="str", interactive=False, wrap=True)
            merges = gr.Dataframe(label="Merges proposed by the current judgments", datatype="str", interactive=False, wrap=True,
                                  elem_id="clusters-merges")
            conflicts = gr.Dataframe(label="Conflicts to review", datatype="str", interactive=False, wrap=True)
            show.click(app.show_cluster, [cluster], [summary, cluster_members, touching])
            cluster.submit(app.show_cluster, [cluster], [summary, cluster_members, touching])
            weakest.select(app.pick_cluster, None, [cluster, summary, cluster_members, touching])
            for trigger in (clusters_tab.select, refresh.click):
                trigger(app.overview, None, [weakest, merges, conflicts])

        with gr.Tab("Retrain & export"):
            gr.Markdown("Corrected clusters = the original clusters joined by confirmed false negatives, never "
                        "across a 'different' judgment.")
            with gr.Row():
                fmt = gr.Radio(["csv", "jsonl", "parquet"], value="csv", label="Export format")
                export_btn = gr.Button("Export corrected clusters", variant="primary")
            export_note = gr.Markdown()
            files = gr.File(label="Download", file_count="multiple", interactive=False, elem_id="export-files")
            export_btn.click(app.export_clusters, [fmt], [files, export_note])
            with gr.Row():
                epochs = gr.Slider(1, 20, value=5, step=1, label="Maximum epochs")
                retrain_btn = gr.Button("Retrain on corrected clusters", variant="primary")
            retrain_note = gr.Markdown(elem_id="retrain-note")
            comparison = gr.Dataframe(label="Old and new model on the same held-out clusters", interactive=False)
            with gr.Row():
                confirm = gr.Button("Use the retrained model", interactive=False, variant="primary")
                discard = gr.Button("Discard it", interactive=False)
            retrain_btn.click(app.retrain, [epochs], [comparison, retrain_note, confirm, discard],
                              concurrency_limit=1, concurrency_id="retrain")
            confirm.click(app.confirm, None, [retrain_note, confirm, discard])
            discard.click(app.discard, None, [retrain_note, confirm, discard])

        with gr.Tab("Metrics") as metrics_tab:
            caption = gr.Markdown()
            with gr.Row():
                auc = gr.LinePlot(x="epoch", y="val ROC AUC", color="model", label="Validation ROC AUC per epoch", x_axis_format="d")
                loss = gr.LinePlot(x="epoch", y="loss", color="model", label="Training loss per epoch", x_axis_format="d")
            bars = gr.BarPlot(x="measure", y="value", color="model", label="H@1 and MRR", y_lim=[0, 1], x_label_angle=-30)
            metrics_tab.select(app.metrics, None, [auc, loss, bars, caption])

        demo.load(app.whoami, None, [who])
    return demo


def served_bundle() -> tuple[Bundle, tuple[str, ...]]:
    """The bundle to serve (``QPR_BUNDLE`` or the demo) and example queries for it."""
    path = os.environ.get("QPR_BUNDLE")
    if not path:
        # The demo model is tiny: a second thread costs more in synchronisation than it saves, and
        # far more when another process holds a core (demo training: 2.6 s on one thread, 106 s on two).
        torch.set_num_threads(1)
        return demo_bundle(), EXAMPLE_QUERIES
    bundle = Bundle.load(path)
    held_out = bundle.corpus[bundle.corpus["split"] == "test"]["question"]
    examples = held_out.sample(min(5, len(held_out)), random_state=0) if len(held_out) else bundle.corpus["question"].head(5)
    return bundle, tuple(examples)


def main() -> int:
    try:
        auth = parse_auth(os.environ.get("QPR_AUTH"))
        store = open_store()
        bundle, examples = served_bundle()
        app = QPRApp(ServedModel(bundle), store, identity_mode(auth), examples)
    except QPRError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    demo = build_ui(app)
    # Searches and judgments are short: several run at once; retraining runs one at a time.
    demo.queue(default_concurrency_limit=8)
    demo.launch(auth=auth, head=SHORTCUTS, allowed_paths=[str(app.cache / "exports")])
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The Search tab: a question in, the served retriever's top k out, and on request its two parts.

The tables' labels name what answers (the served bundle's ``system``; BM25 alone for a lexical
bundle). What the page's project serves can change under an open page (the project opened on
load, an upload, a confirmed retraining), so each session keeps which served model its page
shows (the bundle version, a gr.State), and a search, or opening the tab, sends new labels only
when what is served differs; the tables it does not refill are then emptied, so no result of
another model stays on the page under the new model's name, and the new version in that State
relabels the compare box and brings the project's example queries (its change event).

A search sets a value in each of its outputs, the three tables and that State, and nothing else:
Gradio rebuilds the whole config of every output a handler leaves out or updates (a new
component and its JSON schema, about 1 ms of CPU each), which with the compare box and the
examples among the outputs was a quarter of a search's CPU through Gradio (docs/SERVING.md).
"""

from __future__ import annotations

import gradio as gr
import pandas as pd

from qpr.serving.served_model import Served
from ui.common import AppContext
from ui.display import shows_errors

COLUMNS = ["rank", "question", "cluster", "same meaning"]
WIDTHS = ["9%", "55%", "21%", "15%"]
ENCODER_NAMES = {"cnn-sdml": "SDML", "lstm": "LSTM", "film": "FiLM", "idf-embed": "IDF-embed", "fcrr": "FCRR",
                 "convrr": "ConvRR"}  # a bundle's ``system`` as the page names its encoder
SCORE_NOTE = ("**same meaning**: the estimated probability, 0 to 1 (higher = more alike), that a result means the same "
              "as your question, fitted on this corpus' held-out clusters; the same scale in all three tables. Where it "
              "cannot be fitted (no held-out clusters) the table shows each retriever's own score instead (BM25's, "
              "higher = more alike) or distance (the encoder's, lower = more alike), and its header says which.")


def labels_of(served: Served) -> dict[str, str]:
    """What the tab calls the tables and the compare box when ``served`` answers: "results" (the
    served retriever), "dense" (its encoder alone), "bm25" and "compare"."""
    if served.bundle.lexical:
        return {"results": "BM25 alone (no encoder trained yet)", "dense": "No encoder trained yet", "bm25": "BM25 alone",
                "compare": "Compare with BM25 alone (the same: no encoder trained yet)"}
    encoder = ENCODER_NAMES.get(served.bundle.system, served.bundle.system)
    results = {"hybrid": f"Hybrid: {encoder} and BM25 candidates re-scored",
               "rrf": f"Rank fusion of {encoder} and BM25"}.get(served.default.name, f"{encoder} encoder")
    return {"results": results, "dense": f"{encoder} encoder alone", "bm25": "BM25 alone",
            "compare": f"Compare with {encoder} alone and BM25"}


class SearchTab:
    """Layout and handlers of the Search tab over ``ctx``'s served model."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def render(self) -> None:
        """Lay out the tab (inside a gr.Blocks) and wire it to ``search``."""
        project = self.ctx.current()
        served = project.served()
        labels = labels_of(served)
        with gr.Tab("Search") as tab:
            self.shown = gr.State(served.bundle.version)  # the served model this page shows
            with gr.Row():
                query = gr.Textbox(label="Question", placeholder="Type a question", scale=4)
                k = gr.Slider(1, 50, value=10, step=1, label="Results")
                self.compare = gr.Checkbox(label=labels["compare"])
            button = gr.Button("Search", variant="primary")
            gr.Markdown(SCORE_NOTE)
            with gr.Row():  # side by side when compared
                self.results, self.dense, self.bm25 = (
                    gr.Dataframe(_empty(), label=labels[part], elem_id=f"search-{part}",
                                 datatype=["number", "str", "str", "number"], interactive=False, wrap=True,
                                 visible=part == "results", column_widths=WIDTHS)
                    for part in ("results", "dense", "bm25")
                )
            # The page's project's example queries (``controls`` replaces them when the served model changes).
            self.examples = gr.Dataset(components=[query], samples=[[q] for q in self.ctx.examples_of(project.slug)],
                                       label="Examples (click to search and compare)", elem_id="search-examples")
            inputs = [query, k, self.compare, self.shown]
            self.relabelled = [self.results, self.dense, self.bm25, self.shown]  # what a search sets
            gr.on([button.click, query.submit], self.search, inputs, self.relabelled, api_name="search")
            # An example fills the inputs, then searches as the button does (with this session's labels).
            self.examples.click(self.example, [self.examples], [query, k, self.compare]).then(
                self.search, inputs, self.relabelled, api_visibility="undocumented")
            self.compare.change(self.show_parts, [self.compare], [self.dense, self.bm25]).then(self.refresh, inputs, self.relabelled)
            tab.select(self.relabel, [self.shown, self.compare], self.relabelled)
            self.shown.change(self.controls, None, [self.compare, self.examples])

    @shows_errors
    def search(self, query: str, k: float, compare: bool, shown: str | None = None) -> dict:
        """Top-k questions for ``query`` from the served retriever (the hybrid when the bundle has
        one) and, when ``compare``, from its two parts alone: the encoder and BM25. ``shown`` is
        the version of the served model the session's page shows (None: not tracked, as in a
        direct call): when another is served now, the tables come with its labels."""
        served = self.ctx.current().served()
        parts = {self.results: served.default}
        if compare:
            parts |= {self.dense: served.model_retriever, self.bm25: served.bm25} if served.default is not served.model_retriever else {self.bm25: served.bm25}
        # A table not searched (hidden) is emptied rather than left out: see the module's docstring.
        found = {table: _table(served, parts[table], query, int(k)) if table in parts else _empty()
                 for table in (self.results, self.dense, self.bm25)}
        if found[self.results].empty:
            gr.Warning(f"No question of this project matches {query.strip()!r}: "
                    + ("BM25, which serves it until an encoder is trained, finds questions sharing a word with yours. "
                       if served.bundle.lexical else "") + "Try other words.")
        return found if shown is None else self._labelled(served, shown, compare, found)

    def relabel(self, shown: str, compare: bool) -> dict:
        """On opening the tab: if another model is served than the page shows, its labels and
        empty tables."""
        return self._labelled(self.ctx.current().served(), shown, compare) or gr.skip()

    def _labelled(self, served: Served, shown: str, compare: bool, tables: dict | None = None) -> dict:
        """``tables`` (new contents); when ``served`` is not the model the page shows (``shown``),
        also the labels for ``served`` and empty tables where ``tables`` has none. Only then: a
        label update costs Gradio a rebuild of the component's config, which sent with every
        search was a third of its time under load (docs/RELIABILITY.md)."""
        tables = tables or {}
        if served.bundle.version == shown:
            return tables
        labels = labels_of(served)
        parts = {self.results: ("results", True), self.dense: ("dense", compare and not served.bundle.lexical),
                 self.bm25: ("bm25", compare)}
        updates = {component: gr.Dataframe(label=labels[part], visible=visible,
                                           value=tables.get(component, _empty()))
                   for component, (part, visible) in parts.items()}
        return updates | {self.shown: served.bundle.version}

    def controls(self) -> dict:
        """When the page's served model changed: the compare box's label and the example queries
        of what is served now."""
        project = self.ctx.current()
        return {self.compare: gr.Checkbox(label=labels_of(project.served())["compare"]),
                self.examples: gr.Dataset(samples=[[q] for q in self.ctx.examples_of(project.slug)])}

    @staticmethod
    def example(sample: list[str]) -> list:
        """A clicked example: its query, searched for ten results and compared."""
        return [sample[0], 10, True]

    def show_parts(self, compare: bool) -> dict:
        """Show or hide the two parts' tables (a lexical bundle has no encoder: BM25's only).
        Only the compare box changes their visibility: a visibility update costs Gradio a rebuild
        of the component's config (see ``_labelled``)."""
        encoder = not self.ctx.current().served().bundle.lexical
        return {self.dense: gr.update(visible=compare and encoder), self.bm25: gr.update(visible=compare)}

    def refresh(self, query: str, k: float, compare: bool, shown: str | None = None) -> dict:
        """After the compare box changes: fill the parts' tables if there is a question to compare."""
        return self.search(query, k, compare, shown) if compare and query.strip() else gr.skip()


def _empty() -> pd.DataFrame:
    """A table with the tab's columns and no rows (a new one each time: Gradio may keep it)."""
    return pd.DataFrame(columns=COLUMNS)


def _table(served, retriever, query: str, k: int) -> pd.DataFrame:
    """``retriever``'s top ``k`` for ``query`` as the tab's table, its last column what
    ``Served.readable`` shows (the probability of the same meaning where calibrated)."""
    results = served.results(query, k, retriever)
    last = results[0]["score_is"] if results else COLUMNS[-1]
    rows = [[r["rank"], r["question"], r["cluster"] or "", round(r["score"], 3)] for r in results]
    return pd.DataFrame(rows, columns=[*COLUMNS[:3], last])

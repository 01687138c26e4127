"""The Search tab: a question in, the served retriever's top k out, and on request its two parts."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from ui.common import AppContext, shows_errors, text_table

COLUMNS = ["rank", "question", "cluster", "same meaning"]
WIDTHS = ["9%", "55%", "21%", "15%"]
RESULT_LABELS = {
    "hybrid": "Hybrid: SDML and BM25 candidates re-scored",
    "sdml": "SDML encoder alone",
    "bm25": "BM25 alone",
}
SCORE_NOTE = ("**same meaning**: the estimated probability, 0 to 1 (higher = more alike), that a result means the same "
              "as your question, fitted on this corpus' held-out clusters; the same scale in all three tables. Where it "
              "cannot be fitted (no held-out clusters) the table shows each retriever's own distance instead (lower = "
              "closer).")


class SearchTab:
    """Layout and handlers of the Search tab over ``ctx``'s served model."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def render(self) -> None:
        """Lay out the tab (inside a gr.Blocks) and wire it to ``search``."""
        with gr.Tab("Search"):
            with gr.Row():
                query = gr.Textbox(label="Question", placeholder="Type a question", scale=4)
                k = gr.Slider(1, 50, value=10, step=1, label="Results")
                compare = gr.Checkbox(label="Compare with SDML alone and BM25")
            button = gr.Button("Search", variant="primary")
            gr.Markdown(SCORE_NOTE)
            with gr.Row():  # side by side when compared
                self.results, self.dense, self.bm25 = (
                    gr.Dataframe(label=label, elem_id=elem_id, datatype=["number", "str", "str", "number"], interactive=False,
                                 wrap=True, visible=visible, column_widths=WIDTHS)
                    for label, elem_id, visible in ((RESULT_LABELS[self.ctx.model.current().default.name], "search-results", True),
                                                    (RESULT_LABELS["sdml"], "search-dense", False),
                                                    (RESULT_LABELS["bm25"], "search-bm25", False))
                )
            outputs = [self.results, self.dense, self.bm25]
            gr.Examples([[q, 10, True] for q in self.ctx.examples], inputs=[query, k, compare], outputs=outputs,
                        fn=self.search, run_on_click=True, cache_examples=False, visible_columns=[0],
                        label="Examples (click to search and compare)")
            gr.on([button.click, query.submit], self.search, [query, k, compare], outputs)

    @shows_errors
    def search(self, query: str, k: float, compare: bool) -> dict:
        """Top-k questions for ``query`` from the served retriever (the hybrid when the bundle has
        one) and, when ``compare``, from its two parts alone: the encoder and BM25."""
        served = self.ctx.model.current()

        def table(retriever) -> pd.DataFrame:
            hits = pd.DataFrame([vars(h) for h in retriever.search(query, int(k))], columns=["rank", "qid", "question", "distance"])
            hits.insert(2, "cluster", served.cluster_of(hits["qid"]))  # the served labels: corrections show at once
            hits = hits.drop(columns="qid")
            probability = served.probability(retriever, hits["distance"])
            if probability is None:
                return text_table(hits.assign(distance=hits["distance"].round(3)))
            return text_table(hits.assign(**{"same meaning": probability.round(3)}), COLUMNS)

        parts = [served.dense, served.bm25] if served.default is not served.dense else [served.bm25]
        shown = {retriever.name: table(retriever) for retriever in parts} if compare else {}
        empty = pd.DataFrame(columns=COLUMNS)
        return {self.results: table(served.default)} | {
            component: gr.Dataframe(value=shown.get(name, empty), visible=name in shown)
            for component, name in ((self.dense, "sdml"), (self.bm25, "bm25"))
        }

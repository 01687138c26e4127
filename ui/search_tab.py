"""The Search tab: a question in, the served retriever's top k out, and on request its two parts."""

from __future__ import annotations

import gradio as gr
import pandas as pd

from ui.common import AppContext, shows_errors

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
            compare.change(self.show_parts, [compare], [self.dense, self.bm25]).then(self.refresh, [query, k, compare], outputs)

    @shows_errors
    def search(self, query: str, k: float, compare: bool) -> dict:
        """Top-k questions for ``query`` from the served retriever (the hybrid when the bundle has
        one) and, when ``compare``, from its two parts alone: the encoder and BM25."""
        served = self.ctx.model.current()
        found = {self.results: _table(served, served.default, query, int(k))}
        if compare:
            parts = {self.dense: served.dense, self.bm25: served.bm25} if served.default is not served.dense else {self.bm25: served.bm25}
            found |= {component: _table(served, retriever, query, int(k)) for component, retriever in parts.items()}
        return found

    def show_parts(self, compare: bool) -> dict:
        """Show or hide the two parts' tables. Only the compare box changes their visibility: a
        visibility update costs Gradio a rebuild of the component's config, and sent with every
        search it was a third of a search's time under load (docs/RELIABILITY.md)."""
        return {self.dense: gr.update(visible=compare), self.bm25: gr.update(visible=compare)}

    def refresh(self, query: str, k: float, compare: bool) -> dict:
        """After the compare box changes: fill the parts' tables if there is a question to compare."""
        return self.search(query, k, compare) if compare and query.strip() else gr.skip()


def _table(served, retriever, query: str, k: int) -> pd.DataFrame:
    """``retriever``'s top ``k`` for ``query`` as the tab's table: the probability of the same
    meaning where ``served`` has a calibration for it, else the retriever's own distance."""
    hits = retriever.search(query, k)
    clusters = served.cluster_of([h.qid for h in hits])  # the served labels: corrections show at once
    probability = served.probability(retriever, [h.distance for h in hits])
    last, score = ("same meaning", probability.round(3)) if probability is not None else ("distance", [round(h.distance, 3) for h in hits])
    rows = [[h.rank, h.question, c or "", float(s)] for h, c, s in zip(hits, clusters, score)]
    return pd.DataFrame(rows, columns=[*COLUMNS[:3], last])

"""The Retrain tab's evidence of what a retrain changed (``workflows.judgment_effect``), without Gradio."""

import numpy as np
import pandas as pd

from workflows.judgment_effect import changed_top_results, summary


class Fixed:
    """A retriever whose results per query text are given."""

    def __init__(self, results: dict[str, list[int]]) -> None:
        self.results = results

    def search_ids(self, queries, k):
        found = np.array([(self.results[q] + [-1] * k)[:k] for q in queries])
        return np.zeros(found.shape), found


CORPUS = pd.DataFrame({
    "qid": [1, 2, 3, 4, 5, 6, 7],
    "question": ["how do i pay", "how can i pay", "reset password", "forgot my password", "open account", "q6", "q7"],
    "cluster": ["pay", "pay", "pw", "pw", "acct", "acct", None],
    "split": ["train", "train", "train", "test", "test", "test", "none"],
})


def test_lists_the_queries_whose_first_result_changed_fixed_first_with_the_judged_questions():
    before = Fixed({"forgot my password": [4, 1], "open account": [7], "q6": [5]})
    after = Fixed({"forgot my password": [3], "open account": [1], "q6": [5]})
    changes = changed_top_results(before, after, CORPUS, pd.DataFrame({"qid1": [3], "qid2": [2], "is_duplicate": [0]}))
    # The query itself (qid 4 first) is skipped; q6's first result did not change.
    assert changes.to_dict("records") == [
        {"query": "forgot my password", "before": "how do i pay", "right before": False, "after": "reset password",
         "right after": True, "judged question": True},
        {"query": "open account", "before": "q7", "right before": False, "after": "how do i pay", "right after": False,
         "judged question": False},
    ]
    assert summary(changes).startswith("The retrained model changed 2 held-out queries' first result: 1 now right, 0 now "
                                       "wrong; 1 of the changes involve")


def test_a_broken_query_comes_after_the_fixed_ones_and_no_change_says_so():
    before = Fixed({"forgot my password": [2], "open account": [6], "q6": [5]})
    after = Fixed({"forgot my password": [3], "open account": [2], "q6": [5]})
    changes = changed_top_results(before, after, CORPUS)
    assert changes["query"].tolist() == ["forgot my password", "open account"]
    assert changes["right before"].tolist() == [False, True] and not changes["judged question"].any()
    assert summary(changes.iloc[:0]) == "The retrained model changed no held-out query's first result."

"""How much the questions of one cluster share their words: the paper's cluster coherence.

Distant supervision (``qpr.data.supervise``) filters clusters by it, and the annotation queue
(``annotations.queue``) shows the least coherent clusters first; both read it from here so that
the annotation layer does not depend on distant supervision.
"""

from __future__ import annotations

from typing import Iterable

from qpr.model.text import words


def cluster_coherence(questions: Iterable[str]) -> float:
    """The paper's cluster coherence c = (1/n) * sum_q |T_q ∩ S| / |S|.

    T_q is the set of unique word tokens of question q and S the union of all T_q, so c is 1
    for identical questions and 1/n for n questions with disjoint words of equal count.
    Questions without words contribute 0; an empty input is 0.
    """
    token_sets = [set(words(q)) for q in questions]
    union = set().union(*token_sets) if token_sets else set()
    if not union:
        return 0.0
    return sum(len(t & union) for t in token_sets) / (len(token_sets) * len(union))

"""Concurrent searches coalesced (qpr.serving.batching): searches that arrive while one runs are
answered together, each with what it would have got alone; errors reach every caller of the batch;
a lone search runs at once; the served model searches through it unless QPR_COALESCE_SEARCHES=0."""

from __future__ import annotations

import threading

import numpy as np

from qpr.retrieval.base import Retriever
from qpr.serving.batching import CoalescedRetriever
from qpr.serving.served_model import Served
from qpr.settings import settings


class Gated(Retriever):
    """Answers query "qN" with distance N and qid N (k columns); its first call waits on ``gate``,
    so the test decides how many searches pile up behind it. Records each call's queries."""

    name = "gated"

    def __init__(self, corpus) -> None:
        self.corpus = corpus
        self.gate = threading.Event()
        self.calls: list[list[str]] = []

    def search_ids(self, queries, k):
        if not self.calls:
            self.calls.append(list(queries))
            self.gate.wait()
        else:
            self.calls.append(list(queries))
        if any(q == "q13" for q in queries):
            raise ValueError("unlucky")
        n = np.array([[float(q[1:])] * k for q in queries])
        return n, n.astype(np.int64)


def search_in_threads(retriever, asks):
    """Each (queries, k) of ``asks`` searched in its own thread; the result or exception of each."""
    out = [None] * len(asks)

    def ask(i, queries, k):
        try:
            out[i] = retriever.search_ids(queries, k)
        except Exception as err:
            out[i] = err

    threads = [threading.Thread(target=ask, args=(i, *a)) for i, a in enumerate(asks)]
    for t in threads:
        t.start()
    return threads, out


def test_searches_arriving_while_one_runs_are_answered_together(tiny_corpus):
    inner = Gated(tiny_corpus)
    coalesced = CoalescedRetriever(inner)
    first, first_out = search_in_threads(coalesced, [(["q1"], 3)])
    while not inner.calls:  # the first search is inside the index call
        threading.Event().wait(0.001)
    asks = [([f"q{n}"], 3) for n in range(2, 12)] + [(["q20", "q21"], 3), (["q30"], 5)]
    threads, out = search_in_threads(coalesced, asks)
    while len(coalesced._waiting) < len(asks):  # all queued behind the first
        threading.Event().wait(0.001)
    inner.gate.set()
    for t in first + threads:
        t.join()
    assert inner.calls[0] == ["q1"]
    assert sorted(map(sorted, inner.calls[1:])) == sorted([sorted([f"q{n}" for n in range(2, 12)] + ["q20", "q21"]), ["q30"]]), \
        "one call per k for everything that waited"
    for (queries, k), (distances, qids) in zip(asks, out):
        expected = np.array([[float(q[1:])] * k for q in queries])
        np.testing.assert_array_equal(distances, expected)
        np.testing.assert_array_equal(qids, expected.astype(np.int64))
    np.testing.assert_array_equal(first_out[0][1], [[1, 1, 1]])


def test_an_error_reaches_every_caller_of_its_batch_and_the_next_batch_still_runs(tiny_corpus):
    inner = Gated(tiny_corpus)
    coalesced = CoalescedRetriever(inner)
    first, _ = search_in_threads(coalesced, [(["q1"], 2)])
    while not inner.calls:
        threading.Event().wait(0.001)
    threads, out = search_in_threads(coalesced, [(["q13"], 2), (["q2"], 2)])
    while len(coalesced._waiting) < 2:
        threading.Event().wait(0.001)
    inner.gate.set()
    for t in first + threads:
        t.join()
    assert all(isinstance(o, ValueError) for o in out)
    np.testing.assert_array_equal(coalesced.search_ids(["q4"], 1)[1], [[4]])


def test_a_batch_holds_at_most_max_batch_queries_but_always_one_request(tiny_corpus):
    inner = Gated(tiny_corpus)
    inner.gate.set()
    coalesced = CoalescedRetriever(inner, max_batch=2)
    np.testing.assert_array_equal(coalesced.search_ids(["q1", "q2", "q3"], 1)[1], [[1], [2], [3]])


def test_the_served_model_searches_coalesced_with_the_results_of_its_retriever(bundle, monkeypatch):
    served = Served.of(bundle)
    assert isinstance(served.default, CoalescedRetriever)
    inner = served.default.inner
    queries = bundle.corpus["question"].head(12).tolist()
    threads, out = search_in_threads(served.default, [([q], 5) for q in queries])
    for t in threads:
        t.join()
    for q, (distances, qids) in zip(queries, out):
        d, i = inner.search_ids([q], 5)
        np.testing.assert_array_equal(qids, i)
        np.testing.assert_allclose(distances, d, rtol=1e-5, atol=1e-5)  # batched float sums differ in the last bits
    assert served.default.search(queries[0], 3) == inner.search(queries[0], 3)
    monkeypatch.setenv("QPR_COALESCE_SEARCHES", "0")
    settings.cache_clear()
    assert not isinstance(Served.of(bundle).default, CoalescedRetriever)

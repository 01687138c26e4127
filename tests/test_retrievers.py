import pytest

from qpr.errors import QPRError
from qpr.retrieval.base import Hit
from qpr.retrieval.lexical import BM25Retriever
from qpr.model.text import MAX_QUERY_CHARS


@pytest.fixture(params=["sdml", "bm25"])
def retriever(request, tiny_bundle):
    return tiny_bundle.dense_retriever() if request.param == "sdml" else BM25Retriever(tiny_bundle.corpus)


def test_single_query_gives_ranked_hits(retriever):
    hits = retriever.search("how do i learn chess ?", k=5)
    assert [h.rank for h in hits] == [1, 2, 3, 4, 5]
    assert all(isinstance(h, Hit) for h in hits)
    assert [h.distance for h in hits] == sorted(h.distance for h in hits)
    assert hits[0].question == "how do i learn chess ?" and hits[0].cluster == "c-chess"


def test_a_list_of_queries_gives_one_list_each(retriever):
    results = retriever.search(["tips for chess", "poker ?"], k=3)
    assert len(results) == 2 and all(len(r) == 3 for r in results)


def test_distractors_have_no_cluster(retriever):
    hits = retriever.search("is number 3 a lucky number ?", k=1)
    assert hits[0].cluster is None


@pytest.mark.parametrize(
    "query, k, message",
    [("", 5, "empty"), ("  \n", 5, "empty"), ("x" * (MAX_QUERY_CHARS + 1), 5, "shorten it"), ("ok", 0, "k must be")],
)
def test_bad_queries_are_refused_with_a_reason(retriever, query, k, message):
    with pytest.raises(QPRError, match=message):
        retriever.search(query, k=k)


def test_any_script_is_a_valid_query(tiny_bundle):
    dense, bm25 = tiny_bundle.dense_retriever(), BM25Retriever(tiny_bundle.corpus)
    for query in ["🙂 chess?", "كيف أتعلم الشطرنج", "<script>alert(1)</script>"]:
        assert [h.rank for h in dense.search(query, k=3)] == [1, 2, 3]  # unseen words hash to learned bins
    assert bm25.search("🙂 chess?", k=1)[0].cluster == "c-chess"  # the emoji is ignored, the word matches
    assert bm25.search("كيف أتعلم الشطرنج", k=3) == []  # no shared word: nothing, not noise


def test_bm25_returns_nothing_for_a_query_sharing_no_word(tiny_bundle):
    assert BM25Retriever(tiny_bundle.corpus).search("zyzzyva", k=5) == []


def test_k_larger_than_the_corpus_returns_the_whole_corpus(retriever, tiny_bundle):
    hits = retriever.search("learn", k=999)
    assert 0 < len(hits) <= len(tiny_bundle.corpus)


def test_rows_of_gives_each_qid_s_corpus_row_and_minus_one_for_an_unknown_one(retriever):
    corpus = retriever.corpus
    qids = corpus["qid"].to_numpy()[[4, 0, 2]]
    assert retriever.rows_of([*qids, corpus["qid"].max() + 1]).tolist() == [4, 0, 2, -1]


def test_the_encoder_s_retriever_is_named_by_its_system(tiny_bundle):
    assert tiny_bundle.dense_retriever().name == tiny_bundle.manifest.system == "cnn-sdml"

import json
import math

import numpy as np
import pytest

from qpr.bundles.bundle import Bundle
from qpr.cli.main import main
from qpr.errors import QPRError
from qpr.retrieval.index import IndexConfig
from qpr.evaluation.metrics import query_set
from qpr.retrieval.hybrid import (FEATURES, SIGNS, Fusion, HybridRetriever, RankFusion, RankFusionRetriever, fit_fusion, fit_rows,
                         fusion_rows, rank_fuse)
from qpr.retrieval.lexical import BM25Retriever
from qpr.bundles.bundle import serving_retriever


def hybrid_of(bundle, bm25=None):
    """The hybrid over ``bundle``'s encoder with the fusion its manifest carries."""
    return HybridRetriever(bundle.dense_retriever(), Fusion.from_stored(bundle.manifest.fusion), bm25)


@pytest.fixture(scope="module")
def fitted(tiny_bundle):
    return tiny_bundle.with_fusion(fit_fusion(tiny_bundle.dense_retriever()).to_dict())


def test_features_by_hand(fitted):
    hybrid = hybrid_of(fitted)
    corpus = fitted.corpus
    query, row = "how do i learn python ?", int(np.flatnonzero(corpus["question"] == "where should i start with python ?")[0])
    dense_distance = ((hybrid.dense.encode([query]) - hybrid.dense.encode([corpus["question"][row]])) ** 2).sum()
    bm25 = BM25Retriever(corpus).scores(query)[row]
    (table,) = hybrid.features(query, np.array([row]), np.array([dense_distance]), np.array([bm25]))
    features = dict(zip(FEATURES, table))
    idf = hybrid.lexical.idf
    query_words, candidate_words = {"how", "do", "i", "learn", "python"}, {"where", "should", "i", "start", "with", "python"}
    shared = idf["i"] + idf["python"]
    assert features["dense_distance"] == pytest.approx(dense_distance)
    assert features["bm25"] == pytest.approx(bm25)
    assert features["jaccard"] == pytest.approx(2 / 9)
    assert features["query_idf_shared"] == pytest.approx(shared / sum(idf[w] for w in query_words))
    assert features["candidate_idf_shared"] == pytest.approx(shared / sum(idf[w] for w in candidate_words))
    assert features["bm25_share"] == pytest.approx(features["bm25"] / sum(idf[w] for w in query_words))
    assert features["length_gap"] == pytest.approx(1 / 6)
    n = len(corpus)
    assert idf["python"] == pytest.approx(math.log(1 + (n - 5 + 0.5) / 5.5))


@pytest.mark.parametrize("index", ["Flat", "HNSW8"])
def test_every_candidate_gets_its_own_distance_and_bm25_score(fitted, index):
    bundle = fitted.with_index(IndexConfig(index))
    hybrid = hybrid_of(bundle)
    queries = ["how do i learn python ?", "tips for chess", "a question about nothing in particular"]
    bm25 = BM25Retriever(bundle.corpus)
    dense = bundle.dense_retriever()
    for query, (rows, table) in zip(queries, hybrid.candidates(queries, depth=10)):
        assert len(set(rows)) == len(rows) >= 10
        texts = bundle.corpus["question"].to_numpy()[rows].tolist()
        expected = ((dense.encode(texts) - dense.encode([query])) ** 2).sum(axis=1)
        np.testing.assert_allclose(table[:, FEATURES.index("dense_distance")], expected, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(table[:, FEATURES.index("bm25")], bm25.scores(query)[rows], rtol=1e-5)
        # The candidates include a BM25 top 10 (compared by score: many questions tie here).
        scores = bm25.scores(query)
        np.testing.assert_allclose(np.sort(scores[rows])[-10:], np.sort(scores)[-10:])


def test_weights_keep_their_signs_so_a_verbatim_copy_ranks_first(fitted):
    fusion = Fusion.from_stored(fitted.manifest.fusion)
    assert all(sign * weight >= 0 for sign, weight in zip(SIGNS, fusion.coef))
    _, top = hybrid_of(fitted).search_ids(fitted.corpus["question"].tolist(), 1)
    assert list(top[:, 0]) == list(fitted.corpus["qid"])


def test_hybrid_results_are_ranked_unique_and_k_long(fitted):
    hits = hybrid_of(fitted).search("how can i learn chess ?", k=7)
    assert [h.rank for h in hits] == list(range(1, 8))
    assert len({h.qid for h in hits}) == 7
    assert [h.distance for h in hits] == sorted(h.distance for h in hits)
    # k beyond the fusion depth still gets k results (both sides are asked for more).
    assert len(hybrid_of(fitted).search("how can i learn chess ?", k=40)) == 40


def test_fusion_survives_save_and_load_and_is_required(fitted, tiny_bundle, tmp_path):
    fitted.save(tmp_path / "b")
    loaded = Bundle.load(tmp_path / "b")
    assert Fusion.from_stored(loaded.manifest.fusion) == Fusion.from_stored(fitted.manifest.fusion)
    with pytest.raises(QPRError, match="no fitted fusion"):
        hybrid_of(tiny_bundle)
    stale = fitted.with_fusion(fitted.manifest.fusion | {"features": ["dense_distance"]})
    with pytest.raises(QPRError, match="refit"):
        hybrid_of(stale)
    with pytest.raises(QPRError, match="test is for measuring"):
        fit_fusion(tiny_bundle.dense_retriever(), split="test")
    with pytest.raises(QPRError, match="at least 1"):
        fit_fusion(tiny_bundle.dense_retriever(), max_queries=0)
    with pytest.raises(QPRError, match="another corpus"):
        hybrid_of(fitted, bm25=BM25Retriever(fitted.corpus.iloc[::-1]))


def test_a_fusion_fitted_on_several_corpora_pools_their_candidates(tiny_bundle):
    queries = query_set(tiny_bundle.corpus, "val")
    features, labels, owner = fusion_rows(tiny_bundle.dense_retriever(), queries)
    assert features.shape == (len(labels), len(FEATURES)) and set(owner) == set(range(len(queries)))
    own = tiny_bundle.corpus.set_index("qid").index.get_indexer(queries["qid"])
    hybrid = hybrid_of(tiny_bundle.with_fusion(fit_fusion(tiny_bundle.dense_retriever()).to_dict()))
    for position, row in enumerate(own[:5]):  # a query's own row is never among its candidates
        rows, table = hybrid.candidates([queries["question"].iloc[position]], 20)[0]
        assert len(table[rows != row]) == int((owner == position).sum())
    assert fit_rows([(features, labels, owner)]) == fit_fusion(tiny_bundle.dense_retriever())  # one corpus: the same fit as fit_fusion
    half = len(labels) // 2
    pooled = fit_rows([(features[:half], labels[:half], owner[:half]), (features[half:], labels[half:], owner[half:])])
    assert pooled == fit_rows([(features, labels, owner)])  # pooling is concatenation
    with pytest.raises(QPRError, match="all negative"):
        fit_rows([(features, np.zeros_like(labels), owner)])


def synthetic_queries(seed: int, queries: int = 200, candidates: int = 10) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per query: its candidates' features (noise but the dense distance) and which is the
    paraphrase, the candidate nearest the query; each query's distances sit at their own level,
    as they do for short and long questions or for corpora of different domains."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(queries):
        table = rng.normal(size=(candidates, len(FEATURES)))
        table[:, 0] = rng.normal(0, 5) + rng.normal(size=candidates)
        out.append((table, table[:, 0] == table[:, 0].min()))
    return out


def test_a_fusion_fitted_per_query_ranks_where_one_level_for_all_queries_cannot():
    data = synthetic_queries(0)
    parts = [(np.concatenate([t for t, _ in chunk]), np.concatenate([y for _, y in chunk]),
              np.concatenate([np.full(len(y), i) for i, (_, y) in enumerate(chunk)])) for chunk in (data[:100], data[100:])]
    fusions = {per_query: fit_rows(parts, per_query=per_query) for per_query in (False, True)}
    first = {per_query: np.mean([np.argmax(fusion.score(table)) == np.argmax(y) for table, y in synthetic_queries(1)])
             for per_query, fusion in fusions.items()}
    assert first[True] > 0.9 and first[True] > first[False] + 0.3  # on new queries
    assert fusions[True].intercept == 0.0 and all(np.sign(c) in (0, s) for c, s in zip(fusions[True].coef, SIGNS))
    table = data[0][0]  # one query's only candidate is a paraphrase, another's none are: nothing to rank
    with pytest.raises(QPRError, match="no query among the candidates has both"):
        fit_rows([(table[:1], np.ones(1, dtype=bool), np.zeros(1, dtype=int)), (table[1:], np.zeros(9, dtype=bool), np.zeros(9, dtype=int))],
                 per_query=True)


def test_cli_fuses_a_bundle_then_searches_and_evaluates_with_it(tiny_bundle, tmp_path, capsys):
    path = tiny_bundle.save(tmp_path / "b")
    assert main(["eval", str(path), "--split", "val"]) == 0  # no fusion yet: the encoder serves
    assert json.loads(capsys.readouterr().out)["system"] == "cnn-sdml"  # the encoder named by its system
    assert main(["fuse", str(path)]) == 0
    assert set(json.loads(capsys.readouterr().out)["fusion"]) == set(FEATURES)
    assert main(["search", str(path), "how do i learn golf ?", "-k", "3", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["hits"]) == 3
    assert main(["eval", str(path), "--split", "val"]) == 0
    assert json.loads(capsys.readouterr().out)["system"] == "hybrid"


def test_rank_fusion_by_hand():
    dense = np.array([[10, 11, 12, -1]])
    bm25 = np.array([[12, 13, 10, 14]])
    only_dense = rank_fuse(dense, bm25, RankFusion(1.0, k=0), 3)[1]
    only_bm25 = rank_fuse(dense, bm25, RankFusion(0.0, k=0), 3)[1]
    assert only_dense.tolist() == [[10, 11, 12]] and only_bm25.tolist() == [[12, 13, 10]]
    # Equal weights, k=1: 10 scores 1/2 + 1/4, 12 scores 1/4 + 1/2 (a tie, dense order first), 11 and 13 1/3.
    distances, qids = rank_fuse(dense, bm25, RankFusion(0.5, k=1), 5)
    assert qids.tolist() == [[10, 12, 11, 13, 14]]
    np.testing.assert_allclose(-distances[0], [0.375, 0.375, 1 / 6, 1 / 6, 0.1])


def test_rank_fusion_is_never_below_its_parts_when_they_agree_on_the_hit():
    # Each part alone puts the paraphrase (qid 7) first for one query and second for the other;
    # wherever it is first in both or first in one and second in the other, the fusion puts it first.
    dense = np.array([[7, 1, 2], [3, 7, 4]])
    bm25 = np.array([[5, 7, 6], [7, 8, 9]])
    for weight in (0.3, 0.5, 0.7):
        _, qids = rank_fuse(dense, bm25, RankFusion(weight), 1)
        assert qids[:, 0].tolist() == [7, 7]


def test_a_bundle_with_rank_fusion_serves_it(tiny_bundle):
    bundle = tiny_bundle.with_fusion(RankFusion(0.6).to_dict())
    retriever = serving_retriever(bundle)
    assert isinstance(retriever, RankFusionRetriever)
    hits = retriever.search("how do i learn python ?", 5)
    assert len(hits) == 5 and hits[0].distance <= hits[-1].distance
    with pytest.raises(QPRError, match="dense_weight"):
        RankFusion(1.5)

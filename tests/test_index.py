import faiss
import numpy as np
import pytest

from qpr.errors import QPRError
from qpr.evaluation.metrics import index_recall
from qpr.retrieval.index import (
    ADD_EF_SEARCH, DEFAULT_MEMORY_BYTES, EXACT_UP_TO, GRAPH_UP_TO, IndexConfig, VectorIndex, auto_config, auto_factory, planned_bytes,
)


def test_auto_factory_searches_small_corpora_exactly_and_larger_ones_with_the_measured_graph():
    assert auto_factory(500) == "Flat"
    assert auto_factory(EXACT_UP_TO) == "Flat"
    assert auto_factory(EXACT_UP_TO + 1) == "HNSW48"
    assert auto_factory(157_023) == "HNSW48"  # recall@20 0.994 in 2.3 ms, exact 13 ms (docs/INDEX.md)
    assert auto_config(157_023).search == "efSearch=512"
    assert auto_config(1_000_000).search == "efSearch=768"  # 512 kept 0.9875 of the exact top 20 there, 768 0.9916
    assert IndexConfig().search == "" and VectorIndex.build(np.zeros((1, 2), np.float32), np.arange(1), IndexConfig("HNSW8")).search_params == "efSearch=512"


@pytest.fixture
def vectors():
    return np.random.default_rng(0).normal(size=(2000, 8)).astype(np.float32)


def test_exact_index_returns_corpus_ids_and_squared_distances(vectors):
    ids = np.arange(2000) * 7 + 100
    index = VectorIndex.build(vectors, ids, IndexConfig("auto"))
    assert index.describe() == "exact"
    distances, found = index.search(vectors[:3], 2)
    assert list(found[:, 0]) == [100, 107, 114]
    expected = ((vectors[0] - vectors[(found[0, 1] - 100) // 7]) ** 2).sum()
    assert distances[0, 1] == pytest.approx(expected, rel=1e-5)


def test_ivf_index_with_all_lists_probed_equals_exact(vectors, tmp_path):
    ids = np.arange(2000)
    exact = VectorIndex.build(vectors, ids, IndexConfig("Flat"))
    ivf = VectorIndex.build(vectors, ids, IndexConfig("IVF20,Flat", "nprobe=20"))
    assert ivf.describe() == "IVF20,Flat/nprobe=20"
    assert index_recall(ivf, exact, vectors[:50]) == 1.0
    narrow = VectorIndex.build(vectors, ids, IndexConfig("IVF20,Flat", "nprobe=1"))
    assert index_recall(narrow, exact, vectors[:50]) < 1.0
    narrow.save(tmp_path / "i.faiss")
    loaded = VectorIndex.load(tmp_path / "i.faiss", narrow.settings())
    assert np.array_equal(loaded.search(vectors[:5], 4)[1], narrow.search(vectors[:5], 4)[1])


def test_hnsw_index_keeps_ids_its_search_breadth_and_recall(vectors, tmp_path):
    ids = np.arange(2000) * 3
    exact = VectorIndex.build(vectors, ids, IndexConfig("Flat"))
    wide = VectorIndex.build(vectors, ids, IndexConfig("HNSW16", "efSearch=400"))
    assert wide.describe() == "HNSW16/efSearch=400"
    assert index_recall(wide, exact, vectors[:50]) >= 0.99
    narrow = VectorIndex.build(vectors, ids, IndexConfig("HNSW4", "efSearch=1"))
    assert index_recall(narrow, exact, vectors[:50]) < index_recall(wide, exact, vectors[:50])
    wide.save(tmp_path / "h.faiss")
    loaded = VectorIndex.load(tmp_path / "h.faiss", wide.settings())
    assert loaded.settings() == {"factory": "HNSW16", "search": "efSearch=400"}
    assert np.array_equal(loaded.search(vectors[:5], 4)[1], wide.search(vectors[:5], 4)[1])
    assert set(loaded.search(vectors[:5], 4)[1].ravel()) <= set(ids)


def test_index_errors_say_what_to_fix(vectors, tmp_path):
    with pytest.raises(QPRError, match="one vector per id"):
        VectorIndex.build(vectors, np.arange(5))
    with pytest.raises(QPRError, match="needs at least 5000 vectors"):
        VectorIndex.build(vectors, np.arange(2000), IndexConfig("IVF5000,Flat"))
    with pytest.raises(QPRError, match="unsupported index"):
        VectorIndex.build(vectors, np.arange(2000), IndexConfig("PQ8"))
    with pytest.raises(QPRError, match="unsupported index"):
        VectorIndex.build(vectors, np.arange(2000), IndexConfig("NoSuchIndex12"))
    with pytest.raises(QPRError, match="do not apply to a HNSW16 index"):
        VectorIndex.build(vectors, np.arange(2000), IndexConfig("HNSW16", "nprobe=4"))
    with pytest.raises(QPRError, match="do not apply"):
        VectorIndex.build(vectors, np.arange(2000), IndexConfig("IVF20,Flat", "efSearch=banana"))
    index = VectorIndex.build(vectors, np.arange(2000))
    with pytest.raises(QPRError, match=r"expects \(n, 8\)"):
        index.search(np.zeros((1, 3), dtype=np.float32), 1)
    with pytest.raises(QPRError, match="k must be"):
        index.search(vectors[:1], 0)
    (tmp_path / "bad.faiss").write_bytes(b"garbage")
    with pytest.raises(QPRError, match="cannot read FAISS index"):
        VectorIndex.load(tmp_path / "bad.faiss", {"factory": "Flat"})


@pytest.mark.parametrize("factory", ["Flat", "HNSW16", "IVF20,Flat"])
def test_vectors_returns_what_was_indexed_for_any_ids_in_any_order(vectors, tmp_path, factory):
    ids = np.arange(2000) * 5 + 3
    index = VectorIndex.build(vectors, ids, IndexConfig(factory))
    wanted = np.array([9998, 3, 508, 8])  # rows 1999, 0, 101, 1
    assert np.array_equal(index.vectors(ids[[1999, 0, 101, 1]]), vectors[[1999, 0, 101, 1]])
    index.save(tmp_path / "i.faiss")
    loaded = VectorIndex.load(tmp_path / "i.faiss", index.settings())
    assert np.array_equal(loaded.vectors(wanted), vectors[[1999, 0, 101, 1]])
    with pytest.raises(QPRError, match="not in this index"):
        loaded.vectors(np.array([3, 4]))


def test_single_query_search_matches_batch_search_and_leaves_the_thread_count_alone(vectors):
    import faiss

    index = VectorIndex.build(vectors, np.arange(2000))
    threads = faiss.omp_get_max_threads()
    batch = index.search(vectors[:4], 5)
    for row in range(4):
        distances, ids = index.search(vectors[row : row + 1], 5)
        assert np.array_equal(ids[0], batch[1][row])
        assert np.allclose(distances[0], batch[0][row])
    assert faiss.omp_get_max_threads() == threads


def test_index_settings_are_checked_before_any_work():
    from qpr.retrieval.index import check_config

    check_config(IndexConfig("HNSW16", "efSearch=64"), 10)
    check_config(IndexConfig("IVF20,Flat", "nprobe=5"), 10)  # the vector count is the build's to check
    check_config(IndexConfig("auto"), 10)
    with pytest.raises(QPRError, match="do not apply to a Flat index"):
        check_config(IndexConfig("auto", "efSearch=64"), 100)  # auto searches 100 questions exactly
    check_config(IndexConfig("auto", "efSearch=64"), EXACT_UP_TO + 1)
    with pytest.raises(QPRError, match="unsupported index"):
        check_config(IndexConfig("NoSuch9"), 10)


def test_auto_factory_moves_to_compressed_inverted_files_by_size_and_memory():
    assert auto_factory(GRAPH_UP_TO) == "HNSW48"
    large = auto_factory(GRAPH_UP_TO + 1, memory_bytes=10**12)
    assert large.startswith("IVF") and large.endswith("_HNSW32,SQ8,RFlat")  # room for the full vectors beside the codes
    ten_million = auto_factory(10_000_000)  # the 4 GB default: PQ codes re-ranked from 8-bit codes
    assert ten_million == "IVF16384_HNSW32,PQ75,Refine(SQ8)"
    assert planned_bytes(ten_million, 10_000_000, 300) <= DEFAULT_MEMORY_BYTES
    # A graph that does not fit the budget is not chosen, whatever the size.
    assert auto_factory(1_000_000, memory_bytes=planned_bytes("HNSW48", 1_000_000, 300) - 1).startswith("IVF")
    assert auto_config(10_000_000).search == "nprobe=256,quantizer_efSearch=512,k_factor_rf=8"


@pytest.mark.parametrize("factory, search", [("IVF16,Flat", "nprobe=16"),
                                             ("IVF16_HNSW32,SQ8,RFlat", "nprobe=16,quantizer_efSearch=32,k_factor_rf=4"),
                                             ("HNSW16", "efSearch=200")])
def test_questions_are_added_to_an_existing_index_without_a_rebuild(vectors, factory, search):
    more = np.random.default_rng(1).normal(size=(500, 8)).astype(np.float32)
    all_vectors, ids = np.vstack([vectors, more]), np.arange(2500) * 3 + 1
    index = VectorIndex.build(vectors, ids[:2000], IndexConfig(factory, search))
    ivf = faiss.try_extract_index_ivf(index.index)
    centroids = None if ivf is None else ivf.quantizer.reconstruct_n(0, ivf.nlist)
    index.add(more, ids[2000:])
    assert len(index) == 2500
    if ivf is not None:  # the trained coarse quantizer is kept as it was
        assert np.array_equal(ivf.quantizer.reconstruct_n(0, ivf.nlist), centroids)
    exact = VectorIndex.build(all_vectors, ids, IndexConfig("Flat"))
    assert index_recall(index, exact, more[:50]) >= 0.95  # all lists probed: only SQ8 / the graph may miss
    assert list(index.search(more[:5], 1)[1][:, 0]) == list(ids[2000:2005])
    assert np.allclose(index.vectors(ids[[3, 2100]]), all_vectors[[3, 2100]], atol=1e-5)


def test_the_index_auto_builds_at_10m_adds_saves_loads_and_searches(vectors, tmp_path):
    """PQ codes re-ranked on 8-bit codes, as ``auto`` builds at 10M questions, at toy size."""
    more = np.random.default_rng(1).normal(size=(500, 8)).astype(np.float32)
    ids = np.arange(2500) * 3 + 1
    config = IndexConfig("IVF16_HNSW32,PQ4,Refine(SQ8)", "nprobe=16,quantizer_efSearch=32,k_factor_rf=16")
    index = VectorIndex.build(vectors, ids[:2000], config)
    index.add(more, ids[2000:])
    index.save(tmp_path / "pq.faiss")
    loaded = VectorIndex.load(tmp_path / "pq.faiss", index.settings())
    assert loaded.describe() == "IVF16_HNSW32,PQ4,Refine(SQ8)/nprobe=16,quantizer_efSearch=32,k_factor_rf=16"
    assert len(loaded) == 2500
    exact = VectorIndex.build(np.vstack([vectors, more]), ids, IndexConfig("Flat"))
    assert index_recall(loaded, exact, more[:50]) >= 0.9  # all lists probed: only the codes may miss
    assert list(loaded.search(more[:5], 1)[1][:, 0]) == list(ids[2000:2005])


def test_an_hnsw_quantizer_files_added_vectors_at_a_lower_ef_and_keeps_its_own_for_search(vectors):
    config = IndexConfig("IVF16_HNSW32,Flat", "nprobe=16,quantizer_efSearch=512")
    index = VectorIndex.build(vectors[:1000], np.arange(1000), config)
    quantizer = faiss.downcast_index(faiss.extract_index_ivf(index.index).quantizer)
    seen = []

    class Watched:  # the vectors, noting the quantizer's efSearch each time add reads a chunk
        ndim, shape = 2, vectors[1000:1300].shape

        def __len__(self):
            return 300

        def __getitem__(self, rows):
            seen.append(quantizer.hnsw.efSearch)
            return vectors[1000:1300][rows]

    index.add(Watched(), np.arange(1000, 1300), chunk=100)
    assert seen == [ADD_EF_SEARCH] * 3 and quantizer.hnsw.efSearch == 512
    assert list(index.search(vectors[1000:1010], 1)[1][:, 0]) == list(range(1000, 1010))


def test_adding_known_or_repeated_ids_is_refused_and_adds_nothing(vectors):
    index = VectorIndex.build(vectors[:1000], np.arange(1000), IndexConfig("IVF16,Flat"))
    with pytest.raises(QPRError, match=r"already indexed: \[999\]"):
        index.add(vectors[1000:1002], np.array([999, 5000]))
    with pytest.raises(QPRError, match=r"repeated: \[5000\]"):
        index.add(vectors[1000:1002], np.array([5000, 5000]))
    with pytest.raises(QPRError, match="8-d vector per id"):
        index.add(vectors[:2, :4], np.array([7000, 7001]))
    assert len(index) == 1000

"""Indexes are opened memory-mapped (qpr.retrieval.index.VectorIndex.load): an inverted file's
lists and the stored codes of flat, graph and refine indexes are not read whole at start; they
search as the index written, stay read-only, and a copy, a save and a bundle's added questions
still work, also once the file they map is gone or replaced."""

from __future__ import annotations

import os

import numpy as np
import pytest

from qpr.bundles.bundle import Bundle
from qpr.errors import QPRError
from qpr.retrieval.index import IndexConfig, VectorIndex


@pytest.fixture
def saved(tmp_path):
    vectors = np.random.default_rng(0).random((2000, 16), dtype=np.float32)
    ids = np.arange(2000, dtype=np.int64) * 7 + 3
    built = VectorIndex.build(vectors, ids, IndexConfig("IVF16,Flat", "nprobe=4"))
    built.save(tmp_path / "index.faiss")
    return built, vectors, ids, tmp_path / "index.faiss"


@pytest.mark.parametrize("factory", ["Flat", "HNSW8", "IVF16,PQ4,Refine(SQ8)", "IVF16,SQ8"])
def test_every_kind_of_index_is_mapped_read_only_and_searches_as_written(factory, tmp_path):
    vectors = np.random.default_rng(1).random((2000, 16), dtype=np.float32)
    ids = np.arange(2000, dtype=np.int64) * 5 + 1
    built = VectorIndex.build(vectors, ids, IndexConfig(factory))
    built.save(tmp_path / "index.faiss")
    loaded = VectorIndex.load(tmp_path / "index.faiss", built.settings())
    assert loaded.mapped and not built.mapped
    for got, expected in zip(loaded.search(vectors[:50], 10), built.search(vectors[:50], 10)):
        np.testing.assert_array_equal(got, expected)
    with pytest.raises(QPRError, match="memory-mapped .* read-only; add to a copy"):
        loaded.add(vectors[:1], np.array([0], dtype=np.int64))
    copy = loaded.copy()
    copy.add(vectors[:1], np.array([0], dtype=np.int64))
    assert len(copy) == len(built) + 1 and len(loaded) == len(built)


def test_an_inverted_file_is_mapped_and_searches_as_written(saved):
    built, vectors, ids, path = saved
    loaded = VectorIndex.load(path, built.settings())
    assert loaded.mapped and not built.mapped
    for got, expected in zip(loaded.search(vectors[:50], 10), built.search(vectors[:50], 10)):
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(loaded.vectors(ids[:5]), vectors[:5])
    with pytest.raises(QPRError, match="memory-mapped .* read-only; add to a copy"):
        loaded.add(vectors[:1], np.array([1], dtype=np.int64))


def test_a_mapped_index_saves_and_copies_its_lists_not_a_reference(saved, tmp_path):
    built, vectors, ids, path = saved
    loaded = VectorIndex.load(path, built.settings())
    loaded.save(tmp_path / "again.faiss")
    copy = loaded.copy()
    copy.add(vectors[:3] + 1, np.array([1, 2, 4], dtype=np.int64))
    assert len(copy) == len(built) + 3 and len(loaded) == len(built)
    os.remove(path)  # the saved one and the copy stand alone
    again = VectorIndex.load(tmp_path / "again.faiss", built.settings())
    np.testing.assert_array_equal(again.search(vectors[:20], 5)[1], built.search(vectors[:20], 5)[1])


def test_a_replaced_file_is_not_copied_as_if_it_were_the_mapped_one(saved):
    built, vectors, ids, path = saved
    loaded = VectorIndex.load(path, built.settings())
    replacement = path.with_name("other.faiss")
    VectorIndex.build(vectors[:500], ids[:500], IndexConfig("IVF16,Flat")).save(replacement)
    os.replace(replacement, path)
    with pytest.raises(QPRError, match="was replaced since this index was opened"):
        loaded.copy()
    np.testing.assert_array_equal(loaded.search(vectors[:5], 3)[1], built.search(vectors[:5], 3)[1]), "still serves what it mapped"


def test_a_bundle_with_an_inverted_file_adds_questions_and_saves_again(tiny_bundle, tmp_path):
    corpus = tiny_bundle.corpus
    ivf = tiny_bundle.with_index(IndexConfig("IVF4,Flat", "nprobe=4")).save(tmp_path / "b")
    loaded = Bundle.load(ivf)
    assert loaded.index.mapped
    new = corpus.head(3).assign(qid=corpus["qid"].max() + 1 + np.arange(3), cluster=None, split="none")
    grown = loaded.with_questions(new)
    assert len(grown.index) == len(corpus) + 3 and len(loaded.index) == len(corpus)
    reloaded = Bundle.load(grown.save(tmp_path / "c"))
    assert len(reloaded.index) == len(corpus) + 3
    top = {hit.qid for hit in reloaded.dense_retriever().search(corpus["question"].iloc[0], 2)}
    assert top == {int(corpus["qid"].iloc[0]), int(new["qid"].iloc[0])}, "the question and its added copy"

"""Issue 58's 1M cost step (bench.serving asymmetric) builds a symmetric student bundle and its
asymmetric twin that load and search as the app serves them, at a test's size."""

from __future__ import annotations

import numpy as np

from bench import serving
from qpr.bundles.bundle import Bundle
from qpr.model.text import TextConfig, Vocabulary
from qpr.retrieval.asymmetric import MEASURED


def test_the_student_bundle_and_its_asymmetric_twin_load_and_search(tiny_corpus, tmp_path, monkeypatch):
    vocab = Vocabulary.build(tiny_corpus["question"], TextConfig())
    monkeypatch.setattr(serving, "scale_table", lambda n, work: (tiny_corpus, vocab))
    built = serving.build_asymmetric(len(tiny_corpus), tmp_path / "A", tmp_path / "work")
    student, asymmetric = (Bundle.load(tmp_path / "A" / name) for name in ("student", "asymmetric"))
    assert built["questions"] == len(tiny_corpus) and set(built["index_build_s"]) == {"student", "asymmetric"}
    assert student.asymmetric is None and asymmetric.asymmetric == MEASURED
    assert student.index.dim == serving.MINILM_DIM and asymmetric.index.dim == 2 * serving.MINILM_DIM
    assert np.asarray(asymmetric.teacher_vectors).shape == (len(tiny_corpus), serving.MINILM_DIM)
    question = tiny_corpus["question"].iloc[0]
    assert student.dense_retriever().search(question, 1)[0].qid == tiny_corpus["qid"].iloc[0]
    # The twin's teacher vectors are random, so only that it answers from the corpus is checked.
    assert {hit.qid for hit in asymmetric.dense_retriever().search(question, 3)} <= set(tiny_corpus["qid"])
    assert all(size > 0 for size in built["bundle_gb"].values())

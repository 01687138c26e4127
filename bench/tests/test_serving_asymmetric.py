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
    assert built["peak_rss_gb"] > 0


def test_the_doc_table_shows_both_bundles_from_the_results():
    built = {"date": "2026-11-28T20:00+00:00", "machine": "m", "questions": 1_000_000, "dimensions": 384, "encode_s": 1800.0,
             "teacher": "random", "index": {"student": "IVF a", "asymmetric": "IVF b"},
             "index_build_s": {"student": 60.0, "asymmetric": 150.0}, "bundle_gb": {"student": 1.0, "asymmetric": 3.0}}
    served = {"startup_s": 6.0, "first_start_s": 80.0, "rss_gb": 2.0, "private_rss_gb": 0.5, "search_p50_ms": 17.0,
              "search_p99_ms": 28.0, "http_search_p50_ms": 11.0, "http_search_p99_ms": 25.0, "load_average": 0.5, "searches": 300}
    text = serving.asymmetric_table({"oneM_asymmetric_build": built, "oneM_student": served,
                                     "oneM_asymmetric": served | {"search_p99_ms": 41.0}})
    student, asymmetric = (line for line in text.splitlines() if line.startswith("| student") or line.startswith("| asymmetric"))
    assert "IVF a" in student and "60.000" in student and "17.0 / 28.0" in student
    assert "IVF b" in asymmetric and "150" in asymmetric and "17.0 / 41.0" in asymmetric and "1,000,000 questions" in text
    assert "peak resident memory" not in text, "a build measured before the peak was recorded says nothing of it"
    assert "peak resident memory 18.0 GB" in serving.asymmetric_table(
        {"oneM_asymmetric_build": built | {"peak_rss_gb": 18.03}, "oneM_student": served, "oneM_asymmetric": served})

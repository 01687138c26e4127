"""``qpr.Retriever`` beyond the README's example: its answers are the served retrievers', bad
arguments are errors that say what to do, and a bundle without an encoder is searched by BM25."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import make_corpus
from qpr import QPRError, Retriever
from qpr.bundles.bundle import Bundle
from qpr.retrieval.lexical import BM25Retriever
from qpr.bundles.bundle import serving_retriever


def test_search_answers_as_the_served_retrievers_one_query_or_a_batch(tiny_bundle):
    retriever, queries = Retriever(tiny_bundle), ["how do i learn chess ?", "tips for photography beginners"]
    assert retriever.search(queries, 4) == serving_retriever(tiny_bundle).search(queries, 4)
    one, batch = retriever.search(queries[0], 4), retriever.search(queries, 4)[0]
    assert [h.qid for h in one] == [h.qid for h in batch]  # distances may differ in the last bits by batch size
    assert [h.distance for h in one] == pytest.approx([h.distance for h in batch], abs=1e-5)
    assert retriever.search(queries, 4, method="dense") == tiny_bundle.dense_retriever().search(queries, 4)
    assert retriever.search(queries, 4, method="bm25") == BM25Retriever(tiny_bundle.corpus).search(queries, 4)
    assert retriever.encode(queries[0]).shape == (1, tiny_bundle.index.dim)


def test_added_questions_are_found_without_touching_the_loaded_bundle(tiny_bundle):
    retriever = Retriever(tiny_bundle)
    qids = retriever.add(["where can a beginner learn to juggle ?"], clusters=[None])
    assert retriever.search("where can a beginner learn to juggle ?", 1, method="bm25")[0].qid == qids[0]
    assert len(retriever.corpus) == len(tiny_bundle.corpus) + 1  # the bundle it was given is left as it was
    assert qids[0] not in set(tiny_bundle.corpus["qid"])


def test_bad_arguments_say_what_to_do(tiny_bundle):
    retriever = Retriever(tiny_bundle)
    with pytest.raises(QPRError, match="choose one of served, dense, bm25"):
        retriever.search("chess", 3, method="hybrid-ish")
    with pytest.raises(QPRError, match="one cluster per question"):
        retriever.add(["a", "b"], clusters=["x"])
    with pytest.raises(QPRError):
        retriever.search("   ", 3)
    with pytest.raises(QPRError):
        retriever.add(["   "])


def test_a_bundle_without_an_encoder_is_searched_by_bm25():
    retriever = Retriever(Bundle.lexical_of(make_corpus()))
    assert retriever.search("how do i learn chess ?", 3) == retriever.search("how do i learn chess ?", 3, method="bm25")
    with pytest.raises(QPRError, match="no encoder"):
        retriever.encode(["chess"])
    with pytest.raises(QPRError, match="method='bm25'"):
        retriever.search("chess", 3, method="dense")
    qid, = retriever.add(["how do i juggle three balls ?"])
    assert retriever.search("juggle three balls", 1)[0].qid == qid


def test_the_api_loads_on_first_use_so_the_store_and_the_errors_import_without_torch():
    """``qpr``'s package names load lazily: the annotation store (and its worker processes)
    imports ``qpr.errors`` without paying for torch and FAISS."""
    script = """
import sys
import annotations.db, qpr, qpr.errors
assert "torch" not in sys.modules and "faiss" not in sys.modules, "importing the store loaded torch or FAISS"
assert "Retriever" in dir(qpr)
from qpr import Hit, Retriever
assert Retriever.__module__ == "qpr.api.retriever" and Hit.__module__ == "qpr.retrieval.base" and "torch" in sys.modules
try:
    qpr.Nope
except AttributeError as err:
    print(err)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "module 'qpr' has no attribute 'Nope'"


def test_importing_the_engine_keeps_jax_off_the_gpu_unless_the_user_chose_a_platform():
    """bm25s starts JAX when it is imported, and JAX on a GPU takes most of its memory in every
    process; ``qpr`` keeps it on the CPU, and leaves a platform the user set alone."""
    script = "import os, qpr.retrieval.lexical; print(os.environ['JAX_PLATFORMS'])"
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    default = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    chosen = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            env=env | {"JAX_PLATFORMS": "cuda"})
    assert (default.returncode, default.stdout.strip()) == (0, "cpu"), default.stderr
    assert (chosen.returncode, chosen.stdout.strip()) == (0, "cuda"), chosen.stderr

"""Hypothesis fuzzing of the file readers, the bundle manifest, the query path and annotator names.

The property everywhere: a result that keeps the documented invariants, or QPRError (or its
subclass AnnotationError) with a one-line message; never another exception. Examples are
derandomized (the same few hundred on every run, so CI is reproducible) and there is no
deadline (a slow machine must not fail a run).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from annotations.db import open_store
from annotations.errors import AnnotationError
from annotations.names import annotator_key, annotator_name
from conftest import make_corpus
from qpr.bundles.bundle import Bundle
from qpr.data.corpus import COLUMNS, SPLITS, read_cluster_file
from qpr.errors import QPRError
from qpr.data.qalogs import read_qa_log
from qpr.retrieval.dense import DenseRetriever
from qpr.retrieval.lexical import BM25Retriever
from qpr.model.text import text_problem

FUZZ = settings(max_examples=60, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Any code point, lone surrogates, NULs and controls included, weighted towards the troublesome.
any_piece = st.one_of(st.characters(codec=None), st.sampled_from(["\x00", "\udcff", "\ud800", "\t", "\n", "\r", '"',
                                                                  ",", "\u200b", "e\u0301", "\ufeff", " "]))
any_text = st.lists(any_piece, max_size=30).map("".join)
# Text a file can hold (valid UTF-8), with NULs, controls and invisible characters among it.
file_text = st.lists(st.one_of(st.characters(codec="utf-8"), st.sampled_from(["\x00", "\t", "\u200b", "\ufeff", " "])),
                     max_size=30).map("".join)
cell = st.one_of(any_text, st.integers(-3, 10**20).map(str), st.just(""))


def one_line_error(err: QPRError) -> None:
    assert str(err) and "\n" not in str(err) and "Traceback" not in str(err)


@pytest.fixture(scope="module")
def scratch():
    folder = Path(tempfile.mkdtemp(prefix="qpr-fuzz-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, str):
        content = content.encode("utf-8", "surrogatepass")  # lone surrogates become invalid UTF-8, as in the wild
    path.write_bytes(content)
    return path


@st.composite
def delimited(draw, sep: str) -> str:
    """A CSV/TSV text: half the time a well-formed cluster file with fuzzed questions, else junk."""
    if draw(st.booleans()):
        optional = draw(st.lists(st.sampled_from(["qid", "split", "other"]), unique=True, max_size=3))
        columns = draw(st.permutations(["question", "cluster", *optional]))
        size = draw(st.integers(1, 8))
        values = {
            "question": [draw(st.one_of(file_text, file_text, any_text)).replace(sep, " ").replace('"', "'").replace("\n", " ").replace("\r", " ")
                         for _ in range(size)],
            "cluster": [draw(st.sampled_from(["a", "b", "c", ""])) for _ in range(size)],
            "qid": [str(q) for q in draw(st.lists(st.integers(1, 99), min_size=size, max_size=size, unique=True))],
            "split": [draw(st.sampled_from(SPLITS + ("", "TRAIN"))) for _ in range(size)],
            "other": [draw(cell).replace(sep, " ") for _ in range(size)],
        }
        rows = [[values[c][i] for c in columns] for i in range(size)]
    else:
        columns = draw(st.lists(st.sampled_from(["qid", "question", "cluster", "split", "other", ""]), min_size=1,
                                max_size=5))
        rows = draw(st.lists(st.lists(cell, min_size=len(columns), max_size=len(columns)), max_size=6))
    return "\n".join(sep.join(row) for row in [columns, *rows]) + draw(st.sampled_from(["", "\n", "\r\n"]))


@st.composite
def jsonl(draw) -> str:
    """A JSONL text: records with fuzzed values (half the time always with question and cluster),
    now and then a line cut short."""
    values = st.one_of(file_text, cell, st.integers(), st.none(), st.floats(allow_nan=True), st.lists(st.integers(), max_size=2))
    required = {"question": st.one_of(file_text, any_text), "cluster": st.sampled_from(["a", "b", ""])}
    fixed = required if draw(st.booleans()) else {}
    records = draw(st.lists(st.fixed_dictionaries(fixed, optional={k: values for k in COLUMNS + ["answer", "x"] if k not in fixed}),
                            max_size=6))
    lines = [json.dumps(r) for r in records]
    if lines and draw(st.integers(0, 9)) == 0:
        lines[-1] = lines[-1][:-1]
    return "\n".join(lines)


def _check_corpus(corpus) -> None:
    assert list(corpus.columns) == COLUMNS and len(corpus) > 0
    assert corpus["qid"].dtype == "int64" and corpus["qid"].is_unique
    assert set(corpus["split"]) <= set(SPLITS)
    assert not any(text_problem(q) for q in corpus["question"])


@FUZZ
@given(file=st.one_of(st.tuples(delimited(","), st.just(".csv")), st.tuples(delimited("\t"), st.just(".tsv")),
                      st.tuples(jsonl(), st.just(".jsonl")),
                      st.tuples(st.binary(max_size=200), st.sampled_from([".csv", ".tsv", ".jsonl", ".parquet"]))))
def test_fuzzed_cluster_files_read_or_fail_clearly(scratch, file):
    content, suffix = file
    path = _write(scratch / f"clusters{suffix}", content)
    try:
        corpus = read_cluster_file(path)
    except QPRError as err:
        one_line_error(err)
    else:
        _check_corpus(corpus)


@FUZZ
@given(file=st.one_of(st.tuples(delimited(","), st.just(".csv")), st.tuples(jsonl(), st.just(".jsonl")),
                      st.tuples(st.binary(max_size=200), st.sampled_from([".csv", ".jsonl", ".json"]))))
def test_fuzzed_logs_read_or_fail_clearly(scratch, file):
    content, suffix = file
    path = _write(scratch / f"log{suffix}", content)
    try:
        log = read_qa_log(path, question_col="question", answer_col="cluster")
    except QPRError as err:
        one_line_error(err)
    else:
        assert list(log.columns) == ["question", "answers"] and len(log) > 0
        assert not any(text_problem(q) for q in log["question"])


json_value = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=False), any_text.filter(
    lambda t: not text_problem(t))), lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6)


@pytest.fixture(scope="module")
def saved_bundle(tiny_bundle, scratch):
    return tiny_bundle.save(scratch / "bundle")


@FUZZ
@given(edits=st.lists(st.tuples(st.sampled_from(["format_version", "version", "encoder_config", "vocab_rows", "index",
                                                 "data_fingerprint", "index.factory", "index.search", "index.nprobe", "index.ef_search",
                                                 "encoder_config.channels", "encoder_config.windows"]),
                                st.one_of(st.just("<delete>"), json_value)), min_size=1, max_size=3))
def test_fuzzed_manifests_load_or_fail_clearly(saved_bundle, edits):
    original = (saved_bundle / "manifest.json").read_text()
    manifest = json.loads(original)
    for key, value in edits:
        where, _, leaf = key.rpartition(".")
        holder = manifest[where] if where and isinstance(manifest.get(where), dict) else manifest
        if value == "<delete>":
            holder.pop(leaf or key, None)
        else:
            holder[leaf or key] = value
    (saved_bundle / "manifest.json").write_text(json.dumps(manifest))
    try:
        Bundle.load(saved_bundle)
    except QPRError as err:
        one_line_error(err)
    finally:
        (saved_bundle / "manifest.json").write_text(original)


@pytest.fixture(scope="module")
def retrievers(tiny_bundle):
    return tiny_bundle.dense_retriever(), BM25Retriever(tiny_bundle.corpus)


@FUZZ
@given(query=st.one_of(any_text, st.text(st.characters(codec="utf-8"), min_size=1, max_size=60)),
       k=st.one_of(st.integers(1, 20), st.integers(-3, 2000)))
def test_fuzzed_queries_get_hits_or_a_clear_error(retrievers, query, k):
    for retriever in retrievers:
        try:
            hits = retriever.search(query, k)
        except QPRError as err:
            one_line_error(err)
        else:
            assert len(hits) <= k and [h.rank for h in hits] == list(range(1, len(hits) + 1))
            if isinstance(retriever, DenseRetriever):
                assert not text_problem(query)  # the encoder never embeds a NUL or a lone surrogate


@pytest.fixture(scope="module")
def store(scratch):
    with open_store(f"sqlite:///{scratch / 'fuzz.db'}", project="demo") as opened:
        opened.corpora.register("v1", make_corpus())
        yield opened


@FUZZ
@given(name=st.one_of(any_text, st.text(st.characters(codec="utf-8"), max_size=120)), query=any_text)
def test_fuzzed_names_and_typed_queries_are_stored_or_refused_whole(store, name, query):
    before = len(store.judgments.frame(current_only=False)), store.judgments.annotators()
    try:
        store.judgments.record(name, 2, "unsure", "v1", query_text=query)
    except AnnotationError as err:
        one_line_error(err)
        assert (len(store.judgments.frame(current_only=False)), store.judgments.annotators()) == before
    else:
        shown = annotator_name(name)
        assert annotator_name(shown) == shown and len(shown) <= 100 and annotator_key(shown)
        assert store.judgments.display_name(name) in store.judgments.annotators()
        assert store.judgments.frame(annotator=name)["query_text"].iloc[-1] == query

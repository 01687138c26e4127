import hashlib
import json
import shutil
from dataclasses import FrozenInstanceError, replace

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from qpr.bundles.bundle import Bundle
from qpr.bundles.manifest import Manifest
from qpr.data.corpus_file import read_corpus_file, write_corpus_file
from qpr.errors import QPRError
from qpr.retrieval.index import IndexConfig
from qpr.retrieval.lexical import BM25Retriever

QUERIES = ["how do i learn chess ?", "tips for photography beginners"]


def test_bundle_round_trip_gives_identical_results(tiny_bundle, tmp_path):
    tiny_bundle.save(tmp_path / "b")
    loaded = Bundle.load(tmp_path / "b")
    assert loaded.version == tiny_bundle.version
    assert loaded.dense_retriever().search(QUERIES, 5) == tiny_bundle.dense_retriever().search(QUERIES, 5)
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    for key in ("format_version", "version", "created", "text_config", "encoder_config", "index",
                "data_fingerprint", "training", "metrics"):
        assert key in manifest


def test_a_manifest_keeps_what_it_does_not_know_and_changes_only_by_copy(tiny_bundle, tmp_path):
    saved = tiny_bundle.save(tmp_path / "b")
    written = json.loads((saved / "manifest.json").read_text())
    newer = written | {"from_a_newer_version": {"kept": [1, 2]}}
    (saved / "manifest.json").write_text(json.dumps(newer))
    loaded = Manifest.load(saved)
    assert loaded.extra == {"from_a_newer_version": {"kept": [1, 2]}} and loaded.to_json() == newer
    Bundle.load(saved).save(tmp_path / "again")
    assert json.loads((tmp_path / "again" / "manifest.json").read_text()) == newer  # round-trips as read
    with pytest.raises(FrozenInstanceError):
        loaded.version = "changed"
    fused = tiny_bundle.with_fusion({"kind": "rrf"})
    assert fused.manifest.fusion == {"kind": "rrf"} and tiny_bundle.manifest.fusion is None  # the old bundle's is unchanged


def test_a_bundle_saved_with_the_old_labels_key_loads_its_provenance_and_saves_it_under_the_new_name(tiny_bundle, tmp_path):
    saved = tiny_bundle.save(tmp_path / "b")
    trace = {"export_id": 4, "export_file": "/exports/corrected.parquet", "judgment_ids": [1, 2, 5]}
    written = json.loads((saved / "manifest.json").read_text())
    assert "provenance" not in written and "labels" not in written  # a first training learned from no export
    (saved / "manifest.json").write_text(json.dumps(written | {"labels": trace}))  # as versions before the rename wrote it
    loaded = Bundle.load(saved)
    assert loaded.manifest.provenance == trace and loaded.manifest.extra == {}
    loaded.save(tmp_path / "again")
    again = json.loads((tmp_path / "again" / "manifest.json").read_text())
    assert again["provenance"] == trace and "labels" not in again


def test_a_manifest_refuses_changes_in_place(tiny_bundle):
    manifest = tiny_bundle.with_manifest(provenance={"export_id": 1, "judgment_ids": [3]}, metrics={"val": {"H1": 0.5}}).manifest
    with pytest.raises(TypeError):
        manifest.metrics["x"] = 1
    with pytest.raises(TypeError):
        manifest.metrics["val"].update(H1=1.0)  # nested objects too
    with pytest.raises(TypeError):
        manifest.provenance["judgment_ids"].append(4)  # and arrays
    with pytest.raises(TypeError):
        manifest.training.pop("history", None)
    with pytest.raises(TypeError):
        manifest.extra.setdefault("x", 1)
    merged = manifest.metrics | {"x": 1}  # a new value, for a new manifest
    assert type(merged) is dict and "x" not in manifest.metrics
    assert tiny_bundle.with_manifest(metrics=merged).manifest.metrics["x"] == 1
    written = manifest.to_json()
    assert type(written["metrics"]) is dict and type(written["provenance"]["judgment_ids"]) is list
    assert json.loads(json.dumps(written)) == written

def test_index_settings_survive_the_round_trip_and_older_manifests_load(tiny_bundle, tmp_path):
    tiny_bundle.with_index(IndexConfig("HNSW8", "efSearch=50")).save(tmp_path / "b")
    assert Bundle.load(tmp_path / "b").index.describe() == "HNSW8/efSearch=50"
    manifest_path = tmp_path / "b" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["index"]["search"]  # written before search strings: nprobe and ef_search apart
    manifest["index"] |= {"nprobe": 10, "ef_search": 60}
    manifest_path.write_text(json.dumps(manifest))
    assert Bundle.load(tmp_path / "b").index.describe() == "HNSW8/efSearch=60"
    del manifest["index"]["ef_search"]  # written before HNSW support: the default applies
    manifest_path.write_text(json.dumps(manifest))
    assert Bundle.load(tmp_path / "b").index.describe() == "HNSW8/efSearch=512"


def test_a_crash_while_saving_leaves_the_old_bundle(tiny_bundle, tmp_path, monkeypatch):
    tiny_bundle.save(tmp_path / "b")
    other = tiny_bundle.with_index(IndexConfig("HNSW8", "efSearch=3"))

    def crash(self, path):
        raise KeyboardInterrupt

    monkeypatch.setattr(type(other.index), "save", crash)
    with pytest.raises(KeyboardInterrupt):
        other.save(tmp_path / "b")
    kept = Bundle.load(tmp_path / "b").manifest
    assert kept.corpus_sha256 and replace(kept, corpus_sha256=None) == tiny_bundle.manifest  # the hash is recorded as the bundle is written
    assert [p.name for p in tmp_path.iterdir()] == ["b"]  # no temporary left behind


def test_replacing_a_bundle_swaps_it_whole(tiny_bundle, tmp_path):
    tiny_bundle.save(tmp_path / "b")
    tiny_bundle.with_index(IndexConfig("HNSW8", "efSearch=3")).save(tmp_path / "b")
    assert Bundle.load(tmp_path / "b").index.search_params == "efSearch=3"
    assert [p.name for p in tmp_path.iterdir()] == ["b"]


@pytest.fixture
def saved(tiny_bundle, tmp_path):
    return tiny_bundle.save(tmp_path / "b")


def test_missing_files_are_named(saved):
    (saved / "index.faiss").unlink()
    with pytest.raises(QPRError, match="missing index.faiss"):
        Bundle.load(saved)


def test_not_a_bundle(tmp_path):
    with pytest.raises(QPRError, match="no bundle directory"):
        Bundle.load(tmp_path / "nothing")


def test_future_format_is_refused(saved):
    manifest = json.loads((saved / "manifest.json").read_text())
    (saved / "manifest.json").write_text(json.dumps(manifest | {"format_version": 99}))
    with pytest.raises(QPRError, match="bundle format 99"):
        Bundle.load(saved)


def test_index_of_another_corpus_is_detected(tiny_bundle, saved, tmp_path):
    smaller = Bundle.create(tiny_bundle.encoder, tiny_bundle.vocab, tiny_bundle.corpus.head(20), IndexConfig("Flat"))
    smaller.save(tmp_path / "small")
    (saved / "index.faiss").write_bytes((tmp_path / "small" / "index.faiss").read_bytes())
    with pytest.raises(QPRError, match="index holds 20 vectors for 160 corpus questions"):
        Bundle.load(saved)


def test_weights_that_do_not_fit_the_config_are_detected(saved):
    manifest = json.loads((saved / "manifest.json").read_text())
    manifest["encoder_config"]["channels"] = 64
    (saved / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(QPRError, match="model.safetensors does not match"):
        Bundle.load(saved)


def test_edited_corpus_is_detected(saved):
    corpus = pd.read_feather(saved / "corpus.arrow")
    corpus.loc[0, "question"] = "something else entirely ?"
    write_corpus_file(corpus, saved / "corpus.arrow")
    with pytest.raises(QPRError, match="corpus.arrow is not the corpus the manifest was built on"):
        Bundle.load(saved)


def test_the_corpus_is_checked_by_its_file_hash_and_older_bundles_by_content(saved):
    manifest = json.loads((saved / "manifest.json").read_text())
    assert manifest["corpus_sha256"] == hashlib.sha256((saved / "corpus.arrow").read_bytes()).hexdigest()
    del manifest["corpus_sha256"]  # a bundle saved before the hash was recorded
    (saved / "manifest.json").write_text(json.dumps(manifest))
    assert len(Bundle.load(saved).corpus) == len(pd.read_feather(saved / "corpus.arrow"))
    corpus = pd.read_feather(saved / "corpus.arrow")
    corpus.loc[0, "question"] = "something else entirely ?"
    write_corpus_file(corpus, saved / "corpus.arrow")
    with pytest.raises(QPRError, match="fingerprint differs"):
        Bundle.load(saved)


def test_the_corpus_is_read_through_a_memory_map_not_copied(saved):
    """Its columns are views of the mapped file: loading allocates (next to) no Arrow memory,
    where decoding the same corpus from Parquet (older bundles) allocates its whole size."""
    written = pd.read_feather(saved / "corpus.arrow")
    size = pa.Table.from_pandas(written).nbytes
    allocated = pa.total_allocated_bytes()
    loaded = Bundle.load(saved)
    assert pa.total_allocated_bytes() - allocated < size / 20
    pd.testing.assert_frame_equal(loaded.corpus, written)
    assert loaded.corpus["qid"].dtype == np.int64 and not loaded.corpus["qid"].to_numpy().flags.writeable  # the map's pages
    written.to_parquet(saved / "corpus.parquet", index=False)
    allocated = pa.total_allocated_bytes()
    decoded = read_corpus_file(saved / "corpus.parquet", "rebuild")
    assert pa.total_allocated_bytes() - allocated > size / 2
    del decoded


def test_a_bundle_saved_with_a_parquet_corpus_still_loads_and_saves_anew_as_arrow(saved, tmp_path):
    corpus = pd.read_feather(saved / "corpus.arrow")
    corpus.to_parquet(saved / "corpus.parquet", index=False)
    (saved / "corpus.arrow").unlink()
    manifest = json.loads((saved / "manifest.json").read_text())
    (saved / "manifest.json").write_text(json.dumps(manifest | {"corpus_sha256": hashlib.sha256((saved / "corpus.parquet").read_bytes()).hexdigest()}))
    old = Bundle.load(saved)
    pd.testing.assert_frame_equal(old.corpus, corpus)
    assert old.dense_retriever().search("how do i learn chess ?", 3)
    again = Bundle.load(old.save(tmp_path / "again"))
    assert sorted(p.name for p in (tmp_path / "again").iterdir() if p.name.startswith("corpus")) == ["corpus.arrow"]
    pd.testing.assert_frame_equal(again.corpus, corpus)


def test_a_corpus_keeps_its_nulls_and_an_empty_one_round_trips(tmp_path):
    corpus = pd.DataFrame({"qid": [3, 1], "question": ["a ?", "b ?"], "cluster": ["c", None], "split": ["train", "none"]})
    write_corpus_file(corpus, tmp_path / "c.arrow")
    back = read_corpus_file(tmp_path / "c.arrow", "rebuild")
    assert back["qid"].tolist() == [3, 1] and back["cluster"].isna().tolist() == [False, True]
    write_corpus_file(corpus.iloc[:0], tmp_path / "empty.arrow")
    assert len(read_corpus_file(tmp_path / "empty.arrow", "rebuild")) == 0


def test_a_bundle_with_a_compressed_index_saves_loads_and_searches(tiny_bundle, tmp_path):
    compressed = tiny_bundle.with_index(IndexConfig("IVF4_HNSW8,SQ8,RFlat", "nprobe=4,quantizer_efSearch=8,k_factor_rf=8"))
    compressed.save(tmp_path / "b")
    loaded = Bundle.load(tmp_path / "b")
    assert loaded.index.describe() == "IVF4_HNSW8,SQ8,RFlat/nprobe=4,quantizer_efSearch=8,k_factor_rf=8"
    assert len(loaded.index) == len(tiny_bundle.corpus)
    # Every list probed and the shortlist re-ranked on the full vectors: the exact index's answers.
    assert loaded.dense_retriever().search(QUERIES, 5) == tiny_bundle.dense_retriever().search(QUERIES, 5)


def test_questions_are_added_to_a_bundle_without_reindexing_the_rest(tiny_bundle, tmp_path):
    import pandas as pd

    ivf = tiny_bundle.with_index(IndexConfig("IVF4,Flat", "nprobe=4"))
    new = pd.DataFrame({"qid": [90001, 90002], "question": ["how do i tune a ukulele quickly ?", "best ukulele tuning app"],
                        "cluster": ["uke", "uke"]})
    grown = ivf.with_questions(new)
    assert len(ivf.index) == len(tiny_bundle.corpus)  # the original is untouched
    assert len(grown.index) == len(grown.corpus) == len(tiny_bundle.corpus) + 2
    grown.save(tmp_path / "b")
    loaded = Bundle.load(tmp_path / "b")
    top = loaded.dense_retriever().search("how do i tune a ukulele quickly ?", 1)[0]
    assert top.qid == 90001
    assert loaded.manifest.added_questions == 2
    with pytest.raises(QPRError, match="already in the bundle's corpus: \\[90001\\]"):
        grown.with_questions(new.iloc[:1])


def _bm25_results(bundle):
    return bundle.bm25.search_ids(QUERIES, 5)


def test_the_bm25_index_is_saved_with_the_bundle_and_read_memory_mapped(tiny_bundle, tmp_path):
    tiny_bundle.save(tmp_path / "b")
    loaded = Bundle.load(tmp_path / "b")
    assert loaded.prebuilt_bm25 is not None and loaded.bm25 is loaded.prebuilt_bm25  # not built again
    assert isinstance(loaded.bm25._bm25.scores["data"], np.memmap)
    for got, want in zip(_bm25_results(loaded), _bm25_results(tiny_bundle)):
        np.testing.assert_array_equal(got, want)
    # Bundles over the same corpus carry it on; one with more questions builds its own.
    assert loaded.with_card(name="x").bm25 is loaded.bm25
    assert loaded.with_fusion({}).bm25 is loaded.bm25
    grown = loaded.with_questions(pd.DataFrame({"qid": [10**9], "question": ["a question never seen before"], "cluster": [None]}))
    assert grown.bm25 is not loaded.bm25 and len(grown.bm25.corpus) == len(loaded.corpus) + 1


@pytest.mark.parametrize("damage", ["missing", "unreadable", "other corpus"])
def test_a_bundle_without_a_usable_bm25_index_builds_it(tiny_bundle, tmp_path, damage):
    """Older bundles have no bm25 folder; a damaged one, or one of another corpus, is not trusted:
    BM25 is derived from the corpus, so it is built again rather than refused."""
    tiny_bundle.save(tmp_path / "b")
    folder = tmp_path / "b" / "bm25"
    if damage == "missing":
        shutil.rmtree(folder)
    elif damage == "unreadable":
        (folder / "data.csc.index.npy").write_bytes(b"not an array")
    else:
        shutil.rmtree(folder)
        BM25Retriever(tiny_bundle.corpus.head(10)).save(folder)
    loaded = Bundle.load(tmp_path / "b")
    assert loaded.prebuilt_bm25 is None
    for got, want in zip(_bm25_results(loaded), _bm25_results(tiny_bundle)):
        np.testing.assert_array_equal(got, want)
    loaded.save(tmp_path / "b")  # saving over it writes a good one
    assert Bundle.load(tmp_path / "b").prebuilt_bm25 is not None


def test_a_lexical_bundle_saves_its_bm25_index_too(tiny_bundle, tmp_path):
    Bundle.lexical_of(tiny_bundle.corpus).save(tmp_path / "lex")
    loaded = Bundle.load(tmp_path / "lex")
    assert loaded.prebuilt_bm25 is not None
    for got, want in zip(_bm25_results(loaded), _bm25_results(tiny_bundle)):
        np.testing.assert_array_equal(got, want)


def test_a_bundle_can_be_created_from_vectors_encoded_before(tiny_bundle):
    corpus = tiny_bundle.corpus
    vectors = tiny_bundle.encode(corpus["question"].tolist())
    given = Bundle.create(tiny_bundle.encoder, tiny_bundle.vocab, corpus, IndexConfig("Flat"), vectors=vectors)
    assert given.dense_retriever().search(QUERIES, 5) == tiny_bundle.dense_retriever().search(QUERIES, 5)
    with pytest.raises(QPRError, match="vectors given for"):
        Bundle.create(tiny_bundle.encoder, tiny_bundle.vocab, corpus, IndexConfig("Flat"), vectors=vectors[:-1])


def test_a_bm25_built_before_over_the_same_rows_is_served_and_saved(tiny_bundle, tmp_path, monkeypatch):
    built = BM25Retriever(tiny_bundle.corpus)
    reordered = BM25Retriever(tiny_bundle.corpus.iloc[::-1])
    with monkeypatch.context() as patched:
        patched.setattr(BM25Retriever, "__init__", lambda *_: pytest.fail("built again"))
        assert tiny_bundle.with_bm25(built).bm25 is built
        assert tiny_bundle.with_bm25(reordered).prebuilt_bm25 is not reordered  # its index numbers other rows
        tiny_bundle.with_bm25(built).save(tmp_path / "b")  # saved as it is, not built again
    assert Bundle.load(tmp_path / "b").prebuilt_bm25 is not None

"""Exports in sentence-transformers' training format (``annotations.st_export``): the rows it
makes, hard negatives that are exactly the judged "different" pairs, and the README's example
fine-tuning the packaged MiniLM on them with MultipleNegativesRankingLoss (two steps)."""

from __future__ import annotations

import re
from pathlib import Path

import datasets
import pandas as pd
import pytest

from annotations.db import open_store
from annotations.st_export import training_tables
from conftest import make_corpus
from workflows.hub_export import write_dataset
from workflows.retraining import export_corrected

ROOT = Path(__file__).resolve().parents[1]
VERSION = "v1"


def judged(rows: list[tuple[int, int, int]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["qid1", "qid2", "is_duplicate"])


def test_rows_come_from_training_clusters_and_judgments():
    corpus = pd.DataFrame({
        "qid": [1, 2, 3, 4, 5, 6, 7, 8, 9],
        "question": [f"q{i}" for i in range(1, 10)],
        "cluster": pd.array(["a", "a", "a", "b", "b", None, None, "c", "c"], dtype="string"),
        "split": ["train"] * 7 + ["test", "test"],
    })
    pairs = judged([(6, 7, 1), (2, 1, 1), (1, 4, 0), (6, 5, 0), (6, 7, 0), (1, 8, 0), (4, 1, 0)])
    tables = training_tables(corpus, pairs)
    # Cluster a round its members, b once, then the judged "same" pair 6-7 (2-1 is already there);
    # the test cluster c takes no part.
    assert tables.anchor_positive.values.tolist() == [["q1", "q2"], ["q2", "q3"], ["q3", "q1"], ["q4", "q5"], ["q6", "q7"]]
    # 1-4: q1 searched from, its mate q2; 6-5: q6 has no cluster-mate, so q5 anchors with its mate q4;
    # 6-7: neither has one (left out); 1-8: q8 is a test question; 4-1 is 1-4 again.
    assert tables.triplets.values.tolist() == [["q1", "q2", "q4"], ["q5", "q4", "q6"]]
    assert tables.without_positive == 1


@pytest.fixture
def export(tmp_path):
    """An export of ``make_corpus`` with four train clusters judged different from the next one
    and two judged the same."""
    corpus = make_corpus()
    heads = corpus[(corpus["split"] == "train") & corpus["cluster"].notna()].groupby("cluster", sort=True)["qid"].first().tolist()
    with open_store(f"sqlite:///{tmp_path / 'annotations.db'}", project="demo") as store:
        store.corpora.register(VERSION, corpus)
        for a, b in zip(heads[:4], heads[1:5]):
            store.judgments.record("ann", b, "different", VERSION, query_qid=a)
        store.judgments.record("ann", heads[7], "same", VERSION, query_qid=heads[6])
        return export_corrected(store, corpus, VERSION, "parquet", folder=tmp_path / "exports")


def test_the_hard_negatives_are_exactly_the_judged_different_pairs(export):
    tables = training_tables(export.corpus, export.pairs)
    text = export.corpus.set_index("qid")["question"]
    different = export.pairs[export.pairs["is_duplicate"] == 0]
    assert len(different) == 4 and tables.without_positive == 0
    assert ({frozenset(pair) for pair in zip(tables.triplets["anchor"], tables.triplets["negative"])}
            == {frozenset((text[a], text[b])) for a, b in zip(different["qid1"], different["qid2"])})
    cluster = export.corpus.set_index("question")["cluster"]
    assert all(cluster[a] == cluster[p] != cluster[n] for a, p, n in tables.triplets.itertuples(index=False))


def readme_example() -> str:
    section = (ROOT / "README.md").read_text().split("retraining with sentence-transformers", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_fine_tunes_minilm_on_the_triplets(export, tmp_path, monkeypatch):
    """The README's example as written, but on the dataset folder instead of the Hub repository,
    two steps of four rows (MiniLM on CPU)."""
    folder = write_dataset(export, "faq", tmp_path / "dataset")
    code = readme_example()
    for old, new in (('"you/qpr-corrected"', repr(str(folder))), ("num_train_epochs=1", "max_steps=2"),
                     ("per_device_train_batch_size=32", "per_device_train_batch_size=4")):
        assert old in code
        code = code.replace(old, new)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")  # read at import otherwise
    names: dict = {}
    exec(compile(code, "README.md", "exec"), names)
    assert names["triplets"].column_names == ["anchor", "positive", "negative"] and len(names["triplets"]) == 4
    assert names["trainer"].state.global_step == 2
    assert (tmp_path / "minilm-corrected" / "final" / "model.safetensors").is_file()

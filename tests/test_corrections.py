"""Label versions (migration 0006): corrections recorded and served at once, history, rollback of
a version and revert of one decision. Store cases on SQLite always, PostgreSQL when
QPR_TEST_POSTGRES_URL is set (fixtures of test_annotations_store); serving on a tiny bundle."""

from __future__ import annotations

import pandas as pd
import pytest

from annotations.corrections import apply_corrections, history, revert_decision, rollback
from annotations.errors import AnnotationError
from test_annotations_store import VERSION, corpus, count_rows, store  # noqa: F401  (fixtures)


def members(corpus: pd.DataFrame, cluster: str) -> list[int]:
    return corpus.loc[corpus["cluster"] == cluster, "qid"].tolist()


def labels_cluster(corpus: pd.DataFrame, qid: int) -> str:
    return corpus.set_index("qid").loc[qid, "cluster"]


def cluster_of(labels: pd.DataFrame, qid: int):
    value = labels.set_index("qid").loc[qid, "cluster"]
    return None if pd.isna(value) else value


def a_merge_and_a_split(store, corpus) -> tuple[list[int], list[int]]:
    """Clusters c-0 and c-1 of the corpus judged the same (two independent links: whole clusters
    merge); a member of c-2 judged not to belong."""
    a, b, c = (members(corpus, name) for name in sorted(corpus["cluster"].dropna().unique())[:3])
    store.judgments.record("ann", b[0], "same", VERSION, query_qid=a[0])
    store.judgments.record("ann", b[1], "same", VERSION, query_qid=a[1])
    store.judgments.record("ann", c[1], "different", VERSION, query_qid=c[0])
    return a, b, c


def test_no_version_serves_the_snapshot_and_each_application_is_the_next_version(store, corpus):
    number, labels = store.labels.corpus(VERSION)
    assert number == 0 and labels.equals(store.corpora.snapshot(VERSION)[1])
    assert store.labels.versions(VERSION).empty
    a, b, c = a_merge_and_a_split(store, corpus)
    number, result = apply_corrections(store, corpus, VERSION, "rev")
    assert number == 1
    served, labels = store.labels.corpus(VERSION)
    assert served == 1 and cluster_of(labels, b[0]) == cluster_of(labels, a[0]) and cluster_of(labels, c[1]) is None
    pd.testing.assert_frame_equal(labels, result.corpus.sort_values("qid").reset_index(drop=True), check_dtype=False)
    assert count_rows(store, "label_changes") == len(b) + 1, "only the questions that changed are stored"
    row = store.labels.versions(VERSION).iloc[0]
    assert (row["annotator"], row["kind"], row["changes"]) == ("rev", "apply", len(b) + 1)
    assert row["judgment_ids"] == result.judgment_ids and {d["decision"] for d in row["decisions"]} == {"merged", "split"}
    assert apply_corrections(store, corpus, VERSION, "rev")[0] == 2


def test_labels_over_a_snapshot_the_caller_holds_equal_those_read_back(store, corpus, monkeypatch):
    assert store.labels.latest_number(VERSION) == 0
    a, b, c = a_merge_and_a_split(store, corpus)
    apply_corrections(store, corpus, VERSION, "rev")
    assert store.labels.latest_number(VERSION) == 1
    expected = {number: store.labels.corpus(VERSION, number)[1] for number in (0, 1)}
    shuffled = corpus.sample(frac=1, random_state=0)  # a served bundle's corpus, in its own order
    monkeypatch.setattr(type(store.corpora), "snapshot", lambda *args: pytest.fail("the snapshot was read back"))
    for number, labels in expected.items():
        served, got = store.labels.corpus(VERSION, number, snapshot=shuffled)
        assert served == number
        pd.testing.assert_frame_equal(got.sort_values("qid").reset_index(drop=True), labels, check_dtype=False)
    assert cluster_of(shuffled, c[1]) is not None, "the caller's corpus is not changed"


def test_a_rollback_serves_an_earlier_version_again_and_is_itself_a_version(store, corpus):
    a, b, c = a_merge_and_a_split(store, corpus)
    apply_corrections(store, corpus, VERSION, "rev")
    number, labels = rollback(store, VERSION, 0, "boss")
    assert number == 2 and labels.equals(store.corpora.snapshot(VERSION)[1]) and store.labels.corpus(VERSION)[1].equals(labels)
    shown = history(store, VERSION)
    assert shown["version"].tolist() == [2, 1] and shown.iloc[0]["kind"] == "rollback"
    assert shown.iloc[0]["what"] == "restores version 0" and shown.iloc[0]["annotator"] == "boss"
    assert "merged" in shown.iloc[1]["what"] and f"qid:{c[1]} out of" in shown.iloc[1]["what"]
    assert rollback(store, VERSION, 1, "boss")[0] == 3 and cluster_of(store.labels.corpus(VERSION)[1], c[1]) is None
    assert store.labels.corpus(VERSION, 1)[1].equals(store.labels.corpus(VERSION, 3)[1]), "nothing was deleted or rewritten"
    revert_decision(store, corpus, VERSION, "boss", labels_cluster(corpus, c[1]), f"qid:{c[1]}")  # version 3 serves 1's
    assert cluster_of(store.labels.corpus(VERSION)[1], c[1]) == cluster_of(store.labels.corpus(VERSION)[1], c[0])


def test_a_reverted_decision_stays_undone_when_corrections_are_applied_again(store, corpus):
    a, b, c = a_merge_and_a_split(store, corpus)
    _, result = apply_corrections(store, corpus, VERSION, "rev")
    split = result.splits.iloc[0]
    number, after = revert_decision(store, corpus, VERSION, "boss", split["cluster"], f"qid:{split['qid']}", "it belongs")
    assert number == 2 and cluster_of(after.corpus, c[1]) == cluster_of(after.corpus, c[0])
    assert cluster_of(after.corpus, b[0]) == cluster_of(after.corpus, a[0]), "the merge stays"
    decided = store.review.adjudications()
    assert decided.iloc[-1]["decision"] == "reject" and "revert of the split" in decided.iloc[-1]["note"]
    again = apply_corrections(store, corpus, VERSION, "rev")[1]
    assert again.splits.empty and history(store, VERSION).iloc[1]["kind"] == "revert"
    merge = again.merges.iloc[0]
    revert_decision(store, corpus, VERSION, "boss", merge["cluster_b"], merge["cluster_a"])  # either order
    assert cluster_of(store.labels.corpus(VERSION)[1], b[0]) != cluster_of(store.labels.corpus(VERSION)[1], a[0])


def test_bad_versions_and_decisions_are_refused_and_record_nothing(store, corpus):
    with pytest.raises(AnnotationError, match="no label version 1 to restore|no label version 1"):
        rollback(store, VERSION, 1, "boss")
    with pytest.raises(AnnotationError, match="made no merge or split"):
        revert_decision(store, corpus, VERSION, "boss", "c-0", "c-1")
    with pytest.raises(AnnotationError, match="not over the corpus"):
        store.labels.record("rev", VERSION, corpus.head(5))
    with pytest.raises(AnnotationError, match="annotator name is empty"):
        store.labels.record(" ", VERSION, corpus)
    assert store.labels.versions(VERSION).empty and store.review.adjudications().empty

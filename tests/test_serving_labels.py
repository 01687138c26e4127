"""Served labels over the served bundle (qpr.serving.served_model): a labels version is served at once, readers
keep the snapshot they took, the swap to a retrained model starts from its own labels, and labels
for another bundle or other questions are refused."""

from __future__ import annotations

import pandas as pd
import pytest

from qpr.errors import QPRError
from qpr.serving.served_model import ServedModel


def relabelled(corpus: pd.DataFrame, qid: int, cluster: str | None) -> pd.DataFrame:
    out = corpus.copy()
    out.loc[out["qid"] == qid, "cluster"] = cluster
    return out


def test_a_labels_version_is_served_at_once_and_earlier_snapshots_keep_theirs(bundle):
    model = ServedModel(bundle)
    before = model.current()
    qid = int(bundle.corpus.loc[bundle.corpus["cluster"].notna(), "qid"].iloc[0])
    labels = relabelled(bundle.corpus, qid, None).sample(frac=1, random_state=0)  # any row order
    served = model.relabel(bundle.version, labels, 3)
    assert model.current() is served and served.labels_version == 3 and served.cluster_of([qid]) == [None]
    assert served.corpus["qid"].tolist() == bundle.corpus["qid"].tolist(), "kept in the bundle's row order"
    assert before.labels_version == 0 and before.cluster_of([qid]) == [bundle.corpus.set_index("qid").loc[qid, "cluster"]]
    assert served.bundle is bundle and served.default is before.default, "retrievers and bundle are untouched"


def test_a_confirmed_swap_serves_the_new_bundle_with_its_own_labels(bundle):
    model = ServedModel(bundle)
    model.relabel(bundle.version, relabelled(bundle.corpus, int(bundle.corpus["qid"].iloc[0]), "elsewhere"), 1)
    model.propose(bundle, pd.DataFrame())
    assert model.confirm(bundle.version).labels_version == 0 and model.current().labels is None


@pytest.mark.parametrize("version, labels, message", [
    ("another", None, "for bundle 'another'"),
    (None, "head", "other questions"),
])
def test_labels_for_another_bundle_or_other_questions_are_refused(bundle, version, labels, message):
    model = ServedModel(bundle)
    labels = bundle.corpus.head(3) if labels == "head" else bundle.corpus
    with pytest.raises(QPRError, match=message):
        model.relabel(version or bundle.version, labels, 1)
    assert model.current().labels_version == 0

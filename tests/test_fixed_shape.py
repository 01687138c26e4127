"""Fixed-shape retraining batches (issue 57): relabelling changes what is drawn, never how many
steps or how many pairs a batch holds; no batch holds a question's cluster-mate or judged-same
partner as a negative; impure clusters are drawn less or not at all."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from qpr.errors import QPRError
from qpr.training.fixed_shape import FixedShape
from qpr.training.sampling import JudgedPairs
from qpr.training.train import TrainConfig, train


def corpus(clusters: int = 40, size: int = 5) -> pd.DataFrame:
    rows = [(c * size + m + 1, f"topic {c} question {m} words w{c}", f"c{c:02d}", "train")
            for c in range(clusters) for m in range(size)]
    rows += [(10_000 + c * 2 + m, f"topic {c} held {m} w{c}", f"v{c:02d}", "val") for c in range(6) for m in range(2)]
    frame = pd.DataFrame(rows, columns=["qid", "question", "cluster", "split"])
    return frame.astype({"qid": "int64", "cluster": "string"})


def relabelled(frame: pd.DataFrame) -> pd.DataFrame:
    """Clusters c00-c09 merged into one, c10 split into singletons: what a correction may do."""
    out = frame.copy()
    out.loc[out["cluster"].isin([f"c{c:02d}" for c in range(10)]), "cluster"] = "c00"
    out.loc[out["cluster"] == "c10", "cluster"] = pd.NA
    return out


def judged(frame: pd.DataFrame) -> JudgedPairs:
    pairs = pd.DataFrame({"qid1": [1, 6, 11, 2, 1], "qid2": [101, 106, 111, 7, 50], "is_duplicate": [1, 1, 1, 0, 0]})
    return JudgedPairs.of(frame, pairs)


def test_relabelling_changes_neither_the_steps_nor_the_batch_size():
    shapes = []
    for frame in (corpus(), relabelled(corpus())):
        shape = FixedShape.build(frame, judged(frame), batch_size=8)
        anchors, positives, negatives, batches = shape.epoch(np.random.default_rng(0))
        assert {len(b) for b in batches} == {8}
        shapes.append((len(batches), shape.steps))
    assert shapes[0] == shapes[1] == (25, 25)  # 200 training questions // 8


def test_no_batch_holds_a_cluster_mate_or_a_judged_same_partner_as_a_negative():
    frame = corpus()
    shape = FixedShape.build(frame, judged(frame), batch_size=10, judged_repeat=3)
    anchors, positives, negatives, batches = shape.epoch(np.random.default_rng(1))
    cluster = frame["cluster"].to_numpy()
    partner = {0: 100, 100: 0, 5: 105, 105: 5, 10: 110, 110: 10}  # rows of the judged-same pairs
    for batch in batches:
        rows = set(anchors[batch]) | set(positives[batch])
        assert len({cluster[r] for r in positives[batch]}) == len(batch)
        for i in batch:
            others = set(positives[batch]) - {positives[i]}
            assert cluster[anchors[i]] not in {cluster[o] for o in others}
            assert partner.get(int(anchors[i])) not in others or partner[int(anchors[i])] == positives[i], rows
    judged_rows = [i for b in batches for i in b if (int(anchors[i]), int(positives[i])) in {(0, 100), (100, 0)}]
    assert judged_rows, "a judged-same pair is drawn"
    # only a verified positive has a judged negative: qid 1 (row 0, judged the same as qid 101) gets
    # qid 50 (row 49); qid 2 was judged different from qid 7, but neither has a verified positive
    with_negative = [i for b in batches for i in b if negatives[i] >= 0]
    assert with_negative and all((anchors[i], positives[i], negatives[i]) == (0, 100, 49) for i in with_negative)


def test_impure_clusters_are_drawn_less_and_left_out_below_the_floor():
    frame = corpus()
    weights = pd.Series({"c00": 0.1, "c01": 0.5})
    shape = FixedShape.build(frame, JudgedPairs.of(frame, None), batch_size=8, cluster_weights=weights, min_purity=0.2)
    counts = pd.Series(0, index=range(40))
    rng = np.random.default_rng(2)
    for _ in range(20):
        anchors, _, _, batches = shape.epoch(rng)
        used = np.concatenate(batches)
        counts = counts.add(pd.Series(anchors[used] // 5).value_counts(), fill_value=0)
    assert counts[0] == 0 and counts[1] < counts[2:].mean() * 0.75


def test_a_fixed_retrain_trains_the_same_steps_and_batch_on_any_labels():
    shapes = []
    for frame in (corpus(), relabelled(corpus())):
        config = TrainConfig(batch_size=8, max_epochs=1, patience=1, val_pairs=20, batches="fixed")
        result = train(frame, config, progress=False, judged=pd.DataFrame(
            {"qid1": [1], "qid2": [101], "is_duplicate": [1]}))
        shapes.append((result.history[0]["steps"], result.history[0]["batch_pairs"]))
    assert shapes[0] == shapes[1] == (25, 8)
    with pytest.raises(QPRError, match="batches='fixed'"):
        TrainConfig(batches="fixed", batching="neighbours")
